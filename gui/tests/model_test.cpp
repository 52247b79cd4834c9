// The GUI-free timeline model: tracks, lanes, level of detail, hit-testing, flows, call trees, item models.
#include <QAbstractItemModelTester>
#include <QProcess>
#include <QSortFilterProxyModel>
#include <QtTest>

#include "slow_steps_trace.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/step_outliers.h"
#include "stepscope/gui/item_models.h"
#include "stepscope/gui/range_stats.h"
#include "stepscope/gui/timeline_layout.h"
#include "stepscope/gui/timeline_model.h"
#include "synthetic.h"

using namespace stepscope;
using namespace stepscope::gui;
using namespace stepscope::gui::test;

namespace {

int track_of(const TimelineModel& m, TrackKind kind, int64_t stream = -1) {
  for (size_t i = 0; i < m.tracks().size(); ++i)
    if (m.tracks()[i].kind == kind && (stream < 0 || m.tracks()[i].stream == stream)) return static_cast<int>(i);
  return -1;
}

// A stream of `n` kernels of 100 ns separated by 100 ns gaps.
std::shared_ptr<const TimelineModel> dense_model(int n) {
  auto t = std::make_shared<store::Trace>();
  auto name = t->intern("tiny_kernel");
  t->kernels.reserve(n);
  for (int i = 0; i < n; ++i) {
    store::Kernel k;
    k.start = 200LL * i;
    k.end = k.start + 100;
    k.stream = 1;
    k.name = name;
    t->kernels.push_back(k);
  }
  return TimelineModel::build(t);
}

}  // namespace

class ModelTest : public QObject {
  Q_OBJECT
 private slots:
  void tracksAreGroupedAndOrdered() {
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    QStringList kinds, groups;
    for (const Track& t : m->tracks()) {
      kinds << to_string(t.kind);
      groups << QString::fromStdString(t.group);
    }
    // Analysis, then the GPU (busiest stream first), then the process's threads.
    QCOMPARE(kinds, (QStringList{"steps", "findings", "gpu stream", "gpu stream", "cpu samples", "cpu ranges",
                                 "data waits"}));
    QCOMPARE(groups[0], QString("Analysis"));
    QCOMPARE(groups[2], QString("GPU 0 Test GPU"));
    QCOMPARE(groups[4], QString("Process 100 python train.py"));
    QCOMPARE(m->tracks()[2].stream, 7);  // kernels: busier than the copy stream
    QCOMPARE(m->tracks()[3].stream, 13);
    QVERIFY(m->tracks()[2].busy_ns > m->tracks()[3].busy_ns);
    QCOMPARE(m->begin(), kBase);
    QCOMPARE(m->end(), kBase + kSteps * 10 * kMs);
    // Host ranges nest by time: step range, op, launch call.
    const Track& host = m->tracks()[5];
    QVERIFY(!host.folded);  // it launches GPU work
    QCOMPARE(host.lanes.size(), size_t(3));
    QCOMPARE(QString::fromStdString(m->name_of(host.lanes[0].ref(0))), QString("ProfilerStep#0"));
    QCOMPARE(QString::fromStdString(m->name_of(host.lanes[2].ref(0))), QString("cudaLaunchKernel"));
    QCOMPARE(m->tracks()[0].lanes[0].size(), size_t(kSteps));
    QCOMPARE(QString::fromStdString(m->name_of({EventKind::Step, 0})), QString("Step 0 · input-bound"));
  }

  void idleThreadsFoldAndGroupsCollapse() {
    auto t = synthetic_trace();
    for (int64_t tid : {201, 202, 203}) {  // idle worker threads: samples only
      t->threads.push_back({100, tid, t->intern("pt_worker")});
      t->samples.push_back({kBase + tid, 100, tid, 1, false});
    }
    auto m = TimelineModel::build(t, synthetic_analysis());
    std::vector<int> folded;
    for (size_t i = 0; i < m->tracks().size(); ++i)
      if (m->tracks()[i].folded) folded.push_back(int(i));
    QCOMPARE(folded.size(), size_t(3));
    QCOMPARE(QString::fromStdString(m->tracks()[folded[0]].title), QString("pt_worker 201 · samples"));
    QCOMPARE(QString::fromStdString(m->tracks()[5].title), QString("main 100"));
    const std::string process = "Process 100 python train.py", gpu = "GPU 0 Test GPU";

    TimelineLayout folded_layout(*m);
    int others_rows = 0;
    for (const auto& r : folded_layout.rows())
      if (r.kind == TimelineLayout::RowKind::Others) {
        ++others_rows;
        QCOMPARE(r.others, 3);
        QCOMPARE(r.group, process);
        QVERIFY(!r.open);
      }
    QCOMPARE(others_rows, 1);
    for (int i : folded) QVERIFY(folded_layout.row_of_track(i) == nullptr);
    QVERIFY(folded_layout.tracks_in(0, 1 << 30).size() == m->tracks().size() - 3);

    LayoutState open;
    open.expanded_others.insert(process);
    TimelineLayout open_layout(*m, {}, open);
    for (int i : folded) QVERIFY(open_layout.row_of_track(i) != nullptr);
    QVERIFY(open_layout.total_height() > folded_layout.total_height());

    LayoutState collapsed;
    collapsed.collapsed.insert(gpu);
    TimelineLayout gpu_closed(*m, {}, collapsed);
    QVERIFY(gpu_closed.row_of_track(2) == nullptr && gpu_closed.row_of_track(3) == nullptr);
    int headers = 0;
    for (const auto& r : gpu_closed.rows())
      if (r.kind == TimelineLayout::RowKind::Header && r.group == gpu) {
        ++headers;
        QVERIFY(!r.open);
      }
    QCOMPARE(headers, 1);
    QVERIFY(gpu_closed.row_of_track(5) != nullptr);
  }

  void storedStepsWithoutAnalysis() {
    auto m = TimelineModel::build(synthetic_trace());
    QCOMPARE(m->steps().size(), size_t(kSteps));
    QCOMPARE(QString::fromStdString(m->steps()[0].bound), QString());
    QCOMPARE(m->findings().size(), size_t(0));
    QCOMPARE(track_of(*m, TrackKind::Findings), -1);
  }

  void overlappingEventsGetTheirOwnLane() {
    auto t = std::make_shared<store::Trace>();
    auto n = t->intern("k");
    // Two concurrent kernels on one stream (clock skew in real traces) must not hide each other.
    t->kernels.push_back({0, 100, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, n, 0, 0});
    t->kernels.push_back({50, 150, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, n, 0, 0});
    t->kernels.push_back({200, 300, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, n, 0, 0});
    auto m = TimelineModel::build(t);
    const Track& tr = m->tracks()[0];
    QCOMPARE(tr.lanes.size(), size_t(2));
    QCOMPARE(tr.lanes[0].size(), size_t(2));
    QCOMPARE(tr.lanes[1].starts[0], 50);
  }

  void compactLanesKeepLongDurationsAndKinds() {
    auto t = std::make_shared<store::Trace>();
    auto n = t->intern("op");
    const int64_t kHour = 3'600'000'000'000;  // far beyond a 32-bit duration (4.29 s)
    // One thread: a 1 h range enclosing a 5 s API call and a 10 ns one; both of the latter share lane 1.
    store::Range outer;
    outer.start = 1000;
    outer.end = 1000 + kHour;
    outer.pid = 1;
    outer.tid = 2;
    outer.name = n;
    t->ranges.push_back(outer);
    store::ApiCall a;
    a.pid = 1;
    a.tid = 2;
    a.name = n;
    a.start = 2000;
    a.end = 2000 + 5'000'000'000;
    t->api_calls.push_back(a);
    a.start = 5'000'010'000;
    a.end = 5'000'010'010;
    t->api_calls.push_back(a);
    // A stream whose single lane is all kernels, exactly 2^32 - 1 ns long (the sentinel value itself).
    t->kernels.push_back({0, 0xFFFFFFFFll, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, n, 0, 0});
    auto m = TimelineModel::build(t);
    const Track& host = m->tracks()[track_of(*m, TrackKind::CpuRanges)];
    QCOMPARE(host.lanes.size(), size_t(2));
    const Lane& l0 = host.lanes[0];
    const Lane& l1 = host.lanes[1];
    QCOMPARE(l0.end(0), 1000 + kHour);
    QCOMPARE(l0.ref(0), (EventRef{EventKind::Range, 0}));
    QCOMPARE(l1.size(), size_t(2));
    QCOMPARE(l1.end(0), int64_t(2000 + 5'000'000'000));
    QCOMPARE(l1.dur(1), int64_t(10));
    QCOMPARE(l1.kind(1), EventKind::ApiCall);
    QCOMPARE(l1.first_ending_after(5'000'001'999), size_t(0));
    QCOMPARE(l1.first_ending_after(5'000'002'000), size_t(1));
    QCOMPARE(l1.first_ending_after(5'000'010'010), size_t(2));
    QCOMPARE(m->end(), 1000 + kHour);
    QCOMPARE(m->end_of(l1.ref(0)), int64_t(2000 + 5'000'000'000));
    // The innermost range enclosing the short call: the 1 h range, then the call itself.
    const auto enc = m->enclosing_ranges(1, 2, 5'000'010'000, 5'000'010'010);
    QCOMPARE(enc.size(), size_t(2));
    QCOMPARE(enc[0], (EventRef{EventKind::Range, 0}));
    const Track& gpu = m->tracks()[track_of(*m, TrackKind::GpuStream)];
    QCOMPARE(gpu.lanes[0].end(0), int64_t(0xFFFFFFFFll));
    QVERIFY(gpu.lanes[0].kinds.empty());  // one kind: stored once
    QCOMPARE(gpu.lanes[0].kind(0), EventKind::Kernel);
  }

  void overlappingLaneKeepsPrefixMaxEnd() {
    auto t = std::make_shared<store::Trace>();
    auto n = t->intern("r");
    // 60 concurrent ranges on one thread: lanes are capped, so the last lane overlaps and its ends are not
    // sorted; first_ending_after must still find the long event that started first.
    for (int i = 0; i < 60; ++i) {
      store::Range r;
      r.start = i;
      r.end = i == 59 ? 100 : 10'000 - i;
      r.tid = 1;
      r.name = n;
      t->ranges.push_back(r);
    }
    auto m = TimelineModel::build(t);
    const Track& tr = m->tracks()[0];
    QCOMPARE(tr.lanes.size(), size_t(48));
    const Lane& last = tr.lanes.back();
    QCOMPARE(last.size(), size_t(13));
    QVERIFY(!last.max_end.empty());
    QCOMPARE(last.end(12), int64_t(100));
    QCOMPARE(last.max_end_at(12), int64_t(10'000 - 47));
    QCOMPARE(last.first_ending_after(5000), size_t(0));
    QCOMPARE(last.first_ending_after(10'000 - 47), size_t(13));
  }

  void lodBoundsWorkByPixels() {
    const int n = 200000;
    auto m = dense_model(n);
    Viewport vp{double(m->begin()), double(m->end()), 1000};
    DrawList dl = build_draw_list(*m, vp, {0});
    // Every event is accounted for exactly once, in far fewer blocks than events.
    uint64_t total = 0;
    for (const auto& it : dl.items) total += it.count;
    QCOMPARE(total, uint64_t(n));
    QVERIFY2(dl.items.size() <= 1000, qPrintable(QString::number(dl.items.size())));
    QVERIFY2(dl.events_visited <= 3000, qPrintable(QString::number(dl.events_visited)));
    // Blocks do not overlap and are ordered.
    for (size_t i = 1; i < dl.items.size(); ++i) QVERIFY(dl.items[i].start >= dl.items[i - 1].end);

    // Deep zoom: 10 events of 100 ns over 1000 px are drawn one by one.
    Viewport deep{1'000'000.0, 1'002'000.0, 1000};
    dl = build_draw_list(*m, deep, {0});
    QCOMPARE(dl.items.size(), size_t(10));
    for (const auto& it : dl.items) QCOMPARE(it.count, 1u);
    QCOMPARE(dl.items[0].start, 1'000'000.0);

    // A wide event after a run of tiny ones keeps its own rectangle.
    auto t = std::make_shared<store::Trace>();
    auto k = t->intern("k");
    for (int i = 0; i < 100; ++i) t->kernels.push_back({i * 10, i * 10 + 5, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, k, 0, 0});
    t->kernels.push_back({1000, 100000, 0, 0, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, k, 0, 0});
    auto m2 = TimelineModel::build(t);
    dl = build_draw_list(*m2, Viewport{0, 100000, 1000}, {0});
    QCOMPARE(dl.items.size(), size_t(2));
    QCOMPARE(dl.items[0].count, 100u);
    QCOMPARE(dl.items[1].count, 1u);
    QCOMPARE(dl.items[1].start, 1000.0);
  }

  // Issue 26: a zoomed-out lane draws its busy share per pixel; Lane::busy_in must equal the summed overlaps.
  void busyShareOfALaneIsExact() {
    auto t = std::make_shared<store::Trace>();
    auto n = t->intern("k");
    uint64_t seed = 42;
    auto next = [&seed](int64_t mod) { return int64_t((seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 2) % mod; };
    int64_t at = 0;
    for (int i = 0; i < 5000; ++i) {  // gaps and durations from 0 to 1999 ns, and every 997th kernel 5 s long
      at += next(2000);
      store::Kernel k;
      k.start = at;
      k.end = at + (i % 997 == 996 ? 5'000'000'000LL : next(2000));
      k.stream = 1;
      k.name = n;
      t->kernels.push_back(k);
      at = k.end;
    }
    auto m = TimelineModel::build(t);
    const Lane& lane = m->tracks()[0].lanes[0];
    QCOMPARE(lane.size(), size_t(5000));
    QVERIFY(!lane.long_durs.empty());
    auto brute = [&](int64_t a, int64_t b) {
      int64_t covered = 0;
      for (size_t e = 0; e < lane.size(); ++e) covered += std::max<int64_t>(0, std::min(lane.end(e), b) - std::max(lane.starts[e], a));
      return covered;
    };
    for (int probe = 0; probe < 400; ++probe) {
      const int64_t a = next(at), b = a + 1 + next(probe % 2 ? 50'000 : 6'000'000'000LL);
      QCOMPARE(lane.busy_in(a, b), brute(a, b));
    }
    QCOMPARE(lane.summed_dur(lane.size()), brute(m->begin(), m->end()));
    QCOMPARE(lane.busy_in(m->begin(), m->end()), brute(m->begin(), m->end()));
    QCOMPARE(lane.busy_in(10, 10), int64_t(0));

    // 100 ns kernels every 200 ns: every column of the merged block is half busy.
    auto dense = dense_model(200000);
    DrawList dl = build_draw_list(*dense, Viewport{double(dense->begin()), double(dense->end()), 1000}, {0});
    QCOMPARE(dl.items.size(), size_t(1));
    QCOMPARE(dl.items[0].busy, 0);
    QCOMPARE(dl.busy.size(), size_t(1));
    QCOMPARE(dl.busy[0].share.size(), size_t(1000));
    QCOMPARE(dl.busy_columns, size_t(1000));
    for (size_t k = 0; k + 1 < dl.busy[0].share.size(); ++k) QVERIFY2(std::abs(dl.busy[0].share[k] - 0.5f) < 0.01f, qPrintable(QString::number(k)));
    // Steps tile the run: merged steps are a block, not a busy share.
    auto sm = TimelineModel::build(synthetic_trace());
    const int steps = track_of(*sm, TrackKind::Steps);
    QVERIFY(steps >= 0);
    dl = build_draw_list(*sm, Viewport{double(sm->begin()), double(sm->end()), 4}, {steps});
    QVERIFY(!dl.items.empty() && dl.items[0].count > 1);
    QCOMPARE(dl.items[0].busy, -1);
    QVERIFY(dl.busy.empty());
  }

  void mergedStepsTakeTheirMajorityColour() {
    // 40 steps of 1 ms drawn in 40 px (each step voted on): one merged block, whose first step is sync-bound
    // and whose majority is gpu-bound among all six bounds (a first-event colour drew launch_bound_graph's
    // 2863 gpu-bound steps sync red; a vote of four slots never counted a fifth bound).
    const analyzer::Bound order[] = {analyzer::Bound::Sync, analyzer::Bound::Input, analyzer::Bound::Launch,
                                     analyzer::Bound::Host, analyzer::Bound::Other, analyzer::Bound::Gpu};
    auto with = [&](auto bound_of) {
      auto a = std::make_shared<analyzer::Analysis>();
      for (int s = 0; s < 40; ++s) {
        analyzer::StepBreakdown b;
        b.index = s, b.start_ns = kBase + s * kMs, b.dur_ns = kMs, b.bound = bound_of(s);
        a->steps.push_back(b);
      }
      a->summary.steps = 40;
      auto m = TimelineModel::build(synthetic_trace(), a);
      const int tr = track_of(*m, TrackKind::Steps);
      DrawList dl = build_draw_list(*m, Viewport{double(kBase), double(kBase + 40 * kMs), 40}, {tr});
      return std::make_pair(m, dl);
    };
    // Steps 0-4 one each of five bounds, then gpu on every other step and the five bounds in turn between.
    auto [m, dl] = with([&](int s) {
      return s < 5 ? order[s] : s % 2 ? analyzer::Bound::Gpu : order[(s / 2) % 5];
    });
    QCOMPARE(dl.items.size(), size_t(1));
    QCOMPARE(dl.items[0].count, uint32_t(40));
    QCOMPARE(dl.items[0].colour,
             m->colour_key({EventKind::Step, 1 + 4}));  // step 5: gpu-bound, not step 0's sync
    QCOMPARE(QString::fromStdString(m->steps()[5].bound), QString("gpu"));
    // Six bounds in turn, sync and three others seven times each: a tie goes to the first step's.
    auto [m2, dl2] = with([&](int s) { return order[s % 6]; });
    QCOMPARE(dl2.items.size(), size_t(1));
    QCOMPARE(dl2.items[0].colour, m2->colour_key({EventKind::Step, 0}));
  }

  void sampleDensity() {
    auto m = TimelineModel::build(synthetic_trace());
    const int tr = track_of(*m, TrackKind::CpuSamples);
    QVERIFY(tr >= 0);
    Viewport vp{double(kBase), double(kBase + 10 * kMs), 100};
    DrawList dl = build_draw_list(*m, vp, {tr}, LodOptions{2.0, 10, {}});
    QCOMPARE(dl.density.size(), size_t(1));
    QCOMPARE(dl.density[0].counts.size(), size_t(10));
    for (uint32_t c : dl.density[0].counts) QCOMPARE(c, 1u);  // one sample per ms bucket
    for (float v : dl.density[0].values) QCOMPARE(v, 1.f);
    // A --wall recording: the samples of a thread blocked off the CPU keep their buckets' count but give no
    // height (a 150 ms sleep drew as dense as compute).
    auto t = synthetic_trace();
    for (auto& smp : t->samples)
      if (smp.time >= kBase + 5 * kMs && smp.time < kBase + 10 * kMs) smp.on_cpu = false;
    auto wall = TimelineModel::build(t);
    DrawList dw =
        build_draw_list(*wall, vp, {track_of(*wall, TrackKind::CpuSamples)}, LodOptions{2.0, 10, {}});
    QCOMPARE(dw.density.size(), size_t(1));
    for (int b = 0; b < 10; ++b) {
      QCOMPARE(dw.density[0].counts[size_t(b)], 1u);
      QCOMPARE(dw.density[0].values[size_t(b)], b < 5 ? 1.f : 0.f);
    }
  }

  void hitTestReturnsTheEventUnderThePixel() {
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    TimelineLayout layout(*m);
    Viewport vp{double(kBase), double(kBase + 10 * kMs), 1000};  // 10 µs per pixel
    const int gpu = track_of(*m, TrackKind::GpuStream, 7);
    const int y = layout.lane_y(gpu, 0) + layout.metrics().lane_height / 2;
    // The middle of kernel 3 of step 0.
    const double x = vp.x_of(double(kernel_start(0, 3) + kKernelDur / 2));
    auto hit = hit_test(*m, layout, vp, x, y);
    QVERIFY(hit.has_value());
    QCOMPARE(hit->track, gpu);
    QCOMPARE(int(hit->event.kind), int(EventKind::Kernel));
    QCOMPARE(hit->event.row, 3u);
    // 1 px after its end (within tolerance) still finds it; the middle of the gap finds nothing.
    QCOMPARE(hit_test(*m, layout, vp, vp.x_of(double(kernel_start(0, 3) + kKernelDur)) + 1, y)->event.row, 3u);
    QVERIFY(!hit_test(*m, layout, vp, vp.x_of(double(kernel_start(0, 3) + 550 * kUs)), y).has_value());
    // The launch call sits in lane 2 of the host track.
    const int host = track_of(*m, TrackKind::CpuRanges);
    const double lx = vp.x_of(double(kernel_start(0, 1) - 90 * kUs));
    hit = hit_test(*m, layout, vp, lx, layout.lane_y(host, 2) + 3);
    QVERIFY(hit.has_value());
    QCOMPARE(int(hit->event.kind), int(EventKind::ApiCall));
    QCOMPARE(QString::fromStdString(m->name_of(hit->event)), QString("cudaLaunchKernel"));
    QCOMPARE(m->trace().api_calls[hit->event.row].correlation, 2);
    // Lane 1 at the same x is the op.
    hit = hit_test(*m, layout, vp, lx, layout.lane_y(host, 1) + 3);
    QCOMPARE(QString::fromStdString(m->name_of(hit->event)), QString("aten::conv2d"));
    // Group header rows are not events.
    QVERIFY(!hit_test(*m, layout, vp, 10, 2).has_value());
  }

  void flowsJoinOutOfOrderCorrelations() {
    auto t = std::make_shared<store::Trace>();
    auto n = t->intern("cudaLaunchKernel");
    for (int64_t corr : {5, 3, 5}) {  // out of order; the second call with id 5 is a duplicate
      store::ApiCall a;
      a.start = 10 * corr;
      a.end = a.start + 5;
      a.tid = 1;
      a.name = n;
      a.correlation = corr;
      t->api_calls.push_back(a);
    }
    for (int64_t corr : {5, 9, 3}) t->kernels.push_back({100 * corr, 100 * corr + 50, 0, 0, 1, corr, 1, 1, 1, 1, 1, 1, 0, 0, n, 0, 0});
    store::Memcpy c;
    c.start = 1000;
    c.end = 1100;
    c.stream = 1;
    c.correlation = 5;
    t->memcpys.push_back(c);
    auto m = TimelineModel::build(t);
    QCOMPARE(m->launching_api_call({EventKind::Kernel, 0}), std::optional<uint32_t>(0u));
    QCOMPARE(m->launching_api_call({EventKind::Kernel, 2}), std::optional<uint32_t>(1u));
    QVERIFY(!m->launching_api_call({EventKind::Kernel, 1}).has_value());  // id 9 has no launch in the trace
    QCOMPARE(m->launching_api_call({EventKind::Memcpy, 0}), std::optional<uint32_t>(0u));
    const auto five = m->launched_by(0);
    QCOMPARE(five.size(), size_t(2));
    QCOMPARE(five[0], (EventRef{EventKind::Kernel, 0}));
    QCOMPARE(five[1], (EventRef{EventKind::Memcpy, 0}));
    QCOMPARE(m->launched_by(1), (std::vector<EventRef>{{EventKind::Kernel, 2}}));
  }

  void flowsAndStacks() {
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    const EventRef kernel{EventKind::Kernel, 7};
    auto api = m->launching_api_call(kernel);
    QVERIFY(api.has_value());
    QCOMPARE(m->trace().api_calls[*api].correlation, m->trace().kernels[7].correlation);
    QCOMPARE(m->launched_by(*api).size(), size_t(1));
    QCOMPARE(m->launched_by(*api)[0], kernel);
    const auto& a = m->trace().api_calls[*api];
    auto encl = m->enclosing_ranges(a.pid, a.tid, a.start, a.end);
    QStringList names;
    for (auto e : encl) names << QString::fromStdString(m->name_of(e));
    QCOMPARE(names, (QStringList{"ProfilerStep#1", "aten::conv2d", "cudaLaunchKernel"}));
    auto sample = m->sample_near(a.pid, a.tid, a.start, 2 * kMs);
    QVERIFY(sample.has_value());
    QStringList frames;
    for (auto f : m->stack_frames(m->trace().samples[*sample].stack)) frames << QString::fromStdString(m->frame_name(f));
    QCOMPARE(frames, (QStringList{"forward", "train", "main"}));
    auto loc = m->locate(kernel);
    QVERIFY(loc.has_value());
    QCOMPARE(m->tracks()[loc->track].stream, 7);
    QCOMPARE(loc->index, size_t(7));
  }

  void findingExtentsCoverTheirSteps() {
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    auto ext = m->finding_extent(0);
    QVERIFY(ext.has_value());
    QCOMPARE(ext->first, kBase);
    QCOMPARE(ext->second, kBase + 20 * kMs);
    QCOMPARE(m->findings()[1].start, kBase + 20 * kMs);
  }

  void callTreeFromSamples() {
    auto m = TimelineModel::build(synthetic_trace());
    CallTree td = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown);
    QVERIFY(!td.weighted_by_time());
    const auto& nodes = td.nodes();
    QCOMPARE(nodes[0].total, 20.0);
    const auto& thread = nodes[nodes[0].children.at(0)];
    // Named as the timeline names the thread (its name and id), not "Thread 100".
    QCOMPARE(QString::fromStdString(td.name(thread)), QString("main 100"));
    const auto& main = nodes[thread.children.at(0)];
    const auto& train = nodes[main.children.at(0)];
    QCOMPARE(train.total, 20.0);
    QCOMPARE(train.children.size(), size_t(2));
    QCOMPARE(QString::fromStdString(td.name(nodes[train.children[0]])), QString("forward"));  // 12 > 8
    QCOMPARE(nodes[train.children[0]].self, 12.0);
    QCOMPARE(nodes[train.children[1]].self, 8.0);

    CallTree bu = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::BottomUp);
    const auto& roots = bu.nodes()[0].children;
    QCOMPARE(roots.size(), size_t(2));
    QCOMPARE(QString::fromStdString(bu.name(bu.nodes()[roots[0]])), QString("forward"));
    QCOMPARE(bu.nodes()[roots[0]].self, 12.0);
    QCOMPARE(bu.nodes()[roots[1]].total, 8.0);
    // next_batch ← train ← main
    const auto& nb = bu.nodes()[roots[1]];
    QCOMPARE(QString::fromStdString(bu.name(bu.nodes()[nb.children.at(0)])), QString("train"));
  }

  void innermostFunctionsCountAsAnalyzeDoes() {
    // Below forward, a native BLAS leaf; on a second thread, a native wait with no Python frame at all.
    auto t = synthetic_trace();
    for (const char* name : {"dgemm_kernel", "pthread_cond_wait"}) {
      store::Frame f;
      f.id = int64_t(t->frames.size()) + 1;
      f.symbol = t->intern(name);
      f.module = t->intern("libc.so.6");
      f.kind = store::FrameKind::Native;
      t->frames.push_back(f);
    }
    t->stacks.push_back({5, 4, 5});  // dgemm_kernel ← forward ← train ← main
    t->stacks.push_back({6, 0, 6});  // pthread_cond_wait alone
    t->threads.push_back({100, 101, t->intern("pool")});
    for (int i = 0; i < 6; ++i) t->samples.push_back({kBase + 15 * kMs + i * 100 * kUs, 100, 100, 5, true});
    for (int i = 0; i < 3; ++i) t->samples.push_back({kBase + 15 * kMs + i * 100 * kUs, 100, 101, 6, true});
    std::sort(t->samples.begin(), t->samples.end(),
              [](const auto& a, const auto& b) { return a.time < b.time; });
    auto m = TimelineModel::build(t);
    const CallTree bu = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::BottomUp);
    const auto functions = bu.innermost_functions();
    QStringList got;
    for (const auto& f : functions)
      got << QString("%1 %2 %3")
                 .arg(QString::fromStdString(bu.name(bu.nodes()[size_t(f.node)])))
                 .arg(f.weight)
                 .arg(bu.is_python(bu.nodes()[size_t(f.node)]) ? "python" : "native");
    // forward: its own 12 and the 6 in dgemm_kernel under it; the bottom-up tree's leaves were dgemm_kernel
    // 6, forward 12, next_batch 8, pthread_cond_wait 3.
    QCOMPARE(got, QStringList({"forward 18 python", "next_batch 8 python", "pthread_cond_wait 3 native"}));
    double sum = 0;
    for (const auto& f : functions) sum += f.weight;
    QCOMPARE(sum, bu.nodes()[0].total);  // every sample once
    // Not for a top-down tree, nor one of ranges.
    QVERIFY(CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown)
                .innermost_functions()
                .empty());
  }

  void callTreeLeavesOutTheCollectorsOwnThreads() {
    auto t = synthetic_trace();
    store::Thread own;
    own.pid = 100, own.tid = 300, own.name = t->intern("stepscope-drain"), own.collector = true;
    t->threads.push_back(own);
    for (int i = 0; i < 5; ++i) t->samples.push_back({kBase + 1000 * (i + 1), 100, 300, 1, true});
    std::sort(t->samples.begin(), t->samples.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
    auto m = TimelineModel::build(t);
    auto threads = [](const CallTree& c) {
      QStringList names;
      for (int32_t n : c.nodes()[0].children) names << QString::fromStdString(c.name(c.nodes()[n]));
      return names;
    };
    const CallTree user = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown);
    QCOMPARE(user.nodes()[0].total, 20.0);  // the program's 20 samples only
    QVERIFY(!threads(user).contains("stepscope-drain 300"));
    const CallTree all = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown, true);
    QCOMPARE(all.nodes()[0].total, 25.0);
    QVERIFY2(threads(all).contains("stepscope-drain 300"), qPrintable(threads(all).join(", ")));
  }

  // The H100 torch_dataloader recording holds each wait three times, nested: the sample's NVTX range, its
  // stepscope.wait call and the DataLoader hook. One wait is drawn once and names every source.
  void oneWaitSeenByThreeSourcesIsDrawnOnce() {
    auto t = std::make_shared<store::Trace>();
    for (int i = 0; i < 3; ++i) {
      const int64_t s = kBase + i * 100 * kMs;
      t->data_waits.push_back({s, s + 67 * kMs, 100, 1111, t->intern("nvtx")});
      t->data_waits.push_back({s + 13 * 1000, s + 67 * kMs - 20 * 1000, 100, 1111, t->intern("api")});
      t->data_waits.push_back({s + 15 * 1000, s + 67 * kMs - 40 * 1000, 100, 1111, t->intern("dataloader")});
    }
    t->data_waits.push_back({kBase + 400 * kMs, kBase + 401 * kMs, 100, 1111, t->intern("dataloader")});  // alone
    auto m = TimelineModel::build(t);
    const Track* waits = nullptr;
    for (const auto& tr : m->tracks())
      if (tr.kind == TrackKind::DataWaits) waits = &tr;
    QVERIFY(waits);
    QCOMPARE(waits->lanes.size(), size_t(1));
    QCOMPARE(waits->lanes[0].size(), size_t(4));
    QCOMPARE(QString::fromStdString(m->name_of(waits->lanes[0].ref(0))),
             QString("Data wait (NVTX, stepscope API, DataLoader)"));
    QCOMPARE(QString::fromStdString(m->name_of(waits->lanes[0].ref(3))), QString("Data wait (DataLoader)"));
  }

  // v1 stores do not mark the collector's threads; its library at the leaf (CUPTI's buffer callbacks on a
  // thread of the program's) is the profiler's work too.
  void callTreeLeavesOutSamplesInTheCollectorLibrary() {
    auto t = synthetic_trace();
    int64_t frame_id = 0, stack_id = 0;
    for (const auto& f : t->frames) frame_id = std::max(frame_id, f.id);
    for (const auto& st : t->stacks) stack_id = std::max(stack_id, st.id);
    store::Frame f;
    f.id = ++frame_id, f.module = t->intern("/opt/stepscope/lib/libstepscope_collector.so");
    f.symbol = t->intern("stepscope::collector::cupti::decode_activity_buffer(unsigned char*, unsigned long)");
    t->frames.push_back(f);
    t->stacks.push_back({++stack_id, 0, f.id});
    for (int i = 0; i < 4; ++i) t->samples.push_back({kBase + 1000 * (i + 1) + 500, 100, 777, stack_id, true});
    std::sort(t->samples.begin(), t->samples.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
    auto m = TimelineModel::build(t);
    const CallTree user = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown);
    QCOMPARE(user.nodes()[0].total, 20.0);
    const CallTree all = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown, true);
    QCOMPARE(all.nodes()[0].total, 24.0);
  }

  // Two overloads fold to one short name; they stay two nodes, each with its full name as the tooltip.
  void callTreeKeepsFunctionsThatShareAShortName() {
    auto t = synthetic_trace();
    int64_t frame_id = 0, stack_id = 0;
    for (const auto& f : t->frames) frame_id = std::max(frame_id, f.id);
    for (const auto& st : t->stacks) stack_id = std::max(stack_id, st.id);
    const std::string full_a = "at::native::add_out(at::Tensor const&, at::Tensor const&)";
    const std::string full_b = "at::native::add_out(at::Tensor const&, c10::Scalar const&)";
    for (const std::string& full : {full_a, full_b}) {
      store::Frame f;
      f.id = ++frame_id, f.module = t->intern("libtorch_cpu.so"), f.symbol = t->intern(full);
      t->frames.push_back(f);
      t->stacks.push_back({++stack_id, 0, f.id});
      for (int i = 0; i < 3; ++i) t->samples.push_back({kBase + 30 * kMs + 1000 * (i + 1) + (full == full_b ? 500 : 0), 100, 777, stack_id, true});
    }
    std::sort(t->samples.begin(), t->samples.end(), [](const auto& a, const auto& b) { return a.time < b.time; });
    auto m = TimelineModel::build(t);
    const CallTree td = CallTree::for_range(*m, kBase + 30 * kMs, kBase + 31 * kMs, CallTree::Direction::TopDown);
    int32_t thread_node = -1;
    for (int32_t c : td.nodes()[0].children)
      if (td.name(td.nodes()[c]) == "Thread 777") thread_node = c;
    QVERIFY(thread_node > 0);
    const auto& thread = td.nodes()[thread_node];
    QCOMPARE(thread.children.size(), size_t(2));
    QStringList shown, full;
    for (int32_t c : thread.children) {
      shown << QString::fromStdString(td.name(td.nodes()[c]));
      full << QString::fromStdString(td.full_name(td.nodes()[c]));
    }
    QCOMPARE(shown, QStringList({"at::native::add_out(…)", "at::native::add_out(…)"}));
    full.sort();
    QCOMPARE(full, QStringList({QString::fromStdString(full_a), QString::fromStdString(full_b)}));
    CallTreeModel model;
    model.set_tree(td);
    QModelIndex thread_index;
    for (int r = 0; r < model.rowCount(); ++r)
      if (model.index(r, CallTreeModel::Function).data().toString() == "Thread 777") thread_index = model.index(r, 0);
    QVERIFY(thread_index.isValid());
    const QModelIndex first = model.index(0, CallTreeModel::Function, thread_index);
    QVERIFY(full.contains(model.data(first, Qt::ToolTipRole).toString()));
  }

  void callTreeFromRangesWhenNoSamples() {
    auto t = synthetic_trace();
    t->samples.clear();
    auto m = TimelineModel::build(t);
    CallTree td = CallTree::for_range(*m, kBase, kBase + 10 * kMs, CallTree::Direction::TopDown);
    QVERIFY(td.weighted_by_time());
    const auto& n = td.nodes();
    const auto& step = n[n[n[0].children.at(0)].children.at(0)];
    QCOMPARE(QString::fromStdString(td.name(step)), QString("ProfilerStep#N"));  // every step one node
    QCOMPARE(step.total, double(10 * kMs));
    // Self = 10 ms − 4 ms data loader − 4.5 ms conv.
    QCOMPARE(step.self, double(1500 * kUs));
    QCOMPARE(n[n[0].children.at(0)].total, double(10 * kMs));  // the thread: its outermost ranges' time
    QCOMPARE(n[0].total, double(10 * kMs));
    // Two steps: one ProfilerStep#N node of both, the data loader's time under it summed (was #0 and #1).
    const CallTree two = CallTree::for_range(*m, kBase, kBase + 20 * kMs, CallTree::Direction::TopDown);
    const auto& thread2 = two.nodes()[size_t(two.nodes()[0].children.at(0))];
    QCOMPARE(thread2.children.size(), size_t(1));
    QCOMPARE(two.nodes()[size_t(thread2.children[0])].total, double(20 * kMs));
    CallTree bu = CallTree::for_range(*m, kBase, kBase + 10 * kMs, CallTree::Direction::BottomUp);
    double root_self = 0;
    for (int32_t c : bu.nodes()[0].children) root_self += bu.nodes()[c].self;
    QCOMPARE(root_self, double(10 * kMs));
  }

  void kernelStatsOfARange() {
    auto m = TimelineModel::build(synthetic_trace());
    auto stats = kernel_stats(*m, kBase, kBase + 20 * kMs);
    QCOMPARE(stats.size(), size_t(2));
    QCOMPARE(QString::fromStdString(stats[0].name), QString("volta_sgemm_128x64_nn"));
    QCOMPARE(stats[0].count, 10);
    QCOMPARE(stats[0].total_ns, 10 * kKernelDur);
    QCOMPARE(stats[0].min_ns, kKernelDur);
    QCOMPARE(QString::fromStdString(stats[1].name), QString("Memcpy HtoD"));
    QCOMPARE(stats[1].count, 2);
  }

  // A recording whose host runs ahead of the GPU (the H100's sync_stall_async): the steps table shows the steps in
  // the GPU's time, the rows the slow steps were judged on, and flags exactly those.
  void stepsModelShowsTheGpuTimeRowsWhereTheHostRunsAhead() {
    const QString xz = QString(STEPSCOPE_TRACES_DIR) + "/../recordings/h100-2026-11-22/sync_stall_async.db.xz";
    if (!QFileInfo::exists(xz)) QSKIP("no H100 recordings");
    const QString db = QString::fromStdString(std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-model-ahead.db");
    QProcess unxz;
    unxz.setStandardOutputFile(db);
    unxz.start("xz", {"-dc", xz});
    QVERIFY(unxz.waitForFinished(60000) && unxz.exitCode() == 0);
    auto trace = std::make_shared<store::Trace>(analyzer::load_trace(db.toStdString()));
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace));
    QVERIFY(analysis->summary.host_runs_ahead);
    const auto& o = analysis->step_outliers;
    QVERIFY(o.gpu_time);
    auto m = TimelineModel::build(trace, analysis);
    StepsModel steps;
    steps.set_model(m);
    QCOMPARE(size_t(steps.rowCount()), analysis->gpu_steps.size());
    int64_t flagged = 0;
    for (int r = 0; r < steps.rowCount(); ++r) flagged += steps.is_slow(r);
    QCOMPARE(flagged, o.slow_count);
  }

  void stepsModelFlagsAndExplainsSlowSteps() {
    auto trace = std::make_shared<store::Trace>(stepscope::test::slow_steps_trace());
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace));
    auto m = TimelineModel::build(trace, analysis);
    StepsModel steps;
    QAbstractItemModelTester tester(&steps, QAbstractItemModelTester::FailureReportingMode::QtTest);
    steps.set_model(m);
    QCOMPARE(steps.rowCount(), 12);
    QCOMPARE(steps.columnCount(), 3 + int(analyzer::step_categories().size()) + 2);
    QCOMPARE(steps.headerData(StepsModel::FirstCategory, Qt::Horizontal).toString(), QString("GPU busy"));
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester proxy_tester(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&steps);
    proxy.setSortRole(SortRole);
    proxy.sort(StepsModel::Duration, Qt::DescendingOrder);
    // The two slow steps sort first, flagged, each with its one-line explanation.
    QCOMPARE(proxy.data(proxy.index(0, StepsModel::Step)).toString(), QString("8 ▲"));
    QCOMPARE(proxy.data(proxy.index(1, StepsModel::Step)).toString(), QString("4 ▲"));
    QCOMPARE(proxy.data(proxy.index(2, StepsModel::Step)).toString().contains("▲"), false);
    const int first = proxy.mapToSource(proxy.index(0, 0)).row(), second = proxy.mapToSource(proxy.index(1, 0)).row();
    QVERIFY(steps.is_slow(first) && steps.is_slow(second));
    QVERIFY(steps.explanation(first).contains("GPU busy"));
    QVERIFY(steps.explanation(first).contains("kernel at::native::vectorized_elementwise_kernel<…>(…)"));
    QVERIFY(steps.explanation(second).contains("data wait"));
    // The cell leads with what grew; the step, its time and the median are in the row and in the tooltip.
    QVERIFY(
        steps.explanation(first).startsWith("step 8 took 18.1 ms, 9.02 ms over the median step (9.13 ms): "));
    QCOMPARE(proxy.data(proxy.index(0, steps.explanation_column())).toString(),
             steps.explanation(first).mid(steps.explanation(first).indexOf("): ") + 3));
    QCOMPARE(proxy.data(proxy.index(0, steps.explanation_column()), Qt::ToolTipRole).toString(),
             steps.explanation(first));
    // Sorted by "What grew", the step that grew most first.
    proxy.sort(steps.explanation_column(), Qt::DescendingOrder);
    QCOMPARE(proxy.data(proxy.index(0, StepsModel::Step)).toString(), QString("8 ▲"));
    proxy.sort(StepsModel::Duration, Qt::DescendingOrder);
    QVERIFY(proxy.data(proxy.index(0, StepsModel::OverMedian)).toString().startsWith("+9."));
    QCOMPARE(steps.step_position(first), m->step_position(8));
    // Sorting by a category column orders by its time: the long data wait first.
    proxy.sort(StepsModel::FirstCategory + 1, Qt::DescendingOrder);
    QCOMPARE(proxy.headerData(StepsModel::FirstCategory + 1, Qt::Horizontal).toString(),
             QString("Data wait"));
    QCOMPARE(proxy.data(proxy.index(0, StepsModel::Step)).toString(), QString("4 ▲"));
  }

  // The analyzer's critical path as a track of its own under Analysis: every stretch inside the traced steps,
  // tiling each step exactly, named and coloured by its kind, selectable.
  void criticalPathTrack() {
    auto trace = std::make_shared<store::Trace>(stepscope::test::slow_steps_trace());
    analyzer::AnalyzeOptions opt;
    opt.critical_path_segments = true;
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace, opt));
    const auto& path = analysis->critical_path.path;
    QVERIFY(!path.empty());
    auto m = TimelineModel::build(trace, analysis);
    const int ti = track_of(*m, TrackKind::CriticalPath);
    QVERIFY(ti > 0);
    const Track& tr = m->tracks()[size_t(ti)];
    QCOMPARE(QString::fromStdString(tr.group), QString("Analysis"));
    QCOMPARE(QString::fromStdString(tr.title), QString("Critical path"));
    QCOMPARE(m->tracks()[size_t(ti - 1)].kind, TrackKind::Steps);
    size_t events = 0;
    for (const Lane& l : tr.lanes) events += l.size();
    QCOMPARE(events, path.size());
    // Per traced step the stretches add up to the step, as the analyzer's per-step sums do.
    for (const auto& p : analysis->critical_path.steps) {
      int64_t sum = 0, by_kind = 0;
      for (const auto& sg : path)
        if (sg.step == p.step) sum += sg.end - sg.start;
      for (int64_t v : p.ns) by_kind += v;
      QCOMPARE(sum, by_kind);
      QCOMPARE(sum, analysis->steps[size_t(p.step)].dur_ns);
    }
    const EventRef e{EventKind::PathSegment, 0};
    QCOMPARE(m->start_of(e), path[0].start);
    QCOMPARE(m->end_of(e), path[0].end);
    QCOMPARE(QString::fromStdString(m->name_of(e)),
             QString::fromStdString(std::string(analyzer::to_string(path[0].kind)) + ": " + std::string(path[0].what)));
    QCOMPARE(m->colour_key(e), TimelineModel::kPathKey | uint32_t(path[0].kind));
    const auto loc = m->locate(e);
    QVERIFY(loc.has_value());
    QCOMPARE(loc->track, ti);
    // Without the option (stepscope report, analyze): no path kept, no track.
    auto plain = TimelineModel::build(trace, std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace)));
    QCOMPARE(track_of(*plain, TrackKind::CriticalPath), -1);
  }

  // Issue 26 without the H100 recordings: a run whose step 0 loads CUDA modules for 30 ms opens on steps 1-11,
  // its worst finding first, and the slowest steady step (8) is what --select-slowest-step picks.
  void opensOnTheSteadyStepsAndTheWorstFinding() {
    auto trace = std::make_shared<store::Trace>(stepscope::test::slow_steps_trace());
    constexpr int64_t kCut = 1'000'000, kLoad = 30'000'000;
    auto shift = [&](auto& rows) {
      for (auto& r : rows) {
        if (r.start >= kCut) r.start += kLoad;
        if (r.end > kCut) r.end += kLoad;
      }
    };
    shift(trace->ranges), shift(trace->api_calls), shift(trace->kernels);
    store::ApiCall load;
    load.start = kCut, load.end = kCut + kLoad, load.pid = 100, load.tid = 101, load.name = trace->intern("cuLibraryLoadData");
    trace->api_calls.insert(trace->api_calls.begin(), load);
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace));
    auto m = TimelineModel::build(trace, analysis);
    QCOMPARE(m->steps().size(), size_t(12));
    QVERIFY(m->steps()[0].warmup && !m->steps()[1].warmup);
    const auto ext = m->steady_extent();
    QVERIFY(ext.has_value());
    QCOMPARE(ext->first, m->steps()[1].start);
    QCOMPARE(ext->second, m->steps().back().end);
    // The worst finding: the highest severity, then the largest share.
    const int worst = m->worst_finding();
    QVERIFY(worst >= 0);
    for (const FindingInfo& f : m->findings()) {
      const auto rank = [](const std::string& s) { return s == "high" ? 2 : s == "medium" ? 1 : 0; };
      const FindingInfo& w = m->findings()[size_t(worst)];
      QVERIFY(rank(f.severity) < rank(w.severity) || (rank(f.severity) == rank(w.severity) && f.share <= w.share));
    }
    StepsModel steps;
    steps.set_model(m);
    QVERIFY(steps.is_slow(0) && steps.is_startup(0));
    QCOMPARE(steps.data(steps.index(0, StepsModel::Step)).toString(), QString("0 ▲ start-up"));
    const int slowest = steps.slowest_slow_row();
    QCOMPARE(m->steps()[size_t(steps.step_position(slowest))].index, int64_t(8));
    QVERIFY(!steps.is_startup(slowest));
    // Only start-up slow: then it is the one picked.
    auto only = std::make_shared<analyzer::Analysis>(*analysis);
    only->step_outliers.slow.erase(only->step_outliers.slow.begin() + 1, only->step_outliers.slow.end());
    for (auto& s : only->steps)
      if (s.index != 0) s.dur_ns = only->step_outliers.median_ns;
    StepsModel startup_only;
    startup_only.set_model(TimelineModel::build(trace, only));
    QCOMPARE(startup_only.slowest_slow_row(), 0);
  }

  void rangeBreakdownMeasuresGpuBusyAndProratesIdle() {
    auto a = synthetic_analysis();
    a->steps[0].data_wait_ns = 4 * kMs;  // step 0: [kBase, kBase + 10 ms)
    a->steps[0].other_idle_ns = 2 * kMs;
    auto m = TimelineModel::build(synthetic_trace(), a);
    // GPU busy: the union of the step's kernels and copies, computed here from the trace rows.
    std::vector<std::pair<int64_t, int64_t>> iv;
    for (const auto& k : m->trace().kernels)
      if (k.start < kBase + 10 * kMs && k.end > kBase) iv.emplace_back(std::max(k.start, kBase), std::min(k.end, kBase + 10 * kMs));
    for (const auto& c : m->trace().memcpys)
      if (c.start < kBase + 10 * kMs && c.end > kBase) iv.emplace_back(std::max(c.start, kBase), std::min(c.end, kBase + 10 * kMs));
    std::sort(iv.begin(), iv.end());
    int64_t busy = 0, s = 0, e = INT64_MIN;
    for (auto [x, y] : iv) {
      if (x > e) {
        if (e > s) busy += e - s;
        s = x, e = y;
      } else {
        e = std::max(e, y);
      }
    }
    if (e > s) busy += e - s;
    QVERIFY(busy > 0);
    const RangeBreakdown whole = range_breakdown(*m, kBase, kBase + 10 * kMs);
    QCOMPARE(whole.gpu_busy_ns, busy);
    QCOMPARE(whole.in_steps_ns, 10 * kMs);
    QCOMPARE(whole.idle.size(), analyzer::step_categories().size() - 1);  // every category but GPU busy
    QCOMPARE(whole.idle[0].first, std::string("data wait"));
    QCOMPARE(whole.idle[0].second, 4 * kMs);
    // Half the step: half its idle, prorated.
    const RangeBreakdown half = range_breakdown(*m, kBase, kBase + 5 * kMs);
    QCOMPARE(half.idle[0].second, 2 * kMs);
    const auto other = std::find_if(half.idle.begin(), half.idle.end(), [](const auto& c) { return c.first == "other idle"; });
    QVERIFY(other != half.idle.end());
    QCOMPARE(other->second, 1 * kMs);
    QCOMPARE(half.idle.back().first, std::string("profiler's own cost"));  // none in this trace
    QCOMPARE(half.idle.back().second, int64_t(0));
  }

  void eachFindingKeepsItsLane() {
    // input-bound on steps 0 and 1, launch-overhead on step 2: packed first-fit they shared one lane, and with
    // more findings a rule moved from lane to lane from step to step.
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    const int ti = track_of(*m, TrackKind::Findings);
    QVERIFY(ti >= 0);
    const Track& tr = m->tracks()[size_t(ti)];
    QCOMPARE(tr.lanes.size(), size_t(2));
    for (size_t l = 0; l < tr.lanes.size(); ++l) {
      QVERIFY(tr.lanes[l].size() > 0);
      for (size_t i = 0; i < tr.lanes[l].size(); ++i) QCOMPARE(tr.lanes[l].ref(i).row, uint32_t(l));
    }
  }

  void itemModelsPassTheTester() {
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    FindingsModel findings;
    QAbstractItemModelTester t1(&findings, QAbstractItemModelTester::FailureReportingMode::QtTest);
    findings.set_model(m);
    QCOMPARE(findings.rowCount(), 2);
    QCOMPARE(findings.data(findings.index(0, FindingsModel::Rule)).toString(), QString("input-bound"));
    QCOMPARE(findings.data(findings.index(0, FindingsModel::Steps)).toString(), QString("2 (0–1)"));
    QCOMPARE(findings.data(findings.index(1, FindingsModel::Steps)).toString(), QString("1 (2)"));  // was "2"
    QCOMPARE(findings.data(findings.index(0, FindingsModel::Saving)).toString(), QString("4.00 ms"));

    KernelStatsModel stats;
    QAbstractItemModelTester t2(&stats, QAbstractItemModelTester::FailureReportingMode::QtTest);
    stats.set_stats(kernel_stats(*m, m->begin(), m->end()));
    QSortFilterProxyModel proxy;
    QAbstractItemModelTester t3(&proxy, QAbstractItemModelTester::FailureReportingMode::QtTest);
    proxy.setSourceModel(&stats);
    proxy.setSortRole(SortRole);
    proxy.sort(KernelStatsModel::Count, Qt::DescendingOrder);
    QCOMPARE(proxy.data(proxy.index(0, KernelStatsModel::Name)).toString(), QString("volta_sgemm_128x64_nn"));
    QCOMPARE(proxy.data(proxy.index(0, KernelStatsModel::Count)).toString(), QString("20"));
    QCOMPARE(proxy.data(proxy.index(0, KernelStatsModel::Total)).toString(), QString("6.00 ms"));
    proxy.setFilterFixedString("memcpy");
    proxy.setFilterCaseSensitivity(Qt::CaseInsensitive);
    QCOMPARE(proxy.rowCount(), 1);

    CallTreeModel tree;
    QAbstractItemModelTester t4(&tree, QAbstractItemModelTester::FailureReportingMode::QtTest);
    tree.set_tree(CallTree::for_range(*m, m->begin(), m->end(), CallTree::Direction::TopDown));
    QCOMPARE(tree.rowCount(), 1);
    QModelIndex thread = tree.index(0, 0);
    QCOMPARE(tree.data(thread).toString(), QString("main 100"));
    QModelIndex train = tree.index(0, 0, tree.index(0, 0, thread));
    QCOMPARE(tree.data(train).toString(), QString("train"));
    QCOMPARE(tree.parent(train).parent(), thread);
    QCOMPARE(tree.data(train.siblingAtColumn(CallTreeModel::Total)).toString(), QString("40 (100.0 %)"));
    QCOMPARE(tree.data(tree.index(0, CallTreeModel::Total, train)).toString(), QString("32 (80.0 %)"));  // forward
    // Sorted by self time, smallest first (a header click): next_batch (8) before forward (32), at every
    // level; a persistent index (what keeps a view's rows expanded) follows forward to its new row.
    const QPersistentModelIndex forward = tree.index(0, 0, train);
    QCOMPARE(tree.data(forward).toString(), QString("forward"));
    tree.sort(CallTreeModel::Self, Qt::AscendingOrder);
    QCOMPARE(tree.data(tree.index(0, 0, train)).toString(), QString("next_batch"));
    QCOMPARE(forward.row(), 1);
    QCOMPARE(forward.data().toString(), QString("forward"));
    tree.sort(CallTreeModel::Function, Qt::DescendingOrder);
    QCOMPARE(tree.data(tree.index(0, 0, train)).toString(), QString("next_batch"));
    tree.sort(CallTreeModel::Function, Qt::AscendingOrder);
    QCOMPARE(tree.data(tree.index(0, 0, train)).toString(), QString("forward"));
    QCOMPARE(forward.row(), 0);
    tree.sort(CallTreeModel::Self, Qt::AscendingOrder);
    // A new tree keeps the order asked for (it is made ordered by total, largest first).
    tree.set_tree(CallTree::for_range(*m, m->begin(), m->end(), CallTree::Direction::TopDown));
    QCOMPARE(tree.data(tree.index(0, 0, tree.index(0, 0, tree.index(0, 0, tree.index(0, 0))))).toString(),
             QString("next_batch"));
    tree.sort(CallTreeModel::Total, Qt::DescendingOrder);
    tree.set_tree(CallTree::for_range(*m, m->begin(), m->end(), CallTree::Direction::BottomUp));
    QCOMPARE(tree.rowCount(), 2);
  }

  void viewportZoomKeepsTheAnchor() {
    Viewport vp{1000, 2000, 100};
    const double anchor = vp.time_at(25);
    vp.zoom_about(25, 0.5);
    QCOMPARE(vp.time_at(25), anchor);
    QCOMPARE(vp.t1 - vp.t0, 500.0);
    vp.pan_px(10);
    QCOMPARE(vp.t0, anchor - 125 + 50);
  }

  void formatting() {
    QCOMPARE(QString::fromStdString(format_duration(950)), QString("950 ns"));
    QCOMPARE(QString::fromStdString(format_duration(12500)), QString("12.5 µs"));
    QCOMPARE(QString::fromStdString(format_duration(830e6)), QString("830 ms"));
    QCOMPARE(QString::fromStdString(format_duration(1.2e9)), QString("1.20 s"));
    QCOMPARE(ruler_step(Viewport{0, 1e6, 1000}, 100), 1e5);
    QCOMPARE(ruler_step(Viewport{0, 3e6, 1000}, 100), 5e5);
    // Ticks at whole steps from the first event, as labelled: a run that began 30 ms into the clock's 200 ms
    // step had its "1.3 s" tick at 1.27 s after it.
    const double origin = 3002174160796.0 + 30e6;
    QCOMPARE(first_ruler_tick(Viewport{origin - 1e6, origin + 1.5e9, 1000}, origin, 2e8), origin);
    QCOMPARE(first_ruler_tick(Viewport{origin + 1.25e9, origin + 1.5e9, 1000}, origin, 2e8), origin + 1.4e9);
  }
};

QTEST_GUILESS_MAIN(ModelTest)
#include "model_test.moc"
