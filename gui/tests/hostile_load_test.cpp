// Hostile inputs in the GUI (issue 17): a damaged file gives the very line `stepscope` prints (less its
// "stepscope: " prefix) as the loader's error, and no model — never a crash.
#include <sqlite3.h>

#include <QFile>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cstdio>

#include "trace_loader.h"

using namespace stepscope::gui;

namespace {
QString cli() { return QString(STEPSCOPE_BINARY_DIR) + "/cli/stepscope"; }

// The line `stepscope analyze FILE` prints for a bad FILE, without its "stepscope: " prefix.
QString cli_error(const QString& file) {
  QProcess p;
  p.start(cli(), {"analyze", file});
  p.waitForFinished(120000);
  if (p.exitCode() != 2) return "exit " + QString::number(p.exitCode());
  QString err = QString::fromUtf8(p.readAllStandardError());
  if (err.startsWith("stepscope: ")) err = err.mid(11);
  if (err.endsWith('\n')) err.chop(1);
  return err;
}
}  // namespace

class HostileLoadTest : public QObject {
  Q_OBJECT
 private slots:
  void damaged_files_give_the_cli_line() {
    const QString trace = QString(STEPSCOPE_TRACES_DIR) + "/hta/cuda_event_sync.json.gz";
    if (!QFile::exists(trace) || !QFile::exists(cli())) {
      std::printf("SKIPPED: needs %s and the built CLI\n", qPrintable(trace));
      std::fflush(stdout);
      QSKIP("no trace");
    }
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QFile in(trace);
    QVERIFY(in.open(QIODevice::ReadOnly));
    const QByteArray gz = in.readAll();

    QStringList cases;
    auto write = [&](const QString& name, const QByteArray& bytes) {
      QFile f(dir.filePath(name));
      QVERIFY(f.open(QIODevice::WriteOnly));
      f.write(bytes);
      cases << f.fileName();
    };
    write("truncated.json.gz", gz.left(gz.size() / 2));
    write("truncated.json", QByteArray("{\"traceEvents\":[{\"ph\":\"X\",\"name\":\"k"));
    write("empty.json", QByteArray());
    write("\x01\x1b[31mcontrol.json", QByteArray("\xff\xfe not json"));
    // A store whose strings table names an id far past its rows.
    const QString store = dir.filePath("damaged.db");
    QProcess imp;
    imp.start(cli(), {"import", trace, "-o", store});
    QVERIFY(imp.waitForFinished(120000));
    QCOMPARE(imp.exitCode(), 0);
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(store.toUtf8().constData(), &db), SQLITE_OK);
    QCOMPARE(sqlite3_exec(db, "INSERT INTO strings(id, value) VALUES (4000000000000, 'far')", nullptr, nullptr, nullptr),
             SQLITE_OK);
    sqlite3_close(db);
    cases << store;

    for (const QString& file : cases) {
      const LoadResult r = load_timeline(file);
      QVERIFY2(!r.model, qPrintable(file));
      QVERIFY2(r.error.startsWith(file + ": "), qPrintable(r.error));
      QVERIFY2(!r.error.contains('\n'), qPrintable(r.error));
      QCOMPARE(r.error, cli_error(file));
    }
  }
};

QTEST_MAIN(HostileLoadTest)
#include "hostile_load_test.moc"
