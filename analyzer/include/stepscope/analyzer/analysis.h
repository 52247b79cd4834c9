// The analyzer's result: per-step breakdown and findings. Serialized as "stepscope.analysis/1"
// (docs/analysis-json.md); report, diff and the GUI consume this struct.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

enum class Bound { Input, Launch, Sync, Host, Gpu };
const char* to_string(Bound b);

struct StepBreakdown {
  int64_t index = 0;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int64_t gpu_busy_ns = 0;     // union of kernels, copies, memsets on all devices and streams
  int64_t data_wait_ns = 0;    // GPU idle while the launching thread waits for the next batch
  int64_t launch_idle_ns = 0;  // GPU idle while the host is busy issuing launches
  int64_t sync_idle_ns = 0;    // GPU idle after a host-side synchronization until work resumes
  int64_t other_idle_ns = 0;   // the rest of the GPU idle
  Bound bound = Bound::Gpu;
  int64_t kernels = 0;         // kernels assigned to this step
  // Time the host spent waiting for input inside the step, whether or not the GPU was busy meanwhile
  // (TF profiler's "input" time). data_wait_ns is the part of it during which the GPU was idle too.
  int64_t host_data_wait_ns = 0;
  // GPU busy per device (device id, ns), when the trace has more than one device; gpu_busy_ns is their union.
  std::vector<std::pair<int64_t, int64_t>> device_busy_ns;
};

struct TimeRange {
  int64_t start_ns = 0, end_ns = 0;
};

struct FindingResult {
  std::string rule;  // "input-bound", "launch-overhead", "small-gemm-loop", "sync-stall", "pageable-memcpy", "no-tensor-cores"
  store::Severity severity = store::Severity::Low;
  std::vector<int64_t> steps;          // indexes of affected steps
  std::vector<TimeRange> ranges;       // where in time the evidence lies
  double est_savings_us_per_step = 0;  // estimated saving per affected step
  double share = 0;                    // est. saving as a fraction of summed step time
  std::string summary;                 // one line
  std::string suggestion;              // concrete change, may hold a code snippet
  std::string evidence_json = "{}";    // a JSON object: kernel names, counts, API calls, stacks
};

struct KernelStat {
  std::string name;
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t min_ns = 0, max_ns = 0;
  double mean_ns() const { return count ? double(total_ns) / double(count) : 0.0; }
};

struct HostFunctionStat {  // CPU samples / ops that ran while the GPU was idle
  std::string name;
  int64_t samples = 0;  // sample count (for ops: 0)
  int64_t time_ns = 0;  // estimated time
};

struct AnalysisSummary {
  int64_t kernels = 0, memcpys = 0, memsets = 0;
  double gpu_busy_us = 0;  // union over all devices and streams, whole trace
  double gpu_span_us = 0;  // first GPU activity start to last end
  int64_t steps = 0;
  std::string step_source = "none";  // profiler-step|optimizer|dataloader|pattern|api|none
  double data_wait_share = 0;        // summed host data wait (StepBreakdown::host_data_wait_ns) / summed step time
  double gpu_busy_share = 0;         // summed step GPU busy / summed step time
  bool has_gpu = false;              // false: the trace holds no GPU activity (said plainly in reports)
  // Breakdown totals over all steps (µs); data_wait_share uses host data wait (see StepBreakdown).
  double step_time_us = 0;
  double data_wait_idle_us = 0, launch_idle_us = 0, sync_idle_us = 0, other_idle_us = 0;
};

struct Analysis {
  std::string source_file;
  AnalysisSummary summary;
  std::vector<StepBreakdown> steps;
  std::vector<FindingResult> findings;        // ordered by est. saving, largest first
  std::vector<KernelStat> top_kernels;        // by total time, largest first
  std::vector<HostFunctionStat> idle_host_top;  // top CPU functions/ops during GPU idle
  // GPU utilization over time: busy fraction in equal buckets across the GPU span.
  int64_t utilization_bucket_ns = 0;
  std::vector<double> utilization;
};

struct AnalyzeOptions {
  std::string step_regex;  // --step-regex: NVTX/annotation ranges whose names match become steps
};

// Runs step detection, breakdown and every rule. Never throws for odd-but-valid traces.
Analysis analyze(const store::Trace& trace, const AnalyzeOptions& options = {});

// "stepscope.analysis/1" JSON.
std::string to_json(const Analysis& a);

// One finding as a JSON object (the elements of the "findings" array).
std::string finding_to_json(const FindingResult& f);

// Replaces t.findings with a's findings (rule, severity, step span, saving, summary as message; the
// evidence_json column holds the finding's full JSON object).
void store_findings(const Analysis& a, store::Trace& t);

}  // namespace stepscope::analyzer
