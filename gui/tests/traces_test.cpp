// Every shared real trace opens in the GUI pipeline (load_trace → analyze → timeline model) and renders;
// the input-bound ResNet-50 trace shows GPU kernel tracks, input-bound steps, and its finding zooms there.
#include <QDirIterator>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QRegularExpression>
#include <QScrollBar>
#include <QStyleFactory>
#include <QTableView>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTextLayout>
#include <QTreeView>
#include <QtTest>
#include <algorithm>
#include <cstdio>
#include <map>

#include "event_details.h"
#include "flame_graph.h"
#include "main_window.h"
#include "timeline_view.h"
#include "trace_loader.h"

using namespace stepscope;
using namespace stepscope::gui;

namespace {
QString traces_dir() { return QString(STEPSCOPE_TRACES_DIR); }

// NAME.db of the shared H100 recordings, decompressed into `dir`; empty when the recordings are absent.
QString h100_recording(const QString& name, const QTemporaryDir& dir) {
  const QString xz = traces_dir() + "/../recordings/h100-2026-11-22/" + name + ".db.xz";
  if (!QFileInfo::exists(xz)) return {};
  const QString db = dir.filePath(name + ".db");
  QProcess unxz;
  unxz.setStandardOutputFile(db);
  unxz.start("xz", {"-dc", xz});
  if (!unxz.waitForFinished(60000) || unxz.exitCode() != 0) qFatal("xz -dc %s failed", qPrintable(xz));
  return db;
}
// Opens `path` in `w` through the real background loader, waiting for it; "" on success, else why not.
QString open_in_window(MainWindow& w, const QString& path) {
  w.set_synchronous(true);
  QSignalSpy spy(&w, &MainWindow::model_loaded);
  w.open_file(path);
  if (!spy.wait(60000)) return "no model_loaded signal in 60 s";
  return spy.takeFirst().at(0).toBool() ? QString() : "load failed: " + w.load_error();
}
}  // namespace

class TracesTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    if (!QDir(traces_dir()).exists()) {
      std::printf("SKIPPED: shared traces not found at %s\n", qPrintable(traces_dir()));
      std::fflush(stdout);
      QSKIP("no shared traces");
    }
  }

  void everyTraceOpens() {
    QDirIterator it(traces_dir(), {"*.json.gz", "*.json", "*.sqlite.gz", "*.sqlite"}, QDir::Files,
                    QDirIterator::Subdirectories);
    int opened = 0;
    TimelineView view;
    view.set_synchronous(true);
    view.resize(1000, 600);
    view.show();
    QStringList failures;
    while (it.hasNext()) {
      const QString path = it.next();
      if (path.contains("/schemas/")) continue;
      LoadResult r = load_timeline(path);
      if (!r.model) {
        failures << r.error;
        continue;
      }
      const auto& m = *r.model;
      if (m.tracks().empty() || m.event_count() == 0) {
        failures << path + ": no tracks";
        continue;
      }
      view.set_model(r.model);
      const DrawList& dl = view.rebuild_now();
      if (dl.items.empty() && dl.density.empty()) failures << path + ": nothing drawn";
      // Zooming deep into the middle and rendering must work as well.
      view.zoom_to(m.begin() + (m.end() - m.begin()) * 0.5, m.begin() + (m.end() - m.begin()) * 0.501);
      view.grab();
      std::printf("opened %s: %zu events, %zu tracks, %zu steps, %zu findings (load %.2f s, analyze %.2f s, build %.2f s)\n",
                  qPrintable(path), m.event_count(), m.tracks().size(), m.steps().size(), m.findings().size(), r.load_s,
                  r.analyze_s, r.build_s);
      ++opened;
    }
    QVERIFY2(failures.isEmpty(), qPrintable(failures.join("\n")));
    QVERIFY(opened >= 20);
  }

  // A real H100 recording of a PyTorch DataLoader run (16 idle python3 threads beside the training thread)
  // opens with the GPU stream on the first screen and the idle threads folded into one row.
  void h100RecordingLeadsWithTheGpu() {
    QTemporaryDir dir;
    const QString db = h100_recording("torch_dataloader", dir);
    if (db.isEmpty()) QSKIP("no H100 recordings");
    LoadResult r = load_timeline(db);
    QVERIFY2(r.model, qPrintable(r.error));
    TimelineView view;
    view.set_synchronous(true);
    view.resize(1200, 700);
    view.set_model(r.model);
    const auto& m = *r.model;
    const int screen = view.viewport()->height();
    int gpu_tracks = 0;
    for (size_t i = 0; i < m.tracks().size(); ++i) {
      if (m.tracks()[i].kind != TrackKind::GpuStream) continue;
      ++gpu_tracks;
      const auto* row = view.layout().row_of_track(int(i));
      QVERIFY(row);
      QVERIFY2(row->y + row->height <= screen, qPrintable(QString("GPU row ends at %1 of %2").arg(row->y + row->height).arg(screen)));
    }
    QVERIFY(gpu_tracks >= 1);
    // The training thread (it waits for data) has its name; the 16 idle threads are one row.
    bool main_thread = false;
    int others = 0;
    for (const auto& row : view.layout().rows()) {
      if (row.kind == TimelineLayout::RowKind::Others) others += row.others;
      if (row.kind == TimelineLayout::RowKind::Track && m.tracks()[row.track].title == "python3 1111 · data waits")
        main_thread = row.y + row.height <= screen;
    }
    QVERIFY(main_thread);
    QVERIFY2(others >= 15, qPrintable(QString::number(others)));
    // Names as people read them: CUPTI's mangled kernel names shortened, the full one kept for the tooltip.
    bool elementwise = false;
    for (uint32_t k = 0; k < m.kernel_count() && !elementwise; ++k) {
      if (m.trace().str(m.kernel_name(k)).rfind("_ZN2at6native29vectorized_elementwise_kernel", 0) != 0)
        continue;
      elementwise = true;
      QCOMPARE(QString::fromStdString(m.name_of({EventKind::Kernel, k})), QString("at::native::vectorized_elementwise_kernel<…>(…)"));
      QVERIFY(m.full_name_of({EventKind::Kernel, k}).rfind("void at::native::vectorized_elementwise_kernel<4, ", 0) == 0);
    }
    QVERIFY(elementwise);
    // The Kernels panel keeps kernels apart whose short names coincide, and tells them apart by their first
    // template argument that is not a number (a fill, a ReLU's backward, a clamp); the tooltip names each in
    // full.
    QStringList elementwise_rows;
    for (const auto& st : kernel_stats(m, m.begin(), m.end()))
      if (st.full_name.rfind("void at::native::vectorized_elementwise_kernel<", 0) == 0) {
        elementwise_rows << QString::fromStdString(st.name);
        QVERIFY2(st.name.rfind("at::native::vectorized_elementwise_kernel<4, ", 0) == 0, st.name.c_str());
      }
    QVERIFY2(elementwise_rows.size() > 1, qPrintable(elementwise_rows.join("\n")));
    QCOMPARE(QSet<QString>(elementwise_rows.begin(), elementwise_rows.end()).size(), elementwise_rows.size());
    QVERIFY2(elementwise_rows.filter("FillFunctor<…>").size() == 1, qPrintable(elementwise_rows.join("\n")));
    int python_frames = 0;
    for (uint32_t f = 0; f < m.trace().frames.size(); ++f)
      if (m.trace().frames[f].kind == store::FrameKind::Python && m.trace().frames[f].line > 0) {
        const QString n = QString::fromStdString(m.frame_name(f));
        QVERIFY2(n.contains(QRegularExpression(R"(^\S.* \(.+:\d+\)$)")), qPrintable(n));
        ++python_frames;
      }
    QVERIFY(python_frames > 100);
    // A click on the folded row opens it; the state says so.
    const std::string process = m.tracks().back().group;
    const int rows_before = int(view.layout().rows().size());
    view.toggle_others(process);
    QVERIFY(view.layout_state().expanded_others.count(process));
    QVERIFY(int(view.layout().rows().size()) >= rows_before + 15);
  }

  // A CUDA program recorded by the 0.1 collector: its CUDA calls sit under CUPTI's thread ids, so no OS thread
  // "launches"; the main thread (its samples and steps) must still be on the first screen, not folded away.
  void h100CudaSampleKeepsItsMainThreadUnfolded() {
    QTemporaryDir dir;
    const QString db = h100_recording("launch_bound", dir);
    if (db.isEmpty()) QSKIP("no H100 recordings");
    LoadResult r = load_timeline(db);
    QVERIFY2(r.model, qPrintable(r.error));
    const auto& m = *r.model;
    std::map<int64_t, size_t> samples_of;  // tid → samples
    for (const auto& smp : m.trace().samples) samples_of[smp.tid]++;
    QVERIFY(!samples_of.empty());
    const int64_t main_tid =
        std::max_element(samples_of.begin(), samples_of.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    int main_tracks = 0;
    for (const Track& t : m.tracks()) {
      if (t.tid != main_tid || t.kind == TrackKind::GpuStream) continue;
      ++main_tracks;
      QVERIFY2(!t.folded, qPrintable(QString::fromStdString(t.title)));
    }
    QVERIFY(main_tracks >= 1);
    // The threads CUPTI started for the profiler (their entry in libcupti) are the profiler's cost, left out
    // of the call tree as the collector's own are (this store predates threads.collector): the main thread
    // alone.
    size_t cupti_samples = 0;
    for (const auto& smp : m.trace().samples) {
      const auto frames = m.stack_frames(smp.stack);
      for (auto f = frames.rbegin(); f != frames.rend();
           ++f) {  // the outermost frame past libc's thread start
        const std::string module = m.trace().str(m.trace().frames[*f].module);
        if (module.find("libc.so") != std::string::npos) continue;
        cupti_samples += module.find("libcupti") != std::string::npos;
        break;
      }
    }
    QVERIFY2(cupti_samples > 10, "CUPTI's threads were sampled: the check below means something");
    const CallTree tree = CallTree::for_range(m, m.begin(), m.end(), CallTree::Direction::TopDown);
    QCOMPARE(tree.nodes()[0].children.size(), size_t(1));
    QCOMPARE(tree.name(tree.nodes()[size_t(tree.nodes()[0].children[0])]),
             m.thread_label(m.trace().samples[0].pid, main_tid));
  }

  // The main window as a user first sees it: the deep Python and C++ stacks of a PyTorch recording fill the flame
  // graph, which scrolls in its panel instead of growing the window past the screen and squeezing the timeline.
  void h100MainWindowKeepsTheTimelineFirst() {
    QTemporaryDir dir;
    const QString db = h100_recording("torch_dataloader", dir);
    if (db.isEmpty()) QSKIP("no H100 recordings");
    MainWindow w;
    const QString error = open_in_window(w, db);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // The whole run selected: every thread's stacks, the imports' deepest, in the flame graph.
    const TimelineModel& m = *w.timeline()->model();
    emit w.timeline()->time_range_selected(m.begin(), m.end());
    QTRY_VERIFY(w.findChild<FlameGraphWidget*>()->minimumHeight() > 900);
    const int depth_px = w.findChild<FlameGraphWidget*>()->minimumHeight();
    QVERIFY2(depth_px > 900, qPrintable(QString("flame graph only %1 px deep: the check below proves nothing").arg(depth_px)));
    QVERIFY2(w.minimumSizeHint().height() < 700, qPrintable(QString::number(w.minimumSizeHint().height())));
    QVERIFY2(w.height() <= 900, qPrintable(QString::number(w.height())));
    QVERIFY2(w.timeline()->height() >= w.height() / 2,
             qPrintable(QString("timeline %1 of %2 px").arg(w.timeline()->height()).arg(w.height())));
  }

  // Issue 26: the window opens on the answer — the steps after start-up framed (8.5 s of start-up on this
  // recording), the worst finding selected and its steps shaded, steps drawn apart, the slowest steady step first.
  void h100OpensOnTheSteadySteps() {
    QTemporaryDir dir;
    const QString db = h100_recording("torch_dataloader", dir);
    if (db.isEmpty()) QSKIP("no H100 recordings");
    MainWindow w;
    w.resize(1600, 1000);
    const QString error = open_in_window(w, db);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    const TimelineModel& m = *w.timeline()->model();
    QCOMPARE(int(m.steps().size()), 40);
    QVERIFY2(m.steps()[0].warmup && !m.steps()[1].warmup, "step 0 is the warm-up step");
    const int64_t from = m.steps()[1].start, to = m.steps().back().end;
    const double span = double(to - from);
    const Viewport& vp = w.timeline()->viewport_range();
    QVERIFY2(vp.t0 <= double(from) && vp.t0 >= double(from) - 0.03 * span, qPrintable(QString::number(vp.t0 - double(from))));
    QVERIFY2(vp.t1 >= double(to) && vp.t1 <= double(to) + 0.03 * span, qPrintable(QString::number(vp.t1 - double(to))));
    QVERIFY2(double(from - m.begin()) > 5e9, "start-up is seconds long here: framing it out is what is checked");

    // The worst finding is selected: its row, its steps shaded, its details shown.
    const int worst = m.worst_finding();
    QVERIFY(worst >= 0);
    QCOMPARE(m.findings()[size_t(worst)].rule, std::string("input-bound"));
    const auto rows = w.findings_view()->selectionModel()->selectedRows();
    QCOMPARE(rows.size(), 1);
    QCOMPARE(rows.first().data().toString(), QString::fromStdString(m.findings()[size_t(worst)].severity));
    QCOMPARE(rows.first().siblingAtColumn(FindingsModel::Rule).data().toString(), QString("input-bound"));
    // Shaded: every step of the finding lies in one band; the bands are disjoint (no darker stripes where a step
    // and an evidence range overlap).
    const auto& bands = w.timeline()->highlights();
    for (size_t i = 1; i < bands.size(); ++i) QVERIFY(bands[i].first > bands[i - 1].second);
    for (int64_t s : m.findings()[size_t(worst)].steps) {
      const StepInfo& st = m.steps()[size_t(m.step_position(s))];
      QVERIFY(std::any_of(bands.begin(), bands.end(), [&](const auto& b) { return b.first <= st.start && st.end <= b.second; }));
    }
    QVERIFY(w.details()->toPlainText().contains("input-bound"));
    // The call tree, flame graph and kernels are those of the framed steps, and say so: over the whole run
    // the tree was two thirds the imports of start-up.
    QTRY_VERIFY(w.call_tree_model().tree().nodes()[0].total > 0);
    const QLabel* caption = w.findChild<QLabel*>("rangeLabel");
    QVERIFY(caption);
    QVERIFY2(caption->text().startsWith("Steps 1–39, after start-up: "), qPrintable(caption->text()));
    const auto ext = m.steady_extent();
    QVERIFY(ext);
    const size_t steady_samples = m.samples_in(ext->first, ext->second).size();
    QVERIFY2(steady_samples < m.trace().samples.size() / 2,
             "start-up holds most samples: the check means something");
    double in_tree = w.call_tree_model().tree().nodes()[0].total;
    QVERIFY2(in_tree > 0.9 * double(steady_samples) && in_tree <= double(steady_samples),
             qPrintable(QString("%1 of %2").arg(in_tree).arg(steady_samples)));
    // Opened along the hot path down to numpy's roll (61% of the steps' samples, one node whatever its line).
    bool roll_open = false;
    for (QModelIndex i = w.call_tree_view()->model()->index(0, 0); i.isValid();
         i = w.call_tree_view()->indexBelow(i))
      if (i.data().toString() == "roll (numeric.py)") roll_open = true;
    QVERIFY(roll_open);
    // Beside the estimate, what `analyze` prints with it: the replay of the cure, and that the shares count
    // the warm-up step (94.7%, 73.0% and 80.4% stood side by side unexplained).
    const QString details = w.details()->toPlainText();
    QVERIFY(!m.findings()[size_t(worst)].replayed_cure.empty());
    QVERIFY2(details.contains(QRegularExpression(
                 "replayed\\s+saves [0-9.]+ ms a step with the input prefetched \\(step ")),
             qPrintable(details));
    QVERIFY2(details.contains("Shares of step time count the warm-up step 0"), qPrintable(details));

    // Steps read as steps: along the Steps row every step is its own block, a 1 px gap between neighbours.
    int steps_track = -1;
    for (size_t i = 0; i < m.tracks().size(); ++i)
      if (m.tracks()[i].kind == TrackKind::Steps) steps_track = int(i);
    QVERIFY(steps_track >= 0);
    QTest::qWait(100);
    const QImage img = w.timeline()->viewport()->grab().toImage();
    const int y = w.timeline()->point_for(double(from), steps_track, 0).y();
    const QColor input = w.timeline()->palette_colours().event_colour(TimelineModel::kStepKey | 0, false);
    int blocks = 0;
    bool in_block = false;
    for (int x = TimelineView::kGutterWidth; x < img.width(); ++x) {
      const bool step_px = img.pixelColor(x, y) == input;
      blocks += step_px && !in_block;
      in_block = step_px;
    }
    int input_steps = 0;
    for (size_t i = 1; i < m.steps().size(); ++i) input_steps += m.steps()[i].bound == "input";
    QVERIFY2(blocks >= input_steps - 1 && input_steps >= 30,
             qPrintable(QString("%1 blocks for %2 input-bound steps").arg(blocks).arg(input_steps)));

    // --select-slowest-step picks a steady slow step; step 0 is said to be start-up.
    const StepsModel& sm = w.steps_model();
    const int slowest = sm.slowest_slow_row();
    QVERIFY(slowest > 0);
    QVERIFY(!sm.is_startup(slowest));
    QVERIFY2(sm.explanation(slowest).contains("data wait"), qPrintable(sm.explanation(slowest)));
    QVERIFY(sm.is_slow(0) && sm.is_startup(0));
    QVERIFY2(sm.explanation(0).contains("start-up (a one-time cost, not the loop's)") &&
                 sm.explanation(0).contains("cuLibraryLoadData (CUDA loading its modules, once)"),
             qPrintable(sm.explanation(0)));

    // A CPU sample clicked shows its whole stack, its Python frames first (the tooltip showed 12 native
    // frames of 72, the first Python one the 13th), the interpreter's frames between them folded. A deep
    // sample whose stack holds interpreter frames (/usr/bin/python3.12's) between two Python frames.
    uint32_t deep = UINT32_MAX;
    size_t python_frames = 0;
    for (uint32_t row : m.samples_in(from, to)) {
      const auto fs = m.stack_frames(m.trace().samples[row].stack);
      size_t n = 0, interpreter_between = 0, pending = 0;
      for (uint32_t f : fs) {
        const store::Frame& fr = m.trace().frames[f];
        if (fr.kind == store::FrameKind::Python) {
          interpreter_between += n > 0 ? pending : 0;
          pending = 0, ++n;
        } else if (m.trace().str(fr.module).find("/python3") != std::string::npos) {
          ++pending;
        }
      }
      if (n >= 3 && interpreter_between > 0 && fs.size() > 40) {
        deep = row, python_frames = n;
        break;
      }
    }
    QVERIFY2(deep != UINT32_MAX, "a deep sample with Python frames and interpreter frames between them");
    emit w.timeline()->sample_selected(deep);
    const QString sample = w.details()->toPlainText();
    QVERIFY2(sample.startsWith("CPU sample") && sample.contains("Python stack (innermost first)") &&
                 sample.contains("interpreter frame"),
             qPrintable(sample));
    const auto frames = m.stack_frames(m.trace().samples[deep].stack);
    QVERIFY(sample.contains(QString("Stack (innermost first, %1 frames)").arg(frames.size())));
    for (uint32_t f : frames)
      if (m.trace().frames[f].kind == store::FrameKind::Python)
        QVERIFY2(sample.contains(QString::fromStdString(m.frame_name(f))), m.frame_name(f).c_str());
    const QString tip = sample_tooltip(m, deep);
    const QStringList tip_lines = tip.split('\n');
    QVERIFY2(tip_lines.size() > 1 && tip_lines[1].trimmed() == QString::fromStdString([&] {
                                       for (uint32_t f : frames)
                                         if (m.trace().frames[f].kind == store::FrameKind::Python)
                                           return m.frame_name(f);
                                       return std::string();
                                     }()),
             qPrintable(tip));  // the innermost Python frame first
    QVERIFY(python_frames >= 3);

    // Esc: nothing selected — no finding row, no shading, the run's notes, the load's status line.
    w.timeline()->setFocus();
    QTest::keyClick(w.timeline(), Qt::Key_Escape);
    QVERIFY(w.findings_view()->selectionModel()->selectedRows().isEmpty());
    QVERIFY(w.timeline()->highlights().empty());
    QVERIFY2(!w.details()->toPlainText().startsWith("CPU sample"), qPrintable(w.details()->toPlainText()));
    QVERIFY2(w.status_text().startsWith("opened on the steps from step 1"), qPrintable(w.status_text()));
  }

  // Issue 26: zoomed out, a lane of thousands of kernels shows how busy it is per pixel, not "12482 events".
  void h100ZoomedOutLanesShowBusyShare() {
    QTemporaryDir dir;
    const QString db = h100_recording("launch_bound", dir);
    if (db.isEmpty()) QSKIP("no H100 recordings");
    LoadResult r = load_timeline(db);
    QVERIFY2(r.model, qPrintable(r.error));
    const TimelineModel& m = *r.model;
    TimelineView view;
    view.set_synchronous(true);
    view.resize(1200, 800);
    view.set_model(r.model);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.zoom_to_all();
    const DrawList dl = view.rebuild_now();  // a copy: painting may replace the view's own
    int busiest = -1;
    for (size_t i = 0; i < m.tracks().size(); ++i)
      if (m.tracks()[i].kind == TrackKind::GpuStream && busiest < 0) busiest = int(i);  // busiest stream first
    QVERIFY(busiest >= 0);
    const Lane& lane = m.tracks()[size_t(busiest)].lanes[0];
    QVERIFY(lane.size() > 10000);
    size_t merged = 0, columns = 0, checked = 0;
    const BusyStrip* strip = nullptr;
    for (const DrawItem& it : dl.items) {
      const Track& tr = m.tracks()[size_t(it.track)];
      if (it.count > 1 && (tr.kind == TrackKind::GpuStream || tr.kind == TrackKind::CpuRanges))
        QVERIFY2(it.busy >= 0, "a merged block without its busy share");
      if (it.track != busiest || it.lane != 0 || it.count <= 1) continue;
      ++merged;
      const BusyStrip& s = dl.busy[size_t(it.busy)];
      columns += s.share.size();
      if (!strip || s.share.size() > strip->share.size()) strip = &s;
      // Every 7th column against the kernels themselves (overlap with the column, summed).
      for (size_t k = 0; k < s.share.size(); k += 7, ++checked) {
        const int64_t a = int64_t(std::floor(s.t0 + double(k) * s.bucket_ns)), b = std::max(a + 1, int64_t(std::floor(s.t0 + double(k + 1) * s.bucket_ns)));
        int64_t covered = 0;
        for (size_t e = 0; e < lane.size(); ++e)
          covered += std::max<int64_t>(0, std::min(lane.end(e), b) - std::max(lane.starts[e], a));
        QVERIFY2(std::abs(double(s.share[k]) - double(covered) / double(b - a)) < 1e-3,
                 qPrintable(QString("column %1: %2 drawn, %3 covered").arg(k).arg(s.share[k]).arg(double(covered) / double(b - a))));
      }
    }
    QVERIFY2(merged >= 1 && columns >= 500, qPrintable(QString("%1 merged blocks, %2 columns").arg(merged).arg(columns)));
    QVERIFY(checked >= 70);
    // Pixels: each column's bar is as high as its share of the lane (16 px); an idle column has none.
    const QImage img = view.viewport()->grab().toImage();
    const QColor bar = view.palette_colours().gpu_busy;
    const int lane_px = view.layout().metrics().lane_height - 2;
    int busy_columns = 0, idle_columns = 0;
    for (size_t k = 1; k + 1 < strip->share.size(); ++k) {
      const QPoint mid = view.point_for(strip->t0 + (double(k) + 0.5) * strip->bucket_ns, busiest, 0);
      if (mid.x() < TimelineView::kGutterWidth || mid.x() >= img.width()) continue;
      // Only columns whose neighbours are alike: a bar's edge may fall on either side of a pixel.
      const float lo = std::min({strip->share[k - 1], strip->share[k], strip->share[k + 1]});
      const float hi = std::max({strip->share[k - 1], strip->share[k], strip->share[k + 1]});
      if (hi - lo > 0.05f) continue;
      int px = 0;
      for (int y = mid.y() - lane_px / 2 - 1; y <= mid.y() + lane_px / 2 + 1; ++y) px += img.pixelColor(mid.x(), y) == bar;
      if (hi == 0.f) {
        QCOMPARE(px, 0);
        ++idle_columns;
      } else if (lo >= 0.1f) {
        QVERIFY2(std::abs(double(px) - double(strip->share[k]) * lane_px) <= 1.5,
                 qPrintable(QString("%1 px for a share of %2").arg(px).arg(strip->share[k])));
        ++busy_columns;
      }
    }
    QVERIFY2(busy_columns >= 20, qPrintable(QString("%1 busy and %2 idle columns checked").arg(busy_columns).arg(idle_columns)));
  }

  // Steps nothing marked are said on the status line, whatever the details pane shows: with a finding selected,
  // the nsys CloverLeaf trace never said its steps were inferred, nor the AMD decode trace that it is one window.
  void inferredStepsAreSaid() {
    if (!QDir(traces_dir()).exists()) QSKIP("no shared traces");
    const std::pair<QString, QString> cases[] = {
        {"/nsys/cloverleaf_a100.sqlite.gz", "Steps found from the repeating unit of the trace (confidence "},
        {"/tracelens/amd_vllm_decode_graph.json.gz",
         "No step markers and no repeating unit found: the run is analyzed as one window."}};
    for (const auto& [file, said] : cases) {
      MainWindow w;
      const QString error = open_in_window(w, traces_dir() + file);
      QVERIFY2(error.isEmpty(), qPrintable(error));
      QVERIFY2(w.status_text().contains(said), qPrintable(w.status_text()));
    }
  }

  void resnetInputBound() {
    const QString path = traces_dir() + "/kineto/resnet50_num_workers_0.json.gz";
    MainWindow w;
    w.resize(1400, 900);
    const QString error = open_in_window(w, path);
    QVERIFY2(error.isEmpty(), qPrintable(error));
    const auto& m = *w.timeline()->model();
    int gpu_tracks = 0, steps_track = -1;
    size_t kernels_on_tracks = 0;
    for (size_t i = 0; i < m.tracks().size(); ++i) {
      const Track& t = m.tracks()[i];
      if (t.kind == TrackKind::GpuStream) {
        ++gpu_tracks;
        for (const Lane& l : t.lanes)
          for (size_t k = 0; k < l.size(); ++k) kernels_on_tracks += l.kind(k) == EventKind::Kernel;
      }
      if (t.kind == TrackKind::Steps) steps_track = int(i);
    }
    QVERIFY(gpu_tracks >= 1);
    QCOMPARE(kernels_on_tracks, m.kernel_count());
    QVERIFY(kernels_on_tracks > 1000);
    QVERIFY(steps_track >= 0);
    int input_steps = 0;
    for (const StepInfo& s : m.steps()) input_steps += s.bound == "input";
    QVERIFY2(input_steps >= 1, "no input-bound step");

    // Clicking the input-bound finding zooms to its steps.
    QTableView* v = w.findings_view();
    int row = -1, finding = -1;
    for (int r = 0; r < v->model()->rowCount(); ++r)
      if (v->model()->index(r, FindingsModel::Rule).data().toString() == "input-bound") row = r;
    QVERIFY2(row >= 0, "no input-bound finding");
    for (size_t i = 0; i < m.findings().size(); ++i)
      if (m.findings()[i].rule == "input-bound") finding = int(i);
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    // A trace without samples: its call tree and flame graph are its ranges, each thread as long as its
    // outermost ones (a thread read "0 ns" and the flame graph stayed empty).
    QTRY_VERIFY(w.call_tree_model().tree().nodes()[0].total > 0);
    const CallTree& tree = w.call_tree_model().tree();
    QVERIFY(tree.weighted_by_time());
    for (int32_t thread : tree.nodes()[0].children) {
      double outermost = 0;
      for (int32_t c : tree.nodes()[size_t(thread)].children) outermost += tree.nodes()[size_t(c)].total;
      QCOMPARE(tree.nodes()[size_t(thread)].total, outermost);
      QVERIFY2(tree.nodes()[size_t(thread)].total > 0, tree.name(tree.nodes()[size_t(thread)]).c_str());
    }
    QCOMPARE(w.flame_graph()->tree().nodes()[0].total, tree.nodes()[0].total);  // the graph lays out from it
    w.timeline()->zoom_to_all();
    QTest::mouseClick(v->viewport(), Qt::LeftButton, {}, v->visualRect(v->model()->index(row, FindingsModel::Rule)).center());
    auto ext = m.finding_extent(finding);
    QVERIFY(ext.has_value());
    const Viewport& vp = w.timeline()->viewport_range();
    const double span = double(ext->second - ext->first);
    QVERIFY(vp.t0 <= double(ext->first) && vp.t0 >= double(ext->first) - 0.03 * span);
    QVERIFY(vp.t1 >= double(ext->second) && vp.t1 <= double(ext->second) + 0.03 * span);
    // Its steps are on the timeline and include input-bound ones.
    int input_in_finding = 0;
    for (int64_t s : m.findings()[finding].steps) {
      const int p = m.step_position(s);
      QVERIFY(p >= 0);
      input_in_finding += m.steps()[p].bound == "input";
    }
    QVERIFY(input_in_finding >= 1);

    // The evidence reads as labelled rows and tables, not JSON; a name in it highlights its occurrences.
    const QString html = w.details()->toHtml(), text = w.details()->toPlainText();
    QVERIFY2(!text.contains("{\""), qPrintable(text));
    // Evidence keys read as words (issue 26): no "share for severity".
    // Each label stands on its own row with its value after it.
    QVERIFY2(text.contains(QRegularExpression("host waiting for input\\s+\\d+\\.\\d%")) &&
                 text.contains(QRegularExpression("host waiting for input per step\\s+\\d")),
             qPrintable(text));
    QVERIFY2(text.contains("share of the steady steps' time (sets the severity)") && !text.contains("share for severity"),
             qPrintable(text));
    QVERIFY(text.contains("host data wait") && text.contains(" ms"));
    // The suggested change keeps its lines as written in a narrow panel, which scrolls sideways: wrapped, a comment's
    // last word ended one line and the call it spoke of stood alone as a statement.
    const QString suggestion = QString::fromStdString(m.findings()[finding].suggestion);
    QTextBrowser narrow;
    narrow.resize(320, 600);
    narrow.setHtml(finding_details_html(m, size_t(finding)));
    narrow.show();
    QVERIFY(QTest::qWaitForWindowExposed(&narrow));
    int longest_line_px = 0, wrapped_blocks = 0;
    for (QTextBlock b = narrow.document()->begin(); b.isValid(); b = b.next()) {
      if (b.text().isEmpty() || !suggestion.contains(b.text())) continue;
      longest_line_px = std::max(longest_line_px, narrow.fontMetrics().horizontalAdvance(b.text()));
      wrapped_blocks += b.layout()->lineCount() > 1;
    }
    QVERIFY2(longest_line_px > narrow.viewport()->width(), "no suggestion line is wider than the panel: the check proves nothing");
    QVERIFY2(wrapped_blocks == 0, "a suggestion line wraps");
    QVERIFY2(narrow.horizontalScrollBar()->maximum() > 0, "the wide lines cannot be scrolled to");
    const QString loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";
    QVERIFY2(html.contains("highlight:enumerate%28DataLoader%29"), qPrintable(html));
    emit w.details()->anchorClicked(QUrl(QString(kHighlightScheme) + QUrl::toPercentEncoding(loader)));
    QCOMPARE(w.search_box()->text(), loader);
  }
};

QTEST_MAIN(TracesTest)
#include "traces_test.moc"
