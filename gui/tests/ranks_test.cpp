// `stepscope-gui DIR` (issue 16): the 8 DLRM ranks open in one window, one process group and one GPU group
// per rank, aligned at the step start, and the view renders them. Issue 26: the recorded pids and device ids are
// shown, and a launcher's store (no rank, no steps) is left out as `analyze` leaves it out, and said.
#include <QLabel>
#include <QTemporaryDir>
#include <QtTest>
#include <cstdio>
#include <set>

#include "main_window.h"
#include "stepscope/store/store.h"
#include "synthetic.h"
#include "timeline_view.h"
#include "trace_loader.h"

using namespace stepscope;
using namespace stepscope::gui;

class RanksTest : public QObject {
  Q_OBJECT
 private slots:
  void directoryOpensAsRanks() {
    const QString dir = QString(STEPSCOPE_TRACES_DIR) + "/param";
    if (!QDir(dir).exists()) {
      std::printf("SKIPPED: %s not found\n", qPrintable(dir));
      std::fflush(stdout);
      QSKIP("no shared traces");
    }
    LoadResult r = load_timeline(dir);
    QVERIFY2(r.error.isEmpty(), qPrintable(r.error));
    QVERIFY(r.model);
    std::set<std::string> gpu_groups;
    for (const auto& t : r.model->tracks())
      if (t.group.rfind("GPU ", 0) == 0) gpu_groups.insert(t.group);
    for (int rank = 0; rank < 8; ++rank) {
      const std::string want = "GPU " + std::to_string(rank) + " rank " + std::to_string(rank) + " · Tesla V100-SXM2-32GB";
      QVERIFY2(gpu_groups.count(want), want.c_str());
    }
    QCOMPARE(int(gpu_groups.size()), 8);
    TimelineView view;
    view.set_synchronous(true);
    view.resize(1200, 800);
    view.set_model(r.model);
    view.show();
    QVERIFY(!view.grab().isNull());
  }

  // `record -o run-%r.db` under torchrun writes run-0.db, run-1.db and the agent's run-launcher.db.
  void launcherStoreLeftOutAndRealPids() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    for (int rank = 0; rank < 2; ++rank) {
      auto t = test::synthetic_trace();
      t->meta["rank"] = std::to_string(rank);
      t->meta["world_size"] = "2";
      for (auto& p : t->processes) p.pid += rank;  // each rank its own process: 100, 101
      for (auto& th : t->threads) th.pid += rank;
      for (auto& r : t->kernels) r.pid += rank;
      for (auto& r : t->memcpys) r.pid += rank;
      for (auto& r : t->memsets) r.pid += rank;
      for (auto& r : t->syncs) r.pid += rank;
      for (auto& r : t->api_calls) r.pid += rank;
      for (auto& r : t->ranges) r.pid += rank;
      for (auto& r : t->samples) r.pid += rank;
      for (auto& r : t->data_waits) r.pid += rank;
      for (auto& r : t->steps) r.pid += rank;
      if (rank == 1) t->processes.clear();  // a store without the process's row: the group still names its rank
      store::write_store_atomically(*t, (dir.path() + QString("/run-%1.db").arg(rank)).toStdString());
    }
    // A store with steps but no rank beside ranked ones (a stray single-process recording) is left out too.
    store::write_store_atomically(*test::synthetic_trace(), (dir.path() + "/stray.db").toStdString());
    store::Trace launcher;
    launcher.processes.push_back({4242, launcher.intern("torchrun"), 1});
    launcher.threads.push_back({4242, 4242, launcher.intern("torchrun")});
    store::write_store_atomically(launcher, (dir.path() + "/run-launcher.db").toStdString());

    LoadResult r = load_timeline(dir.path());
    QVERIFY2(r.error.isEmpty(), qPrintable(r.error));
    std::set<std::string> groups;
    for (const auto& t : r.model->tracks()) groups.insert(t.group);
    QVERIFY(groups.count("Process 100 rank 0 · python train.py"));
    QVERIFY(groups.count("Process 101 rank 1"));
    QVERIFY(groups.count("GPU 0 rank 0 · Test GPU"));
    QVERIFY(groups.count("GPU 0 rank 1 · Test GPU"));
    for (const auto& g : groups) QVERIFY2(g.find("torchrun") == std::string::npos && g.find("input") == std::string::npos, g.c_str());
    QCOMPARE(QString::fromStdString(r.model->trace().meta.at("ranks")), QString("2"));
    QCOMPARE(QString::fromStdString(r.model->trace().meta.at("ranks.left_out")),
             dir.path() + "/run-launcher.db: no steps; " + dir.path() + "/stray.db: no rank, unlike the others");
  }

  // Issue 47: two flight saves of one trainer (named like rank files) are not ranks. The window shows the
  // first alone, unmerged, and its status line says why.
  void flightSavesOfOneProcessAreNotMerged() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    QStringList files;
    for (int k = 0; k < 2; ++k) {
      auto t = test::synthetic_trace();
      t->meta["flight.pid"] = "100";
      t->meta["host"] = "gpu-7";
      t->meta["flight.save"] =
          "20261128T10150" + std::to_string(k) + "Z-step" + std::to_string(199 + 200 * k);
      files << dir.path() + "/run-" + QString::fromStdString(t->meta["flight.save"]) + ".db";
      store::write_store_atomically(*t, files.back().toStdString());
    }
    MainWindow w;
    w.set_synchronous(true);
    QSignalSpy spy(&w, &MainWindow::model_loaded);
    w.open_file(dir.path());
    QVERIFY(spy.wait(30000));
    QCOMPARE(spy.takeFirst().at(0).toBool(), true);
    const auto& m = *w.timeline()->model();
    QCOMPARE(QString::fromStdString(m.trace().meta.at("ranks.not_one_job")),
             QString("2 flight saves of one process (pid 100 on gpu-7)"));
    QVERIFY(!m.trace().meta.count("ranks"));
    QCOMPARE(m.trace().kernels.size(), test::synthetic_trace()->kernels.size());  // one save, not both
    std::set<std::string> groups;
    for (const auto& t : m.tracks()) groups.insert(t.group);
    QVERIFY(groups.count("Process 100 python train.py"));  // no "rank" or "input" label: nothing merged
    const QString want =
        " — not the ranks of one job: 2 flight saves of one process (pid 100 on gpu-7); showing " + files[0] +
        " on its own (File ▸ Open for the others)";
    bool said = false;
    for (const QLabel* l : w.findChildren<QLabel*>()) said = said || l->text().endsWith(want);
    QVERIFY2(said, qPrintable(want));
  }
};

QTEST_MAIN(RanksTest)
#include "ranks_test.moc"
