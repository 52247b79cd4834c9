// The critical path (docs/critical-path.md): one walk back over the whole trace, from its last GPU work or
// last step end, along the dependency that ended last at each point — host work, launches, waits, GPU work —
// each stretch named by its kind; then cut by the steps' host windows. A step's kinds sum to its duration.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stepscope::analyzer {

enum class PathKind : uint8_t {
  GpuCompute,  // a kernel ran (not a collective)
  GpuComm,     // a collective kernel (NCCL, RCCL) ran
  GpuMemory,   // a copy or memset ran
  Launch,      // the host was inside a launch call, or the GPU waited for a launch to reach it
  Host,        // the host ran its own code (Python, framework dispatch, other CUDA API calls)
  DataWait,    // the host waited for the next batch
  Sync,        // the host was inside a synchronizing call that did not wait for GPU work, or woke up after it
  Other,  // GPU work that waited on neither its stream nor its launch (another stream's event), or unknown
};
inline constexpr int kPathKinds = 8;
const char* to_string(PathKind k);

struct CriticalPath {
  int64_t step = 0;             // StepBreakdown::index
  int64_t ns[kPathKinds] = {};  // time on the path by kind; sums to the step's duration
  int64_t segments = 0;         // stretches walked
  // The longest stretches on the path (at most 5): what to look at first.
  struct Segment {
    PathKind kind = PathKind::Other;
    int64_t start = 0, end = 0;
    std::string what;  // kernel or API name, "host code", the wait's source
  };
  std::vector<Segment> longest;
};

// One stretch of the path inside a GPU-traced step (kept with AnalyzeOptions::critical_path_segments).
struct PathSegment {
  int64_t start = 0, end = 0;
  int64_t step = 0;  // StepBreakdown::index
  PathKind kind = PathKind::Other;
  std::string_view what;  // a name in the trace's strings, or static text: valid while the trace is
};

struct CriticalPaths {
  std::vector<CriticalPath> steps;  // the GPU-traced steps, in order
  int64_t ns[kPathKinds] = {};      // summed over the steady ones
  int64_t total_ns = 0;
  int64_t segments = 0;           // stretches the walk made
  std::vector<PathSegment> path;  // the whole path in the traced steps, by time (only when asked for)
  bool empty() const { return steps.empty(); }
};

}  // namespace stepscope::analyzer
