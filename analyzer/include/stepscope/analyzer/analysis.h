// The analyzer's result: per-step breakdown and findings. Serialized as "stepscope.analysis/1"
// (docs/analysis-json.md); report, diff and the GUI consume this struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stepscope/analyzer/critical_path.h"
#include "stepscope/analyzer/what_if.h"
#include "stepscope/analyzer/gpu_breakdowns.h"
#include "stepscope/analyzer/graph_replays.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// Untraced: the step lies outside the recording's GPU windows (`record --gpu-window N/M`): no GPU figures.
enum class Bound { Input, Launch, Sync, Host, Gpu, Other, Untraced };
const char* to_string(Bound b);

struct StepBreakdown {
  int64_t index = 0;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int64_t gpu_busy_ns = 0;     // union of kernels, copies, memsets on all devices and streams
  int64_t data_wait_ns = 0;    // GPU idle while the launching thread waits for the next batch
  int64_t launch_idle_ns = 0;  // GPU idle (queue empty) while the host is inside the launch call of the next work
  int64_t sync_idle_ns = 0;    // GPU idle after a host-side synchronization until work resumes
  int64_t host_idle_ns = 0;    // GPU idle (queue empty) while the launching thread runs host code before its launch
  int64_t other_idle_ns = 0;   // the rest: GPU-side gaps with work queued, gaps with no known launch
  // GPU idle that the profiler's own per-launch cost added (removed from launch/host idle; see
  // AnalysisSummary::profiler). busy + data + launch + sync + host + other + profiler == dur.
  int64_t profiler_ns = 0;
  Bound bound = Bound::Gpu;
  int64_t kernels = 0;         // kernels assigned to this step
  // Time the host spent waiting for input inside the step, whether or not the GPU was busy meanwhile
  // (TF profiler's "input" time). data_wait_ns is the part of it during which the GPU was idle too.
  int64_t host_data_wait_ns = 0;
  // False when the recording traced CUDA activity in windows (store gpu_windows) and this step lies outside
  // them: its GPU busy and idle parts are zero (unknown), it takes no part in findings; its duration and host
  // data wait are still measured.
  bool gpu_traced = true;
  // The first step of 4 or more, longer than kWarmupStepFactor × the median of the others: it carries one-time
  // costs (CUDA context and module loading, allocator growth, autotuning, the first batch with nothing
  // prefetched) that no suggested change removes. Left out of the shares that decide severities; views start on
  // the steps after it.
  bool warmup = false;
  // GPU busy per device (device id, ns), when the trace has more than one device; gpu_busy_ns is their union.
  std::vector<std::pair<int64_t, int64_t>> device_busy_ns;
};

struct TimeRange {
  int64_t start_ns = 0, end_ns = 0;
};

struct FindingResult {
  std::string rule;  // "input-bound", "launch-overhead", "host-compute", "small-gemm-loop", "sync-stall", "pageable-memcpy", "no-tensor-cores"
  store::Severity severity = store::Severity::Low;
  std::vector<int64_t> steps;          // indexes of affected steps
  std::vector<TimeRange> ranges;       // where in time the evidence lies
  double est_savings_us_per_step = 0;  // estimated saving per affected step
  double share = 0;                    // est. saving as a fraction of summed step time
  std::string summary;                 // one line
  std::string suggestion;              // concrete change, may hold a code snippet
  std::string evidence_json = "{}";    // a JSON object: kernel names, counts, API calls, stacks
  // The what-if replay of this finding's cure (WhatIf::cures; launch-overhead: CUDA graphs), when it ran: the
  // predicted step and the replayed step minus it. The rule's own est_savings_us_per_step is the idle it explains.
  std::string replayed_cure;
  double replayed_step_us = 0, replayed_saving_us = 0;
};

struct KernelStat {
  std::string name;
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0, max_ns = 0;
  double mean_ns() const { return count ? double(total_ns) / double(count) : 0.0; }
};

struct HostFunctionStat {  // where the training thread was: a function (CPU samples) or an op (ranges)
  std::string name;
  int64_t samples = 0;  // sample count (for ops: 0)
  int64_t periods =
      0;  // sampling periods they stand for: more than samples where a POSIX timer merged expiries
  int64_t time_ns = 0;  // its samples' periods inside the window, or the op's exclusive time: a time, never a share
  bool on_cpu = true;   // false: `--wall` samples of the thread blocked here (off CPU)
  // Samples only: the time of the samples with this function anywhere on their stack (once per sample, however
  // deep it recurses), time_ns and all it called; >= time_ns. 0 for ops (ranges).
  int64_t inclusive_ns = 0;
};

// Another thread of the program in the same window, kept apart from the training thread (pool, loader, workers).
struct HostThreadStat {
  int64_t pid = 0, tid = 0;
  std::string name;             // thread name ("" when unknown)
  int64_t samples = 0;          // on-CPU samples inside the window
  int64_t on_cpu_ns = 0;        // its samples' periods inside the window
  bool other_process = false;   // a process other than the training thread's (DataLoader workers, ...)
};

// Where the host's time went inside a window of the run (docs/rules.md, "Host activity"): measured per thread from
// its own samples, for the thread that runs the steps and issues the GPU work. Every time adds up within the
// window: the training thread's functions sum to its on-CPU (+ off-CPU with --wall) time, at most window_ns.
struct HostActivity {
  // "gpu-waited-for-host": the GPU idle inside steps that the host caused (queue empty); "steps": the steps
  // themselves (a run without GPU activity); "" when there is nothing to show.
  std::string window;
  int64_t window_ns = 0;        // summed length of the window
  std::string source;           // "samples" (CPU samples), "ranges" (op/annotation exclusive times), ""
  int64_t pid = 0, tid = 0;     // the training thread (samples only)
  std::string thread_name;
  std::string thread_reason;    // how it was chosen: "runs the steps", "launches GPU work", "most samples"
  int64_t sample_period_ns = 0; // what one sample stands for
  std::string period_source;    // "meta collector.cpu_hz (perf_event task-clock)", "median sample spacing"
  bool wall = false;            // off-CPU samples present (--wall): off_cpu_ns is measured, not inferred
  int64_t on_cpu_ns = 0;        // the training thread's on-CPU time inside the window
  int64_t off_cpu_ns = 0;       // ... off CPU: measured with --wall, else window_ns - on_cpu_ns (blocked or waiting)
  std::vector<HostFunctionStat> functions;     // the training thread's, longest first
  std::vector<HostThreadStat> other_threads;   // busiest first
};

// How much of the recorded time the profiler's own per-launch cost explains (docs/rules.md, "Profiler cost").
struct ProfilerCorrection {
  bool applied = false;
  double cost_ns_per_launch = 0;  // what one traced launch costs the host
  std::string source;             // "meta cupti.launch_cost_ns", "default: stepscope 0.1 …", or why not applied
  int64_t launches = 0;           // launch calls inside steps
  double removed_us = 0;          // summed StepBreakdown::profiler_ns (launches when applied, and Python hooks)
  double step_median_us = 0;      // recorded median step
  double corrected_step_median_us = 0;  // median of (dur - profiler): the estimated unprofiled step
  // --step-func/--data-wait-func: what one hooked Python call of each kind cost the program (meta
  // python.hook_ns_per_step_call / _wait_call, measured at install) and how many such calls the steps made
  // (a step-func boundary each, and each data-wait-func wait); taken out of the steps' host time.
  double hook_ns_per_step_call = 0, hook_ns_per_wait_call = 0;
  int64_t hook_step_calls = 0, hook_wait_calls = 0;
};

struct AnalysisSummary {
  int64_t kernels = 0, memcpys = 0, memsets = 0;
  double gpu_busy_us = 0;  // union over all devices and streams, whole trace
  double gpu_span_us = 0;  // first GPU activity start to last end
  int64_t steps = 0;
  // Steps whose GPU activity was traced (== steps unless the recording traced the GPU in windows), and the
  // recording's window ("all", or "N/M": N steps traced of every M). GPU shares and findings come from the
  // traced steps; step times and the host's data wait from all of them.
  int64_t gpu_traced_steps = 0;
  std::string gpu_window = "all";
  // The traced steps are the run's first ones and fewer than half of them: the windows saw the start-up only
  // (a short run under the default window), said in gpu_window_note.
  bool gpu_traced_start_only = false;
  // The recording lent CUDA tracing to another profiler of the process (torch.profiler) while it traced:
  // meta cupti.lent ("torch.profiler: 1 time, 0.412 s in all ..."), said in gpu_window_note; "" when not.
  std::string cuda_lent;
  std::string step_source = "none";  // regex|step-func|api|profiler-step|nvtx|optimizer|dataloader|periodic|none
  std::string step_regex;  // the --step-regex asked for ("" when none): steps_advice says one unmatched
  // Data waits recorded on other threads than the one that drove the steps (a prefetch thread's): not counted
  // as the loop's wait, said in steps_advice with what to mark when the loop does block on that thread.
  int64_t other_thread_data_waits = 0;
  double other_thread_data_wait_us = 0;  // their union's length
  double step_confidence = 1.0;      // periodic steps: share of the sequence that repeats with the period
  double data_wait_share = 0;        // summed host data wait (StepBreakdown::host_data_wait_ns) / summed step time
  double input_idle_share = 0;       // summed GPU idle while waiting for data (data_wait_ns) / summed step time
  double gpu_busy_share = 0;         // summed step GPU busy / summed step time
  bool has_gpu = false;              // false: the trace holds no GPU activity (said plainly in reports)
  // Breakdown totals over all steps (µs); data_wait_share uses host data wait (see StepBreakdown).
  double step_time_us = 0;
  double traced_step_time_us = 0;  // of the GPU-traced steps (all steps without GPU windows)
  double data_wait_idle_us = 0, launch_idle_us = 0, sync_idle_us = 0, host_idle_us = 0, other_idle_us = 0;
  double profiler_us = 0;
  ProfilerCorrection profiler;
  std::string framework;  // "pytorch", "tensorflow", "jax", "cuda" (no framework seen): the idiom advice uses
  // Steps are host windows. The GPU's own step: from the first GPU work a step launched to the first GPU work
  // the next step launched (consecutive traced steps); its median beside the host's. When the GPU's is longer
  // by kHostAheadMargin the host runs ahead of the GPU (it queues work and waits later, outside the steps or in
  // a later one): step times and per-step figures are the host's, and the GPU's step time is the program's pace.
  double host_step_median_us = 0;  // median step duration
  double gpu_step_median_us = 0;   // 0 when fewer than two consecutive traced steps launched GPU work
  bool host_runs_ahead = false;
  // The recording's meta `python.hooks` ("installed in 1 of 1 Python process", "none: no CPython …"; empty for
  // imported traces): what steps_advice() says when there are no step markers.
  std::string python_hooks;
  // Device events the importer found and could not read (meta import.unread_device_events, e.g.
  // "mtia_ccp_events:25814,mtia_runtime:3453"); empty when none.
  std::string unread_device_events;
  // Events the importer could not read and left out (the malformed part of meta import.dropped_events: keys in
  // parentheses, e.g. "(no ph):984,(ts not a time):3"); empty when none.
  std::string malformed_events;
  // A flight recorder's save (meta flight.*, docs/flight.md): which trigger fired, on which step, and which steps
  // of the window have GPU activity. Empty trigger: not a flight save.
  std::string flight_trigger, flight_detail, flight_gpu_steps;
  int64_t flight_step = -1;
};

// The GPU's step is this much longer than the host's before the host is said to run ahead.
inline constexpr double kHostAheadMargin = 0.25;

// A step slower than the median step by more than the run's own noise, and what differed (step_outliers.h).
struct SlowStep {
  int64_t index = 0, start_ns = 0, dur_ns = 0;
  int64_t excess_ns = 0;          // dur_ns - median step duration
  std::string category;           // key of the breakdown category that grew most ("data_wait", ...); "" when none grew
  int64_t category_ns = 0, category_median_ns = 0;
  std::string contributor_kind;   // "kernel", "copy", "wait", "op", "call", "sync", "function"; "" when none
  std::string contributor;        // its name (full)
  int64_t contributor_ns = 0, contributor_median_ns = 0;
  std::string explanation;        // one line
  // A warm-up step (StepBreakdown::warmup): its excess is start-up cost, said so in the explanation; views pick
  // the slowest steady step before it.
  bool startup = false;
  // The training thread's time off CPU in this step and in the median step (its duration minus its on-CPU
  // samples' periods; -1: not measured). not_running: the contributor explains less than half the excess and
  // off-CPU time grew by at least half of it: the thread was preempted or blocked, not slower.
  int64_t off_cpu_ns = -1, off_cpu_median_ns = 0;
  bool not_running = false;
};

struct StepOutliers {
  int64_t median_ns = 0;          // median step duration
  int64_t noise_ns = 0;           // the run's own noise: 1.4826 × median absolute deviation of step durations
  int64_t threshold_ns = 0;       // a step is slow above median + threshold
  int64_t slow_count = 0;         // steps above it; `slow` explains the slowest of them
  std::vector<SlowStep> slow;     // slowest first
  // Judged on Analysis::gpu_steps, the steps in the GPU's time (the host runs ahead): there a host step that waits
  // in a sync for the queued GPU work is not slow (the H200's launch_bound --graph: every 1000th host step 21 ms,
  // its "contributor" the ~350 queued replays' kernels).
  bool gpu_time = false;
  int64_t steps = 0;  // the steps judged
};

struct Analysis {
  std::string source_file;
  AnalysisSummary summary;
  std::vector<StepBreakdown> steps;
  // When the host runs ahead of the GPU (AnalysisSummary::host_runs_ahead): the same steps in the GPU's time, each
  // from the first GPU work it launched to the next step's, with busy and the idle parts inside that window (the
  // profiler correction is not applied to them). Empty otherwise. Views show these rows instead of the host's.
  std::vector<StepBreakdown> gpu_steps;
  std::vector<FindingResult> findings;        // ordered by est. saving, largest first
  std::vector<KernelStat> top_kernels;        // by total time, largest first
  HostActivity host_activity;  // the training thread's time while the GPU waited for the host (no GPU: the steps)
  // GPU utilization over time: busy fraction in equal buckets across the GPU span.
  int64_t utilization_bucket_ns = 0;
  std::vector<double> utilization;
  StepOutliers step_outliers;  // slow steps explained against the median step
  GpuBreakdowns gpu_breakdowns;  // HTA's kernel-type, launch, queue-length and annotation breakdowns (whole trace)
  GraphTable graphs;             // CUDA/HIP graph replays and the per-graph table (whole trace); empty: no graphs
  CriticalPaths critical_path;   // per GPU-traced step: what decided when things happened (docs/critical-path.md)
  WhatIf what_if;  // the steps replayed unchanged and with each finding's cure (docs/critical-path.md)
  // The host's waits for input (data_waits rows and data-loader ranges; of the training thread where the steps
  // are its own): a sorted, disjoint union. StepBreakdown::host_data_wait_ns is its overlap with each step.
  std::vector<TimeRange> data_waits;
};

struct AnalyzeOptions {
  std::string step_regex;  // --step-regex: NVTX/annotation ranges whose names match become steps
  // Keep every stretch of the critical path (CriticalPaths::path: ~2 per GPU op) for a view that draws it.
  bool critical_path_segments = false;
  // The input-bound cure's what-if: loader workers that take the batches in turn (`analyze --what-if-workers`).
  int what_if_loader_workers = 4;
};

// Runs step detection, breakdown and every rule. Never throws for odd-but-valid traces.
Analysis analyze(const store::Trace& trace, const AnalyzeOptions& options = {});

// One sentence when the recording traced the GPU in windows (what the GPU figures cover), else empty.
std::string gpu_window_note(const AnalysisSummary& s);
// When the run has no step markers: why (from the Python hooks' status) and what to do; when a --step-regex
// matched no range, that first; when data waits on other threads were left out, that last; else empty.
std::string steps_advice(const AnalysisSummary& s);
// For a flight recorder's save, the sentence that says why it was saved; "" otherwise.
std::string flight_note(const AnalysisSummary& s);
// Without GPU activity, the one sentence every view opens with: that the breakdown is host time, and which device
// events the trace held that stepscope could not read (an MTIA trace is not a run without an accelerator).
std::string no_gpu_note(const AnalysisSummary& s);
// The rows a per-step table shows: the steps in the GPU's time when the host runs ahead (Analysis::gpu_steps),
// else the steps; and the sentence that goes above such rows (empty for the host's steps).
const std::vector<StepBreakdown>& step_rows(const Analysis& a);
std::string step_rows_note(const Analysis& a);
// One sentence when nothing marked the steps: found from the repeating unit of the trace (with its confidence), or
// none found and the run analyzed as one window; else empty. The terminal and the GUI's status line say it.
std::string step_source_note(const AnalysisSummary& s);
// One sentence when the profiler's cost was taken out of the steps: what tracing cost per launch and in all, how
// much of it was GPU idle (the part removed: the rest overlapped GPU work and cost the step nothing), and the
// median step with and without it; else empty.
std::string profiler_cost_note(const AnalysisSummary& s);
// One sentence when a warm-up step was left out of the severities and summaries but counts in the findings'
// shares of step time (a 5 s first step of lazy loading made host-compute "80.4% of the step" in its summary
// and "0.4% of step time" beside it); else empty.
std::string warmup_share_note(const Analysis& a);
// A finding's steps as runs: "0–12" when contiguous, "0, 7, 10–12, 15, …" when not (at most `max_runs` runs):
// "13 steps (0..37)" read as a range for thirteen scattered steps.
std::string compact_step_list(const std::vector<int64_t>& steps, size_t max_runs = 8);
// One sentence per finding whose estimated saving and replayed cure (WhatIf) disagree by more than
// kEstimateReplayRatio, both per traced step: the estimate counts the idle the cause explains, the replay re-runs
// the steps with the cure, where the work the removed waits stood for still bounds the step. Else empty.
inline constexpr double kEstimateReplayRatio = 2.0;
std::string estimate_replay_note(const Analysis& a);
// The same sentence for one finding, given the mean GPU-traced step (traced_mean_step_us; 0: none).
std::string estimate_replay_sentence(const FindingResult& f, double mean_step_us);
double traced_mean_step_us(const Analysis& a);
// A what-if cure in words: "with CUDA graphs", "with the input prefetched", ...
std::string cure_phrase(const std::string& cure);
// One sentence when the importer left events out that it could not read (a ts that is no number, no ph): how many
// and why, so that figures over the rest are not taken for the whole file's; else empty.
std::string malformed_events_note(const AnalysisSummary& s);
// One sentence when the host runs ahead of the GPU (the GPU's step against the host's), else empty.
std::string host_ahead_note(const AnalysisSummary& s);

// JSON: stepscope/analyzer/analysis_json.h (the report room).

}  // namespace stepscope::analyzer
