// diff verdicts on synthetic runs whose steps are drawn from known distributions (seeded), kernel and finding
// changes, configuration files, and the JUnit/JSON/Markdown outputs.
#include <catch2/catch.hpp>

#include <simdjson.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "diff/stats.h"
#include "report_test_fixtures.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using analyzer::Verdict;

namespace {

struct RunSpec {
  int steps = 20;
  double step_ms = 100;
  double cv = 0.05;           // step-to-step variation of step time
  double busy_share = 0.6;
  double data_share = 0.1;
  double launch_share = 0.05;
  double sync_share = 0.02;
  double share_jitter = 0.01;  // absolute noise per step on each share
};

// One run: steps drawn from the spec with a seeded generator; component shares jittered per step.
analyzer::DiffRun synth_run(const RunSpec& s, uint64_t seed, const std::string& name = "run") {
  analyzer::stats::SplitMix64 rng(seed);
  analyzer::DiffRun r;
  r.file = name;
  r.analysis.source_file = name;
  r.analysis.summary.step_source = "profiler-step";
  r.analysis.summary.has_gpu = true;
  int64_t t = 0;
  for (int i = 0; i < s.steps; ++i) {
    double dur = std::max(1.0, s.step_ms * (1 + s.cv * rng.normal())) * 1e6;
    auto share = [&](double mean) { return std::clamp(mean + s.share_jitter * rng.normal(), 0.0, 1.0); };
    analyzer::StepBreakdown st;
    st.index = i;
    st.start_ns = t;
    st.dur_ns = int64_t(dur);
    st.gpu_busy_ns = int64_t(dur * share(s.busy_share));
    st.data_wait_ns = int64_t(dur * share(s.data_share));
    st.launch_idle_ns = int64_t(dur * share(s.launch_share));
    st.sync_idle_ns = int64_t(dur * share(s.sync_share));
    st.other_idle_ns = std::max<int64_t>(0, st.dur_ns - st.gpu_busy_ns - st.data_wait_ns - st.launch_idle_ns - st.sync_idle_ns);
    r.analysis.steps.push_back(st);
    t += st.dur_ns;
  }
  r.analysis.summary.steps = s.steps;
  return r;
}

const analyzer::MetricDiff& metric(const analyzer::DiffResult& d, const std::string& id) {
  for (const auto& m : d.metrics)
    if (m.id == id) return m;
  FAIL("no metric " << id);
  throw 0;
}

struct XmlCheck {
  bool ok = false;
  std::string output;
};

// Parses XML with Python's expat-based xml.etree (a strict, independent parser) and prints
// "<tests> <failures> <testcase names>".
XmlCheck parse_junit_with_python(const std::string& path) {
  std::string script =
      "import sys, xml.etree.ElementTree as ET\n"
      "root = ET.parse(sys.argv[1]).getroot()\n"
      "assert root.tag == 'testsuites', root.tag\n"
      "suite = root.find('testsuite')\n"
      "cases = suite.findall('testcase')\n"
      "fails = [c.get('name') for c in cases if c.find('failure') is not None]\n"
      "assert int(suite.get('tests')) == len(cases)\n"
      "assert int(suite.get('failures')) == len(fails)\n"
      "print(len(cases), len(fails), ','.join(c.get('name') for c in cases), ','.join(fails))\n"
      "for c in cases:\n"
      "  for e in c:\n"
      "    print('TEXT', c.get('name'), e.tag, (e.get('message') or '') + '|' + (e.text or '').replace('\\n', ' '))\n";
  test::ScratchDir dir("diff_junit_py");
  std::string py = dir.file("check.py");
  std::ofstream(py) << script;
  auto r = test::run_command("python3 " + test::shell_quote(py) + " " + test::shell_quote(path));
  return {r.exit_code == 0, r.output};
}

}  // namespace

// [plain_only]: statistics over 100 seeded runs; the sanitized suite takes the same code in the other cases.
TEST_CASE("same distribution: no regression in at least 95 of 100 seeded pairs", "[plain_only]") {
  RunSpec spec;
  int regressions = 0, any_change = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    auto d = analyzer::diff_runs({synth_run(spec, seed * 2)}, {synth_run(spec, seed * 2 + 1)});
    if (d.regression) ++regressions;
    for (const auto& m : d.metrics) {
      REQUIRE(m.tested);  // 19 vs 19 steps after warm-up: the test is in force
      if (m.verdict != Verdict::Unchanged) {
        ++any_change;
        break;
      }
    }
  }
  INFO("regressions " << regressions << ", pairs with any verdict " << any_change);
  CHECK(regressions <= 5);
  CHECK(any_change <= 10);
}

// [plain_only]: statistics over 100 seeded runs; the sanitized suite takes the same code in the other cases.
TEST_CASE("same distribution with high variance: thresholds are crossed by noise, significance keeps builds green", "[plain_only]") {
  RunSpec spec;
  spec.cv = 0.25;  // noisy steps: the median often moves by more than 5% by chance
  spec.share_jitter = 0.05;
  int regressions = 0, crossings = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    auto d = analyzer::diff_runs({synth_run(spec, 1000 + seed * 2)}, {synth_run(spec, 1000 + seed * 2 + 1)});
    if (d.regression) ++regressions;
    if (metric(d, "step_time_median").exceeds_threshold) ++crossings;
  }
  INFO("regressions " << regressions << ", step-time threshold crossings " << crossings);
  CHECK(crossings >= 30);  // a threshold-only gate would go red often here
  CHECK(regressions <= 5);
}

TEST_CASE("a +10% step-time shift with low variance is caught — the reverse is an improvement") {
  RunSpec base, slow;
  base.cv = slow.cv = 0.02;
  slow.step_ms = 110;
  int caught = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    auto d = analyzer::diff_runs({synth_run(base, seed)}, {synth_run(slow, seed + 100)});
    if (metric(d, "step_time_median").verdict == Verdict::Regression && d.exit_code() == 1) ++caught;
  }
  CHECK(caught == 20);
  auto d = analyzer::diff_runs({synth_run(base, 5)}, {synth_run(slow, 6)});
  const auto& m = metric(d, "step_time_median");
  CHECK(m.significant);
  CHECK(m.p_value <= 1.0 / 2000);  // no resample of 2000 near 0: the smallest p they can show
  CHECK(m.p_adjusted < 0.01);
  CHECK_THAT(m.change, Catch::Matchers::WithinAbs(0.10, 0.02));
  REQUIRE(m.ci_valid);
  CHECK(m.ci_lo > 0.05);
  CHECK(m.ci_hi < 0.15);
  auto back = analyzer::diff_runs({synth_run(slow, 6)}, {synth_run(base, 5)});
  CHECK(metric(back, "step_time_median").verdict == Verdict::Improvement);
  CHECK(back.exit_code() == 0);
}

TEST_CASE("a significant change below its threshold is unchanged") {
  RunSpec base, slow;
  base.cv = slow.cv = 0.005;
  slow.step_ms = 102;  // +2%: real, but under the 5% threshold
  auto d = analyzer::diff_runs({synth_run(base, 1)}, {synth_run(slow, 2)});
  const auto& m = metric(d, "step_time_median");
  CHECK(m.significant);
  CHECK_FALSE(m.exceeds_threshold);
  CHECK(m.verdict == Verdict::Unchanged);
  CHECK(d.exit_code() == 0);
  analyzer::DiffConfig strict;
  strict.step_time_median = 0.01;
  CHECK(metric(analyzer::diff_runs({synth_run(base, 1)}, {synth_run(slow, 2)}, strict), "step_time_median").verdict ==
        Verdict::Regression);
}

TEST_CASE("share metrics: more data wait and less GPU busy are regressions") {
  RunSpec base, input_bound;
  input_bound.data_share = 0.3;
  input_bound.busy_share = 0.4;
  auto d = analyzer::diff_runs({synth_run(base, 1)}, {synth_run(input_bound, 2)});
  CHECK(metric(d, "data_wait_share").verdict == Verdict::Regression);
  CHECK_THAT(metric(d, "data_wait_share").change, Catch::Matchers::WithinAbs(0.2, 0.02));
  CHECK(metric(d, "gpu_busy_share").verdict == Verdict::Regression);
  CHECK(metric(d, "gpu_busy_share").change < -0.15);
  CHECK(metric(d, "launch_idle_share").verdict == Verdict::Unchanged);
  CHECK(metric(d, "sync_idle_share").verdict == Verdict::Unchanged);
  CHECK(d.regression);
  auto back = analyzer::diff_runs({synth_run(input_bound, 2)}, {synth_run(base, 1)});
  CHECK(metric(back, "data_wait_share").verdict == Verdict::Improvement);
  CHECK(metric(back, "gpu_busy_share").verdict == Verdict::Improvement);
  CHECK_FALSE(back.regression);
}

TEST_CASE("a share that rises only because the step got shorter is not a regression") {
  // Faster GPU work (e.g. AMP): 100 ms steps with 60 ms busy, 10 ms data wait become 70 ms steps with 30 ms
  // busy and the same 10 ms data wait. Data-wait share 10% → 14%, GPU busy share 60% → 43%.
  RunSpec base, faster;
  base.share_jitter = faster.share_jitter = 0.002;
  faster.step_ms = 70;
  faster.busy_share = 30.0 / 70;
  faster.data_share = 10.0 / 70;
  faster.launch_share = 3.5 / 70;  // 5 ms → 3.5 ms
  faster.sync_share = 1.4 / 70;
  auto d = analyzer::diff_runs({synth_run(base, 1)}, {synth_run(faster, 2)});
  CHECK(metric(d, "step_time_median").verdict == Verdict::Improvement);
  const auto& dw = metric(d, "data_wait_share");
  CHECK(dw.change > 0.03);
  CHECK(std::fabs(dw.time_change) < 0.01);
  CHECK(dw.verdict == Verdict::Unchanged);
  INFO(dw.note);
  CHECK(dw.note.find("the step length changed, not this component") != std::string::npos);
  const auto& busy = metric(d, "gpu_busy_share");
  CHECK(busy.change < -0.15);
  CHECK(busy.verdict == Verdict::Unchanged);  // GPU idle per step did not grow
  CHECK_FALSE(d.regression);
}

TEST_CASE("a run against itself is unchanged everywhere") {
  auto r = synth_run(RunSpec{}, 9);
  auto d = analyzer::diff_runs({r}, {r});
  for (const auto& m : d.metrics) {
    CHECK(m.verdict == Verdict::Unchanged);
    CHECK(m.change == 0);
    // The bootstrap's resamples of one run against itself centre on 0: far from significant, 0 inside.
    CHECK(m.p_value > 0.5);
    CHECK((m.ci_valid && m.ci_lo <= 0 && m.ci_hi >= 0));
  }
  CHECK(d.exit_code() == 0);
}

TEST_CASE("several runs per side pool their steps — warm-up steps are dropped per run") {
  RunSpec spec;
  spec.steps = 4;
  auto d = analyzer::diff_runs({synth_run(spec, 1), synth_run(spec, 2), synth_run(spec, 3)},
                               {synth_run(spec, 4), synth_run(spec, 5)});
  CHECK(d.base.steps == 9);
  CHECK(d.base.steps_dropped == 3);
  CHECK(d.now.steps == 6);
  CHECK(d.base.files.size() == 3);
  CHECK(metric(d, "step_time_median").tested);
  analyzer::DiffConfig keep;
  keep.skip_first_steps = 0;
  auto d2 = analyzer::diff_runs({synth_run(spec, 1)}, {synth_run(spec, 4)}, keep);
  CHECK(d2.base.steps == 4);
  CHECK(d2.base.steps_dropped == 0);
  // Too few steps to leave the warm-up out: every step is compared, and the notes say so (they were silent).
  RunSpec two;
  two.steps = 2;
  auto d3 = analyzer::diff_runs({synth_run(two, 1, "short.db")}, {synth_run(spec, 4)});
  CHECK(d3.base.steps == 2);
  CHECK(d3.base.steps_dropped == 0);
  CHECK(d3.now.steps_dropped == 1);
  CHECK(std::count(
            d3.notes.begin(), d3.notes.end(),
            "base: short.db: 2 step(s), too few to leave out the first 1 as warm-up (test.skip_first_steps "
            "needs 3 or more); every step is compared") == 1);
}

TEST_CASE("too few steps: said plainly, and the threshold alone decides") {
  RunSpec base, slow;
  base.steps = slow.steps = 3;
  slow.step_ms = 150;
  auto d = analyzer::diff_runs({synth_run(base, 1)}, {synth_run(slow, 2)});
  const auto& m = metric(d, "step_time_median");
  CHECK_FALSE(m.tested);
  REQUIRE_FALSE(d.notes.empty());
  CHECK(d.notes.front() == "too few steps for a significance test (2 base vs 2 new); the threshold alone decides");
  CHECK(m.verdict == Verdict::Regression);
  CHECK(d.exit_code() == 1);
  CHECK(analyzer::diff_to_markdown(d).find("too few steps") != std::string::npos);
  // A run with no steps at all adds nothing and says so.
  analyzer::DiffRun empty;
  empty.file = "empty.json";
  auto e = analyzer::diff_runs({empty}, {synth_run(base, 3)});
  CHECK(metric(e, "step_time_median").verdict == Verdict::Unchanged);
  CHECK(e.notes.front().find("empty.json has no steps") != std::string::npos);
}

TEST_CASE("kernel time by name: changes, added and removed, per step") {
  auto b = synth_run(RunSpec{}, 1, "base");
  auto n = synth_run(RunSpec{}, 2, "new");
  // base: 20 steps; new: 20 steps.
  b.kernels = {{"gemm", 200, 200'000'000, 0, 0}, {"relu", 400, 40'000'000, 0, 0}, {"old_kernel", 20, 20'000'000, 0, 0}};
  n.kernels = {{"gemm", 200, 300'000'000, 0, 0}, {"relu", 400, 40'000'000, 0, 0}, {"new_fused<T>", 40, 80'000'000, 0, 0}};
  auto d = analyzer::diff_runs({b}, {n});
  REQUIRE(d.kernel_changes.size() == 1);  // relu did not change
  CHECK(d.kernel_changes[0].name == "gemm");
  CHECK(d.kernel_changes[0].base_us_per_step == 10000);
  CHECK(d.kernel_changes[0].new_us_per_step == 15000);
  REQUIRE(d.kernels_added.size() == 1);
  CHECK(d.kernels_added[0].name == "new_fused<T>");
  CHECK(d.kernels_added[0].new_count_per_step == 2);
  REQUIRE(d.kernels_removed.size() == 1);
  CHECK(d.kernels_removed[0].name == "old_kernel");
  std::string md = analyzer::diff_to_markdown(d);
  CHECK(md.find("| gemm | 10 ms | 15 ms | +5 ms | 10.0 → 10.0 |") != std::string::npos);
  CHECK(md.find("new\\_fused&lt;T&gt;") != std::string::npos);
}

TEST_CASE("kernel time per step is over the steps whose GPU was traced") {
  // The same program traced in windows (5 of 20 steps) and whole: a recording holds the kernels of its traced
  // steps only, and over every step a windowed run showed each kernel 4x smaller (the gate failed on it).
  auto windowed = synth_run(RunSpec{}, 1, "windowed");
  auto whole = synth_run(RunSpec{}, 2, "whole");
  for (size_t i = 5; i < windowed.analysis.steps.size(); ++i) windowed.analysis.steps[i].gpu_traced = false;
  windowed.kernels = {{"gemm", 5, 50'000'000, 0, 0}};  // 5 traced steps, 10 ms each
  whole.kernels = {{"gemm", 20, 200'000'000, 0, 0}};   // 20 steps, 10 ms each
  analyzer::DiffConfig cfg;
  cfg.kernel_regression_us = 50;
  auto d = analyzer::diff_runs({windowed}, {whole}, cfg);
  CHECK(d.kernel_changes.empty());  // 10 ms a step on both sides
  CHECK(d.kernel_regressions == 0);
}

TEST_CASE("kernel_stats_by_name counts kernels inside the given steps only") {
  store::Trace t;
  auto add = [&](const char* name, int64_t s, int64_t e) {
    store::Kernel k;
    k.name = t.intern(name);
    k.start = s, k.end = e;
    t.kernels.push_back(k);
  };
  add("warmup", 0, 50);
  add("a", 100, 110);
  add("a", 120, 125);
  add("b", 210, 240);
  add("a", 400, 420);  // after the last step
  std::vector<analyzer::StepBreakdown> steps(2);
  steps[0].start_ns = 100, steps[0].dur_ns = 100;
  steps[1].start_ns = 200, steps[1].dur_ns = 100;
  auto ks = analyzer::kernel_stats_by_name(t, steps);
  REQUIRE(ks.size() == 2);
  CHECK(ks[0].name == "b");
  CHECK(ks[0].total_ns == 30);
  CHECK(ks[1].name == "a");
  CHECK(ks[1].count == 2);
  CHECK(ks[1].total_ns == 15);
  CHECK(ks[1].min_ns == 5);
  CHECK(ks[1].max_ns == 10);
  CHECK(analyzer::kernel_stats_by_name(t).size() == 3);  // no steps: the whole trace
}

TEST_CASE("kernel_stats_by_name puts a kernel in the step that launched it") {
  // A queue behind the host runs the last step's kernel after the step ended: by its start it was not
  // counted.
  store::Trace t;
  auto add = [&](int64_t launch, int64_t s, int64_t e, int64_t corr, int64_t pid) {
    store::ApiCall c;
    c.start = launch, c.end = launch + 2, c.correlation = corr, c.pid = pid;
    t.api_calls.push_back(c);
    store::Kernel k;
    k.name = t.intern("k");
    k.start = s, k.end = e, k.correlation = corr, k.pid = pid;
    t.kernels.push_back(k);
  };
  add(110, 150, 160, 1, 7);
  add(210, 290, 300, 2, 7);
  add(280, 330, 340, 3, 7);  // launched in step 2, run after it
  add(50, 120, 130, 4, 7);   // launched before the first step, run inside it
  add(150, 420, 430, 3, 8);  // another process's id 3: its own launch (before the steps' end), not pid 7's
  std::vector<analyzer::StepBreakdown> steps(2);
  steps[0].start_ns = 100, steps[0].dur_ns = 100;
  steps[1].start_ns = 200, steps[1].dur_ns = 100;
  auto ks = analyzer::kernel_stats_by_name(t, steps);
  REQUIRE(ks.size() == 1);
  CHECK(ks[0].count == 4);
  CHECK(ks[0].total_ns == 40);
}

TEST_CASE("GPU shares are over the steps whose GPU was traced, step time over every step") {
  // Under record's default GPU windows an untraced step has no GPU record: pooled as idle, GPU busy fell from
  // 60% to 6% of the run and a share regression in the traced steps was diluted tenfold.
  RunSpec spec;
  spec.steps = 40;
  auto windowed = [&](uint64_t seed, double launch_share) {
    RunSpec s = spec;
    s.launch_share = launch_share;
    auto r = synth_run(s, seed);
    for (size_t i = 0; i < r.analysis.steps.size(); ++i)
      if (i % 10 >= 4) {  // 4 of every 10 traced
        auto& st = r.analysis.steps[i];
        st.gpu_traced = false;
        st.gpu_busy_ns = st.launch_idle_ns = st.sync_idle_ns = st.data_wait_ns = 0;
        st.other_idle_ns = st.dur_ns;
      }
    return r;
  };
  auto d = analyzer::diff_runs({windowed(1, 0.05)}, {windowed(2, 0.15)});
  CHECK(d.base.steps == 39);  // the first dropped as warm-up
  CHECK(d.base.gpu_traced_steps == 15);
  CHECK(d.now.gpu_traced_steps == 15);
  const auto& busy = metric(d, "gpu_busy_share");
  CHECK(busy.base == Approx(0.6).margin(0.02));
  const auto& launch = metric(d, "launch_idle_share");
  CHECK(launch.change == Approx(0.10).margin(0.02));
  CHECK(launch.tested);
  CHECK(launch.verdict == Verdict::Regression);
  CHECK(metric(d, "step_time_median").verdict == Verdict::Unchanged);
  bool noted = false;
  for (const auto& n : d.notes)
    noted |= n.find(
                 "GPU windows: the GPU shares (busy, launch idle, sync idle) are over the steps whose CUDA "
                 "activity was traced, 15 of 39 base and 15 of 39 new") != std::string::npos;
  CHECK(noted);
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(analyzer::diff_to_json(d));
  CHECK(int64_t(doc["base"]["gpu_traced_steps"]) == 15);
}

TEST_CASE("findings that appear, disappear or change severity") {
  auto b = synth_run(RunSpec{}, 1);
  auto n = synth_run(RunSpec{}, 2);
  analyzer::FindingResult f;
  f.rule = "launch-overhead";
  f.severity = store::Severity::Medium;
  b.analysis.findings.push_back(f);
  f.rule = "sync-stall";
  b.analysis.findings.push_back(f);
  n.analysis.findings.push_back(f);
  f.rule = "input-bound";
  f.severity = store::Severity::High;
  f.summary = "GPU idle 40% waiting for data";
  n.analysis.findings.push_back(f);
  auto d = analyzer::diff_runs({b}, {n});
  REQUIRE(d.findings.size() == 3);
  CHECK(d.findings[0].rule == "input-bound");
  CHECK(d.findings[0].status == analyzer::FindingDiff::Status::Appeared);
  CHECK(d.findings[1].rule == "launch-overhead");
  CHECK(d.findings[1].status == analyzer::FindingDiff::Status::Disappeared);
  CHECK(d.findings[2].status == analyzer::FindingDiff::Status::Persisting);
  CHECK_FALSE(d.regression);  // default: findings are listed, metrics decide
  analyzer::DiffConfig cfg;
  cfg.fail_on_new_findings = "high";
  auto strict = analyzer::diff_runs({b}, {n}, cfg);
  CHECK(strict.findings[0].fails);
  CHECK(strict.regression);
  cfg.fail_on_new_findings = "medium";
  n.analysis.findings[0].severity = store::Severity::High;  // sync-stall medium → high
  auto changed = analyzer::diff_runs({b}, {n}, cfg);
  CHECK(changed.findings[2].status == analyzer::FindingDiff::Status::Changed);
  CHECK(changed.findings[2].fails);
}

TEST_CASE("configuration: TOML subset and JSON, strict about keys and values") {
  auto c = analyzer::parse_diff_config(R"(
# stepscope diff thresholds
[thresholds]
step_time_median = 0.03   # 3%
data_wait_share = 0.05
[test]
alpha = 0.01
skip_first_steps = 2
seed = 1_000
[report]
fail_on_new_findings = "high"
top_kernels = 5
)", "t.toml");
  CHECK(c.step_time_median == 0.03);
  CHECK(c.data_wait_share == 0.05);
  CHECK(c.step_time_p90 == 0.10);  // untouched default
  CHECK(c.alpha == 0.01);
  CHECK(c.skip_first_steps == 2);
  CHECK(c.seed == 1000);
  CHECK(c.fail_on_new_findings == "high");
  CHECK(c.top_kernels == 5);
  auto j = analyzer::parse_diff_config(R"({"thresholds":{"sync_idle_share":0.04},"test":{"alpha":0.1},
                                           "report":{"fail_on_new_findings":"medium"}})", "t.json");
  CHECK(j.sync_idle_share == 0.04);
  CHECK(j.alpha == 0.1);
  CHECK(j.fail_on_new_findings == "medium");

  auto error_of = [](const std::string& text) {
    try {
      analyzer::parse_diff_config(text, "cfg");
    } catch (const store::StoreError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("[thresholds]\nstep_time = 0.1\n") == "cfg:2: unknown setting 'thresholds.step_time'");
  CHECK(error_of("[thresholds]\nstep_time_median = -1\n") == "cfg:2: thresholds.step_time_median must be a number >= 0");
  CHECK(error_of("[test]\nalpha = 1.5\n") == "cfg:2: test.alpha must lie strictly between 0 and 1");
  CHECK(error_of("[nope]\n") == "cfg:1: unknown table [nope]");
  CHECK(error_of("step_time_median = 0.1\n") == "cfg:1: unknown setting 'step_time_median'");
  CHECK(error_of("[report]\nfail_on_new_findings = \"always\"\n").find("must be \"none\"") != std::string::npos);
  CHECK(error_of("[thresholds]\nstep_time_median = abc\n") ==
        "cfg:2: bad value 'abc' for 'step_time_median': expected a number, a quoted string or true/false");
  CHECK(error_of("[thresholds]\nstep_time_median = 5%\n") ==
        "cfg:2: bad value '5%' for 'step_time_median': expected a number, a quoted string or true/false (a "
        "fraction: 0.05 for 5%)");
  CHECK(error_of("{\"thresholds\": {\"x\": 1}}") == "cfg: unknown setting 'thresholds.x'");
  CHECK(error_of("{\"thresholds\": ").rfind("cfg: invalid JSON", 0) == 0);

  test::ScratchDir dir("diff_config");
  CHECK_THROWS_AS(analyzer::load_diff_config(dir.file("missing.toml")), store::StoreError);
  std::ofstream(dir.file("c.toml")) << "[thresholds]\nstep_time_p90 = 0.2\n";
  CHECK(analyzer::load_diff_config(dir.file("c.toml")).step_time_p90 == 0.2);
}

TEST_CASE("JUnit output is well-formed XML with one testcase per metric and failures for regressions") {
  RunSpec base, bad;
  bad.step_ms = 130;
  bad.data_share = 0.3;
  auto b = synth_run(base, 1, "base <run> & \"x\"");
  auto n = synth_run(bad, 2, "new]]>run");
  // Names that break naive XML: markup, CDATA end, control characters, invalid UTF-8.
  b.kernels = {{"<script>alert(1)</script>", 20, 1000, 0, 0}};
  n.kernels = {{std::string("ctl\x01\x02 ]]> \xff kernel"), 20, 5000, 0, 0}};
  analyzer::FindingResult f;
  f.rule = "input-bound";
  f.severity = store::Severity::High;
  f.summary = "data wait <40%> & more";
  n.analysis.findings.push_back(f);
  auto d = analyzer::diff_runs({b}, {n});
  REQUIRE(d.regression);
  std::string xml = analyzer::diff_to_junit(d);
  test::ScratchDir dir("diff_junit");
  std::string path = dir.file("junit.xml");
  analyzer::write_file_atomically(path, xml);
  if (!test::have_program("python3")) STEPSCOPE_SKIP("python3 not installed");
  auto r = parse_junit_with_python(path);
  INFO(r.output);
  REQUIRE(r.ok);
  CHECK(r.output.rfind("9 3 step_time_median,step_time_p90,gpu_busy_share,data_wait_share,launch_idle_share,"
                       "sync_idle_share,findings,kernels,ops step_time_median,step_time_p90,data_wait_share",
                       0) == 0);
  CHECK(r.output.find("kernels system-out") != std::string::npos);
  CHECK(r.output.find("<script>alert(1)</script>") != std::string::npos);  // round-trips as text
  CHECK(xml.find("<script>") == std::string::npos);
  // The new finding is listed but, by default, does not fail.
  CHECK(r.output.find("appeared input-bound (base -, new high): data wait <40%> & more") != std::string::npos);
}

TEST_CASE("JSON output parses and carries verdicts, intervals and kernel changes") {
  RunSpec base, slow;
  base.cv = slow.cv = 0.02;
  slow.step_ms = 120;
  auto b = synth_run(base, 1, "b.json");
  auto n = synth_run(slow, 2, "n.json");
  b.kernels = {{"k\"quote", 10, 1000, 0, 0}};
  n.kernels = {{"k\"quote", 10, 3000, 0, 0}};
  auto d = analyzer::diff_runs({b}, {n});
  std::string json = analyzer::diff_to_json(d);
  simdjson::dom::parser p;
  simdjson::dom::element root;
  REQUIRE(p.parse(json).get(root) == simdjson::SUCCESS);
  CHECK(std::string_view(root["schema"]) == "stepscope.diff/1");
  CHECK(std::string_view(root["verdict"]) == "regression");
  CHECK(int64_t(root["exit_code"]) == 1);
  CHECK(int64_t(root["base"]["steps"]) == 19);
  simdjson::dom::array metrics = root["metrics"];
  REQUIRE(metrics.size() == 6);
  simdjson::dom::element m0 = metrics.at(0);
  CHECK(std::string_view(m0["id"]) == "step_time_median");
  CHECK(std::string_view(m0["verdict"]) == "regression");
  CHECK(simdjson::dom::array(m0["ci95"]).size() == 2);
  CHECK(double(m0["change"]) > 0.15);
  simdjson::dom::element k0 = root["kernels"]["changed"].at(0);
  CHECK(std::string_view(k0["name"]) == "k\"quote");
  CHECK_THAT(double(k0["delta_us_per_step"]), Catch::Matchers::WithinAbs(0.1, 1e-12));
}

TEST_CASE(
    "data wait steady at 22 ms per step while the step grows: no improvement, the note says the step "
    "changed") {
  // Issue 48: the share fell 22% → 15% only because the step grew 100 → 150 ms; the wait per step stayed.
  RunSpec base, longer;
  base.cv = longer.cv = 0.02;
  base.share_jitter = longer.share_jitter = 0.002;
  base.data_share = 0.22;
  longer.step_ms = 150;
  longer.data_share = 22.0 / 150;
  auto d = analyzer::diff_runs({synth_run(base, 3)}, {synth_run(longer, 4)});
  const auto& dw = metric(d, "data_wait_share");
  CHECK(dw.change < -0.05);
  CHECK(dw.verdict == Verdict::Unchanged);
  CHECK_THAT(dw.base_time_us, Catch::Matchers::WithinRel(22000.0, 0.03));
  CHECK_THAT(dw.new_time_us, Catch::Matchers::WithinRel(22000.0, 0.03));
  INFO(dw.note);
  CHECK(dw.note.find("the time per step went 22") != std::string::npos);
  CHECK(dw.note.find("the step length changed, not this component") != std::string::npos);
  CHECK(metric(d, "step_time_median").verdict == Verdict::Regression);
  // Every metric's p-value agrees with its interval.
  for (const auto& m : d.metrics) {
    REQUIRE(m.ci_valid);
    CHECK((m.p_value < 0.05) == (m.ci_lo > 0 || m.ci_hi < 0));
  }
  const std::string md = analyzer::diff_to_markdown(d);
  CHECK(md.find("✅") == std::string::npos);
}

// [plain_only]: statistics over 100 seeded runs; the sanitized suite takes the same code in the other cases.
TEST_CASE("100 seeded diffs: every metric's p-value is below 0.05 exactly when its 95% interval excludes 0", "[plain_only]") {
  int excluded = 0, included = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    analyzer::stats::SplitMix64 rng(seed * 7919);
    RunSpec base, now;
    base.cv = now.cv = 0.02 + 0.08 * rng.uniform();
    now.step_ms = 100 * (1 + 0.08 * (rng.uniform() - 0.5));  // -4% .. +4%: many near the edge
    now.data_share = 0.1 + 0.04 * (rng.uniform() - 0.5);
    auto d = analyzer::diff_runs({synth_run(base, seed)}, {synth_run(now, seed + 1000)});
    for (const auto& m : d.metrics) {
      if (!m.ci_valid) continue;
      const bool excludes = m.ci_lo > 0 || m.ci_hi < 0;
      INFO("seed " << seed << " " << m.id << ": p=" << m.p_value << " CI " << m.ci_lo << " .. " << m.ci_hi);
      CHECK((m.p_value < 0.05) == excludes);
      (excludes ? excluded : included)++;
    }
  }
  CHECK(excluded >= 50);
  CHECK(included >= 50);
}

TEST_CASE("CPU runs compare the training thread's host functions per step, beyond their sampling noise") {
  // 20 steps sampled at 1 kHz: a function's samples are its milliseconds.
  auto cpu_run = [](uint64_t seed, int64_t hot_samples, int64_t noisy_samples) {
    RunSpec s;
    auto r = synth_run(s, seed);
    r.analysis.summary.has_gpu = false;
    r.host_functions.push_back({"hot_inner(int)", hot_samples, hot_samples * 1000000, 0, 0});
    r.host_functions.push_back({"helper()", 20, 20 * 1000000, 0, 0});
    r.host_functions.push_back({"noisy()", noisy_samples, noisy_samples * 1000000, 0, 0});
    return r;
  };
  // hot_inner: 30 → 45 ms a step (600 → 900 samples), two standard errors 2·√(1.22² + 1.5²) = 3.87 ms;
  // noisy(): 2 → 2.5 ms (40 → 50 samples), within its 0.95 ms: not listed, counted.
  auto d = analyzer::diff_runs({cpu_run(1, 600, 40)}, {cpu_run(2, 900, 50)});
  REQUIRE(d.host_functions.changed.size() == 1);
  CHECK(d.host_functions.changed[0].name == "hot_inner(int)");
  CHECK_THAT(d.host_functions.changed[0].delta_us_per_step(), Catch::Matchers::WithinAbs(15000.0, 1e-6));
  CHECK_THAT(d.host_functions.changed[0].noise_us_per_step,
             Catch::Matchers::WithinAbs(2 * std::sqrt(30000.0 * 30000 / 600 + 45000.0 * 45000 / 900), 1e-6));
  CHECK(d.host_functions.within_noise == 1);
  CHECK(d.host_functions.regressions == 0);  // listed, never a gate
  const std::string text = analyzer::diff_to_text(d);
  INFO(text);
  CHECK(
      text.find(
          "\nHost function time per step (training thread, sampled)\n  changed     +15 ms ±3.87 ms  (30 ms → "
          "45 ms)  hot_inner(…)\n  (1 more changed within their sampling noise, not shown)\n") !=
      std::string::npos);
  // Neither run had GPU activity: its shares (zeros against zeros) are left out of the table, and said.
  CHECK(text.find("GPU busy share") == std::string::npos);
  CHECK(text.find("Launch-idle share") == std::string::npos);
  CHECK(text.find("Data-wait share") != std::string::npos);
  CHECK(text.find(
            "note: no GPU activity on either side: the GPU shares (busy, launch idle, sync idle) are left "
            "out\n") != std::string::npos);
  const std::string md = analyzer::diff_to_markdown(d);
  CHECK(md.find("| hot\\_inner(int) | 30 ms | 45 ms | +15 ms ±3.87 ms | 30.0 → 45.0 |") != std::string::npos);
  CHECK(md.find("Samples / step (base → new)") != std::string::npos);
  CHECK(md.find("| GPU busy share |") == std::string::npos);
  const std::string json = analyzer::diff_to_json(d);
  CHECK(json.find("\"host_functions\":{\"changed\":[{\"name\":\"hot_inner(int)\"") != std::string::npos);
  CHECK(json.find("\"within_noise\":1") != std::string::npos);
  CHECK(json.find("\"id\":\"gpu_busy_share\"") != std::string::npos);  // JSON keeps every metric
}
