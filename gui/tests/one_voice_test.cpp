// The GUI says what `stepscope analyze` says (issue 48, item 3): a store of a run without steps or GPU
// activity, opened offscreen through the real loader, shows the analyzer's advice in the Details pane (not an
// empty pane), and a run without GPU activity shows its steps in the host's words, with no GPU categories.
#include <QSignalSpy>
#include <QTableView>
#include <QTextBrowser>
#include <QtTest>
#include <filesystem>
#include <fstream>

#include "host_only_traces.h"
#include "main_window.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"
#include "stepscope/gui/item_models.h"
#include "stepscope/store/store.h"
#include "timeline_view.h"

using namespace stepscope;
using namespace stepscope::gui;

namespace {

// Writes `t` as a store and opens it in `w` through the background loader; "" on success, else why not.
QString open_store(MainWindow& w, const store::Trace& t, const std::string& name) {
  const std::string dir = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-one-voice";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name + ".db";
  store::write_store_atomically(t, path);
  w.set_synchronous(true);
  QSignalSpy spy(&w, &MainWindow::model_loaded);
  w.open_file(QString::fromStdString(path));
  if (!spy.wait(30000)) return "no model_loaded signal in 30 s";
  return spy.takeFirst().at(0).toBool() ? QString() : "load failed: " + w.load_error();
}

}  // namespace

class OneVoiceTest : public QObject {
  Q_OBJECT
 private slots:
  void detailsPaneSaysWhatAnalyzeSays() {
    MainWindow w;
    const QString why = open_store(w, test::c_program_without_steps(), "c_program");
    QVERIFY2(why.isEmpty(), qPrintable(why));
    const TimelineModel& m = *w.timeline()->model();
    QVERIFY(m.analysis());
    QVERIFY(m.findings().empty());
    const std::string advice = analyzer::steps_advice(m.analysis()->summary);
    QVERIFY(
        advice.rfind(
            "No step markers (no Python in the recorded processes): mark them with stepscope.h, installed "
            "as <prefix>/include/stepscope.h",
            0) == 0);
    // The model's notes are the analyzer's sentences, in the order `analyze` prints them.
    const std::vector<std::string> notes = m.run_notes();
    QCOMPARE(notes.size(), size_t(2));
    QCOMPARE(notes[0], analyzer::no_gpu_note(m.analysis()->summary));
    QCOMPARE(notes[1], advice);
    // The same string as the text report's, in the Details pane, with the text report's "no findings".
    QVERIFY(analyzer::render_text_report(*m.analysis()).find("\n" + advice + "\n") != std::string::npos);
    const QString details = w.details()->toPlainText();
    QVERIFY2(details.contains(QString::fromStdString(advice)), qPrintable(details));
    QVERIFY(details.contains("No findings."));
  }

  void eventsLeftOutAreSaidInTheStatusAndTheDetails() {
    const std::string path = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-one-voice-malformed.json";
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << R"({"traceEvents":[
      {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10,"dur":2,"args":{"device":0,"stream":7}},
      {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":"20","dur":2,"args":{"device":0,"stream":7}}]})";
    MainWindow w;
    w.set_synchronous(true);
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    w.open_file(QString::fromStdString(path));
    QVERIFY(spy.wait(30000) && spy.takeFirst().at(0).toBool());
    const QString note = QString::fromStdString(analyzer::malformed_events_note(w.timeline()->model()->analysis()->summary));
    QCOMPARE(note, QString("The file held 1 event that could not be read and was left out (1 ts not a time): every "
                           "figure here is over the rest."));
    QVERIFY2(w.details()->toPlainText().contains(note), qPrintable(w.details()->toPlainText()));
    QVERIFY2(w.status_text().contains(note), qPrintable(w.status_text()));
    QCOMPARE(w.timeline()->model()->run_notes().front(), note.toStdString());
  }

  void aRunWithoutGpuIsShownInTheHostsWords() {
    MainWindow w;
    const QString why = open_store(w, test::host_only_input_bound(), "host_only");
    QVERIFY2(why.isEmpty(), qPrintable(why));
    const StepsModel& steps = w.steps_model();
    QVERIFY(!steps.has_gpu());
    const auto& cats = analyzer::step_categories();
    for (size_t c = 0; c < cats.size(); ++c) {
      const int col = StepsModel::FirstCategory + int(c);
      const std::string_view key = cats[c].key;
      const QString header = steps.headerData(col, Qt::Horizontal).toString();
      const bool shown = key == "data_wait" || key == "host_idle";
      QCOMPARE(w.steps_view()->isColumnHidden(col), !shown);
      if (key == "data_wait") QCOMPARE(header, QString("Waiting for input"));
      if (key == "host_idle") QCOMPARE(header, QString("The training thread's own work"));
    }
    w.select_step(3);
    const QString details = w.details()->toPlainText();
    QVERIFY2(details.contains("the training thread's own work") && details.contains("waiting for input"),
             qPrintable(details));
    QVERIFY2(!details.contains("GPU busy") && !details.contains("host code between launches"),
             qPrintable(details));
  }
};

QTEST_MAIN(OneVoiceTest)
#include "one_voice_test.moc"
