// The GUI-free timeline model: tracks, lanes, level of detail, hit-testing, flows, call trees, item models.
#include <QAbstractItemModelTester>
#include <QSortFilterProxyModel>
#include <QtTest>

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
    QCOMPARE(kinds, (QStringList{"steps", "findings", "cpu samples", "cpu ranges", "data waits", "gpu stream",
                                 "gpu stream"}));
    QCOMPARE(groups[0], QString("Analysis"));
    QCOMPARE(groups[2], QString("Process 100 python train.py"));
    QCOMPARE(groups[5], QString("GPU 0 Test GPU"));
    QCOMPARE(m->tracks()[5].stream, 7);
    QCOMPARE(m->tracks()[6].stream, 13);
    QCOMPARE(m->begin(), kBase);
    QCOMPARE(m->end(), kBase + kSteps * 10 * kMs);
    // Host ranges nest by time: step range, op, launch call.
    const Track& host = m->tracks()[3];
    QCOMPARE(host.lanes.size(), size_t(3));
    QCOMPARE(QString::fromStdString(m->name_of(host.lanes[0].ref(0))), QString("ProfilerStep#0"));
    QCOMPARE(QString::fromStdString(m->name_of(host.lanes[2].ref(0))), QString("cudaLaunchKernel"));
    QCOMPARE(m->tracks()[0].lanes[0].size(), size_t(kSteps));
    QCOMPARE(QString::fromStdString(m->name_of({EventKind::Step, 0})), QString("Step 0 · input-bound"));
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

  void sampleDensity() {
    auto m = TimelineModel::build(synthetic_trace());
    const int tr = track_of(*m, TrackKind::CpuSamples);
    QVERIFY(tr >= 0);
    Viewport vp{double(kBase), double(kBase + 10 * kMs), 100};
    DrawList dl = build_draw_list(*m, vp, {tr}, LodOptions{2.0, 10});
    QCOMPARE(dl.density.size(), size_t(1));
    QCOMPARE(dl.density[0].counts.size(), size_t(10));
    for (uint32_t c : dl.density[0].counts) QCOMPARE(c, 1u);  // one sample per ms bucket
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
    QCOMPARE(QString::fromStdString(td.name(thread)), QString("Thread 100"));
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

  void callTreeFromRangesWhenNoSamples() {
    auto t = synthetic_trace();
    t->samples.clear();
    auto m = TimelineModel::build(t);
    CallTree td = CallTree::for_range(*m, kBase, kBase + 10 * kMs, CallTree::Direction::TopDown);
    QVERIFY(td.weighted_by_time());
    const auto& n = td.nodes();
    const auto& step = n[n[n[0].children.at(0)].children.at(0)];
    QCOMPARE(QString::fromStdString(td.name(step)), QString("ProfilerStep#0"));
    QCOMPARE(step.total, double(10 * kMs));
    // Self = 10 ms − 4 ms data loader − 4.5 ms conv.
    QCOMPARE(step.self, double(1500 * kUs));
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

  void itemModelsPassTheTester() {
    auto m = TimelineModel::build(synthetic_trace(), synthetic_analysis());
    FindingsModel findings;
    QAbstractItemModelTester t1(&findings, QAbstractItemModelTester::FailureReportingMode::QtTest);
    findings.set_model(m);
    QCOMPARE(findings.rowCount(), 2);
    QCOMPARE(findings.data(findings.index(0, FindingsModel::Rule)).toString(), QString("input-bound"));
    QCOMPARE(findings.data(findings.index(0, FindingsModel::Steps)).toString(), QString("2 (0–1)"));
    QCOMPARE(findings.data(findings.index(0, FindingsModel::Saving)).toString(), QString("4.00 ms"));

    KernelStatsModel stats;
    QAbstractItemModelTester t2(&stats, QAbstractItemModelTester::FailureReportingMode::QtTest);
    stats.set_stats(kernel_stats(*m, m->begin(), m->end()), m->end() - m->begin());
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
    QCOMPARE(tree.data(thread).toString(), QString("Thread 100"));
    QModelIndex train = tree.index(0, 0, tree.index(0, 0, thread));
    QCOMPARE(tree.data(train).toString(), QString("train"));
    QCOMPARE(tree.parent(train).parent(), thread);
    QCOMPARE(tree.data(train.siblingAtColumn(CallTreeModel::Total)).toString(), QString("40 (100.0 %)"));
    QCOMPARE(tree.data(tree.index(0, CallTreeModel::Total, train)).toString(), QString("32 (80.0 %)"));  // forward
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
  }
};

QTEST_GUILESS_MAIN(ModelTest)
#include "model_test.moc"
