// stepscope-gui FILE: the desktop timeline.
#include <QApplication>
#include <QCommandLineParser>
#include <QTimer>

#include "main_window.h"
#include "timeline_view.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("stepscope");
  QApplication::setApplicationName("stepscope-gui");
  QApplication::setApplicationVersion("0.1.0");
  QCommandLineParser parser;
  parser.setApplicationDescription("stepscope desktop timeline: CPU threads, CUDA API, GPU streams, steps, findings");
  parser.addHelpOption();
  parser.addVersionOption();
  parser.addPositionalArgument("FILE", "a stepscope store, Kineto/Chrome JSON (.json, .gz, .zst) or Nsight Systems SQLite export");
  QCommandLineOption screenshot("screenshot", "Load FILE, save a picture of the window to PNG and quit.", "PNG");
  QCommandLineOption finding("select-finding", "After loading, select the first finding with this rule.", "RULE");
  parser.addOption(screenshot);
  parser.addOption(finding);
  parser.process(app);

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
