// Every shared real trace opens in the GUI pipeline (load_trace → analyze → timeline model) and renders;
// the input-bound ResNet-50 trace shows GPU kernel tracks, input-bound steps, and its finding zooms there.
#include <QDirIterator>
#include <QProcess>
#include <QTemporaryDir>
#include <QStyleFactory>
#include <QLineEdit>
#include <QTableView>
#include <QTextBrowser>
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
    for (uint32_t k = 0; k < m.trace().kernels.size() && !elementwise; ++k) {
      if (m.trace().str(m.trace().kernels[k].name).rfind("_ZN2at6native29vectorized_elementwise_kernel", 0) != 0) continue;
      elementwise = true;
      QCOMPARE(QString::fromStdString(m.name_of({EventKind::Kernel, k})), QString("at::native::vectorized_elementwise_kernel<…>(…)"));
      QVERIFY(m.full_name_of({EventKind::Kernel, k}).rfind("void at::native::vectorized_elementwise_kernel<4, ", 0) == 0);
    }
    QVERIFY(elementwise);
    // The Kernels panel keeps kernels apart whose short names coincide; the tooltip names each in full.
    int same_short = 0;
    for (const auto& st : kernel_stats(m, m.begin(), m.end()))
      if (st.name == "at::native::vectorized_elementwise_kernel<…>(…)") {
        ++same_short;
        QVERIFY(st.full_name.rfind("void at::native::vectorized_elementwise_kernel<", 0) == 0);
      }
    QVERIFY(same_short > 1);
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
  }

  // The main window as a user first sees it: the deep Python and C++ stacks of a PyTorch recording fill the flame
  // graph, which scrolls in its panel instead of growing the window past the screen and squeezing the timeline.
  void h100MainWindowKeepsTheTimelineFirst() {
    QTemporaryDir dir;
    const QString db = h100_recording("torch_dataloader", dir);
    if (db.isEmpty()) QSKIP("no H100 recordings");
    MainWindow w;
    w.set_synchronous(true);
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    w.open_file(db);
    QVERIFY(spy.wait(60000));
    QVERIFY2(spy.takeFirst().at(0).toBool(), "load failed");
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    w.timeline()->zoom_to_all();  // the whole run: every thread's stacks in the flame graph
    QTest::qWait(200);
    const int depth_px = w.findChild<FlameGraphWidget*>()->minimumHeight();
    QVERIFY2(depth_px > 900, qPrintable(QString("flame graph only %1 px deep: the check below proves nothing").arg(depth_px)));
    QVERIFY2(w.minimumSizeHint().height() < 700, qPrintable(QString::number(w.minimumSizeHint().height())));
    QVERIFY2(w.height() <= 900, qPrintable(QString::number(w.height())));
    QVERIFY2(w.timeline()->height() >= w.height() / 2,
             qPrintable(QString("timeline %1 of %2 px").arg(w.timeline()->height()).arg(w.height())));
  }

  void resnetInputBound() {
    const QString path = traces_dir() + "/kineto/resnet50_num_workers_0.json.gz";
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1400, 900);
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    w.open_file(path);  // the real background path
    QVERIFY(spy.wait(60000));
    QVERIFY2(spy.takeFirst().at(0).toBool(), "load failed");
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
    QCOMPARE(kernels_on_tracks, m.trace().kernels.size());
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
    QVERIFY2(text.contains("data wait share") && text.contains("host data wait per step"), qPrintable(text));
    QVERIFY(text.contains("host data wait") && text.contains(" ms"));
    const QString loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";
    QVERIFY2(html.contains("highlight:enumerate%28DataLoader%29"), qPrintable(html));
    emit w.details()->anchorClicked(QUrl(QString(kHighlightScheme) + QUrl::toPercentEncoding(loader)));
    QCOMPARE(w.search_box()->text(), loader);
  }
};

QTEST_MAIN(TracesTest)
#include "traces_test.moc"
