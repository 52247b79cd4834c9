// The analyzer's working state, shared by the breakdown and the rules (internal; not installed).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer::detail {

// Thresholds of the breakdown itself (docs/rules.md, "Breakdown thresholds").
// A GPU gap with no known launch call is launch idle when no longer than this (a launch latency plus framework
// dispatch per op); gaps whose next launch is known are judged by the queue model instead.
inline constexpr int64_t kLaunchGapMaxNs = 200'000;
// Work that starts longer than this after its launch call returned waited in the GPU's queue (behind another
// stream, untraced work): the gap after the return is the GPU's own (other), not the launch's. A launch on an idle
// GPU starts within a few µs of the call's return (an AMD decode trace's first copy started 7.8 ms after its
// 10 µs hipMemcpyAsync returned, and the whole 7.8 ms had been booked as launch idle).
inline constexpr int64_t kQueuedLatencyMaxNs = 200'000;
// A gap whose host-bound part (its launch and host idle; the data waits and syncs inside it left out) is no longer
// than this is per-op dispatch — launch calls, Python and framework code between launches — which fusion and CUDA
// graphs remove; a longer one is a host computation of its own.
// Eager PyTorch dispatches an op in 10-100 µs; even slow Python dispatch stays well under 1 ms per op.
inline constexpr int64_t kDispatchGapMaxNs = 1'000'000;
// Per-launch cost of tracing with stepscope 0.1's CUPTI activity kinds when a recording does not carry its own
// calibration (meta cupti.launch_cost_ns): H100, launch_bound --ops 30, plain 137.5 µs vs recorded 230.6 µs per
// step of 31 launches = 3.0 µs per launch; a CUPTI-only injection library with the same kinds cost ~3 µs too.
inline constexpr int64_t kDefaultProfilerLaunchCostNs = 3'000;
// GPU-side gap left per kernel once launches are batched (CUDA graph replay) and the host is off the critical path.
// Measured on an H100 (launch_bound --ops 30): the graphed step takes 53.5 µs, no longer than the same 31 kernels'
// busy time when traced eagerly (54.7 µs per step), so graph nodes follow each other within the kernels' own
// timing noise and nothing is kept back. (NVIDIA's CUDA-graphs post measured ~0.5 µs per node on a V100: on older
// GPUs the saving is an upper bound by about that much per kernel.)
inline constexpr int64_t kResidualGapNs = 0;
// After a blocking call returns, the GPU idle until the host issues the next launch still counts as sync idle,
// for at most this long (the queue was drained by the sync; beyond this the host is doing other work).
inline constexpr int64_t kSyncTailMaxNs = 200'000;
// A step is labelled `gpu` when the GPU is busy for at least this share of it.
inline constexpr double kGpuBoundBusyShare = 0.80;
// Without GPU activity, a step whose host data wait is at least this share of it is labelled `input`
// (the input-bound rule's "high" share), else `host`.
inline constexpr double kHostInputBoundShare = 0.20;
// An async copy call lasting at least this long and returning after its copy ended blocked the host.
inline constexpr int64_t kBlockingCopyMinNs = 20'000;

// With 4 steps or more, a first step longer than this many times the median of the others is a warm-up step: it is
// analysed and shown, but left out of the shares that decide severities.
inline constexpr double kWarmupStepFactor = 1.5;
// With 2 or 3 steps there is no median of the others to trust: a first step longer than this many times the
// longest of them is the warm-up (a two-step AlexNet trace: 5.0 s of lazy module loading and cuDNN's
// algorithm search, then a 27 ms step; host-compute claimed 2.51 s "per step").
inline constexpr double kFewStepsWarmupFactor = 10.0;
// A recording that traced the GPU in windows (`record --gpu-window N/M`): a step counts as traced when its
// recording's windows cover this share of it. The collector switches at its own step marker, a few µs from where
// the analyzer puts the boundary; a step half in a window has half its GPU work missing and is left out.
inline constexpr double kGpuWindowCoverage = 0.95;

// A median step figure: the middle value, the mean of the two middle ones for an even count (the slow-step list,
// the summary and the metrics once used three definitions and showed 8.855, 8.3 and 7.742 ms for one run).
inline int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(mid), v.end());
  int64_t m = v[mid];
  if (v.size() % 2 == 0) {
    const int64_t lower = *std::max_element(v.begin(), v.begin() + ptrdiff_t(mid));
    m = lower + (m - lower) / 2;
  }
  return m;
}

// The middle value, the upper of the two middles for an even count (nth_element's); `empty` when there is none.
inline int64_t upper_median(std::vector<int64_t> v, int64_t empty = 0) {
  if (v.empty()) return empty;
  std::nth_element(v.begin(), v.begin() + int64_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct Interval {
  int64_t start = 0, end = 0;
};

enum class GpuOpKind : uint8_t { Kernel, Memcpy, Memset };

// 32 bytes an op (10M kernels: 320 MB): indexes in 32 bits.
struct GpuOp {
  int64_t start = 0, end = 0;
  uint32_t index = 0;     // into trace.kernels / memcpys / memsets
  int32_t step = -1;      // step that launched it (correlation), else the step it started in, else -1
  int32_t api = -1;       // index into trace.api_calls of its launch call, -1 when unknown
  GpuOpKind kind = GpuOpKind::Kernel;
};
static_assert(sizeof(GpuOp) == 32);

enum class IdleKind : uint8_t { Data, Launch, Sync, Host, Other };

struct IdleSegment {
  int64_t start = 0, end = 0;
  IdleKind kind = IdleKind::Other;
  int32_t cause = -1;      // Sync: index into Context::blocking
  int64_t api = -1;        // Launch/Host: trace.api_calls index of the launch that ended the gap
  bool dispatch = false;   // Launch/Host: its gap's host-bound part is no longer than kDispatchGapMaxNs
  int64_t gap = -1;        // Launch/Host: where its gap begins (one gap's host-bound pieces share it)
};

// A host-side call that waits for the device.
struct BlockingCall {
  int64_t start = 0, end = 0;  // while the host was blocked
  int64_t tail_end = 0;        // end extended to the next launch on that thread (at most kSyncTailMaxNs)
  int64_t pid = 0, tid = 0;
  std::string name;            // API name, cuda_sync kind, or op name
  std::string what;            // extra: "DtoH Device -> Pageable, 704 B" for copies
  int64_t api = -1;            // trace.api_calls index, or -1
  int64_t range = -1;          // trace.ranges index (blocking op), or -1
  int32_t step = -1;
  int64_t idle_ns = 0;         // sync idle attributed to it (whole analysed span)
  int64_t in_step_idle_ns = 0; // ... of which inside steps
};

struct StepWindow {
  int64_t start = 0, end = 0;
  int64_t pid = 0, tid = 0;
  int64_t number = -1;  // the recorder's step number (store `steps`); -1: found here, numbered by position
};

struct Context {
  const store::Trace* trace = nullptr;
  std::string step_source = "none";
  double step_confidence = 1.0;
  std::string framework;                // detect_framework(): the idiom suggestions are written in
  std::vector<StepWindow> windows;      // sorted by start
  std::vector<Interval> gpu_windows;    // union of the store's gpu_windows (traced intervals); empty: all traced
  std::vector<StepBreakdown> steps;     // parallel to windows
  std::vector<GpuOp> ops;               // sorted by start
  std::vector<Interval> busy;           // union of ops, sorted, disjoint
  std::vector<IdleSegment> idle;        // classified GPU idle inside the analysed span, sorted
  std::vector<BlockingCall> blocking;   // sorted by start
  std::vector<Interval> data_waits;     // host-side data waits, union, sorted
  // Waits on other threads than the one whose steps these are (a prefetcher's), left out of data_waits: how
  // many and their union's length (AnalysisSummary::other_thread_data_waits).
  int64_t other_thread_waits = 0, other_thread_wait_ns = 0;
  std::vector<uint32_t> api_op_count;   // per api call: GPU ops it launched
  std::vector<int64_t> dispatch_idle;   // per step: launch + host idle inside dispatch gaps (after correction)
  std::vector<int64_t> dispatch_launch_idle;  // per step: the launch-call part of dispatch_idle
  std::vector<int64_t> launches;        // per step: launch calls (API calls that issued GPU work) it made
  std::vector<int64_t> hook_ns;         // per step: what its --step-func/--data-wait-func hooked calls cost
  std::vector<uint8_t> steady;          // per step: 1 unless it is a warm-up first step (kWarmupStepFactor)
  int64_t total_step_ns = 0;
  int64_t traced_step_ns = 0;           // ... of the steps whose GPU activity was traced: the base of GPU shares
  int64_t traced_steps = 0;             // how many those are (outside the GPU windows no kernel is recorded)
  int64_t total_gpu_idle_ns = 0;        // summed over steps (profiler cost excluded)
  int64_t steady_step_ns = 0;           // summed duration of the steady steps: the base of severity shares
  int64_t residual_gap_ns = 0;          // GPU-side gap left per kernel once launches are batched (measured)
  // Found once per analysis (host_activity.h): the thread that runs the steps, and what one CPU sample stands for.
  int64_t training_pid = 0, training_tid = 0;  // 0: no samples, or no thread on CPU in the steps
  std::string training_reason;                 // "runs the steps", "launches GPU work", "most samples in the steps"
  int64_t sample_period_ns = 0;
  std::string sample_period_source;
  ProfilerCorrection profiler;
  GraphTable graphs;  // the trace's graph replays (graph_replays.h); moved into Analysis::graphs at the end

  const store::Trace& t() const { return *trace; }
  // Which step contains time `ts` (windows sorted; -1 when none).
  int32_t step_at(int64_t ts) const;
};

// Builds ops, busy union, data waits, blocking calls, idle classification and per-step breakdowns.
void build_breakdown(Context& ctx);

// `gpu` when the GPU is busy kGpuBoundBusyShare of the step, else the largest idle cause (docs/rules.md).
Bound bound_of(const StepBreakdown& st, bool no_gpu, int64_t dispatch_idle);

// Idle time the rules' savings have already explained. Rules run in a fixed order and claim the idle their saving
// counts, so no two findings count the same idle twice (docs/rules.md, "Savings that add up").
class SavingsLedger {
 public:
  // Claims [start, end) and returns how much of it was not claimed before.
  int64_t claim(int64_t start, int64_t end);
  // Unclaimed part of [start, end), without claiming it.
  int64_t unclaimed(int64_t start, int64_t end) const;

 private:
  std::vector<Interval> claimed_;  // sorted, disjoint
};

// Ranges on (pid, tid) enclosing [start, end], outermost first (linear scan; call sparingly).
std::vector<int64_t> enclosing_ranges(const store::Trace& t, int64_t pid, int64_t tid, int64_t start, int64_t end);

struct RangeQuery {
  int64_t pid = 0, tid = 0, start = 0, end = 0;
};
// enclosing_ranges for many queries in one pass over the ranges: O(ranges * log(queries) + matches).
std::vector<std::vector<int64_t>> enclosing_ranges_batch(const store::Trace& t, const std::vector<RangeQuery>& q);

}  // namespace stepscope::analyzer::detail
