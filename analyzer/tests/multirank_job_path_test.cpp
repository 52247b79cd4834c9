// The job's critical path across ranks and the what-if of each rank-level cure (issue 51, items 2 and 3):
// synthetic CPU jobs whose path is known by construction, and the 8 real DLRM ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>

#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

constexpr int64_t US = 1000, MS = 1000 * US;
constexpr int64_t kStep = 60 * MS, kTransfer = 1 * MS;

// A CPU rank of a synchronous job: per 60 ms step, `busy(i)` of own work (of it `wait(i)` waiting for input, from
// the step's start), then a sync all-reduce that completes `kTransfer` after the slowest rank issued it
// (`slowest(i)`), then host work to the step's end.
template <class Busy, class Wait, class Slowest>
store::Trace rank_trace(int rank, int world, int steps, Busy busy, Wait wait, Slowest slowest) {
  store::Trace t;
  t.meta["rank"] = std::to_string(rank);
  t.meta["world_size"] = std::to_string(world);
  const auto domain = t.intern("stepscope.comm"), optimizer = t.intern("optimizer"), api = t.intern("api");
  for (int i = 0; i < steps; ++i) {
    const int64_t t0 = 10 * MS + i * kStep;
    store::Step s;
    s.index = i, s.start = t0, s.end = t0 + kStep, s.source = optimizer, s.pid = 1, s.tid = 1;
    t.steps.push_back(s);
    if (wait(i) > 0) t.data_waits.push_back({t0, t0 + wait(i), 1, 1, api});
    store::Range r;
    r.pid = 1, r.tid = 1, r.domain = domain;
    r.start = t0 + busy(i), r.end = t0 + slowest(i) + kTransfer;
    r.name = t.intern("all_reduce 4096B pg=0 seq=" + std::to_string(i) + " sync");
    t.ranges.push_back(r);
  }
  return t;
}

int64_t path_sum(const analyzer::AlignedStep& s) {
  int64_t n = 0;
  for (const auto& p : s.path) n += p.total();
  return n;
}

}  // namespace

TEST_CASE("two ranks straggling on alternate steps: the job's critical path alternates, and its parts add up") {
  const int world = 3, steps = 6;
  // Rank 1 takes 45 ms before the all-reduce on even steps, rank 2 on odd ones; every other time 25 ms.
  auto busy_of = [](int rank) {
    return [rank](int i) -> int64_t { return (rank == 1 && i % 2 == 0) || (rank == 2 && i % 2 == 1) ? 45 * MS : 25 * MS; };
  };
  auto none = [](int) -> int64_t { return 0; };
  auto slowest = [](int) -> int64_t { return 45 * MS; };
  std::vector<analyzer::RankResult> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(analyzer::analyze_rank(rank_trace(r, world, steps, busy_of(r), none, slowest), "rank" + std::to_string(r)));
  const auto m = analyzer::combine_ranks(std::move(ranks));
  REQUIRE(m.steps.size() == 6);
  for (const auto& s : m.steps) {
    INFO("step " << s.index);
    const size_t late = s.index % 2 == 0 ? 1 : 2, other = 3 - late;
    // Round 1: the late rank's 45 ms of host work, then the all-reduce's 1 ms transfer (it waited for nobody);
    // then the 14 ms to the step's end, every rank's alike (the lowest rank's on the tie).
    CHECK(s.path[late].host_ns == 45 * MS);
    CHECK(s.path[late].comm_ns == kTransfer);
    CHECK(s.path[late].compute_ns == 0);
    CHECK(s.path[0].host_ns == 14 * MS);
    CHECK(s.path[other].total() == 0);
    CHECK(s.path_ns == kStep);
    CHECK(path_sum(s) == s.path_ns);
    // Where it runs, on each rank's own clock: the late rank from its step's start to its issue at 45 ms, the
    // transfer to 46 ms; then rank 0's tail to its step's end.
    const int64_t t0 = 10 * MS + s.index * kStep;
    REQUIRE(s.path_rounds.size() == 2);
    CHECK(s.path_rounds[0].rank == late);
    CHECK(s.path_rounds[0].start_ns == t0);
    CHECK(s.path_rounds[0].arrive_ns == t0 + 45 * MS);
    CHECK(s.path_rounds[0].end_ns == t0 + 46 * MS);
    CHECK(s.path_rounds[1].rank == 0);
    CHECK(s.path_rounds[1].start_ns == t0 + 46 * MS);
    CHECK(s.path_rounds[1].end_ns == t0 + kStep);
  }
  // The matched all-reduce of each step, as combine_ranks matched it (what the GUI marks as delayed): the late
  // rank's call lasts the 1 ms transfer, the others' their 20 ms wait for it plus the transfer.
  for (const auto& s : m.steps) {
    const auto matched = analyzer::matched_collectives(m, s.index);
    REQUIRE(matched.size() == 1);
    const size_t late = s.index % 2 == 0 ? 1 : 2;
    CHECK(matched[0].last == late);
    for (size_t r = 0; r < 3; ++r) CHECK(matched[0].calls[r]->dur_ns == (r == late ? kTransfer : 20 * MS + kTransfer));
    CHECK(matched[0].calls[late] == &m.ranks[late].steps[size_t(s.index)].collectives[0]);
  }
  CHECK(analyzer::matched_collectives(m, 99).empty());
  // Over the job: rank 1 on the path 3 steps of 6, rank 2 the other 3; means per step.
  CHECK(m.job_path_ns == kStep);
  CHECK(m.job_path[1].host_ns == 45 * MS / 2);
  CHECK(m.job_path[2].host_ns == 45 * MS / 2);
  CHECK(m.job_path[0].host_ns == 14 * MS);
  const std::string json = analyzer::multirank_to_json(m);
  CHECK(json.find(R"("critical_path":{"dur_us":60000,"ranks":[{"rank":1,"compute_us":0,"data_wait_us":0,"host_us":45000,"comm_us":1000,"share":0.7666666666666667},{"rank":0,)") !=
        std::string::npos);
  const std::string text = analyzer::render_multirank_report(m, analyzer::ReportFormat::Text);
  CHECK(text.find("The job's critical path, 60.000 ms a step (mean): rank 1 host 37.5%, rank 2 host 37.5%, "
                  "rank 0 host 23.3%") != std::string::npos);
}

TEST_CASE("a rank-level cure is replayed on the job: on the critical path it buys the job its saving, off it nothing") {
  const int world = 3, steps = 6;
  // Rank 1 waits 20 ms for its batch, then works 25 ms: it reaches the all-reduce last, 45 ms into every step.
  // Rank 0 waits 10 ms of its 25: input-bound too, but it is never the last to arrive.
  auto busy = [](int rank) { return [rank](int) -> int64_t { return rank == 1 ? 45 * MS : 25 * MS; }; };
  auto wait = [](int rank) {
    return [rank](int) -> int64_t { return rank == 1 ? 20 * MS : rank == 0 ? 10 * MS : 0; };
  };
  auto slowest = [](int) -> int64_t { return 45 * MS; };
  std::vector<analyzer::RankResult> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(analyzer::analyze_rank(rank_trace(r, world, steps, busy(r), wait(r), slowest), "rank" + std::to_string(r)));
  const auto m = analyzer::combine_ranks(std::move(ranks));
  REQUIRE(m.steps.size() == 6);
  CHECK(m.steps[3].path[1].data_wait_ns == 20 * MS);
  CHECK(m.steps[3].path[1].host_ns == 25 * MS);
  CHECK(m.job_step_ns == kStep);

  const analyzer::RankCure* on_path = nullptr;
  const analyzer::RankCure* off_path = nullptr;
  for (const auto& c : m.ranks[1].cures)
    if (c.rule == "input-bound") on_path = &c;
  for (const auto& c : m.ranks[0].cures)
    if (c.rule == "input-bound") off_path = &c;
  REQUIRE(on_path);
  REQUIRE(off_path);
  CHECK(on_path->part == analyzer::RankCure::Part::DataWait);
  REQUIRE(on_path->saving_ns > 0);
  REQUIRE(on_path->saving_ns <= 20 * MS);
  const analyzer::MultiRankAnalysis::WhatIf* cure1 = nullptr;
  const analyzer::MultiRankAnalysis::WhatIf* cure0 = nullptr;
  for (const auto& w : m.what_if) {
    if (w.rule == "input-bound" && w.rank == 1) cure1 = &w;
    if (w.rule == "input-bound" && w.rank == 0) cure0 = &w;
  }
  REQUIRE(cure1);
  REQUIRE(cure0);
  // Rank 1 arrives earlier by what the cure takes off its wait, and no other rank is later than 25 ms.
  CHECK(cure1->job_step_ns == kStep - on_path->saving_ns);
  CHECK(cure1->rank_saving_ns == on_path->saving_ns);
  CHECK(cure0->job_step_ns == kStep);
  // The straggler's pace first, then the cures, the one that buys the job most first.
  REQUIRE(m.what_if.size() >= 3);
  CHECK(m.what_if[0].rule == "straggler");
  CHECK(m.what_if[1].rank == 1);
  const std::string text = analyzer::render_multirank_report(m, analyzer::ReportFormat::Text);
  CHECK(text.find("The job's critical path, 60.000 ms a step (mean): rank 1 host 41.7%, rank 1 data wait 33.3%, "
                  "rank 0 host 23.3%, rank 1 communication 1.7%\n") != std::string::npos);
  CHECK(text.find("What-if: the job's step, 60.000 ms (median), would be 40.000 ms with rank 1 at the median rank's "
                  "pace (the straggler's own delay removed)\nWhat-if: the job's step, 60.000 ms (median), would be "
                  "40.000 ms with input-bound cured on rank 1 (which saves that rank 20.000 ms a step)\n(") !=
        std::string::npos);
  CHECK(text.find("What-if: the job's step, 60.000 ms (median), would be 40.000 ms with input-bound cured on rank 1 "
                  "(which saves that rank 20.000 ms a step)\n") != std::string::npos);
  CHECK(text.find("with input-bound cured on rank 0") == std::string::npos);  // buys nothing: left to the JSON
  CHECK(text.find("all of them in the JSON, analyze --json or report -f json)") != std::string::npos);
  // Markdown: one list item a line (lines joined by a bare newline are one paragraph).
  const std::string md = analyzer::render_multirank_report(m, analyzer::ReportFormat::Markdown);
  CHECK(md.find("\n- The job's critical path, 60.000 ms a step (mean): rank 1 host 41.7%") != std::string::npos);
  CHECK(md.find("\n- What-if: the job's step, 60.000 ms (median), would be 40.000 ms with rank 1 at the median rank's "
                "pace (the straggler's own delay removed)\n- What-if: ") != std::string::npos);
  CHECK(md.find("\n- (") != std::string::npos);
}

TEST_CASE("the 8 DLRM ranks: the critical path runs through rank 7, and its communication is the critical exposed time") {
  const std::string dir = test::trace_path("param");
  if (!std::filesystem::exists(dir)) {
    WARN("SKIPPED: shared traces not present: " << test::traces_dir());
    return;
  }
  const auto files = analyzer::expand_rank_inputs(std::vector<std::string>{dir});
  const auto m = analyzer::analyze_ranks(files);
  REQUIRE(m.ranks.size() == 8);
  REQUIRE(m.steps.size() == 1);
  const auto& s = m.steps[0];
  CHECK(path_sum(s) == s.path_ns);
  int64_t comm = 0;
  size_t most = 0;
  for (size_t r = 0; r < 8; ++r) {
    comm += s.path[r].comm_ns;
    if (s.path[r].total() > s.path[most].total()) most = r;
  }
  CHECK(m.ranks[most].rank == 7);  // the straggler
  // One step, every collective fully exposed on its last arrival: the path's transfers are exactly the critical
  // exposed collective time (217 µs, tests/reference/multirank_expected.tsv).
  CHECK(comm == s.critical_exposed_ns);
  CHECK(s.path_ns <= s.max_dur_ns);
  // The what-if keeps the straggler's figure (docs/multi-rank.md) and adds the rank-level cures after it.
  REQUIRE(m.what_if.size() > 1);
  CHECK(m.what_if[0].rule == "straggler");
  CHECK(m.what_if[0].rank == 7);
  for (size_t i = 2; i < m.what_if.size(); ++i) CHECK(m.what_if[i - 1].job_step_ns <= m.what_if[i].job_step_ns);
}

TEST_CASE("the 8 DLRM ranks on one timeline take the ranks' own verdicts, not the merged trace's") {
  STEPSCOPE_REQUIRE_TRACES();
  const auto files = analyzer::expand_rank_inputs(std::vector<std::string>{test::trace_path("param")});
  const store::Trace merged = analyzer::merge_ranks_for_timeline(files);
  analyzer::Analysis a = analyzer::analyze(merged);
  // As one program: 8 GPUs read as one busy GPU, and rank-level causes vanish or appear.
  auto has = [](const analyzer::Analysis& x, const std::string& rule) {
    return std::any_of(x.findings.begin(), x.findings.end(), [&](const auto& f) { return f.rule == rule; });
  };
  REQUIRE(!a.steps.empty());
  CHECK(a.steps[0].bound == analyzer::Bound::Gpu);
  CHECK_FALSE(has(a, "launch-overhead"));
  analyzer::MultiRankOptions options;
  options.keep_rank_findings = true;
  const auto m = analyzer::analyze_ranks(files, options);
  REQUIRE(m.ranks.size() == 8);
  analyzer::adopt_rank_verdicts(a, m, merged.meta);
  // Every rank's own analysis says launch-bound with a high launch-overhead finding (analyze on each file).
  for (const auto& s : a.steps) CHECK(s.bound == analyzer::Bound::Launch);
  int launch = 0;
  for (const auto& f : a.findings) {
    INFO(f.summary);
    CHECK(f.summary.rfind("rank ", 0) == 0);
    CHECK(f.rule != "no-tensor-cores");
    if (f.rule == "launch-overhead") {
      ++launch;
      CHECK(f.severity == store::Severity::High);
    }
  }
  CHECK(launch == 8);
  // Ordered by total saving, and each finding's ranges on the merged clock: inside the merged trace's span.
  for (size_t i = 1; i < a.findings.size(); ++i)
    CHECK(a.findings[i - 1].est_savings_us_per_step * double(a.findings[i - 1].steps.size()) >=
          a.findings[i].est_savings_us_per_step * double(a.findings[i].steps.size()));
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& k : merged.kernels) lo = std::min(lo, k.start), hi = std::max(hi, k.end);
  for (const auto& r : merged.ranges) lo = std::min(lo, r.start), hi = std::max(hi, r.end);
  for (const auto& f : a.findings)
    for (const auto& r : f.ranges) {
      CHECK(r.start_ns >= lo);
      CHECK(r.end_ns <= hi);
    }
}
