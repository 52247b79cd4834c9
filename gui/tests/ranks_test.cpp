// `stepscope-gui DIR` (issue 16): the 8 DLRM ranks open in one window, one process group and one GPU group
// per rank, aligned at the step start, and the view renders them. Issue 26: the recorded pids and device ids are
// shown, and a launcher's store (no rank, no steps) is left out as `analyze` leaves it out, and said.
#include <QTemporaryDir>
#include <QtTest>
#include <cstdio>
#include <set>

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
};

QTEST_MAIN(RanksTest)
#include "ranks_test.moc"
