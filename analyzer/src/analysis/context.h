// The analyzer's working state, shared by the breakdown and the rules (internal; not installed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer::detail {

// Thresholds of the breakdown itself (docs/rules.md, "Breakdown thresholds").
// A GPU gap no longer than this is launch idle (a launch latency plus framework dispatch per op).
inline constexpr int64_t kLaunchGapMaxNs = 200'000;
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

struct Interval {
  int64_t start = 0, end = 0;
};

enum class GpuOpKind : uint8_t { Kernel, Memcpy, Memset };

struct GpuOp {
  int64_t start = 0, end = 0;
  uint32_t index = 0;     // into trace.kernels / memcpys / memsets
  GpuOpKind kind = GpuOpKind::Kernel;
  int32_t step = -1;      // step that launched it (correlation), else the step it started in, else -1
  int64_t api = -1;       // index into trace.api_calls of its launch call, -1 when unknown
};

enum class IdleKind : uint8_t { Data, Launch, Sync, Other };

struct IdleSegment {
  int64_t start = 0, end = 0;
  IdleKind kind = IdleKind::Other;
  int32_t cause = -1;  // Sync: index into Context::blocking
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
};

struct Context {
  const store::Trace* trace = nullptr;
  std::string step_source = "none";
  std::vector<StepWindow> windows;      // sorted by start
  std::vector<StepBreakdown> steps;     // parallel to windows
  std::vector<GpuOp> ops;               // sorted by start
  std::vector<Interval> busy;           // union of ops, sorted, disjoint
  std::vector<IdleSegment> idle;        // classified GPU idle inside the analysed span, sorted
  std::vector<BlockingCall> blocking;   // sorted by start
  std::vector<Interval> data_waits;     // host-side data waits, union, sorted
  std::vector<int64_t> api_op_count;    // per api call: GPU ops it launched
  int64_t total_step_ns = 0;
  int64_t total_gpu_idle_ns = 0;        // summed over steps

  const store::Trace& t() const { return *trace; }
  // Which step contains time `ts` (windows sorted; -1 when none).
  int32_t step_at(int64_t ts) const;
};

// Builds ops, busy union, data waits, blocking calls, idle classification and per-step breakdowns.
void build_breakdown(Context& ctx);

// Ranges on (pid, tid) enclosing [start, end], outermost first (linear scan; call sparingly).
std::vector<int64_t> enclosing_ranges(const store::Trace& t, int64_t pid, int64_t tid, int64_t start, int64_t end);

struct RangeQuery {
  int64_t pid = 0, tid = 0, start = 0, end = 0;
};
// enclosing_ranges for many queries in one pass over the ranges: O(ranges * log(queries) + matches).
std::vector<std::vector<int64_t>> enclosing_ranges_batch(const store::Trace& t, const std::vector<RangeQuery>& q);

}  // namespace stepscope::analyzer::detail
