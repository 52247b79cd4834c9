// `stepscope diff`: compares the per-step distributions of two sets of runs (base and new) and gives each
// metric a verdict — regression, improvement or unchanged — that counts a change only when it exceeds its
// threshold AND is significant given step-to-step variation (docs/ci.md documents the method and defaults).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// Thresholds and test settings. Defaults are the documented ones; --config overrides any subset.
struct DiffConfig {
  // Relative change of the step-time median / p90 (0.05 = +5%) that counts.
  double step_time_median = 0.05;
  double step_time_p90 = 0.10;
  // Absolute change of a share of summed step time (0.03 = 3 percentage points) that counts.
  double gpu_busy_share = 0.03;
  double data_wait_share = 0.02;
  double launch_idle_share = 0.02;
  double sync_idle_share = 0.02;
  double alpha = 0.05;          // family-wise significance level (Holm over the tested metrics)
  int skip_first_steps = 1;     // warm-up steps dropped from each run (only when it keeps >= 2 steps)
  uint64_t seed = 20240601;     // bootstrap seed: same inputs, same intervals
  int bootstrap_resamples = 2000;
  // The resamples each test draws: bootstrap_resamples = 0 hides the intervals, the tests still draw 2000.
  int test_resamples() const {
    return bootstrap_resamples > 0 ? (bootstrap_resamples < 10 ? 10 : bootstrap_resamples) : 2000;
  }
  int top_kernels = 15;         // kernel (and op) changes listed
  // Kernel- and op-level regressions for CI: a kernel or framework op whose time per step grows by more than
  // kernel_regression_us AND by more than kernel_regression_ratio of its base — or a new one taking more than
  // kernel_regression_us per step — fails the diff. 0 (the default): changes are listed, none fails.
  double kernel_regression_us = 0;
  double kernel_regression_ratio = 0.10;
  // Findings that appear in NEW with at least this severity fail the diff: "none" (default), "low",
  // "medium" or "high".
  std::string fail_on_new_findings = "none";
};

// Reads a TOML subset (`key = value`, `[thresholds]`/`[test]`/`[report]` tables, # comments) or JSON
// (chosen by content: a leading '{' means JSON). Unknown keys are errors. Throws store::StoreError
// ("FILE: reason") on any problem.
DiffConfig load_diff_config(const std::string& path);
DiffConfig parse_diff_config(const std::string& text, const std::string& name_for_errors);

// One analyzed run (a file) and its kernel time by name.
struct DiffRun {
  std::string file;
  Analysis analysis;
  std::vector<KernelStat> kernels;  // every kernel name, not only the top ones
  std::vector<KernelStat> ops;      // framework ops (Kineto cpu_op, store ranges of source Op) by name
  // Runs without GPU activity: the training thread's self time per function over the steps (HostActivity of
  // window "steps"; count = samples; off-CPU ones suffixed " (off CPU)"). Empty for GPU runs.
  std::vector<KernelStat> host_functions;
  // The steps `kernels` and `ops` were counted over (make_diff_run's skip_first_steps left out), and how many of
  // them had their GPU traced: the divisors of their per-step figures. -1: every step of the analysis.
  int64_t table_steps = -1, table_gpu_steps = -1;
};

// Kernel count and time by name, largest total first. With `steps` non-empty only kernels that start inside
// one of those steps count (so per-step figures are not diluted by warm-up before the first step).
std::vector<KernelStat> kernel_stats_by_name(const store::Trace& trace, const std::vector<StepBreakdown>& steps = {});
// The same for framework ops (ranges of source Op, every depth), by their start.
std::vector<KernelStat> op_stats_by_name(const store::Trace& trace, const std::vector<StepBreakdown>& steps = {});

// Loads nothing: analyzes an already-loaded trace into a DiffRun (analyze() + kernel_stats_by_name()). The kernel
// and op tables leave out the first `skip_first_steps` steps, as the metrics do (DiffConfig::skip_first_steps,
// when the run keeps at least two), and record the steps they are over (DiffRun::table_steps).
DiffRun make_diff_run(const std::string& file, const store::Trace& trace, const AnalyzeOptions& options = {},
                      int skip_first_steps = 0);

enum class Verdict { Unchanged, Regression, Improvement };
const char* to_string(Verdict v);

struct MetricDiff {
  std::string id;     // "step_time_median", "step_time_p90", "gpu_busy_share", "data_wait_share", ...
  std::string title;  // "Step time (median)"
  bool relative = false;        // threshold and change are relative (step time) or absolute (shares)
  bool higher_is_worse = true;  // gpu_busy_share: lower is worse
  double base = 0, now = 0;     // statistic on each side (µs for step time, fraction for shares)
  double change = 0;            // relative (now/base - 1) or absolute (now - base)
  double ci_lo = 0, ci_hi = 0;  // seeded bootstrap 95% interval of `change` (when ci_valid)
  bool ci_valid = false;
  double threshold = 0;
  // Shares only: the change of the component's time per step (GPU idle for gpu_busy_share) as a fraction of
  // the base mean step time. A share counts as changed only when this moved past the threshold the same way,
  // so a share that rises merely because the step got shorter (another bottleneck went away) is no regression.
  double time_change = 0;
  // Shares only: the component's mean time per step on each side (for gpu_busy_share the GPU idle time), the
  // mean step, and the bootstrap test of time_change (the share moves with the step's length alone; this does
  // not).
  double base_time_us = 0, new_time_us = 0, base_step_us = 0, new_step_us = 0;
  double time_ci_lo = 0, time_ci_hi = 0;
  bool time_ci_valid = false;
  double time_p_value = 1;
  bool exceeds_threshold = false;
  double p_value = 1;  // two-sided, from the same bootstrap as the interval: < 0.05 iff it excludes 0
  double p_adjusted = 1;        // Holm-adjusted over the tested metrics
  bool tested = false;          // false: too few steps for the test; threshold alone decides
  bool significant = false;
  Verdict verdict = Verdict::Unchanged;
  std::string note;             // e.g. "too few steps for a significance test (3 vs 4)"
};

struct KernelDiff {
  std::string name;
  double base_us_per_step = 0, new_us_per_step = 0;
  double base_count_per_step = 0, new_count_per_step = 0;
  bool fails = false;  // past kernel_regression_us / _ratio
  // Sampled rows (host functions): two standard errors of the change (of the value, for an added or removed
  // one) from the sample counts, each a Poisson count; 0 for traced rows (kernels, ops).
  double noise_us_per_step = 0;
  double delta_us_per_step() const { return new_us_per_step - base_us_per_step; }
};

// Changes by name at one level (kernels, ops): on both sides, largest |Δ time per step| first; only in NEW;
// only in BASE — each list cut to the config's top N, the totals and regressions counted before the cut.
struct NameLevelDiff {
  std::vector<KernelDiff> changed, added, removed;
  int64_t added_total = 0, removed_total = 0;
  int64_t regressions = 0;
  // Sampled levels: the rows left out because their change (or value) is within noise_us_per_step: "+0.005
  // µs" from 4 samples against 4, "added 16.9 µs" from one sample over 59 steps.
  int64_t within_noise = 0;
  bool empty() const { return changed.empty() && added.empty() && removed.empty(); }
};

struct FindingDiff {
  std::string rule;
  enum class Status { Appeared, Disappeared, Changed, Persisting } status = Status::Persisting;
  bool has_base = false, has_new = false;
  store::Severity base_severity = store::Severity::Low, new_severity = store::Severity::Low;
  double base_share = 0, new_share = 0;  // est. saving as a share of step time
  std::string summary;                   // the NEW one's summary when present, else the base one's
  bool fails = false;                    // counted as a regression (config fail_on_new_findings)
};
const char* to_string(FindingDiff::Status s);

struct DiffSide {
  std::vector<std::string> files;
  int64_t steps = 0;          // steps compared (after warm-up steps were dropped)
  int64_t steps_dropped = 0;  // warm-up steps dropped
  int64_t gpu_traced_steps = 0;  // of `steps`, those whose CUDA activity was traced (the GPU shares' steps)
  std::vector<std::string> step_sources;  // per file
  bool has_gpu = false;
};

struct DiffResult {
  DiffSide base, now;
  DiffConfig config;
  std::vector<MetricDiff> metrics;
  std::vector<KernelDiff> kernel_changes;  // kernels on both sides, largest |Δ time per step| first (top N)
  std::vector<KernelDiff> kernels_added;   // only in NEW, largest time first (top N)
  std::vector<KernelDiff> kernels_removed; // only in BASE, largest time first (top N)
  int64_t kernels_added_total = 0, kernels_removed_total = 0;
  int64_t kernel_regressions = 0;          // kernels past kernel_regression_us / _ratio (they fail the diff)
  NameLevelDiff ops;                       // framework ops, the same way
  NameLevelDiff host_functions;  // CPU runs: the training thread's functions (listed, never failing)
  std::vector<FindingDiff> findings;       // appeared, disappeared, changed, persisting (in that order)
  std::vector<std::string> notes;
  // Two job folders: the per-rank comparison as a JSON object (multirank_diff_json), written under "ranks";
  // empty: none.
  std::string ranks_json;
  bool regression = false;                 // any metric regression, failing finding, kernel or op
  int exit_code() const { return regression ? 1 : 0; }
};

// Pools the steps of every run per side and compares. Runs need not have steps: a run without steps counts
// as one window. Never throws for valid analyses.
DiffResult diff_runs(const std::vector<DiffRun>& base, const std::vector<DiffRun>& now, const DiffConfig& config = {});

// Renderings. JSON: "stepscope.diff/1" (docs/ci.md). JUnit: one testcase per metric, a failure per
// regression; plus a findings testcase and a kernels testcase. Markdown: a GitHub step summary.
std::string diff_to_json(const DiffResult& d);
std::string diff_to_junit(const DiffResult& d);
std::string diff_to_markdown(const DiffResult& d);
// Text: the metrics one row each, or, for a terminal of `columns` narrower than that table (columns > 0),
// each metric's confidence interval, threshold and test on a line under its row.
std::string diff_to_text(const DiffResult& d, int columns = 0);

}  // namespace stepscope::analyzer
