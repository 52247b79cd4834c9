// `stepscope-gui DIR` (issue 16): the 8 DLRM ranks open in one window, one process group and one GPU group
// per rank, aligned at the step start, and the view renders them.
#include <QtTest>
#include <cstdio>
#include <set>

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
      const std::string want = "GPU " + std::to_string((rank + 1) * 1000 + rank) + " rank " +
                               std::to_string(rank) + " · Tesla V100-SXM2-32GB";
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
};

QTEST_MAIN(RanksTest)
#include "ranks_test.moc"
