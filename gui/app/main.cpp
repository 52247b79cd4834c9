// stepscope-gui FILE: the desktop timeline.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "main_window.h"
#include "timeline_view.h"

namespace {

const QCommandLineOption screenshot("screenshot", "Load FILE, save a picture of the window to PNG and quit.", "PNG");
const QCommandLineOption finding("select-finding", "After loading, select the first finding with this rule.", "RULE");
const QCommandLineOption slowest("select-slowest-step", "After loading, show the Steps panel and select the slowest slow step.");

void describe(QCoreApplication& app, QCommandLineParser& parser) {
  QCoreApplication::setOrganizationName("stepscope");
  QCoreApplication::setApplicationName("stepscope-gui");
  QCoreApplication::setApplicationVersion("0.1.0");
  parser.setApplicationDescription("stepscope desktop timeline: CPU threads, CUDA API, GPU streams, steps, findings");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("FILE", "a stepscope store, Kineto/Chrome JSON (.json, .gz, .zst) or Nsight Systems SQLite export");
  parser.addOption(screenshot);
  parser.addOption(finding);
  parser.addOption(slowest);
  parser.process(app);  // --help / --version print and exit here
}

}  // namespace

int main(int argc, char** argv) {
  // --help and --version need no display: answer them before a QApplication connects to one.
  for (int i = 1; i < argc; ++i) {
    const QByteArray a(argv[i]);
    if (a == "-h" || a == "--help" || a == "--help-all" || a == "-v" || a == "--version") {
      QCoreApplication core(argc, argv);
      QCommandLineParser parser;
      describe(core, parser);
      return 0;
    }
  }
  QApplication app(argc, argv);
  QCommandLineParser parser;
  describe(app, parser);

  stepscope::gui::MainWindow window;
  const QStringList files = parser.positionalArguments();
  const QString shot = parser.value(screenshot);
  const QString rule = parser.value(finding);
  QObject::connect(&window, &stepscope::gui::MainWindow::model_loaded, &window, [&](bool ok) {
    if (ok && !rule.isEmpty()) {
      const auto& f = window.timeline()->model()->findings();
      for (size_t i = 0; i < f.size(); ++i)
        if (QString::fromStdString(f[i].rule) == rule) {
          window.select_finding(int(i));
          break;
        }
    }
    if (ok && parser.isSet(slowest)) {
      const auto& steps = window.steps_model();
      int best = -1;
      for (int r = 0; r < steps.rowCount(); ++r)
        if (steps.is_slow(r) &&
            (best < 0 || steps.index(r, stepscope::gui::StepsModel::Duration).data(stepscope::gui::SortRole).toLongLong() >
                             steps.index(best, stepscope::gui::StepsModel::Duration).data(stepscope::gui::SortRole).toLongLong()))
          best = r;
      if (best >= 0) window.select_step(best);
    }
    if (!shot.isEmpty()) {
      window.set_synchronous(true);
      QTimer::singleShot(300, &window, [&, ok] {
        window.grab().save(shot);
        QApplication::exit(ok ? 0 : 2);
      });
    }
  });
  if (!shot.isEmpty()) window.resize(1600, 1000);
  window.show();
  if (!files.isEmpty()) window.open_file(files.first());
  return app.exec();
}
