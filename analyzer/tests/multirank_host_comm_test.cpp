// Collectives from any backend (issue 51): host-side collectives (the collector's torch.distributed hooks, Kineto's
// record_param_comms) count as communication where no NCCL/RCCL kernel is there, matched across ranks by process
// group and sequence number. Synthetic CPU jobs whose every figure is known by construction.
#include <catch2/catch.hpp>

#include <string>

#include "findings.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using test::find_finding;

namespace {

constexpr int64_t US = 1000, MS = 1000 * US;

// A CPU rank of DDP over gloo: per 60 ms step (optimizer marks), `busy` of host work, then the gradient
// all-reduce issued async; it completes on every rank `transfer` after the slowest rank issued it (at `slowest`).
// `extra_group`: this rank also runs an all-reduce of its own in group "7" at the step's start (others do not).
store::Trace cpu_rank(int rank, int world, int steps, int64_t busy, int64_t slowest, int64_t transfer,
                      bool extra_group) {
  store::Trace t;
  t.meta["rank"] = std::to_string(rank);
  t.meta["world_size"] = std::to_string(world);
  const int64_t step = 60 * MS;
  const auto domain = t.intern("stepscope.comm");
  const auto optimizer = t.intern("optimizer");
  for (int i = 0; i <= steps; ++i) {
    const int64_t t0 = 10 * MS + i * step;
    if (i < steps) {
      store::Step s;
      s.index = i, s.start = t0, s.end = t0 + step, s.source = optimizer, s.pid = 1, s.tid = 1;
      t.steps.push_back(s);
    }
    if (i == steps) break;
    store::Range r;
    r.pid = 1, r.tid = 1, r.domain = domain;
    r.start = t0 + busy, r.end = t0 + slowest + transfer;
    r.name = t.intern("all_reduce 546856B pg=0 seq=" + std::to_string(4 + i) + " async");
    t.ranges.push_back(r);
    if (extra_group) {
      r.start = t0 + 1 * MS, r.end = t0 + 2 * MS;
      r.name = t.intern("all_reduce 4B pg=7 seq=" + std::to_string(1 + i) + " sync");
      t.ranges.push_back(r);
    }
  }
  return t;
}

analyzer::MultiRankAnalysis cpu_job(int slow_rank, bool extra_group_on_rank2 = false, int64_t transfer = 1 * MS) {
  const int world = 3, steps = 5;
  const int64_t busy = 25 * MS, slow = 45 * MS;
  const int64_t slowest = slow_rank >= 0 ? slow : busy;
  std::vector<analyzer::RankResult> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(analyzer::analyze_rank(
        cpu_rank(r, world, steps, r == slow_rank ? slow : busy, slowest, transfer, extra_group_on_rank2 && r == 2),
        "rank" + std::to_string(r)));
  return analyzer::combine_ranks(std::move(ranks));
}

}  // namespace

TEST_CASE("the collector's collective ranges are parsed: kind, size, group, sequence number") {
  analyzer::HostCollective c;
  REQUIRE(analyzer::parse_host_collective("stepscope.comm", "all_reduce 546856B pg=0 seq=4 async", &c));
  CHECK(c.kind == analyzer::CollectiveKind::AllReduce);
  CHECK(c.op == "all_reduce");
  CHECK(c.bytes == 546856);
  CHECK(c.group == "0");
  CHECK(c.seq == 4);
  CHECK(c.async);
  REQUIRE(analyzer::parse_host_collective("stepscope.comm", "send 40B pg=3 seq=-1 async issued", &c));
  CHECK(c.kind == analyzer::CollectiveKind::SendRecv);
  CHECK(c.seq == -1);
  REQUIRE(analyzer::parse_host_collective("stepscope.comm", "barrier 0B pg=0 seq=9 sync", &c));
  CHECK(c.kind == analyzer::CollectiveKind::Other);
  CHECK_FALSE(c.async);
  CHECK_FALSE(analyzer::parse_host_collective("", "all_reduce 4B pg=0 seq=1 sync", &c));  // an NVTX range

  CHECK(analyzer::host_collective_kind("c10d::allreduce_") == analyzer::CollectiveKind::AllReduce);
  CHECK(analyzer::host_collective_kind("nccl:all_to_all") == analyzer::CollectiveKind::AllToAll);
  CHECK(analyzer::host_collective_kind("gloo:_reduce_scatter_base") == analyzer::CollectiveKind::ReduceScatter);
  CHECK(analyzer::host_collective_kind("c10d::_allgather_base_") == analyzer::CollectiveKind::AllGather);
  CHECK(analyzer::host_collective_kind("c10d::broadcast_") == analyzer::CollectiveKind::Broadcast);
  CHECK(analyzer::host_collective_kind("c10d::reduce_") == analyzer::CollectiveKind::Reduce);
  CHECK(analyzer::host_collective_kind("c10d::barrier") == analyzer::CollectiveKind::Other);
}

TEST_CASE("a gloo rank that issues its all-reduce 20 ms late is the straggler, and the job's step without it is predicted") {
  const auto m = cpu_job(1);
  REQUIRE(m.ranks.size() == 3);
  CHECK(m.ranks[0].comm_source == "torch.distributed");
  REQUIRE(m.steps.size() == 5);
  for (const auto& s : m.steps) {
    CHECK(s.matched_collectives == 1);
    CHECK(s.caused_ns[1] == 20 * MS);  // the others' 21 ms against its 1 ms
    CHECK(s.wait_ns[0] == 20 * MS);
    CHECK(s.wait_ns[1] == 0);
  }
  const auto* st = find_finding(m, "straggler");
  REQUIRE(st);
  CHECK(st->est_savings_us_per_step == Approx(20000.0));
  // No GPU work: what it did longer is host time, by exactly the 20 ms (its exposed all-reduce is 1 ms, the
  // others' 21 ms: the all-reduce is its step's only collective, so all of it is waited for).
  CHECK(st->summary.find("rank 1 is the straggler") != std::string::npos);
  CHECK(st->summary.find("its host time is 20.00 ms longer than the median rank's") != std::string::npos);
  const auto& mine = *analyzer::find_step(m.ranks[1], 2);
  CHECK(mine.compute_ns == 0);
  CHECK(mine.exposed_comm_ns == 1 * MS);
  CHECK(mine.host_ns == 59 * MS);
  CHECK(analyzer::find_step(m.ranks[0], 2)->host_ns == 39 * MS);
  // The straggler's exposed all-reduce, 1 ms of a 60 ms step, is under exposed-comm's 5%.
  CHECK_FALSE(find_finding(m, "exposed-comm"));
  CHECK(m.job_step_ns == 60 * MS);
  REQUIRE(m.what_if.size() == 1);
  CHECK(m.what_if[0].rank == 1);
  CHECK(m.what_if[0].job_step_ns == 40 * MS);
  const std::string json = analyzer::multirank_to_json(m);
  CHECK(json.find(R"("job_step_us":60000)") != std::string::npos);
  CHECK(json.find(R"("rank":1,"job_step_us":40000)") != std::string::npos);
  CHECK(json.find(R"("name":"all_reduce","bytes":546856,"group":"0","seq":6)") != std::string::npos);
}

TEST_CASE("equal gloo ranks: the all-reduce that no host work hides is exposed-comm, no straggler") {
  const auto m = cpu_job(-1, false, 10 * MS);
  CHECK_FALSE(find_finding(m, "straggler"));
  CHECK(m.what_if.empty());
  const auto* ec = find_finding(m, "exposed-comm");
  REQUIRE(ec);
  CHECK(ec->est_savings_us_per_step == Approx(10000.0));  // the 10 ms transfer each step, on every rank
  CHECK(ec->summary.find("all-reduce") != std::string::npos);
  CHECK(analyzer::find_step(m.ranks[0], 3)->exposed_comm_ns == 10 * MS);
  CHECK(cpu_job(-1, false, 1 * MS).findings.empty());  // a 1 ms transfer, of a 60 ms step: under the 5%
}

TEST_CASE("an async bucket is hidden by the host work until its thread issues the next one") {
  // DDP's two buckets: A issued at 20 ms (done at 40), B at 30 ms (done at 42). The thread computed B's gradients
  // from 20 to 30 ms; after issuing B it waited. Exposed: [30, 42) = 12 ms of the 22 ms of communication.
  store::Trace t;
  t.meta["rank"] = "0";
  store::Step s;
  s.index = 0, s.start = 0, s.end = 60 * MS, s.source = t.intern("optimizer"), s.pid = 1, s.tid = 1;
  t.steps.push_back(s);
  s.index = 1, s.start = 60 * MS, s.end = 120 * MS;
  t.steps.push_back(s);
  store::Range r;
  r.pid = 1, r.tid = 1, r.domain = t.intern("stepscope.comm");
  r.start = 20 * MS, r.end = 40 * MS, r.name = t.intern("all_reduce 100B pg=0 seq=1 async");
  t.ranges.push_back(r);
  r.start = 30 * MS, r.end = 42 * MS, r.name = t.intern("all_reduce 100B pg=0 seq=2 async");
  t.ranges.push_back(r);
  const auto rank = analyzer::analyze_rank(t, "rank0");
  const auto* st = analyzer::find_step(rank, 0);
  REQUIRE(st);
  CHECK(st->comm_ns == 22 * MS);
  CHECK(st->exposed_comm_ns == 12 * MS);
  REQUIRE(st->collectives.size() == 2);
  CHECK(st->collectives[0].exposed_ns == 10 * MS);  // [30, 40)
  CHECK(st->collectives[1].exposed_ns == 12 * MS);
}

TEST_CASE("collectives match by process group and sequence number, not by order") {
  // Rank 2 also runs a small all-reduce in its own group 7 at each step's start. By order, its first all-reduce
  // would be matched with the others' gradient all-reduce; by (group, sequence number) it is left out.
  const auto m = cpu_job(1, true);
  REQUIRE(m.steps.size() == 5);
  for (const auto& s : m.steps) {
    CHECK(s.matched_collectives == 1);
    CHECK(s.caused_ns[1] == 20 * MS);
    CHECK(s.caused_ns[2] == 0);
  }
  bool noted = false;
  for (const auto& n : m.notes)
    noted = noted || n.find("5 all-reduce collective(s) were recorded on some ranks only") != std::string::npos;
  CHECK(noted);
}

TEST_CASE("Kineto's record_param_comms ranges are collectives, their kind from the c10d op around them") {
  std::vector<analyzer::RankResult> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    store::Trace t;
    t.meta["rank"] = std::to_string(rank);
    t.meta["world_size"] = "2";
    for (int i = 0; i < 3; ++i) {
      const int64_t t0 = 10 * MS + i * 50 * MS;
      store::Step s;
      s.index = i, s.start = t0, s.end = t0 + 50 * MS, s.source = t.intern("optimizer"), s.pid = 1, s.tid = 1;
      t.steps.push_back(s);
      store::Range r;
      r.pid = 1, r.tid = 1, r.source = store::RangeSource::Op;
      const int64_t issue = t0 + (rank == 0 ? 30 : 10) * MS;  // rank 0 issues 20 ms later
      r.start = issue, r.end = t0 + 41 * MS, r.name = t.intern("c10d::allreduce_");
      t.ranges.push_back(r);
      r.start = issue + 10 * US, r.end = t0 + 41 * MS - 10 * US, r.name = t.intern("record_param_comms");
      t.ranges.push_back(r);
    }
    ranks.push_back(analyzer::analyze_rank(t, "rank" + std::to_string(rank)));
  }
  const auto m = analyzer::combine_ranks(std::move(ranks));
  REQUIRE(m.ranks.size() == 2);
  CHECK(m.ranks[0].comm_source == "record_param_comms");
  const auto& c = analyzer::find_step(m.ranks[0], 1)->collectives;
  REQUIRE(c.size() == 1);
  CHECK(c[0].kind == analyzer::CollectiveKind::AllReduce);
  CHECK(c[0].name == "c10d::allreduce_");
  CHECK(analyzer::find_step(m.ranks[0], 1)->host_call(c[0]).seq == -1);  // matched by order
  REQUIRE(m.steps.size() == 3);
  CHECK(m.steps[1].caused_ns[0] == 20 * MS);
  const auto* st = find_finding(m, "straggler");
  REQUIRE(st);
  CHECK(st->summary.find("rank 0 is the straggler") != std::string::npos);
}

TEST_CASE("a real gloo rank's Kineto trace: its gloo:all_reduce ranges are its collectives") {
  // hta/cpu_only.json.gz: rank 34 of 300, CPU training over gloo, 5 ProfilerSteps; each step's two gradient
  // all-reduces (DDP buckets, issued by two c10d::allreduce_ ops on the main thread) run on gloo's worker threads as
  // "gloo:all_reduce" ranges (the first 173209.713 us, inside ProfilerStep#551); no record_param_comms.
  STEPSCOPE_REQUIRE_TRACES();
  const auto t = analyzer::load_trace(test::traces_dir() + "/hta/cpu_only.json.gz");
  const auto r = analyzer::analyze_rank(t, "cpu_only");
  CHECK(r.comm_source == "gloo");
  CHECK(r.rank == 34);
  size_t all_reduces = 0;
  bool first = false;
  for (const auto& s : r.steps)
    for (const auto& c : s.collectives) {
      CHECK(c.kind == analyzer::CollectiveKind::AllReduce);
      CHECK(c.name == "gloo:all_reduce");
      ++all_reduces;
      first = first || std::llabs(c.dur_ns - 173'209'713) <= 1;
    }
  CHECK(first);
  CHECK(all_reduces == 10);  // two buckets a step, as the two c10d::allreduce_ ops that issue them
}
