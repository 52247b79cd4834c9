// Issue 51's validation against a measured cure: a real torchrun job on CPU (DDP over gloo, 3 ranks) where rank 1
// spends a known 40 ms every step in read_slow_shard(), recorded with `record -o run-%r.db --data-wait-func
// read_slow_shard`: a wait for input on one rank. Every rank also sleeps 40 ms a step (--io-ms, not marked) and the
// model is small (--hidden 32): 3 ranks share 2 cores here, and a rank that sleeps frees a core for the others, so a
// compute-bound job runs faster beside its straggler than without it (the what-if, which takes the others' pace as
// measured, then falls short of the cure: docs/multi-rank.md's validation table). The collector's torch.distributed
// hooks give the gradient all-reduces; `analyze` names rank 1 as the straggler with its longer data wait, and
// predicts the job's step (a) with rank 1 at the median rank's pace and (b) with rank 1's own input-bound finding
// cured, each of which must land within 15% of the same job measured without the extra wait; the job's critical
// path runs through rank 1's data wait.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "python_test_support.h"
#include "test_support.h"

using namespace stepscope;
using namespace stepscope::test;

namespace {

const std::string kCli = STEPSCOPE_CLI;
const std::string kVenv = STEPSCOPE_PYTHON_VENV;
constexpr double kSlowMs = 40.0;

std::string missing_torchrun() {
  const std::string py = kVenv + "/bin/python";
  if (run_shell(shell_quote(py) + " -c 'import torch.distributed' >/dev/null 2>&1").status != 0)
    return "the venv python " + py + " cannot import torch.distributed (run scripts/python-env.sh)";
  if (!std::filesystem::exists(kVenv + "/bin/torchrun")) return "no torchrun in " + kVenv + "/bin";
  if (run_shell(shell_quote(py) +
                " -c 'import torch.distributed as d, sys; sys.exit(0 if hasattr(d.ProcessGroup, "
                "\"register_pre_hook\") else 1)' >/dev/null 2>&1")
          .status != 0)
    return "this torch has no ProcessGroup.register_pre_hook: its collectives are not recorded";
  return "";
}

// `record` of the 3-rank job into `dir`; returns `analyze --json dir`.
std::string record_job(const ScratchDir& scratch, const std::string& sub, const std::string& flags) {
  // The straggler's extra time is a wait for input (the function is only called on rank 1 of the slow run).
  const std::string dir = scratch.file(sub);
  std::filesystem::create_directories(dir);
  const auto r = run_shell("cd " + shell_quote(dir) + " && " + shell_quote(kCli) + " record --cpu-hz 50 --data-wait-func read_slow_shard -o run-%r.db -- " +
                           shell_quote(kVenv + "/bin/torchrun") + " --standalone --nproc_per_node 3 " +
                           shell_quote(source_dir() + "/samples/cpu/python_ddp_gloo.py") + " --steps 20 --hidden 32 --io-ms 40 " + flags +
                           " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (int rank : {0, 1, 2})
    CHECK(r.output.find("rank " + std::to_string(rank) + " of 3 (local " + std::to_string(rank) + "): 20 steps") !=
          std::string::npos);
  const auto a = run_shell(shell_quote(kCli) + " analyze --json " + shell_quote(dir) + " 2>/dev/null");
  INFO(a.output);
  REQUIRE(a.status == 0);
  return a.output;
}

}  // namespace

TEST_CASE("gloo ranks: the straggler that sleeps 40 ms a step is named, and the job without it is predicted",
          "[framework]") {
  if (auto why = missing_torchrun(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir scratch("python_straggler");
  const std::string slow = record_job(scratch, "slow", "--slow-rank 1 --slow-ms " + std::to_string(int(kSlowMs)));
  const std::string base = record_job(scratch, "base", "");
  INFO("slow: " << slow.substr(0, 400));

  simdjson::dom::parser p1, p2;
  simdjson::dom::element s = p1.parse(slow), b = p2.parse(base);
  REQUIRE(std::string(std::string_view(s["schema"])) == "stepscope.multirank/1");
  // The ranks' collectives come from the hooks: DDP's gradient all-reduce, matched by group and sequence number.
  for (auto r : s["ranks"].get_array()) CHECK(std::string(std::string_view(r["comm_source"])) == "torch.distributed");
  int64_t matched = 0;
  for (auto st : s["steps"].get_array()) matched += int64_t(st["matched_collectives"]);
  CHECK(matched >= 18);

  // The straggler: rank 1, what it did longer is its wait for input, about the 40 ms it slept.
  bool found = false;
  for (auto f : s["findings"].get_array()) {
    if (std::string(std::string_view(f["rule"])) != "straggler") continue;
    found = true;
    const std::string summary{std::string_view(f["summary"])};
    INFO(summary);
    CHECK(summary.rfind("rank 1 is the straggler", 0) == 0);
    CHECK(summary.find("its data wait is") != std::string::npos);
    const double data_ms = double(f["evidence"]["longer_than_median_us"]["data_wait"]) / 1000.0;
    CHECK(data_ms > 0.75 * kSlowMs);
    CHECK(data_ms < 1.25 * kSlowMs);
  }
  CHECK(found);

  // The job's critical path runs through rank 1's data wait: about the 40 ms a step.
  double rank1_wait_ms = 0;
  for (auto part : s["critical_path"]["ranks"].get_array())
    if (int64_t(part["rank"]) == 1) rank1_wait_ms = double(part["data_wait_us"]) / 1000.0;
  CHECK(rank1_wait_ms > 0.75 * kSlowMs);
  CHECK(rank1_wait_ms < 1.25 * kSlowMs);

  // What-if against the measured cure: the job's step (a) with rank 1 at the median rank's pace, (b) with rank 1's
  // input-bound finding cured, against the same job without the extra wait.
  double pace = -1, cure = -1;
  for (auto w : s["what_if"].get_array()) {
    const std::string rule{std::string_view(w["rule"])};
    if (rule == "straggler" && int64_t(w["rank"]) == 1) pace = double(w["job_step_us"]);
    if (rule == "input-bound" && int64_t(w["rank"]) == 1) cure = double(w["job_step_us"]);
  }
  const double measured = double(b["job_step_us"]);
  const double with_sleep = double(s["job_step_us"]);
  INFO("job step with the extra wait " << with_sleep << " us; without it: predicted (a) " << pace << " us, (b) "
                                       << cure << " us, measured " << measured << " us");
  CHECK(with_sleep > measured + 0.5 * kSlowMs * 1000.0);  // the wait did slow the job
  CHECK(pace > 0.85 * measured);
  CHECK(pace < 1.15 * measured);
  CHECK(cure > 0.85 * measured);
  CHECK(cure < 1.15 * measured);
}
