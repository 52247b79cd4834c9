// `stepscope-gui DIR` (issue 16): the 8 DLRM ranks open in one window, one process group and one GPU group
// per rank, aligned at the step start, and the view renders them. Issue 26: the recorded pids and device ids are
// shown, and a launcher's store (no rank, no steps) is left out as `analyze` leaves it out, and said.
// Issue 51 item 4: the window opens on the cross-rank findings, the straggler's groups marked, the collectives it
// delayed on the other ranks, and the job's critical path drawn rank to rank at each rank's shifted time.
#include <QLabel>
#include <QScrollBar>
#include <QSettings>
#include <QTableView>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QTextDocumentFragment>
#include <QtTest>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>

#include "event_details.h"
#include "main_window.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"
#include "synthetic.h"
#include "timeline_view.h"
#include "trace_loader.h"

using namespace stepscope;
using namespace stepscope::gui;

namespace {

constexpr int64_t US = 1000, MS = 1000 * US;

// Opens `dir` in a synchronous window, as `stepscope-gui DIR` does.
bool open_in(MainWindow& w, const QString& dir) {
  w.set_synchronous(true);
  w.resize(1600, 1000);
  w.show();
  QSignalSpy spy(&w, &MainWindow::model_loaded);
  w.open_file(dir);
  return spy.wait(300000) && spy.takeFirst().at(0).toBool();
}

// The segments of the job's critical path against the analysis' rounds: one own-work segment per round (and a
// transfer after it unless it is the tail), on that rank's lane, at the round's times on the rank's own clock plus
// the rank's shift (meta ranks.shift.<k>); painted where that time falls on that lane. Returns the count checked.
size_t check_path_drawn(const TimelineModel& m, TimelineView& view) {
  const CrossRank& cr = *m.cross_rank();
  size_t seg = 0;
  for (const auto& a : cr.analysis->steps)
    for (size_t j = 0; j < a.path_rounds.size(); ++j) {
      const auto& rd = a.path_rounds[j];
      const int k = cr.merged[rd.rank];
      const int64_t shift = std::stoll(m.trace().meta.at("ranks.shift." + std::to_string(k)));
      for (bool transfer : {false, true}) {
        if (transfer && rd.end_ns == rd.arrive_ns) continue;
        const RankPathSegment& sg = cr.path.at(seg);
        const EventRef ref{EventKind::RankPath, uint32_t(seg)};
        ++seg;
        if (sg.rank != rd.rank || sg.step != a.index || sg.round != j || sg.transfer != transfer) return 0;
        const int64_t from = (transfer ? rd.arrive_ns : rd.start_ns) + shift, to = (transfer ? rd.end_ns : rd.arrive_ns) + shift;
        if (sg.start != from || sg.end != to) return 0;
        auto loc = m.locate(ref);
        if (!loc || loc->track != cr.track[rd.rank] || loc->lane != 0) return 0;
        // Drawn at its time on its rank's lane: the rectangle starts at x(from) on the lane's row.
        view.zoom_to(double(from), double(to) + 1);
        const QRectF r = view.rect_of(ref);
        const QPoint p = view.point_for(double(from), loc->track, 0);
        if (std::abs(r.left() - p.x()) > 1.0 || std::abs(r.center().y() - p.y()) > 1.5) return 0;
        auto hit = view.hit_at(view.point_for(double(from + to) / 2, loc->track, 0));
        if (!hit || !(hit->event == ref)) return 0;
      }
    }
  return seg == cr.path.size() ? seg : 0;
}

// A CPU rank of a synchronous 3-rank job (as analyzer/tests/multirank_job_path_test.cpp's): per 60 ms step, `busy`
// of host work, then a sync all-reduce completing 1 ms after the slowest rank issued it at 45 ms. Rank r's clock
// starts 7 ms · r later, so the timeline shifts it.
store::Trace job_rank(int rank, int steps, const std::function<int64_t(int)>& busy) {
  constexpr int64_t kStep = 60 * MS;
  store::Trace t;
  t.meta["rank"] = std::to_string(rank);
  t.meta["world_size"] = "3";
  t.processes.push_back({100 + rank, t.intern("python train.py"), 1});
  t.threads.push_back({100 + rank, 100 + rank, t.intern("python")});
  const auto domain = t.intern("stepscope.comm"), optimizer = t.intern("optimizer");
  for (int i = 0; i < steps; ++i) {
    const int64_t t0 = 10 * MS + rank * 7 * MS + i * kStep;
    store::Step s;
    s.index = i, s.start = t0, s.end = t0 + kStep, s.source = optimizer, s.pid = 100 + rank, s.tid = 100 + rank;
    t.steps.push_back(s);
    store::Range r;
    r.pid = 100 + rank, r.tid = 100 + rank, r.domain = domain;
    r.start = t0 + busy(i), r.end = t0 + 46 * MS;
    r.name = t.intern("all_reduce 4096B pg=0 seq=" + std::to_string(i) + " sync");
    t.ranges.push_back(r);
  }
  return t;
}

}  // namespace

class RanksTest : public QObject {
  Q_OBJECT
 private slots:
  void initTestCase() {
    // Settings of their own: a collapsed group saved by another run must not hide a lane here.
    QCoreApplication::setOrganizationName("stepscope-test");
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope,
                       QString(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-ranks-settings");
    QSettings().clear();
  }

  // The 8 DLRM ranks: rank 7 is the straggler (docs/multi-rank.md "Proof"); the window says so first.
  void crossRankFindingsAndJobPath() {
    const QString dir = QString(STEPSCOPE_TRACES_DIR) + "/param";
    if (!QDir(dir).exists()) {
      std::printf("SKIPPED: %s not found\n", qPrintable(dir));
      std::fflush(stdout);
      QSKIP("no shared traces");
    }
    MainWindow w;
    QVERIFY(open_in(w, dir));
    const TimelineModel& m = *w.timeline()->model();
    const CrossRank* cr = m.cross_rank();
    QVERIFY(cr);
    const auto& a = *cr->analysis;
    QCOMPARE(int(a.ranks.size()), 8);
    QCOMPARE(int(a.steps.size()), 1);

    // The findings list leads with the cross-rank straggler, selected, naming rank 7; the details say what
    // `analyze DIR` says of the job.
    QCOMPARE(QString::fromStdString(m.findings()[0].rule), QString("straggler"));
    QVERIFY(m.findings()[0].cross_rank);
    QVERIFY2(m.findings()[0].summary.rfind("rank 7 is the straggler", 0) == 0, m.findings()[0].summary.c_str());
    const QModelIndex sel = w.findings_view()->selectionModel()->selectedRows().value(0);
    QCOMPARE(sel.siblingAtColumn(FindingsModel::Rule).data().toString(), QString("straggler"));
    QCOMPARE(sel.row(), 0);  // the top row of the panel
    const QString details = w.details()->toPlainText();
    QVERIFY(details.contains("rank 7 is the straggler"));
    const std::string report = analyzer::render_multirank_report(a, analyzer::ReportFormat::Text);
    const size_t path_line = report.find("The job's critical path, ");
    QVERIFY(path_line != std::string::npos);
    QVERIFY2(details.contains(QString::fromStdString(report.substr(path_line, report.find('\n', path_line) - path_line))),
             qPrintable(details));
    QVERIFY(details.contains("What-if: the job's step, "));
    // A rank's own finding: its saving is that rank's step, and the job's what-if is beside it (rank 5's 8.39
    // ms a step moved the job's by 0.10 ms).
    const size_t rank_finding = size_t(std::find_if(m.findings().begin(), m.findings().end(),
                                                    [](const FindingInfo& f) { return !f.cross_rank; }) -
                                       m.findings().begin());
    QVERIFY(rank_finding < m.findings().size());
    const QString rank_details =
        QTextDocumentFragment::fromHtml(finding_details_html(m, rank_finding)).toPlainText();
    QVERIFY2(rank_details.contains("The saving above is this rank's own step. What the job gains:"),
             qPrintable(rank_details));
    QVERIFY2(rank_details.contains("What-if: the job's step, "), qPrintable(rank_details));

    // The Findings track: a lane a rule, not one a rank's finding (23 lanes pushed the job's path off the
    // screen). Each lane's blocks are one rule's, drawn by its most severe finding and named with how many
    // ranks it holds.
    std::map<std::string, std::vector<size_t>> of_rule;
    for (size_t i = 0; i < m.findings().size(); ++i) of_rule[m.findings()[i].rule].push_back(i);
    QCOMPARE(of_rule["launch-overhead"].size(), size_t(8));
    const auto severity = [&](size_t i) {
      const std::string& s = m.findings()[i].severity;
      return s == "high" ? 2 : s == "medium" ? 1 : 0;
    };
    int findings_track = -1;
    for (size_t t = 0; t < m.tracks().size(); ++t)
      if (m.tracks()[t].kind == TrackKind::Findings) findings_track = int(t);
    QVERIFY(findings_track >= 0);
    const Track& found = m.tracks()[size_t(findings_track)];
    QCOMPARE(found.lanes.size(), of_rule.size());
    std::set<std::string> lane_rules;
    for (const Lane& l : found.lanes) {
      QVERIFY(l.size() > 0);
      const uint32_t head = l.rows[0];
      const FindingInfo& h = m.findings()[head];
      QVERIFY(lane_rules.insert(h.rule).second);
      const auto& members = of_rule[h.rule];
      QCOMPARE(h.drawn_by, -1);
      QCOMPARE(size_t(h.drawn_for), members.size());
      for (size_t i = 0; i < l.size(); ++i) QCOMPARE(l.rows[i], head);
      for (size_t i : members) {
        QVERIFY(severity(i) <= severity(head));
        if (i != head) QCOMPARE(m.findings()[i].drawn_by, int32_t(head));
        // Selected in the panel, a rank's finding is outlined on its rule's lane.
        auto loc = m.locate({EventKind::Finding, uint32_t(i)});
        QVERIFY(loc && loc->track == findings_track && &found.lanes[size_t(loc->lane)] == &l);
      }
      const std::string name = m.name_of({EventKind::Finding, head});
      QCOMPARE(QString::fromStdString(name),
               members.size() > 1
                   ? QString("%1 · %2 ranks").arg(QString::fromStdString(h.rule)).arg(members.size())
                   : QString::fromStdString(h.rule));
    }
    QVERIFY(lane_rules.count("launch-overhead"));
    for (size_t i : of_rule["launch-overhead"])
      if (m.findings()[i].drawn_by < 0)
        QCOMPARE(QString::fromStdString(m.name_of({EventKind::Finding, uint32_t(i)})),
                 QString("launch-overhead · 8 ranks"));

    // The straggler: rank 7, its lane titled so and its process and GPU groups marked, no other rank's.
    QVERIFY(cr->straggler >= 0);
    QCOMPARE(a.ranks[size_t(cr->straggler)].rank, int64_t(7));
    QCOMPARE(QString::fromStdString(m.tracks()[size_t(cr->track[size_t(cr->straggler)])].title), QString("rank 7 · straggler"));
    std::set<std::string> marked;
    for (const auto& t : m.tracks())
      if (m.straggler_group(t.group)) marked.insert(t.group);
    QVERIFY(marked.count("GPU 7 rank 7 · Tesla V100-SXM2-32GB"));
    for (const auto& g : marked) QVERIFY2(g.find(" rank 7") != std::string::npos, g.c_str());
    QVERIFY(marked.size() >= 2);  // its process too

    // The shift maps each rank's own clock onto the merged one: every rank's step 10 starts where rank 0's does.
    for (size_t i = 0; i < 8; ++i) {
      QCOMPARE(a.ranks[i].rank, int64_t(i));
      QCOMPARE(cr->merged[i], int(i));
      QCOMPARE(a.ranks[i].steps.front().start_ns + cr->shift[i], a.ranks[0].steps.front().start_ns + cr->shift[0]);
    }
    QCOMPARE(cr->shift[0], int64_t(0));

    // The job's critical path starts on rank 7 (`analyze --json`: steps[0].critical_path.rounds[0].rank = 7), and
    // every segment lies at its round's time plus its rank's shift, on its rank's lane, where a click finds it.
    // Its 9 rounds run through ranks 7, 7, 7, 7, 7, 5, 5, 4, 4; the first is 3.212 ms of rank 7's own work.
    const auto& rounds = a.steps[0].path_rounds;
    std::vector<int64_t> through;
    for (const auto& rd : rounds) through.push_back(a.ranks[rd.rank].rank);
    QCOMPARE(through, (std::vector<int64_t>{7, 7, 7, 7, 7, 5, 5, 4, 4}));
    QCOMPARE(int(cr->path.size()), 17);  // 9 own-work stretches, 8 transfers (the tail has none)
    QVERIFY(std::abs(cr->path[0].end - cr->path[0].start - 3212 * US) < US);
    QCOMPARE(int(cr->path[0].rank), cr->straggler);
    QCOMPARE(cr->path[0].start, rounds[0].start_ns + cr->shift[rounds[0].rank]);
    QCOMPARE(check_path_drawn(m, *w.timeline()), cr->path.size());

    // The collectives rank 7 delayed: on every other rank, none on rank 7, each waiting its call minus rank 7's.
    QVERIFY(!cr->delayed.empty());
    std::set<uint32_t> waited;
    for (const auto& d : cr->delayed) {
      QVERIFY(int(d.rank) != cr->straggler);
      QVERIFY(d.wait_ns > 0);
      QCOMPARE(d.end - d.start, d.call->dur_ns);
      QCOMPARE(d.start, d.call->start_ns + cr->shift[d.rank]);
      waited.insert(d.rank);
      auto loc = m.locate({EventKind::RankWait, uint32_t(&d - cr->delayed.data())});
      QVERIFY(loc && loc->track == cr->track[d.rank] && loc->lane >= 1);
    }
    QCOMPARE(int(waited.size()), 7);
    // Rank 7 was last into the first four send/recv and the first all-reduce (docs/multi-rank.md "Proof").
    QCOMPARE(int(cr->delayed.size()), 5 * 7);

    // Selecting the straggler zooms to its first affected step across every rank; the path is drawn rank to rank.
    w.select_finding(0);
    const auto& step = m.findings()[0].ranges.front();
    const auto& vp = w.timeline()->viewport_range();
    QVERIFY(vp.t0 <= double(step.first) && vp.t1 >= double(step.second));
    QVERIFY(vp.t1 - vp.t0 <= 1.05 * double(step.second - step.first));
    QVERIFY(!w.timeline()->rank_path_links().empty());

    // A click on the path's first segment says which rank, what part and how long.
    const EventRef first{EventKind::RankPath, 0};
    const QRectF r = w.timeline()->rect_of(first);
    QTest::mouseClick(w.timeline()->viewport(), Qt::LeftButton, {}, r.center().toPoint());
    QVERIFY(w.timeline()->selected_event() && *w.timeline()->selected_event() == first);
    const QString clicked = w.details()->toPlainText();
    QVERIFY2(clicked.contains("rank 7 (the straggler)") && clicked.contains("own work") &&
                 clicked.contains(QString::fromStdString(format_duration(double(cr->path[0].end - cr->path[0].start)))),
             qPrintable(clicked));

    const std::string shot = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-ranks";
    std::filesystem::create_directories(shot);
    QVERIFY(w.grab().save(QString::fromStdString(shot + "/dlrm_ranks.png")));
    // And scrolled to the straggler's GPU, its header marked.
    const auto& layout = w.timeline()->layout();
    for (const auto& row : layout.rows())
      if (row.kind == TimelineLayout::RowKind::Header && row.group == "GPU 7 rank 7 · Tesla V100-SXM2-32GB")
        w.timeline()->verticalScrollBar()->setValue(row.y - 40);
    QVERIFY(w.timeline()->grab().save(QString::fromStdString(shot + "/dlrm_straggler_gpu.png")));
  }

  // Three ranks where rank 1 arrives late on even steps and rank 2 on odd ones: the path alternates between their
  // lanes, each step's first round on the late rank from its step start to 45 ms, the tail on rank 0.
  void pathAlternatesBetweenStragglers() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const int steps = 6;
    for (int rank = 0; rank < 3; ++rank) {
      auto busy = [rank](int i) -> int64_t { return (rank == 1 && i % 2 == 0) || (rank == 2 && i % 2 == 1) ? 45 * MS : 25 * MS; };
      store::write_store_atomically(job_rank(rank, steps, busy), (dir.path() + QString("/run-%1.db").arg(rank)).toStdString());
    }
    MainWindow w;
    QVERIFY(open_in(w, dir.path()));
    const TimelineModel& m = *w.timeline()->model();
    const CrossRank* cr = m.cross_rank();
    QVERIFY(cr);
    QCOMPARE(int(cr->analysis->steps.size()), steps);
    for (int k = 0; k < 3; ++k)
      QCOMPARE(m.trace().meta.at("ranks.shift." + std::to_string(k)), std::to_string(-7 * MS * k));
    // Per step: the late rank's own work (45 ms), its transfer (1 ms), then rank 0's tail (14 ms).
    QCOMPARE(int(cr->path.size()), 3 * steps);
    for (int i = 0; i < steps; ++i) {
      const uint32_t late = i % 2 == 0 ? 1 : 2;
      const int64_t t0 = 10 * MS + i * 60 * MS;  // every rank's step on the merged clock
      const RankPathSegment *own = &cr->path[size_t(3 * i)], *xfer = own + 1, *tail = own + 2;
      QCOMPARE(own->rank, late);
      QVERIFY(!own->transfer && xfer->transfer && !tail->transfer);
      QCOMPARE(own->start, t0);
      QCOMPARE(own->end, t0 + 45 * MS);
      QCOMPARE(xfer->rank, late);
      QCOMPARE(xfer->end, t0 + 46 * MS);
      QCOMPARE(tail->rank, 0u);
      QCOMPARE(tail->start, t0 + 46 * MS);
      QCOMPARE(tail->end, t0 + 60 * MS);
    }
    QCOMPARE(check_path_drawn(m, *w.timeline()), size_t(3 * steps));
    // Drawn across lanes: at the whole run, a link from each late rank's transfer down to rank 0's lane.
    w.timeline()->zoom_to_all();
    const auto links = w.timeline()->rank_path_links();
    QCOMPARE(int(links.size()), steps);
    for (int i = 0; i < steps; ++i) {
      const QRectF xfer = w.timeline()->rect_of({EventKind::RankPath, uint32_t(3 * i + 1)});
      const QRectF tail = w.timeline()->rect_of({EventKind::RankPath, uint32_t(3 * i + 2)});
      QCOMPARE(links[size_t(i)].p1(), QPointF(xfer.right(), xfer.center().y()));
      QCOMPARE(links[size_t(i)].p2(), QPointF(tail.left(), tail.center().y()));
      // From the late rank's lane up to rank 0's: the rows' distance.
      const auto& layout = w.timeline()->layout();
      const int late_track = cr->track[i % 2 == 0 ? 1 : 2];
      QCOMPARE(int(links[size_t(i)].p1().y() - links[size_t(i)].p2().y()),
               layout.row_of_track(late_track)->y - layout.row_of_track(cr->track[0])->y);
      QVERIFY(layout.row_of_track(late_track)->y > layout.row_of_track(cr->track[0])->y);
    }
    const std::string shot = std::string(STEPSCOPE_BINARY_DIR) + "/test-scratch/gui-ranks";
    std::filesystem::create_directories(shot);
    QVERIFY(w.grab().save(QString::fromStdString(shot + "/alternating.png")));
  }
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
    // First on the status line, where a narrow window cuts its end.
    const QString want =
        "Showing " + files[0] +
        " on its own (File ▸ Open for the others): not the ranks of one job: 2 flight saves of one "
        "process (pid 100 on gpu-7) — ";
    bool said = false;
    for (const QLabel* l : w.findChildren<QLabel*>()) said = said || l->text().startsWith(want);
    QVERIFY2(said, qPrintable(want));
  }
};

QTEST_MAIN(RanksTest)
#include "ranks_test.moc"
