// stepscope-gui FILE: the desktop timeline.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QTimer>

#include <cstdio>
#include <cstdlib>
#include <set>

#include "main_window.h"
#include "stepscope/store/store.h"
#include "timeline_view.h"

namespace {

const QCommandLineOption screenshot("screenshot", "Load FILE, save a picture of the window to PNG and quit.", "PNG");
const QCommandLineOption finding("select-finding", "After loading, select the first finding with this rule.", "RULE");
const QCommandLineOption slowest("select-slowest-step",
                                 "After loading, show the Steps panel and select the slowest slow step after start-up.");

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

// Every refusal is one line on stderr and exit code 2, as the CLI's.
int refuse(const QString& why) {
  std::fprintf(stderr, "stepscope-gui: %s\n", qPrintable(why));
  return 2;
}

bool has_display() {
  for (const char* v : {"DISPLAY", "WAYLAND_DISPLAY"})
    if (const char* d = std::getenv(v); d && *d) return true;
  return false;
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
  // Without a display Qt's default platform (xcb) aborts the process: a screenshot needs none (offscreen),
  // a window does, and says so in one line.
  bool wants_shot = false;
  for (int i = 1; i < argc; ++i)
    if (QByteArray(argv[i]) == "--screenshot" || QByteArray(argv[i]).startsWith("--screenshot=")) wants_shot = true;
  const QByteArray platform = qgetenv("QT_QPA_PLATFORM");
  if ((platform.isEmpty() || platform.startsWith("xcb") || platform.startsWith("wayland")) && !has_display()) {
    if (!wants_shot)
      return refuse("no display (DISPLAY and WAYLAND_DISPLAY are unset): run it in a desktop session or over "
                    "ssh -X, or save a picture with --screenshot PNG");
    qputenv("QT_QPA_PLATFORM", "offscreen");
  }
  QApplication app(argc, argv);
  QCommandLineParser parser;
  describe(app, parser);

  const QStringList files = parser.positionalArguments();
  const QString shot = parser.value(screenshot);
  const QString rule = parser.value(finding);
  if (!files.isEmpty() && !QFileInfo(files.first()).isDir() &&
      stepscope::store::sniff_file(files.first().toStdString()) == stepscope::store::FileKind::Missing)
    return refuse(files.first() + ": " + QString::fromStdString(stepscope::store::missing_file_reason(files.first().toStdString())));
  if (!shot.isEmpty()) {
    const QFileInfo out(shot);
    if (!out.absoluteDir().exists()) return refuse(shot + ": no such directory " + out.absolutePath());
    if (files.isEmpty()) return refuse("--screenshot needs a FILE to load");
  }
  stepscope::gui::MainWindow window;
  // A screenshot run has nobody to close a modal error box: errors go to stderr and the exit code.
  if (!shot.isEmpty()) window.set_synchronous(true);
  QObject::connect(&window, &stepscope::gui::MainWindow::model_loaded, &window, [&](bool ok) {
    if (!ok && !shot.isEmpty()) {
      QApplication::exit(refuse(window.load_error()));
      return;
    }
    if (ok && !rule.isEmpty()) {
      const auto& f = window.timeline()->model()->findings();
      std::set<QString> present;
      int found = -1;
      for (size_t i = 0; i < f.size(); ++i) {
        present.insert(QString::fromStdString(f[i].rule));
        if (found < 0 && QString::fromStdString(f[i].rule) == rule) found = int(i);
      }
      if (found < 0) {
        QStringList names(present.begin(), present.end());
        QApplication::exit(
            refuse("--select-finding " + rule + ": no such finding in " + files.first() + " (" +
                   (names.isEmpty() ? QString("it has none") : "it has " + names.join(", ")) + ")" +
                   (window.not_analyzed().isEmpty() ? QString() : "; " + window.not_analyzed())));
        return;
      }
      window.select_finding(found);
    }
    if (ok && parser.isSet(slowest)) {
      if (const int best = window.steps_model().slowest_slow_row(); best >= 0) {
        window.select_step(best);
      } else {
        // Nothing to select is no error, but it is said: the Steps panel shows, and one line why.
        window.show_steps();
        std::fprintf(stderr,
                     "stepscope-gui: --select-slowest-step: no slow step in %s (none exceeds the median step by more "
                     "than the run's noise, or too few steps to judge; the Steps panel lists them all)\n",
                     qPrintable(files.first()));
      }
    }
    if (!shot.isEmpty()) {
      QTimer::singleShot(300, &window, [&] {
        if (!window.grab().save(shot)) {
          QApplication::exit(refuse(shot + ": cannot write the PNG"));
          return;
        }
        QApplication::exit(0);
      });
    }
  });
  if (!shot.isEmpty()) window.resize(1600, 1000);
  window.show();
  if (!files.isEmpty()) window.open_file(files.first());
  return app.exec();
}
