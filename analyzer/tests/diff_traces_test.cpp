// Acceptance diffs on real traces recorded by others (../shared/traces), through the library and through the
// `stepscope diff` command (exit codes, output files, JUnit parsed by an independent XML parser).
#include <catch2/catch.hpp>

#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "report_test_fixtures.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using analyzer::Verdict;

namespace {

const std::string kW4 = "kineto/resnet50_num_workers_4.json.gz";
const std::string kW0 = "kineto/resnet50_num_workers_0.json.gz";
const std::string kA100 = "hta/trace_diff_control_a100.json.gz";
const std::string kV100 = "hta/trace_diff_test_v100.json.gz";

analyzer::DiffRun run_of(const std::string& rel) {
  std::string path = test::trace_path(rel);
  return analyzer::make_diff_run(path, analyzer::load_trace(path));
}

const analyzer::MetricDiff& metric(const analyzer::DiffResult& d, const std::string& id) {
  for (const auto& m : d.metrics)
    if (m.id == id) return m;
  FAIL("no metric " << id);
  throw 0;
}

const analyzer::FindingDiff* finding(const analyzer::DiffResult& d, const std::string& rule) {
  for (const auto& f : d.findings)
    if (f.rule == rule) return &f;
  return nullptr;
}

std::string stepscope_binary() { return test::binary_dir() + "/cli/stepscope"; }

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("resnet50 num_workers 4 -> 0: step time and data wait regress, input-bound appears") {
  STEPSCOPE_REQUIRE_TRACES();
  auto d = analyzer::diff_runs({run_of(kW4)}, {run_of(kW0)});
  const auto& st = metric(d, "step_time_median");
  CHECK(st.verdict == Verdict::Regression);
  // ProfilerStep medians over steps 6-10 (ms): 126.3 → 176.5, computed from the JSON.
  CHECK_THAT(st.change, Catch::Matchers::WithinAbs(176.5 / 126.3 - 1, 0.03));
  CHECK(st.tested);
  CHECK(st.significant);
  CHECK(metric(d, "data_wait_share").verdict == Verdict::Regression);
  CHECK(metric(d, "data_wait_share").change > 0.25);
  CHECK(metric(d, "gpu_busy_share").verdict == Verdict::Regression);
  const auto* f = finding(d, "input-bound");
  REQUIRE(f);
  CHECK(f->status == analyzer::FindingDiff::Status::Appeared);
  CHECK(f->new_severity == store::Severity::High);
  CHECK(d.exit_code() == 1);
}

TEST_CASE("resnet50 num_workers 0 -> 4: improvements, exit 0") {
  STEPSCOPE_REQUIRE_TRACES();
  auto d = analyzer::diff_runs({run_of(kW0)}, {run_of(kW4)});
  CHECK(metric(d, "step_time_median").verdict == Verdict::Improvement);
  CHECK(metric(d, "data_wait_share").verdict == Verdict::Improvement);
  CHECK(metric(d, "gpu_busy_share").verdict == Verdict::Improvement);
  for (const auto& m : d.metrics) CHECK(m.verdict != Verdict::Regression);
  const auto* f = finding(d, "input-bound");
  REQUIRE(f);
  CHECK(f->status == analyzer::FindingDiff::Status::Disappeared);
  CHECK(d.exit_code() == 0);
}

TEST_CASE("a trace against itself is unchanged everywhere") {
  STEPSCOPE_REQUIRE_TRACES();
  auto r = run_of(kW0);
  auto d = analyzer::diff_runs({r}, {r});
  for (const auto& m : d.metrics) {
    CHECK(m.verdict == Verdict::Unchanged);
    CHECK(m.change == 0);
  }
  CHECK(d.kernel_changes.empty());
  CHECK(d.kernels_added.empty());
  CHECK(d.kernels_removed.empty());
  for (const auto& f : d.findings) CHECK(f.status == analyzer::FindingDiff::Status::Persisting);
  CHECK(d.exit_code() == 0);
}

TEST_CASE("hta trace_diff A100 -> V100: kernel-level changes match an independent count") {
  STEPSCOPE_REQUIRE_TRACES();
  auto d = analyzer::diff_runs({run_of(kA100)}, {run_of(kV100)});
  // Counted in Python from the JSON: kernels starting inside ProfilerStep ranges, by name, per step.
  CHECK(d.kernels_added_total == 27);
  CHECK(d.kernels_removed_total == 66);
  REQUIRE_FALSE(d.kernels_added.empty());
  CHECK(d.kernels_added[0].name.rfind("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1", 0) == 0);
  CHECK_THAT(d.kernels_added[0].new_us_per_step, Catch::Matchers::WithinRel(10022.3, 0.01));
  REQUIRE_FALSE(d.kernels_removed.empty());
  CHECK_THAT(d.kernels_removed[0].base_us_per_step, Catch::Matchers::WithinRel(6030.0, 0.01));
  REQUIRE_FALSE(d.kernel_changes.empty());
  CHECK(d.kernel_changes[0].name == "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)");
  CHECK_THAT(d.kernel_changes[0].delta_us_per_step(), Catch::Matchers::WithinRel(9867.0, 0.01));
  // V100 GEMMs are volta_* kernels, A100's ampere_*/cutlass_80 ones.
  bool volta_added = false;
  for (const auto& k : d.kernels_added) volta_added = volta_added || k.name.rfind("volta_sgemm", 0) == 0;
  CHECK(volta_added);
  std::string md = analyzer::diff_to_markdown(d);
  CHECK(md.find("Added kernels (27 in all, largest shown)") != std::string::npos);
  CHECK(md.find("Removed kernels (66 in all, largest shown)") != std::string::npos);
}

TEST_CASE("hta trace_diff A100 -> V100: op-level changes match an independent count, and a kernel threshold fails CI") {
  STEPSCOPE_REQUIRE_TRACES();
  analyzer::DiffConfig listed;  // kernel_regression_us 0: changes listed, none fails
  auto d = analyzer::diff_runs({run_of(kA100)}, {run_of(kV100)}, listed);
  CHECK(d.kernel_regressions == 0);
  CHECK(d.ops.regressions == 0);
  // Counted in Python from the JSON: cpu_op events starting inside ProfilerStep ranges, by name, per step (6 each).
  auto find = [](const std::vector<analyzer::KernelDiff>& v, const std::string& name) -> const analyzer::KernelDiff* {
    for (const auto& k : v)
      if (k.name == name) return &k;
    return nullptr;
  };
  const auto* item = find(d.ops.changed, "aten::item");
  REQUIRE(item);
  CHECK_THAT(item->base_us_per_step, Catch::Matchers::WithinRel(6162.667, 1e-6));
  CHECK_THAT(item->new_us_per_step, Catch::Matchers::WithinRel(34576.833, 1e-6));
  const auto* compiled = find(d.ops.added, "CompiledFunction");  // the V100 run is torch.compile'd
  REQUIRE(compiled);
  CHECK_THAT(compiled->new_us_per_step, Catch::Matchers::WithinRel(13064.667, 1e-6));
  const auto* bmm = find(d.ops.removed, "aten::bmm");
  REQUIRE(bmm);
  CHECK_THAT(bmm->base_us_per_step, Catch::Matchers::WithinRel(913.5, 1e-6));

  analyzer::DiffConfig gate;
  gate.kernel_regression_us = 2000;  // +2 ms per step and +10%: fails
  auto g = analyzer::diff_runs({run_of(kA100)}, {run_of(kV100)}, gate);
  CHECK(g.kernel_regressions == 15);
  CHECK(g.ops.regressions == 11);
  CHECK(g.regression);
  CHECK(g.exit_code() == 1);
  REQUIRE_FALSE(g.kernel_changes.empty());
  CHECK(g.kernel_changes[0].fails);  // failing ones first
  CHECK(g.kernel_changes[0].name == "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)");
  const auto* removed = find(g.kernels_removed, g.kernels_removed[0].name);
  CHECK_FALSE(removed->fails);  // a removed kernel never fails
  const std::string junit = analyzer::diff_to_junit(g);
  CHECK(junit.find("message=\"15 kernels grew past 2000 µs per step and 10%") != std::string::npos);
  CHECK(junit.find("message=\"11 ops grew past 2000 µs per step and 10%") != std::string::npos);
  const std::string md = analyzer::diff_to_markdown(g);
  CHECK(md.find("### Op time per step") != std::string::npos);
  CHECK(md.find("Added ops (") != std::string::npos);
  CHECK(md.find("| ❌ ncclKernel") != std::string::npos);
  const std::string json = analyzer::diff_to_json(g);
  CHECK(json.find("\"kernel_regression_us\":2000") != std::string::npos);
  CHECK(json.find("\"ops\":{\"changed\":[") != std::string::npos);
}

TEST_CASE("several files per side pool their steps") {
  STEPSCOPE_REQUIRE_TRACES();
  auto w4 = run_of(kW4);
  auto w0 = run_of(kW0);
  auto d = analyzer::diff_runs({w4, w4}, {w0, w0, w0});
  CHECK(d.base.steps == 10);  // 6 ProfilerSteps per run, first dropped as warm-up
  CHECK(d.now.steps == 15);
  CHECK(d.base.files.size() == 2);
  CHECK(metric(d, "step_time_median").verdict == Verdict::Regression);
  CHECK(d.exit_code() == 1);
}

TEST_CASE("stepscope diff: exit codes, output files, JUnit read by Python's XML parser") {
  STEPSCOPE_REQUIRE_TRACES();
  if (!std::filesystem::exists(stepscope_binary())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("diff_cli");
  std::string bin = test::shell_quote(stepscope_binary());
  std::string w4 = test::shell_quote(test::trace_path(kW4)), w0 = test::shell_quote(test::trace_path(kW0));
  std::string junit = dir.file("junit.xml"), md = dir.file("summary.md"), json = dir.file("diff.json");

  auto r = test::run_command(bin + " diff " + w4 + " " + w0 + " --junit " + test::shell_quote(junit) + " --md " +
                             test::shell_quote(md) + " --json " + test::shell_quote(json));
  INFO(r.output);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("stepscope diff: REGRESSION") != std::string::npos);
  CHECK(read_all(md).find("## stepscope diff: ❌ regression") != std::string::npos);
  simdjson::dom::parser p;
  simdjson::dom::element root;
  std::string js = read_all(json);
  REQUIRE(p.parse(js).get(root) == simdjson::SUCCESS);
  CHECK(std::string_view(root["verdict"]) == "regression");
  if (test::have_program("python3")) {
    auto x = test::run_command(
        "python3 -c \"import sys, xml.etree.ElementTree as ET; s = ET.parse(sys.argv[1]).getroot().find('testsuite'); "
        "print(s.get('tests'), s.get('failures'), ' '.join(c.get('name') for c in s.findall('testcase') if c.find('failure') is not None))\" " +
        test::shell_quote(junit));
    INFO(x.output);
    CHECK(x.exit_code == 0);
    CHECK(x.output.rfind("9 4 step_time_median step_time_p90 gpu_busy_share data_wait_share", 0) == 0);  // 6 metrics, findings, kernels, ops
  }

  // Reverse and self: exit 0. Repeated runs with --base/--new pool.
  CHECK(test::run_command(bin + " diff " + w0 + " " + w4).exit_code == 0);
  CHECK(test::run_command(bin + " diff " + w0 + " " + w0).exit_code == 0);
  auto pooled = test::run_command(bin + " diff --base " + w4 + " --base " + w4 + " --new " + w0 + " --format json");
  CHECK(pooled.exit_code == 1);
  CHECK(pooled.output.find("\"steps\":10") != std::string::npos);

  // Bad input: exit 2, one line naming the file, no output files left behind.
  std::string bad = dir.file("bad.json");
  std::ofstream(bad) << "{\"traceEvents\": [ {\"ph\": ";
  std::string junit2 = dir.file("junit2.xml");
  auto e = test::run_command(bin + " diff " + test::shell_quote(bad) + " " + w0 + " --junit " + test::shell_quote(junit2));
  INFO(e.output);
  CHECK(e.exit_code == 2);
  CHECK(e.output.find("stepscope: " + bad + ":") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(junit2));
  CHECK(test::run_command(bin + " diff " + test::shell_quote(dir.file("missing.db")) + " " + w0).exit_code == 2);
  std::string cfg = dir.file("bad.toml");
  std::ofstream(cfg) << "[thresholds]\nstep_time = 0.1\n";
  auto c = test::run_command(bin + " diff " + w0 + " " + w0 + " --config " + test::shell_quote(cfg));
  CHECK(c.exit_code == 2);
  CHECK(c.output.find(cfg + ":2: unknown setting 'thresholds.step_time'") != std::string::npos);
  CHECK(test::run_command(bin + " diff " + w0).exit_code == 2);  // one file only
  // A config that loosens the step-time thresholds past +40% and ignores shares keeps the build green.
  std::string loose = dir.file("loose.json");
  std::ofstream(loose) << R"({"thresholds":{"step_time_median":0.5,"step_time_p90":0.5,"gpu_busy_share":1,"data_wait_share":1,
                              "launch_idle_share":1,"sync_idle_share":1}})";
  CHECK(test::run_command(bin + " diff " + w4 + " " + w0 + " --config " + test::shell_quote(loose)).exit_code == 0);
}

TEST_CASE(
    "stepscope diff: a gate that could never fail, an empty side, a half-written output are all refused") {
  STEPSCOPE_REQUIRE_TRACES();
  if (!std::filesystem::exists(stepscope_binary())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("diff_cli_refusals");
  const std::string bin = test::shell_quote(stepscope_binary());
  const std::string w4 = test::shell_quote(test::trace_path(kW4)),
                    w0 = test::shell_quote(test::trace_path(kW0));
  auto refused = [&](const std::string& args, const std::string& line) {
    const auto r = test::run_command(bin + " diff " + args);
    INFO(args);
    INFO(r.output);
    CHECK(r.exit_code == 2);
    CHECK(r.output == line);
  };
  // alpha below what the resamples can reach: 6/2000 = 0.003 (alpha = 0.001 passed +40% as unchanged).
  const std::string strict = dir.file("strict.toml");
  std::ofstream(strict) << "[test]\nalpha = 0.001\n";
  refused(
      w4 + " " + w0 + " --config " + test::shell_quote(strict),
      "stepscope: " + strict +
          ": test.alpha = 0.001 cannot be reached with 2000 bootstrap resamples: the least p-value they can "
          "give, corrected over the six metrics, is 6/2000 = 0.003, so no metric could ever be significant; "
          "set test.bootstrap_resamples to 6000 or more, or raise test.alpha\n");
  std::ofstream(strict) << "[test]\nalpha = 0.001\nbootstrap_resamples = 6000\n";
  CHECK(test::run_command(bin + " diff " + w4 + " " + w0 + " --config " + test::shell_quote(strict))
            .exit_code == 1);
  const std::string twice = dir.file("twice.toml");
  std::ofstream(twice) << "[thresholds]\nstep_time_median = 0.1\nstep_time_median = 0.2\n";
  refused(w0 + " " + w0 + " --config " + test::shell_quote(twice),
          "stepscope: " + twice + ":3: 'thresholds.step_time_median' is set twice\n");
  const std::string share = dir.file("share.toml");
  std::ofstream(share) << "[thresholds]\ngpu_busy_share = 5\n";
  refused(
      w0 + " " + w0 + " --config " + test::shell_quote(share),
      "stepscope: " + share +
          ":2: thresholds.gpu_busy_share must be a fraction of the step between 0 and 1 (0.03 = 3 points)\n");
  refused(w0 + " " + w0 + " --config " + test::shell_quote(dir.path().string()),
          "stepscope: " + dir.path().string() + ": is a folder, not a configuration file\n");
  CHECK(test::run_command(bin + " diff " + w0 + " " + w0 + " --kernel-regression-us inf").exit_code == 2);

  // A new side with no step (a run that crashed before its first): bad input, not "no regression".
  const std::string empty = dir.file("empty.db");
  stepscope::store::write_store_atomically(stepscope::store::Trace{}, empty);
  refused(
      w0 + " " + test::shell_quote(empty),
      "stepscope: " + empty +
          ": nothing to compare: no step with a duration on the new side (an empty recording, or a run that "
          "ended before its first step)\n");

  // An output that cannot be written is found before any input is read, and none of the others is written.
  const std::string junit = dir.file("j.xml"), md = dir.file("m.md");
  refused(w4 + " " + w0 + " --junit " + test::shell_quote(junit) + " --md " + test::shell_quote(md) +
              " --json /nonexistent-folder/d.json",
          "stepscope: /nonexistent-folder/d.json: no such folder /nonexistent-folder (create it first)\n");
  CHECK_FALSE(std::filesystem::exists(junit));
  CHECK_FALSE(std::filesystem::exists(md));
  // stdout that cannot be written (a full disk) is an error, not exit 0.
  if (std::filesystem::exists("/dev/full")) {
    const auto full = test::run_shell(bin + " diff " + w0 + " " + w0 + " --format json 2>&1 >/dev/full");
    INFO(full.output);
    CHECK(full.status == 2);
    CHECK(full.output.find("stepscope: standard output: cannot write: No space left on device") !=
          std::string::npos);
  }
  // --json - writes the JSON to stdout (it wrote a file named "-"), before the text.
  const auto dash = test::run_shell("cd " + test::shell_quote(dir.path().string()) + " && " + bin + " diff " +
                                    w0 + " " + w0 + " --json -");
  CHECK(dash.status == 0);
  CHECK(dash.output.rfind("{\"schema\":\"stepscope.diff/1\"", 0) == 0);
  CHECK(dash.output.find("stepscope diff: no regression") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("-")));
  // A rank folder holding a file named as a store that is none: said, not skipped. Another program's SQLite
  // database there is passed over.
  const std::string ranks = dir.file("ranks");
  std::filesystem::create_directory(ranks);
  std::filesystem::copy_file(test::trace_path(kW0), ranks + "/rank0.json.gz");
  if (test::have_program("sqlite3"))
    REQUIRE(test::run_shell("sqlite3 " + test::shell_quote(ranks + "/optuna.db") + " 'create table t(i int)'")
                .status == 0);
  const auto folders = test::run_command(bin + " diff " + test::shell_quote(ranks) + " " + test::shell_quote(ranks));
  CHECK(folders.exit_code == 0);
  // The same two folders as --base/--new: a job's ranks, as given positionally (was "is a directory, not a store").
  const auto named = test::run_command(bin + " diff --base " + test::shell_quote(ranks) + " --new " + test::shell_quote(ranks));
  CHECK(named.exit_code == 0);
  CHECK(named.output == folders.output);
  std::ofstream(ranks + "/rank1.db");  // empty
  refused(
      test::shell_quote(ranks) + " " + test::shell_quote(ranks),
      "stepscope: " + ranks +
          "/rank1.db: not a stepscope store or a trace (empty or damaged); remove it from the folder or name "
          "the files to read\n");
}

TEST_CASE("diff compares the program's pace: the GPU's steps where the host runs ahead, the profiler's cost out") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  test::ScratchDir dir("diff_pace");
  auto rec = [&](const std::string& name) {
    const std::string db = test::decompressed_recording("h100-2026-11-22/" + name + ".db.xz", dir);
    REQUIRE(!db.empty());
    return analyzer::make_diff_run(db, analyzer::load_trace(db));
  };
  {
    // sync_stall -> its async cure: the async host loop runs 119 µs a step ahead of a GPU that takes 344 µs (the
    // sample's own log: 344.25 µs); by the host's loop the diff said -74.7%.
    const auto base = rec("sync_stall"), now = rec("sync_stall_async");
    REQUIRE(now.analysis.summary.host_runs_ahead);
    const auto d = analyzer::diff_runs({base}, {now});
    const auto& m = metric(d, "step_time_median");
    CHECK(m.now == Approx(344.0).margin(2.0));
    CHECK(m.base == Approx(462.0).margin(3.0));  // 470 µs recorded, less the profiler's launch cost
    bool said = false;
    for (const auto& n : d.notes) said = said || n.find("the host runs ahead of the GPU") != std::string::npos;
    CHECK(said);
  }
  {
    // launch_bound -> its CUDA graph: 137.5 -> 53.5 µs measured unprofiled (-61%); the recorded steps said -76%.
    const auto d = analyzer::diff_runs({rec("launch_bound")}, {rec("launch_bound_graph")});
    const auto& m = metric(d, "step_time_median");
    CHECK(m.change > -0.62);
    CHECK(m.change < -0.58);
  }
}

TEST_CASE("diff's kernel and op tables are over the steps the metrics compare, warm-up left out") {
  STEPSCOPE_REQUIRE_TRACES();
  // Per step, the same with and without the first step when every step runs the same kernels: the warm-up out of
  // the counts and out of the divisor (out of the counts only, a kernel of 10 calls a step read 7.5).
  const std::string path = test::trace_path("hta/gpu_user_annotation_steps.json.gz");
  const auto all = analyzer::make_diff_run(path, analyzer::load_trace(path));
  const auto skipped = analyzer::make_diff_run(path, analyzer::load_trace(path), {}, 1);
  REQUIRE(all.analysis.steps.size() >= 3);
  CHECK(skipped.table_steps == int64_t(all.analysis.steps.size()) - 1);
  const auto d = analyzer::diff_runs({all}, {skipped});
  REQUIRE(d.kernel_changes.size() + d.kernels_added.size() + d.kernels_removed.size() > 0);
  for (const auto& k : d.kernel_changes) {
    INFO(k.name);
    CHECK(k.new_count_per_step == Approx(k.base_count_per_step).epsilon(0.01));
  }
  CHECK(d.kernels_added.empty());
  CHECK(d.kernels_removed.empty());
}
