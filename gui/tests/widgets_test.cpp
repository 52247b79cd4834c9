// The real widgets, offscreen: golden screenshot, clicks, wheel, keys, findings, range panels, search,
// background loading of a real store file.
#include <QAbstractItemModelTester>
#include <QFontDatabase>
#include <QLabel>
#include <QLineEdit>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QStatusBar>
#include <QStyleFactory>
#include <QTableView>
#include <QTextBrowser>
#include <QTreeView>
#include <QtTest>
#include <filesystem>

#include "flame_graph.h"
#include "slow_steps_trace.h"
#include "stepscope/analyzer/analysis.h"
#include "main_window.h"
#include "stepscope/store/store.h"
#include "synthetic.h"
#include "timeline_view.h"

using namespace stepscope;
using namespace stepscope::gui;
using namespace stepscope::gui::test;

namespace {

int track_of(const TimelineModel& m, TrackKind kind) {
  for (size_t i = 0; i < m.tracks().size(); ++i)
    if (m.tracks()[i].kind == kind) return static_cast<int>(i);
  return -1;
}

// Share of pixels whose largest channel difference exceeds `threshold`.
double differing_share(const QImage& a, const QImage& b, int threshold) {
  if (a.size() != b.size()) return 1.0;
  qint64 diff = 0;
  for (int y = 0; y < a.height(); ++y)
    for (int x = 0; x < a.width(); ++x) {
      const QRgb p = a.pixel(x, y), q = b.pixel(x, y);
      const int d = std::max({std::abs(qRed(p) - qRed(q)), std::abs(qGreen(p) - qGreen(q)), std::abs(qBlue(p) - qBlue(q))});
      if (d > threshold) ++diff;
    }
  return double(diff) / double(a.width() * a.height());
}

}  // namespace

class WidgetsTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    // Fixed look: Fusion, its light palette, DejaVu Sans 9 pt loaded from the file.
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(QApplication::style()->standardPalette());
    const int id = QFontDatabase::addApplicationFont("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf");
    QVERIFY2(id >= 0, "DejaVuSans.ttf (fonts-dejavu-core) is needed for the golden screenshot");
    QFont f(QFontDatabase::applicationFontFamilies(id).value(0));
    f.setPointSize(9);
    f.setHintingPreference(QFont::PreferFullHinting);
    QApplication::setFont(f);
    QCoreApplication::setOrganizationName("stepscope-test");
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, QString(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-settings");
  }

  void goldenScreenshot() {
    TimelineView view;
    view.set_synchronous(true);
    view.resize(960, 420);
    view.set_model(TimelineModel::build(synthetic_trace(), synthetic_analysis()));
    view.select_event(EventRef{EventKind::Kernel, 6});  // draws the flow arrow from its launch call
    view.set_time_selection(std::make_pair(kBase + 20 * kMs, kBase + 30 * kMs));
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QImage actual = view.grab().toImage().convertToFormat(QImage::Format_RGB32);
    const QString golden = QString(STEPSCOPE_GUI_GOLDEN_DIR) + "/timeline.png";
    const QString out = QString(STEPSCOPE_BINARY_DIR) + "/test-scratch/timeline_actual.png";
    std::filesystem::create_directories(std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch");
    actual.save(out);
    if (qEnvironmentVariableIsSet("STEPSCOPE_UPDATE_GOLDEN")) {
      QVERIFY(actual.save(golden));
      QSKIP("golden updated");
    }
    QImage expected(golden);
    QVERIFY2(!expected.isNull(), qPrintable("missing golden " + golden + "; run with STEPSCOPE_UPDATE_GOLDEN=1"));
    expected = expected.convertToFormat(QImage::Format_RGB32);
    QCOMPARE(actual.size(), expected.size());
    // Font rasterization differs slightly across FreeType builds: allow 1% of pixels to differ clearly.
    const double share = differing_share(actual, expected, 48);
    QVERIFY2(share < 0.01, qPrintable(QString("%1 % of pixels differ; actual saved to %2").arg(share * 100).arg(out)));
    // And the picture is not blank: a kernel's colour is where the kernel is.
    const QPoint k = view.point_for(double(kernel_start(0, 2) + kKernelDur / 2), track_of(*view.model(), TrackKind::GpuStream), 0);
    const QColor c = actual.pixelColor(view.viewport()->mapTo(&view, k));
    QCOMPARE(c.rgb(), view.palette_colours().event_colour(view.model()->colour_key({EventKind::Kernel, 2}), false).rgb());
  }

  void aLongTitleKeepsItsIdAndWhatTheRowHolds() {
    const QFontMetrics fm(QFont{});
    const QString waits = "thread 25738 (python_data_loader_main) · data waits";
    const int width = fm.horizontalAdvance("thread 25738 (python) · data waits") - 2;
    const QString shown = TimelineView::gutter_title(fm, waits, width);
    QVERIFY2(shown.startsWith("thread 25738 (") && shown.endsWith("… · data waits"), qPrintable(shown));
    QVERIFY(fm.horizontalAdvance(shown) <= width);
    QCOMPARE(TimelineView::gutter_title(fm, "Stream 7", width), QString("Stream 7"));  // fits: as it is
    const QString gpu =
        TimelineView::gutter_title(fm, "GPU 0 Tesla V100-SXM2-32GB stream of the NCCL kernels", width);
    QVERIFY2(gpu.startsWith("GPU 0 Tesla") && gpu.endsWith("…"), qPrintable(gpu));  // no " · ": its end goes
    // Too narrow to keep any of the name before " · ": the whole title loses its end.
    const QString narrow = TimelineView::gutter_title(fm, waits, fm.horizontalAdvance(" · data waits") + 4);
    QVERIFY2(narrow.startsWith("thr") && narrow.endsWith("…"), qPrintable(narrow));
    // A thread named by its program, the id after the name: the name is shortened, the id kept.
    const QString named = TimelineView::gutter_title(fm, "cuda-cloverleaf 1701812 · samples",
                                                     fm.horizontalAdvance("cuda-clover 1701812 · samples"));
    QVERIFY2(named.startsWith("cuda-") && named.endsWith("… 1701812 · samples"), qPrintable(named));
  }

  void clickSelectsEventAndShowsDetails() {
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1200, 800);
    w.set_model(TimelineModel::build(synthetic_trace(), synthetic_analysis()));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    TimelineView* tl = w.timeline();
    tl->zoom_to(double(kBase + 10 * kMs), double(kBase + 20 * kMs), 0);
    const int gpu = track_of(*tl->model(), TrackKind::GpuStream);
    const QPoint p = tl->point_for(double(kernel_start(1, 2) + kKernelDur / 2), gpu, 0);
    QTest::mouseClick(tl->viewport(), Qt::LeftButton, {}, p);
    QVERIFY(tl->selected_event().has_value());
    QCOMPARE(*tl->selected_event(), (EventRef{EventKind::Kernel, 7}));
    const QString text = w.details()->toPlainText();
    QVERIFY2(text.contains("volta_sgemm_128x64_nn"), qPrintable(text));
    QVERIFY(text.contains("128 × 1 × 1"));
    QVERIFY(text.contains("cudaLaunchKernel"));
    QVERIFY(text.contains("aten::conv2d"));
    QVERIFY(text.contains("forward"));  // the CPU stack of the launch
    // Clicking empty space clears the selection.
    QTest::mouseClick(tl->viewport(), Qt::LeftButton, {}, tl->point_for(double(kernel_start(1, 2) + 550 * kUs), gpu, 0));
    QVERIFY(!tl->selected_event().has_value());
  }

  void clickingAFindingZoomsToItsSteps() {
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1200, 800);
    w.set_model(TimelineModel::build(synthetic_trace(), synthetic_analysis()));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTableView* v = w.findings_view();
    int row = -1;
    for (int r = 0; r < v->model()->rowCount(); ++r)
      if (v->model()->index(r, FindingsModel::Rule).data().toString() == "launch-overhead") row = r;
    QVERIFY(row >= 0);
    QTest::mouseClick(v->viewport(), Qt::LeftButton, {}, v->visualRect(v->model()->index(row, FindingsModel::Rule)).center());
    const Viewport& vp = w.timeline()->viewport_range();
    // Step 2 is [20 ms, 30 ms) after the start; the view shows it with 2% padding.
    QVERIFY(vp.t0 <= double(kBase + 20 * kMs) && vp.t0 >= double(kBase + 20 * kMs) - 0.03 * 10 * kMs);
    QVERIFY(vp.t1 >= double(kBase + 30 * kMs) && vp.t1 <= double(kBase + 30 * kMs) + 0.03 * 10 * kMs);
    QCOMPARE(*w.timeline()->selected_event(), (EventRef{EventKind::Finding, 1}));
    QVERIFY(w.details()->toPlainText().contains("Many small launches"));
  }

  void clickingASlowStepZoomsToItAndExplainsIt() {
    auto trace = std::make_shared<store::Trace>(stepscope::test::slow_steps_trace());
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace));
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1200, 800);
    w.set_model(TimelineModel::build(trace, analysis));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    QTableView* v = w.steps_view();
    v->sortByColumn(StepsModel::Duration, Qt::DescendingOrder);
    QCOMPARE(v->model()->index(0, StepsModel::Step).data().toString(), QString("8 ▲"));
    v->parentWidget()->show();  // a tab behind Findings: its viewport must be visible to take the click
    v->parentWidget()->raise();
    QTest::mouseClick(v->viewport(), Qt::LeftButton, {}, v->visualRect(v->model()->index(0, StepsModel::Step)).center());
    const auto& m = *w.timeline()->model();
    const int pos = m.step_position(8);
    QCOMPARE(*w.timeline()->selected_event(), (EventRef{EventKind::Step, uint32_t(pos)}));
    const Viewport& vp = w.timeline()->viewport_range();
    const double s0 = double(m.steps()[pos].start), s1 = double(m.steps()[pos].end);
    QVERIFY(vp.t0 <= s0 && vp.t0 >= s0 - 0.03 * (s1 - s0));
    QVERIFY(vp.t1 >= s1 && vp.t1 <= s1 + 0.03 * (s1 - s0));
    const QString details = w.details()->toPlainText();
    QVERIFY2(details.contains("biggest contributor: kernel at::native::vectorized_elementwise_kernel<…>(…) 12 ms vs 3 ms"),
             qPrintable(details));
    QVERIFY(details.contains("GPU busy"));
    QVERIFY(details.contains("median"));
  }

  void rulerDragSelectsARangeAndShowsItsBreakdown() {
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1200, 800);
    w.set_model(TimelineModel::build(synthetic_trace(), synthetic_analysis()));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    TimelineView* v = w.timeline();
    v->zoom_to(double(kBase), double(kBase + 40 * kMs), 0);
    QSignalSpy spy(v, &TimelineView::time_range_selected);
    const Viewport& vp = v->viewport_range();
    // Drag over step 2 (20–30 ms): GPU busy there is its kernels, its idle split the analysis's.
    const int x0 = TimelineView::kGutterWidth + int(std::lround(vp.x_of(double(kBase + 20 * kMs))));
    const int x1 = TimelineView::kGutterWidth + int(std::lround(vp.x_of(double(kBase + 30 * kMs))));
    QWidget* ruler = v->ruler();
    QTest::mousePress(ruler, Qt::LeftButton, {}, QPoint(x0, 10));
    QMouseEvent move(QEvent::MouseMove, QPointF(x1, 10), ruler->mapToGlobal(QPointF(x1, 10)), Qt::NoButton, Qt::LeftButton, {});
    QApplication::sendEvent(ruler, &move);
    QTest::mouseRelease(ruler, Qt::LeftButton, {}, QPoint(x1, 10));
    QCOMPARE(spy.count(), 1);
    const auto sel = *v->time_selection();
    const double px = vp.ns_per_px();
    QVERIFY(std::abs(double(sel.first - (kBase + 20 * kMs))) <= px);
    QVERIFY(std::abs(double(sel.second - (kBase + 30 * kMs))) <= px);
    const QString details = w.details()->toPlainText();
    QVERIFY2(details.contains("GPU busy") && details.contains("data wait") && details.contains("Top kernels") &&
                 details.contains("volta_sgemm_128x64_nn"),
             qPrintable(details));
    // The step's 10 samples, all in forward: the function, its samples and its share of the selection's.
    QVERIFY2(
        details.contains(QRegularExpression("Top host functions \\(CPU samples: each at its innermost Python "
                                            "function, else its native function\\)\\s+function\\s+samples\\s+"
                                            "share\\s+forward\\s+10\\s+100.0 %")),
        qPrintable(details));
    const QString status = w.statusBar()->findChildren<QLabel*>().first()->text();
    QVERIFY2(status.startsWith("Selection: ") && status.contains("GPU busy"), qPrintable(status));
  }

  void wheelZoomsAboutTheCursor() {
    TimelineView view;
    view.set_synchronous(true);
    view.resize(900, 400);
    view.set_model(TimelineModel::build(synthetic_trace()));
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.zoom_to(double(kBase), double(kBase + 40 * kMs), 0);
    const Viewport before = view.viewport_range();
    const QPointF pos(TimelineView::kGutterWidth + 300, 50);
    const double anchor = before.time_at(300);
    QWheelEvent wheel(pos, view.viewport()->mapToGlobal(pos), QPoint(), QPoint(0, 120), Qt::NoButton, Qt::NoModifier,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(view.viewport(), &wheel);
    const Viewport after = view.viewport_range();
    QCOMPARE(after.t1 - after.t0, (before.t1 - before.t0) * 0.8);
    QVERIFY(std::abs(after.time_at(300) - anchor) < 1.0);
    // W zooms in, S out, A/D pan by a tenth of the width.
    view.setFocus();
    const double span = after.t1 - after.t0;
    QTest::keyClick(&view, Qt::Key_W);
    QVERIFY(std::abs((view.viewport_range().t1 - view.viewport_range().t0) - span * 0.8) < 1.0);
    const double t0 = view.viewport_range().t0;
    QTest::keyClick(&view, Qt::Key_D);
    QVERIFY(std::abs(view.viewport_range().t0 - (t0 + view.viewport_range().ns_per_px() * view.viewport_range().width * 0.1)) < 1.0);
    // Dragging pans: the time under the cursor follows it.
    const QPoint from(TimelineView::kGutterWidth + 400, 100), to(TimelineView::kGutterWidth + 300, 100);
    const double grabbed = view.viewport_range().time_at(400);
    QTest::mousePress(view.viewport(), Qt::LeftButton, {}, from);
    QMouseEvent move(QEvent::MouseMove, to, view.viewport()->mapToGlobal(to), Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
    QApplication::sendEvent(view.viewport(), &move);
    QTest::mouseRelease(view.viewport(), Qt::LeftButton, {}, to);
    QVERIFY(std::abs(view.viewport_range().time_at(300) - grabbed) < 1.0);
  }

  void rangeSelectionFillsThePanels() {
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1200, 800);
    w.set_model(TimelineModel::build(synthetic_trace(), synthetic_analysis()));
    w.show();
    QVERIFY(QTest::qWaitForWindowExposed(&w));
    TimelineView* tl = w.timeline();
    tl->zoom_to(double(kBase), double(kBase + 40 * kMs), 0);
    // Right-drag over the first step.
    const int y = 60;
    const QPoint a(TimelineView::kGutterWidth + int(tl->viewport_range().x_of(double(kBase))), y);
    const QPoint b(TimelineView::kGutterWidth + int(tl->viewport_range().x_of(double(kBase + 10 * kMs))), y);
    QTest::mousePress(tl->viewport(), Qt::RightButton, {}, a);
    QMouseEvent move(QEvent::MouseMove, b, tl->viewport()->mapToGlobal(b), Qt::NoButton, Qt::RightButton, Qt::NoModifier);
    QApplication::sendEvent(tl->viewport(), &move);
    QTest::mouseRelease(tl->viewport(), Qt::RightButton, {}, b);
    QVERIFY(tl->time_selection().has_value());
    const auto& stats = w.kernel_stats_model().stats();
    QCOMPARE(stats.size(), size_t(2));
    QCOMPARE(stats[0].count, int64_t(kLaunchesPerStep));
    QAbstractItemModelTester tester(w.call_tree_view()->model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(w.call_tree_model().tree().nodes()[0].total, 10.0);  // ten samples in the first step
    QVERIFY(!w.flame_graph()->tree().nodes()[0].children.empty());
    // The flame graph hit-tests its boxes, laid out for the width its scrolling panel gives it: top row is the
    // thread.
    const int32_t n = w.flame_graph()->node_at(QPoint(w.flame_graph()->width() / 2, 5));
    QVERIFY(n > 0);
    QCOMPARE(QString::fromStdString(w.flame_graph()->tree().name(w.flame_graph()->tree().nodes()[n])),
             QString("main 100"));
    // Zoom to selection shows exactly the selected range (with padding).
    tl->zoom_to_selection();
    QVERIFY(tl->viewport_range().t1 - tl->viewport_range().t0 < 11.0 * kMs);
  }

  void searchHighlightsAndJumps() {
    MainWindow w;
    w.set_synchronous(true);
    w.set_model(TimelineModel::build(synthetic_trace(), synthetic_analysis()));
    w.search_box()->setText("SGEMM");
    QCOMPARE(w.timeline()->set_search("SGEMM"), size_t(kSteps * kLaunchesPerStep));
    QTest::keyClick(w.search_box(), Qt::Key_Return);
    QCOMPARE(*w.timeline()->selected_event(), (EventRef{EventKind::Kernel, 0}));
    QVERIFY(w.timeline()->next_match());
    QCOMPARE(*w.timeline()->selected_event(), (EventRef{EventKind::Kernel, 1}));
    QVERIFY(w.timeline()->next_match(true));
    QCOMPARE(*w.timeline()->selected_event(), (EventRef{EventKind::Kernel, 0}));
    QCOMPARE(w.timeline()->set_search("no such name"), size_t(0));
  }

  void loadsAStoreInTheBackground() {
    const std::string dir = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-load";
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/synthetic.stepscope";
    store::write_store_atomically(*synthetic_trace(), path);
    MainWindow w;
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    QSignalSpy progress(&w.loader(), &TraceLoader::progress);
    w.open_file(QString::fromStdString(path));
    QVERIFY(spy.wait(30000));
    QCOMPARE(spy.takeFirst().at(0).toBool(), true);
    QVERIFY(progress.count() >= 2);
    const auto& m = *w.timeline()->model();
    QCOMPARE(m.kernel_count(), size_t(kSteps * kLaunchesPerStep));
    QVERIFY(m.kernel_columns());  // a store: its kernels as columns, rows read back from it
    QVERIFY(track_of(m, TrackKind::GpuStream) >= 0);
    QVERIFY(track_of(m, TrackKind::Steps) >= 0);
    QCOMPARE(m.begin(), kBase);
  }

  // A store whose rows and analysis would not fit the memory allowed opens as its timeline alone, with the
  // findings the store holds, and the status line says why and what to do.
  void aStoreTooBigToAnalyzeOpensAsItsTimeline() {
    const std::string dir = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-load-unanalyzed";
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/synthetic.stepscope";
    auto t = synthetic_trace();
    store::Finding f;
    f.rule = t->intern("launch-overhead");
    f.severity = store::Severity::High;
    f.first_step = 1;
    f.last_step = 2;
    f.message = t->intern("stored by analyze --write-findings");
    t->findings.push_back(f);
    store::write_store_atomically(*t, path);
    struct Unset {  // whatever happens, later tests see no budget
      ~Unset() { qunsetenv("STEPSCOPE_ANALYSIS_MEMORY_MB"); }
    } unset;
    qputenv("STEPSCOPE_ANALYSIS_MEMORY_MB", "0");
    MainWindow w;
    w.set_synchronous(true);
    w.resize(1200, 800);
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    w.open_file(QString::fromStdString(path));
    QVERIFY(spy.wait(30000));
    QCOMPARE(spy.takeFirst().at(0).toBool(), true);
    const auto& m = *w.timeline()->model();
    QVERIFY(!m.analysis());
    QCOMPARE(m.kernel_count(), size_t(kSteps * kLaunchesPerStep));
    QCOMPARE(w.findings_view()->model()->rowCount(), 1);
    QCOMPARE(w.findings_view()->model()->index(0, FindingsModel::Rule).data().toString(),
             QString("launch-overhead"));
    // The status line in short, the reason whole in the note that stays while the file is open.
    const QString status = w.status_text();
    QVERIFY2(status.contains(" — not analysed: ~"), qPrintable(status));
    QVERIFY2(status.endsWith("needed with the analysis, none allowed (why: the note at the right)"),
             qPrintable(status));
    QVERIFY2(!status.contains("analyzed in"), qPrintable(status));
    QVERIFY2(
        w.not_analyzed().startsWith(QString("not analysed: %1 kernels, %2 API calls and %3 samples need ~")
                                        .arg(t->kernels.size())
                                        .arg(t->api_calls.size())
                                        .arg(t->samples.size())),
        qPrintable(w.not_analyzed()));
    QCOMPARE(w.analysis_note(), QString("Not analysed"));
    w.select_step(0);  // the status line moves on; the note stays
    QCOMPARE(w.analysis_note(), QString("Not analysed"));
    // Opened again with room to analyse: analysed, no note.
    qunsetenv("STEPSCOPE_ANALYSIS_MEMORY_MB");
    w.open_file(QString::fromStdString(path));
    QVERIFY(spy.wait(30000));
    QVERIFY(w.timeline()->model()->analysis());
    QVERIFY(w.not_analyzed().isEmpty());
    QCOMPARE(w.analysis_note(), QString());
  }

  void aBadFileIsReported() {
    MainWindow w;
    w.set_synchronous(true);
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    w.open_file("/nonexistent/trace.json");
    QVERIFY(spy.wait(10000));
    QCOMPARE(spy.takeFirst().at(0).toBool(), false);
    QVERIFY(!w.timeline()->model());
  }

  void layoutIsRemembered() {
    {
      MainWindow w;
      w.resize(1000, 700);
      w.show();
      QVERIFY(QTest::qWaitForWindowExposed(&w));
      w.close();
    }
    QSettings s;
    QVERIFY(!s.value("window/state").toByteArray().isEmpty());
    QVERIFY(!s.value("window/geometry").toByteArray().isEmpty());
  }
};

QTEST_MAIN(WidgetsTest)
#include "widgets_test.moc"
