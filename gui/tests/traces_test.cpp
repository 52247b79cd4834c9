// Every shared real trace opens in the GUI pipeline (load_trace → analyze → timeline model) and renders;
// the input-bound ResNet-50 trace shows GPU kernel tracks, input-bound steps, and its finding zooms there.
#include <QDirIterator>
#include <QStyleFactory>
#include <QTableView>
#include <QtTest>
#include <cstdio>

#include "main_window.h"
#include "timeline_view.h"
#include "trace_loader.h"

using namespace stepscope;
using namespace stepscope::gui;

namespace {
QString traces_dir() { return QString(STEPSCOPE_TRACES_DIR); }
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
  }
};

QTEST_MAIN(TracesTest)
#include "traces_test.moc"
