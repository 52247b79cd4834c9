// CUDA graph replays on the timeline (issue 49, item 4), through the real window offscreen: a store file written
// with the store writer holding two replays of a 3-node captured graph, and stepscope's own H100 recording of
// `launch_bound --graph`, which traced one interval a replay.
#include <QAction>
#include <QProcess>
#include <QSignalSpy>
#include <QTextBrowser>
#include <QTextDocument>
#include <QtTest>
#include <filesystem>
#include <map>

#include "main_window.h"
#include "stepscope/gui/timeline_layout.h"
#include "stepscope/store/store.h"
#include "timeline_view.h"

using namespace stepscope;
using namespace stepscope::gui;

namespace {

constexpr int64_t kUs = 1000;
constexpr int64_t kBase = 5'000'000'000;
constexpr int64_t kPid = 4242, kStream = 7;
constexpr int64_t kCapturedGraph = 1, kExecGraph = 2;
// Replay r starts here; its kernel k runs [start + 20 µs · k, + 15 µs): a replay spans 55 µs, busy 45 µs of it.
int64_t replay_start(int r) { return kBase + (r + 1) * 1000 * kUs; }
int64_t node_start(int r, int k) { return replay_start(r) + k * 20 * kUs; }
const char* const kKernelNames[] = {"gemm_a", "relu_b", "softmax_c"};

// One process that copies its inputs with a plain kernel, captures a 3-kernel graph (graph 1; each node with the
// Python line that launched it during capture), instantiates it (graph 2, nodes cloned from graph 1's) and
// replays it twice.
store::Trace graph_trace() {
  store::Trace t;
  t.meta["clock_domain"] = "CLOCK_MONOTONIC";
  t.meta["source_format"] = "stepscope-collector";
  t.meta["gpu.graph_records"] = "nodes";
  t.processes.push_back({kPid, t.intern("python3"), 1});
  t.threads.push_back({kPid, kPid, t.intern("python3")});
  t.devices.push_back({0, t.intern("Test H100"), 9, 0, 132, 80LL << 30, t.intern("nvidia")});
  // Frames 1-4: the capture's Python frames; 5: the native frame under them; 6-8: each node's own line.
  auto py = [&](int64_t id, const char* fn, const char* file, int line) {
    store::Frame f;
    f.id = id;
    f.symbol = t.intern(fn);
    f.file = t.intern(file);
    f.line = line;
    f.kind = store::FrameKind::Python;
    t.frames.push_back(f);
  };
  py(1, "<module>", "train.py", 90);
  py(2, "capture_graph", "train.py", 31);
  py(3, "forward", "model.py", 20);
  store::Frame native;
  native.id = 5;
  native.symbol = t.intern("cudaLaunchKernel");
  native.module = t.intern("/usr/lib/libcudart.so.12");
  t.frames.push_back(native);
  py(6, "layer_a", "model.py", 11);
  py(7, "layer_b", "model.py", 12);
  py(8, "layer_c", "model.py", 13);
  // Stacks (root first): 1 <module> → 2 capture_graph → 3 forward → {layer_a, layer_b, layer_c} → cudaLaunchKernel.
  t.stacks = {{1, 0, 1}, {2, 1, 2}, {3, 2, 3}, {4, 3, 6}, {5, 4, 5}, {6, 3, 7}, {7, 6, 5}, {8, 3, 8}, {9, 8, 5}};
  const int64_t node_stack[] = {5, 7, 9};
  t.graphs.push_back({kPid, kCapturedGraph, store::GraphKind::Capture, 0, kBase, 2});
  t.graphs.push_back({kPid, kExecGraph, store::GraphKind::Instantiated, kCapturedGraph, kBase + 10 * kUs, 0});
  for (int k = 0; k < 3; ++k) {
    t.graph_nodes.push_back({kPid, kCapturedGraph, 11 + k, 0, store::GraphNodeKind::Kernel, kBase, node_stack[k]});
    t.graph_nodes.push_back({kPid, kExecGraph, 21 + k, 11 + k, store::GraphNodeKind::Kernel, kBase + 10 * kUs, 0});
  }
  auto launch_call = [&](const char* name, int64_t at, int64_t corr) {
    store::ApiCall a;
    a.start = at;
    a.end = at + 5 * kUs;
    a.pid = a.tid = kPid;
    a.name = t.intern(name);
    a.correlation = corr;
    t.api_calls.push_back(a);
  };
  auto kernel = [&](const char* name, int64_t start, int64_t dur, int64_t corr, int64_t graph, int64_t node) {
    store::Kernel k;
    k.start = start;
    k.end = start + dur;
    k.stream = kStream;
    k.correlation = corr;
    k.grid_x = k.grid_y = k.grid_z = k.block_x = k.block_y = k.block_z = 1;
    k.name = t.intern(name);
    k.graph_id = graph;
    k.pid = kPid;
    k.graph_node_id = node;
    t.kernels.push_back(k);
  };
  launch_call("cudaLaunchKernel", kBase - 20 * kUs, 500);
  kernel("copy_inputs", kBase, 100 * kUs, 500, 0, 0);
  for (int r = 0; r < 2; ++r) {
    launch_call("cudaGraphLaunch", replay_start(r) - 10 * kUs, 501 + r);
    for (int k = 0; k < 3; ++k) kernel(kKernelNames[k], node_start(r, k), 15 * kUs, 501 + r, kExecGraph, 21 + k);
  }
  return t;
}

QString open_in_window(MainWindow& w, const QString& path) {
  w.set_synchronous(true);
  QSignalSpy spy(&w, &MainWindow::model_loaded);
  w.open_file(path);
  if (!spy.wait(60000)) return "no model_loaded signal in 60 s";
  return spy.takeFirst().at(0).toBool() ? QString() : "load failed: " + w.load_error();
}

int stream_track(const TimelineModel& m, int64_t stream) {
  for (size_t i = 0; i < m.tracks().size(); ++i)
    if (m.tracks()[i].kind == TrackKind::GpuStream && m.tracks()[i].stream == stream) return int(i);
  return -1;
}

// The draw list's items on `track`, by kind.
struct Drawn {
  std::vector<DrawItem> replays, graph_kernels, other;
};
Drawn drawn_on(const TimelineModel& m, const DrawList& dl, int track) {
  Drawn d;
  const Track& tr = m.tracks()[size_t(track)];
  for (const DrawItem& it : dl.items) {
    if (it.track != track) continue;
    const EventRef e = tr.lane_at(size_t(it.lane)).ref(it.index);
    if (e.kind == EventKind::GraphReplay) d.replays.push_back(it);
    else if (e.kind == EventKind::Kernel && m.kernel(e.row).graph_id)
      d.graph_kernels.push_back(it);
    else d.other.push_back(it);
  }
  return d;
}

// The details pane as lines of plain text (a table row's label and value are two lines).
QStringList detail_lines(MainWindow& w) { return w.details()->toPlainText().split('\n', Qt::SkipEmptyParts); }
bool has_row(const QStringList& lines, const QString& label, const QString& value) {
  for (qsizetype i = 0; i + 1 < lines.size(); ++i)
    if (lines[i] == label && lines[i + 1] == value) return true;
  return false;
}

// Unpacks an xz-compressed recording into the test's scratch folder and opens it in `w` (1400 x 900).
bool open_xz_recording(MainWindow& w, const QString& xz, const QString& name) {
  const QString db = QString::fromStdString(std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-graphs/") + name;
  QProcess unxz;
  unxz.setStandardOutputFile(db);
  unxz.start("xz", {"-dc", xz});
  if (!unxz.waitForFinished(60000) || unxz.exitCode() != 0) return false;
  w.resize(1400, 900);
  const QString error = open_in_window(w, db);
  if (!error.isEmpty()) qWarning("%s", qPrintable(error));
  return error.isEmpty();
}

}  // namespace

class GraphsTest : public QObject {
  Q_OBJECT
  QString path_;

 private slots:
  void initTestCase() {
    // Settings of their own, emptied: opened streams are saved with the layout and must not leak into this run.
    QCoreApplication::setOrganizationName("stepscope-test");
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope,
                       QString(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-graphs-settings");
    QSettings().clear();
    const std::string dir = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-graphs";
    std::filesystem::create_directories(dir);
    path_ = QString::fromStdString(dir + "/two_replays.stepscope");
    store::write_store_atomically(graph_trace(), path_.toStdString());
  }

  // Collapsed (the default): one block a replay on stream 7, spanning its kernels, named by its graph.
  void replaysAreBlocks() {
    MainWindow w;
    w.resize(1400, 900);
    const QString error = open_in_window(w, path_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    TimelineView* view = w.timeline();
    const TimelineModel& m = *view->model();
    QCOMPARE(m.trace().graph_nodes.size(), size_t(6));  // the store round trip kept the nodes
    QCOMPARE(m.graph_records(), std::string("nodes"));
    QCOMPARE(m.replays().size(), size_t(2));
    for (int r = 0; r < 2; ++r) {
      const GraphReplay& g = m.replays()[size_t(r)];
      QCOMPARE(g.start, replay_start(r));
      QCOMPARE(g.end, replay_start(r) + 55 * kUs);
      QCOMPARE(g.correlation, int64_t(501 + r));
      QCOMPARE(g.graph_id, kExecGraph);
      QCOMPARE(g.count, 3u);
      QVERIFY(!g.whole);
      QCOMPARE(QString::fromStdString(m.name_of({EventKind::GraphReplay, uint32_t(r)})), QString("CUDA graph 2"));
    }
    const int track = stream_track(m, kStream);
    QVERIFY(track >= 0);
    QVERIFY(m.tracks()[size_t(track)].graphs_open_inside);
    QVERIFY(!view->layout().graphs_open(track));
    QCOMPARE(view->layout().row_of_track(track)->height, view->layout().metrics().lane_height);  // one lane
    // 7 kernels and 3 API calls, the blocks standing for their kernels (the analysis tracks left out).
    // (The window's model holds the store's kernels and API calls as columns: this trace gets their rows
    // back.)
    auto rows = std::make_shared<store::Trace>(m.trace());
    for (uint32_t k = 0; k < m.kernel_count(); ++k) rows->kernels.push_back(m.kernel(k));
    for (uint32_t c = 0; c < m.api_call_count(); ++c) rows->api_calls.push_back(m.api_call(c));
    QCOMPARE(TimelineModel::build(rows)->event_count(), size_t(7 + 3));

    view->zoom_to(double(kBase), double(replay_start(1) + 55 * kUs), 0);
    const DrawList dl = view->rebuild_now();
    const Drawn d = drawn_on(m, dl, track);
    QCOMPARE(d.replays.size(), size_t(2));
    QCOMPARE(d.graph_kernels.size(), size_t(0));
    QCOMPARE(d.other.size(), size_t(1));  // copy_inputs
    for (int r = 0; r < 2; ++r) {
      QCOMPARE(d.replays[size_t(r)].start, double(replay_start(r)));
      QCOMPARE(d.replays[size_t(r)].end, double(replay_start(r) + 55 * kUs));
      QCOMPARE(d.replays[size_t(r)].count, 1u);
    }
    // A click on the block selects the replay; its details say what ran inside.
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, view->point_for(double(replay_start(0) + 30 * kUs), track, 0));
    QCOMPARE(*view->selected_event(), (EventRef{EventKind::GraphReplay, 0}));
    const QStringList lines = detail_lines(w);
    QVERIFY2(has_row(lines, "inside", "3 kernels, 0 copies, 0 memsets"), qPrintable(lines.join("\n")));
    QVERIFY2(has_row(lines, "GPU busy", "45.0 µs (81.8 % of the replay)"), qPrintable(lines.join("\n")));
    QVERIFY2(has_row(lines, "graph", "2 · executable, instantiated from graph 1 (captured from a stream)"),
             qPrintable(lines.join("\n")));
    QVERIFY2(has_row(lines, "API call", "cudaGraphLaunch (runtime)"), qPrintable(lines.join("\n")));
    // Where the graph was captured: graph 1's stack, leaf first.
    const int at = int(lines.indexOf("Graph 1 captured at"));
    QVERIFY2(at >= 0, qPrintable(lines.join("\n")));
    QCOMPARE(lines.mid(at + 1, 3), (QStringList{"capture_graph (train.py:31)", "<module> (train.py:90)", "Launched by"}));
  }

  // Expanded: a double-click opens the stream's replays, their six kernels drawn in place under the blocks.
  void replaysOpenIntoTheirKernels() {
    MainWindow w;
    w.resize(1400, 900);
    const QString error = open_in_window(w, path_);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    TimelineView* view = w.timeline();
    const TimelineModel& m = *view->model();
    const int track = stream_track(m, kStream);
    view->zoom_to(double(kBase), double(replay_start(1) + 55 * kUs), 0);
    QTest::mouseDClick(view->viewport(), Qt::LeftButton, {}, view->point_for(double(replay_start(1) + 30 * kUs), track, 0));
    QVERIFY(view->layout().graphs_open(track));
    QCOMPARE(view->layout().row_of_track(track)->height, 2 * view->layout().metrics().lane_height);
    view->zoom_to(double(kBase), double(replay_start(1) + 55 * kUs), 0);
    const Drawn d = drawn_on(m, view->rebuild_now(), track);
    QCOMPARE(d.replays.size(), size_t(2));  // the blocks stay, their kernels under them
    QCOMPARE(d.graph_kernels.size(), size_t(6));
    for (size_t i = 0; i < 6; ++i) {
      const DrawItem& it = d.graph_kernels[i];
      QCOMPARE(int(it.lane), 1);
      QCOMPARE(it.start, double(node_start(int(i / 3), int(i % 3))));
      QCOMPARE(it.end, double(node_start(int(i / 3), int(i % 3)) + 15 * kUs));
      const EventRef e = m.tracks()[size_t(track)].lane_at(1).ref(it.index);
      QCOMPARE(QString::fromStdString(m.name_of(e)), QString(kKernelNames[i % 3]));
      QCOMPARE(m.replay_of(e), std::optional<uint32_t>(uint32_t(i / 3)));
    }
    // A replayed kernel's details: its graph, its node, and the line that captured the node.
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, view->point_for(double(node_start(1, 1) + 7 * kUs), track, 1));
    QVERIFY(view->selected_event() && view->selected_event()->kind == EventKind::Kernel);
    QCOMPARE(QString::fromStdString(m.name_of(*view->selected_event())), QString("relu_b"));
    const QStringList lines = detail_lines(w);
    QVERIFY2(has_row(lines, "graph", "2 · executable, instantiated from graph 1 (captured from a stream)"),
             qPrintable(lines.join("\n")));
    QVERIFY2(has_row(lines, "node", "22 · kernel node, cloned from node 12 of graph 1"), qPrintable(lines.join("\n")));
    QVERIFY2(has_row(lines, "replay", "at 2.02 ms, 3 rows, launch correlation 502"), qPrintable(lines.join("\n")));
    const int at = int(lines.indexOf("Captured at"));
    QVERIFY2(at >= 0, qPrintable(lines.join("\n")));
    QCOMPARE(lines.mid(at + 1, 6), (QStringList{"cudaLaunchKernel", "layer_b (model.py:12)", "forward (model.py:20)",
                                                "capture_graph (train.py:31)", "<module> (train.py:90)", "Launched by"}));
    // View → Close every CUDA graph replay folds them back into their blocks.
    w.findChild<QAction*>("closeGraphs")->trigger();
    QVERIFY(!view->layout().graphs_open(track));
    QCOMPARE(drawn_on(m, view->rebuild_now(), track).graph_kernels.size(), size_t(0));
    // Searching for a kernel inside a closed replay opens it.
    QCOMPARE(view->set_search("softmax"), size_t(2));
    QVERIFY(view->next_match());
    QVERIFY(view->layout().graphs_open(track));
  }

  // The H100 recording of `launch_bound --graph` (a v1 store: it traced one interval a replay, named by the collector
  // "CUDA graph 2"): every interval is a block, and there is nothing inside to open.
  void wholeReplaysOfTheH100Recording() {
    const QString xz = QString(STEPSCOPE_TRACES_DIR) + "/../recordings/h100-2026-11-22/launch_bound_graph.db.xz";
    if (!QFileInfo::exists(xz)) QSKIP("no H100 recordings");
    MainWindow w;
    QVERIFY(open_xz_recording(w, xz, "launch_bound_graph.db"));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    TimelineView* view = w.timeline();
    const TimelineModel& m = *view->model();
    QCOMPARE(m.graph_records(), std::string("graph"));
    // Independently: one replay a distinct launch correlation of the graph's kernels.
    std::set<int64_t> launches;
    size_t graph_kernels = 0;
    for (uint32_t row = 0; row < m.kernel_count(); ++row)  // a store's kernels, read back from it
      if (const store::Kernel k = m.kernel(row); k.graph_id) launches.insert(k.correlation), ++graph_kernels;
    QCOMPARE(graph_kernels, size_t(3050));
    QCOMPARE(launches.size(), size_t(3050));
    QCOMPARE(m.replays().size(), launches.size());
    for (uint32_t r = 0; r < m.replays().size(); ++r) {
      const GraphReplay& g = m.replays()[r];
      QVERIFY(g.whole);
      QCOMPARE(g.count, 1u);
      const auto rows = m.replay_records(r);
      const store::Kernel k = m.kernel(rows[0].row);
      QCOMPARE(g.start, k.start);
      QCOMPARE(g.end, k.end);
      QCOMPARE(g.correlation, k.correlation);
    }
    const int track = stream_track(m, 13);
    QVERIFY(track >= 0);
    const Track& tr = m.tracks()[size_t(track)];
    QVERIFY(!tr.graphs_open_inside);
    size_t blocks = 0;
    for (const Lane& l : tr.lanes)
      for (size_t i = 0; i < l.size(); ++i) blocks += l.kind(i) == EventKind::GraphReplay;
    QCOMPARE(blocks, size_t(3050));
    // Zoomed to one replay: its block; a double-click opens nothing; the details say why.
    const GraphReplay& g = m.replays()[100];
    view->zoom_to(double(g.start), double(g.end), 0.05);
    const DrawList dl = view->rebuild_now();
    const Drawn d = drawn_on(m, dl, track);
    QVERIFY(!d.replays.empty());
    QVERIFY(std::any_of(d.replays.begin(), d.replays.end(), [&](const DrawItem& it) {
      return it.start == double(g.start) && it.end == double(g.end) && it.count == 1;
    }));
    QCOMPARE(d.graph_kernels.size(), size_t(0));
    const QPoint at = view->point_for(double(g.start + g.end) / 2, track, 0);
    QTest::mouseDClick(view->viewport(), Qt::LeftButton, {}, at);
    QVERIFY(!view->layout().graphs_open(track));
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, view->point_for(double(g.start + g.end) / 2, track, 0));
    QCOMPARE(*view->selected_event(), (EventRef{EventKind::GraphReplay, 100}));
    const QStringList lines = detail_lines(w);
    QVERIFY2(has_row(lines, "inside", "not recorded: this recording holds one interval a replay (gpu.graph_records = "
                            "graph), so there is nothing to open"),
             qPrintable(lines.join("\n")));
    QVERIFY2(has_row(lines, "API call", "cudaGraphLaunch (runtime)"), qPrintable(lines.join("\n")));
  }

  // The fifth GPU proof's H200 recording, node by node, whose merge lost meta gpu.graph_records: the timeline
  // reads the nodes from the records (until 2026-11-30 it drew each of them as a whole replay with nothing
  // inside).
  void nodeRecordsWithoutTheirMeta() {
    const QString xz = QString(STEPSCOPE_SOURCE_DIR) +
                       "/tests/gpu_proof/data/h200-2026-11-30/launch_bound-graph-nodes-192.db.xz";
    QVERIFY(QFileInfo::exists(xz));
    MainWindow w;
    QVERIFY(open_xz_recording(w, xz, "h200-nodes.db"));
    const TimelineModel& m = *w.timeline()->model();
    QVERIFY(!m.trace().meta.count("gpu.graph_records"));
    QCOMPARE(m.graph_records(), std::string("nodes"));
    // Independently: a replay is one launch correlation of the graph's kernels, 31 of them each.
    std::map<int64_t, int> per_launch;
    for (uint32_t row = 0; row < m.kernel_count(); ++row)
      if (const store::Kernel k = m.kernel(row); k.graph_id) ++per_launch[k.correlation];
    QCOMPARE(per_launch.size(), size_t(192));
    QCOMPARE(m.replays().size(), size_t(192));
    for (const GraphReplay& g : m.replays()) {
      QVERIFY(!g.whole);
      QCOMPARE(g.count, 31u);
      QCOMPARE(per_launch.at(g.correlation), 31);
    }
  }
};

QTEST_MAIN(GraphsTest)
#include "graphs_test.moc"
