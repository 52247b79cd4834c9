// A timeline built from a store keeps its kernels as columns and reads their rows back from the store
// (TimelineModel::build_from_store, issue 53 item 3): it must answer every question exactly as the model
// built from the trace's rows does — tracks, lanes, times, names, colours, flows, replays, locations, the
// details pane — on the synthetic trace, stepscope's H200 recording of CUDA graph nodes and its H100
// recordings.
#include <sqlite3.h>

#include <QtTest>
#include <filesystem>
#include <tuple>

#include "event_details.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/gui/timeline_model.h"
#include "stepscope/store/store.h"
#include "synthetic.h"
#include "test_support.h"
#include "trace_loader.h"

using namespace stepscope;
using namespace stepscope::gui;

namespace {

auto key(const store::Kernel& k) {
  return std::tuple(k.start, k.end, k.device, k.context, k.stream, k.correlation, k.grid_x, k.grid_y,
                    k.grid_z, k.block_x, k.block_y, k.block_z, k.registers, k.shared_memory, k.name,
                    k.graph_id, k.pid, k.graph_node_id);
}

auto key(const store::ApiCall& a) {
  return std::tuple(a.start, a.end, a.pid, a.tid, int(a.kind), a.name, a.correlation, a.return_code, a.stack);
}

bool same_lane(const Lane& a, const Lane& b) {
  return a.starts == b.starts && a.durs == b.durs && a.rows == b.rows && a.kinds == b.kinds &&
         a.kind_all == b.kind_all && a.long_durs == b.long_durs && a.max_end == b.max_end &&
         a.busy_marks == b.busy_marks;
}

// Every question the views ask, of at most ~`budget` events a lane (evenly spread), and every kernel's row.
void compare_models(const TimelineModel& a, const TimelineModel& b, size_t budget = 20'000) {
  QCOMPARE(b.kernel_count(), a.kernel_count());
  QCOMPARE(b.api_call_count(), a.api_call_count());
  QCOMPARE(b.begin(), a.begin());
  QCOMPARE(b.end(), a.end());
  QCOMPARE(b.event_count(), a.event_count());
  QCOMPARE(b.graph_records(), a.graph_records());
  QCOMPARE(b.tracks().size(), a.tracks().size());
  for (size_t i = 0; i < a.tracks().size(); ++i) {
    const Track &x = a.tracks()[i], &y = b.tracks()[i];
    QCOMPARE(std::tie(y.kind, y.group, y.title, y.pid, y.tid, y.device, y.stream, y.folded, y.busy_ns),
             std::tie(x.kind, x.group, x.title, x.pid, x.tid, x.device, x.stream, x.folded, x.busy_ns));
    QCOMPARE(y.graphs_open_inside, x.graphs_open_inside);
    QCOMPARE(y.sample_times, x.sample_times);
    QCOMPARE(y.sample_rows, x.sample_rows);
    QCOMPARE(y.all_lanes(), x.all_lanes());
    for (size_t li = 0; li < x.all_lanes(); ++li) {
      const Lane &la = x.lane_at(li), &lb = y.lane_at(li);
      QVERIFY2(same_lane(la, lb), qPrintable(QString("track %1 lane %2").arg(i).arg(li)));
      const size_t stride = std::max<size_t>(1, la.size() / budget);
      for (size_t k = 0; k < la.size(); k += stride) {
        const EventRef e = la.ref(k);
        QCOMPARE(b.start_of(e), a.start_of(e));
        QCOMPARE(b.end_of(e), a.end_of(e));
        QCOMPARE(b.name_of(e), a.name_of(e));
        QCOMPARE(b.full_name_of(e), a.full_name_of(e));
        QCOMPARE(b.colour_key(e), a.colour_key(e));
        QCOMPARE(b.launching_api_call(e), a.launching_api_call(e));
        QCOMPARE(b.replay_of(e), a.replay_of(e));
        const auto pa = a.locate(e), pb = b.locate(e);
        QCOMPARE(pb.has_value(), pa.has_value());
        if (pa) QCOMPARE(std::tie(pb->track, pb->lane, pb->index), std::tie(pa->track, pa->lane, pa->index));
        if (e.kind == EventKind::ApiCall) QCOMPARE(b.launched_by(e.row), a.launched_by(e.row));
      }
    }
  }
  QCOMPARE(b.replays().size(), a.replays().size());
  for (uint32_t r = 0; r < a.replays().size(); ++r) {
    const GraphReplay &x = a.replays()[r], &y = b.replays()[r];
    QCOMPARE(std::tie(y.pid, y.device, y.stream, y.graph_id, y.correlation, y.start, y.end, y.first, y.count,
                      y.whole),
             std::tie(x.pid, x.device, x.stream, x.graph_id, x.correlation, x.start, x.end, x.first, x.count,
                      x.whole));
    QCOMPARE(b.replay_records(r), a.replay_records(r));
  }
  for (uint32_t k = 0; k < a.kernel_count(); ++k) {
    QCOMPARE(b.kernel_name(k), a.kernel_name(k));
    if (k % 7 == 0 || a.trace().kernels[k].graph_id) QVERIFY(key(b.kernel(k)) == key(a.kernel(k)));
  }
  for (uint32_t c = 0; c < a.api_call_count(); ++c) {
    QCOMPARE(b.api_call_name(c), a.api_call_name(c));
    if (c % 5 == 0) QVERIFY(key(b.api_call(c)) == key(a.api_call(c)));
  }
  // The details pane: kernels (their rows and their launches' come back from the store) and API calls.
  const size_t every = std::max<size_t>(1, a.kernel_count() / 300);
  for (uint32_t k = 0; k < a.kernel_count(); k += uint32_t(every))
    QCOMPARE(event_details_html(b, {EventKind::Kernel, k}), event_details_html(a, {EventKind::Kernel, k}));
  const size_t each = std::max<size_t>(1, a.api_call_count() / 200);
  for (uint32_t c = 0; c < a.api_call_count(); c += uint32_t(each))
    QCOMPARE(event_details_html(b, {EventKind::ApiCall, c}), event_details_html(a, {EventKind::ApiCall, c}));
  for (uint32_t r = 0; r < a.replays().size() && r < 50; ++r)
    QCOMPARE(event_details_html(b, {EventKind::GraphReplay, r}),
             event_details_html(a, {EventKind::GraphReplay, r}));
}

// The three ways to a model of `path`: from the trace (rows), from the store alone (kernels streamed into
// columns), from the store with the trace that was loaded for the analysis (its kernels moved into columns).
void compare_ways(const std::string& path, size_t budget = 20'000) {
  auto trace = std::make_shared<store::Trace>(analyzer::load_trace(path));
  analyzer::AnalyzeOptions aopt;
  aopt.critical_path_segments = true;
  auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace, aopt));
  const auto rows = TimelineModel::build(trace, analysis);
  QVERIFY(!rows->kernel_columns());
  auto reader = std::make_shared<store::StoreReader>(path);
  const auto streamed = TimelineModel::build_from_store(reader, {}, analysis);
  QVERIFY(streamed->kernel_columns());
  QVERIFY(streamed->trace().kernels.empty());
  QVERIFY(streamed->trace().api_calls.empty());
  QVERIFY(streamed->api_call_columns());
  compare_models(*rows, *streamed, budget);
  auto copy = std::make_shared<store::Trace>(*trace);
  const auto moved =
      TimelineModel::build_from_store(std::make_shared<store::StoreReader>(path), copy, analysis);
  QVERIFY(copy->kernels.empty());  // released: the columns hold them
  QVERIFY(copy->api_calls.empty());
  compare_models(*rows, *moved, budget);
  // Bytes a kernel: start 8, duration 4, name 4, stream 4, launch 4 when the trace has launches.
  const KernelColumns& c = *streamed->kernel_columns();
  const size_t per = c.launches.empty() ? 20 : 24;
  QVERIFY2(c.bytes() <= per * c.size() + c.graph_rows.size() * sizeof(c.graph_rows[0]) +
                            (c.long_durs.size() + c.odd_names.size()) * 16 + c.stream_keys.size() * 16,
           qPrintable(QString("%1 bytes for %2 kernels").arg(c.bytes()).arg(c.size())));
  // An API call: start 8, duration 4, name 4, thread 4, correlation 8.
  const ApiCallColumns& ac = *streamed->api_call_columns();
  QVERIFY2(
      ac.bytes() <= 28 * ac.size() + (ac.long_durs.size() + ac.odd_names.size() + ac.thread_keys.size()) * 16,
      qPrintable(QString("%1 bytes for %2 API calls").arg(ac.bytes()).arg(ac.size())));
}

void sql(const std::string& path, const char* statement) {
  sqlite3* db = nullptr;
  QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const int rc = sqlite3_exec(db, statement, nullptr, nullptr, nullptr);
  sqlite3_close(db);
  QCOMPARE(rc, SQLITE_OK);
}

}  // namespace

class StoreBackedTest : public QObject {
  Q_OBJECT
 private slots:
  // The synthetic trace (launches, a copy stream, samples, waits, steps) and a kernel of 5 s, whose duration
  // does not fit the columns' 32 bits; packed and as rows (a v4 store).
  void syntheticTraceEitherWay() {
    stepscope::test::ScratchDir dir("gui_store_backed_synthetic");
    auto t = gui::test::synthetic_trace();
    store::Kernel longest = t->kernels.back();
    longest.start = t->kernels.back().end + 1'000'000;
    longest.end = longest.start + 5'000'000'000;
    longest.correlation = 0;
    t->kernels.push_back(
        longest);  // in rows.db its name is made one no string has (a damaged or foreign store)
    store::write_store_atomically(*t, dir.file("packed.db"), true);
    store::write_store_atomically(*t, dir.file("rows.db"), false);
    sql(dir.file("rows.db"),
        "UPDATE kernels SET name = 1099511627776 WHERE rowid = (SELECT max(rowid) FROM kernels)");
    compare_ways(dir.file("packed.db"));
    compare_ways(dir.file("rows.db"));
    const auto odd =
        TimelineModel::build_from_store(std::make_shared<store::StoreReader>(dir.file("rows.db")));
    QCOMPARE(odd->kernel_name(uint32_t(odd->kernel_count() - 1)), int64_t(1) << 40);
    QCOMPARE(odd->kernel_columns()->odd_names.size(), size_t(1));
    const auto m =
        TimelineModel::build_from_store(std::make_shared<store::StoreReader>(dir.file("packed.db")));
    const uint32_t last = uint32_t(m->kernel_count() - 1);
    QCOMPARE(m->end_of({EventKind::Kernel, last}) - m->start_of({EventKind::Kernel, last}),
             int64_t(5'000'000'000));
    QCOMPARE(m->kernel_columns()->long_durs.size(), size_t(1));
  }

  // stepscope's H200 recording of `launch_bound --graph` with a record a node: replays gathered from the
  // columns' graph rows open into the same kernels, with the same capture origins in the details.
  void graphNodesRecording() {
    stepscope::test::ScratchDir dir("gui_store_backed_graphs");
    const std::string xz = std::string(STEPSCOPE_SOURCE_DIR) +
                           "/tests/gpu_proof/data/h200-2026-11-30/launch_bound-graph-nodes-192.db.xz";
    QVERIFY(std::filesystem::exists(xz));
    const std::string db = dir.file("nodes.db");
    QCOMPARE(stepscope::test::run_shell("xz -dc " + stepscope::test::shell_quote(xz) + " > " +
                                        stepscope::test::shell_quote(db))
                 .status,
             0);
    compare_ways(db);
    const auto m = TimelineModel::build_from_store(std::make_shared<store::StoreReader>(db));
    QVERIFY(!m->replays().empty());
    QCOMPARE(m->graph_records(), std::string("nodes"));
  }

  // stepscope's H100 recordings: a PyTorch trainer (launches, samples, Python) and launch_bound's many
  // kernels.
  void h100Recordings() {
    if (!stepscope::test::have_recordings()) QSKIP("SKIPPED: shared recordings not found");
    stepscope::test::ScratchDir dir("gui_store_backed_h100");
    for (const char* rel : {"h100-2026-11-22/torch_dataloader.db.xz", "h100-2026-11-22/launch_bound.db.xz"}) {
      const std::string db = stepscope::test::decompressed_recording(rel, dir);
      QVERIFY2(!db.empty(), rel);
      compare_ways(db, 2'000);
    }
  }

  // What cannot be: a trace that is not the store's is refused in one line naming the file; a store damaged
  // after the timeline opened says so in the details pane instead of showing a wrong row or ending the
  // program.
  void refusalsAndDamage() {
    stepscope::test::ScratchDir dir("gui_store_backed_refusals");
    auto t = gui::test::synthetic_trace();
    store::write_store_atomically(*t, dir.file("a.db"), true);
    auto fewer = std::make_shared<store::Trace>(*t);
    fewer->kernels.pop_back();
    try {
      TimelineModel::build_from_store(std::make_shared<store::StoreReader>(dir.file("a.db")), fewer);
      QFAIL("a trace of another store was taken");
    } catch (const store::StoreError& e) {
      QCOMPARE(e.file(), dir.file("a.db"));
      const std::string calls = std::to_string(t->api_calls.size());
      QCOMPARE(e.reason(), "the trace given holds " + std::to_string(t->kernels.size() - 1) +
                               " kernels and " + calls + " API calls, the store " +
                               std::to_string(t->kernels.size()) + " and " + calls +
                               ": not this store's trace, or it changed since");
    }
    const auto m = TimelineModel::build_from_store(std::make_shared<store::StoreReader>(dir.file("a.db")));
    sql(dir.file("a.db"), "UPDATE packed_kernels SET lo = lo + 1");
    sql(dir.file("a.db"), "UPDATE packed_api_calls SET hi = 'later'");
    const QString call = event_details_html(*m, {EventKind::ApiCall, 0});
    QVERIFY2(call.contains("corrupt store: a block of packed_api_calls has bounds that are no integers"),
             qPrintable(call));
    const QString html = event_details_html(*m, {EventKind::Kernel, 0});
    QVERIFY2(
        html.contains("corrupt store: a block of packed_kernels has bounds that are not its rows&#39;") ||
            html.contains("corrupt store: a block of packed_kernels has bounds that are not its rows'"),
        qPrintable(html));
    QCOMPARE(m->name_of({EventKind::Kernel, 0}), t->str(t->kernels[0].name));  // the columns still answer
  }

  // The window loads a store, analyzes it, then builds the timeline: a store replaced under the same name in
  // between (a new recording to the same path) is never mixed with the one loaded — the rows read back are
  // the loaded one's.
  void storeReplacedWhileTheWindowLoads() {
    stepscope::test::ScratchDir dir("gui_store_backed_replaced");
    auto t = gui::test::synthetic_trace();
    store::write_store_atomically(*t, dir.file("run.db"), true);
    auto other = std::make_shared<store::Trace>(*t);
    for (auto& k : other->kernels) k.grid_x = 999, k.start += 7, k.end += 7;
    store::write_store_atomically(*other, dir.file("new.db"), true);
    bool replaced = false;
    const LoadResult r =
        load_timeline(QString::fromStdString(dir.file("run.db")), [&](int permille, const QString&) {
          if (permille == 700 && !replaced)  // analyzing: the trace is loaded, the timeline not yet built
            replaced = std::filesystem::exists(dir.file("new.db")) &&
                       (std::filesystem::rename(dir.file("new.db"), dir.file("run.db")), true);
        });
    QVERIFY(replaced);
    QVERIFY2(r.error.isEmpty(), qPrintable(r.error));
    QVERIFY(r.model->kernel_columns());
    for (uint32_t k = 0; k < r.model->kernel_count(); ++k) {
      QCOMPARE(r.model->kernel(k).grid_x, t->kernels[k].grid_x);
      QCOMPARE(r.model->kernel(k).start, r.model->start_of({EventKind::Kernel, k}));
    }
  }

  // The window analyses a store when its rows and the analysis fit the memory allowed: the need is the rows
  // counted at the window's measured bytes a row, the budget STEPSCOPE_ANALYSIS_MEMORY_MB or half of what is
  // available. Over it, the timeline alone is read from the store (its kernels never all as rows) and the
  // reason is said.
  void aStoreOverItsAnalysisBudgetOpensWithoutIt() {
    struct Unset {  // whatever happens, later tests see no budget
      ~Unset() { qunsetenv("STEPSCOPE_ANALYSIS_MEMORY_MB"); }
    } unset;
    stepscope::test::ScratchDir dir("gui_store_backed_budget");
    auto t = gui::test::synthetic_trace();
    const std::string path = dir.file("run.db");
    store::write_store_atomically(*t, path, true);
    auto reader = std::make_shared<store::StoreReader>(path);
    const uint64_t need = t->kernels.size() * kAnalysisBytesPerKernel +
                          t->api_calls.size() * kAnalysisBytesPerApiCall +
                          t->samples.size() * kAnalysisBytesPerSample;
    QVERIFY(need > 0);

    // The predicate: within the budget, the need itself included; a budget of 0 never.
    QVERIFY((AnalysisBudget{.need_bytes = 5, .budget_bytes = 5}).fits());
    QVERIFY(!(AnalysisBudget{.need_bytes = 6, .budget_bytes = 5}).fits());
    QVERIFY(!(AnalysisBudget{.need_bytes = 0, .budget_bytes = 0, .set_by_environment = true}).fits());

    // Unset (or empty): half of what this process may still take.
    for (const char* unset_or_empty : {static_cast<const char*>(nullptr), ""}) {
      if (unset_or_empty)
        qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", unset_or_empty);
      else
        qunsetenv("STEPSCOPE_ANALYSIS_MEMORY_MB");
      const uint64_t available = memory_available();
      const AnalysisBudget b = analysis_budget(*reader);
      QCOMPARE(b.kernels, uint64_t(t->kernels.size()));
      QCOMPARE(b.api_calls, uint64_t(t->api_calls.size()));
      QCOMPARE(b.samples, uint64_t(t->samples.size()));
      QCOMPARE(b.need_bytes, need);
      QVERIFY(!b.set_by_environment);
      QVERIFY(available > (uint64_t(64) << 20));
      // Read twice (other processes come and go between): within a quarter of half.
      QVERIFY2(b.budget_bytes > available / 2 * 3 / 4 && b.budget_bytes < available / 2 * 5 / 4,
               qPrintable(QString("budget %1, available %2").arg(b.budget_bytes).arg(available)));
      QVERIFY(b.fits());
      QVERIFY(
          not_analyzed_reason(b).contains("allowed (half the memory available; STEPSCOPE_ANALYSIS_MEMORY_MB "
                                          "sets it)"));
    }

    // Set: a budget in MiB; 0: the timeline alone.
    qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", "0");
    AnalysisBudget b = analysis_budget(*reader);
    QCOMPARE(b.budget_bytes, uint64_t(0));
    QVERIFY(b.set_by_environment);
    QVERIFY(!b.fits());
    LoadResult r = load_timeline(QString::fromStdString(path));
    QVERIFY2(r.error.isEmpty(), qPrintable(r.error));
    QVERIFY(r.model);
    QVERIFY(!r.model->analysis());
    QVERIFY(r.model->kernel_columns());
    QVERIFY(r.over_budget);
    QCOMPARE(r.over_budget->need_bytes, need);
    QCOMPARE(r.model->kernel_count(), t->kernels.size());
    QCOMPARE(r.model->steps().size(), t->steps.size());  // the store's own steps
    for (uint32_t k = 0; k < r.model->kernel_count();
         ++k) {  // string ids are the store's: names compared as text
      store::Kernel got = r.model->kernel(k), want = t->kernels[k];
      QCOMPARE(r.model->trace().str(got.name), t->str(want.name));
      got.name = want.name = 0;
      QCOMPARE(key(got), key(want));
    }
    QCOMPARE(
        r.not_analyzed,
        QString(
            "not analysed: %1 kernels, %2 API calls and %3 samples need ~%4 MB with the analysis, over the "
            "none allowed (STEPSCOPE_ANALYSIS_MEMORY_MB) — the timeline alone, with the steps and findings "
            "the store holds; `stepscope analyze --write-findings FILE` where there is memory stores the "
            "findings")
            .arg(t->kernels.size())
            .arg(t->api_calls.size())
            .arg(t->samples.size())
            .arg((need + 999'999) / 1000'000));
    QCOMPARE(not_analyzed_brief(*r.over_budget),
             QString("not analysed: ~%1 MB needed with the analysis, none allowed")
                 .arg((need + 999'999) / 1000'000));

    // A budget a MiB over the need: analysed.
    qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", QByteArray::number(qulonglong((need >> 20) + 1)));
    r = load_timeline(QString::fromStdString(path));
    QVERIFY2(r.error.isEmpty(), qPrintable(r.error));
    QVERIFY(r.model->analysis());
    QVERIFY(r.not_analyzed.isEmpty());
    QVERIFY(!r.over_budget);
    QVERIFY(!r.model->analysis()->steps.empty());

    // Not a number of megabytes, or too many: said in one line, nothing loaded.
    for (const char* bad : {"12x", "-1", "1.5", " 3", "+5", "0x10"}) {
      qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", bad);
      r = load_timeline(QString::fromStdString(path));
      QVERIFY(!r.model);
      QCOMPARE(r.error,
               QString("STEPSCOPE_ANALYSIS_MEMORY_MB=%1: not a whole number of megabytes (0: open stores "
                       "without their analysis)")
                   .arg(bad));
    }
    for (const char* big : {"1099511627777", "99999999999999999999999"}) {
      qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", big);
      r = load_timeline(QString::fromStdString(path));
      QVERIFY(!r.model);
      QCOMPARE(r.error, QString("STEPSCOPE_ANALYSIS_MEMORY_MB=%1: more than 2^40 megabytes").arg(big));
    }
  }

  // Over the budget, a store whose rows grow between their count and their read (a store still being written)
  // is counted and read once more: the timeline holds its rows as they are then.
  void aStoreGrowingWhileOpenedWithoutItsAnalysis() {
    struct Unset {
      ~Unset() { qunsetenv("STEPSCOPE_ANALYSIS_MEMORY_MB"); }
    } unset;
    stepscope::test::ScratchDir dir("gui_store_backed_growing");
    auto t = gui::test::synthetic_trace();
    const std::string path = dir.file("rows.db");
    store::write_store_atomically(*t, path, false);  // rows: one more is one INSERT
    qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", "0");
    bool grown = false;
    const LoadResult r = load_timeline(QString::fromStdString(path), [&](int permille, const QString&) {
      if (permille != 100 || grown) return;  // counted, not yet read
      sqlite3* db = nullptr;
      QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
      QCOMPARE(
          sqlite3_exec(db, "INSERT INTO kernels SELECT * FROM kernels LIMIT 1", nullptr, nullptr, nullptr),
          SQLITE_OK);
      sqlite3_close(db);
      grown = true;
    });
    QVERIFY(grown);
    QVERIFY2(r.error.isEmpty(), qPrintable(r.error));
    QVERIFY(!r.model->analysis());
    QCOMPARE(r.model->kernel_count(), t->kernels.size() + 1);
  }
};

QTEST_MAIN(StoreBackedTest)
#include "store_backed_test.moc"
