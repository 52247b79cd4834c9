// CUDA/HIP graph replays and the per-graph table (docs/analysis-json.md, "graphs"; docs/rules.md, "CUDA graphs"):
// which GPU records each replay of each graph ran, what a replay cost the GPU and the host, and how long the GPU
// idled inside and between replays.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// One replay: the GPU records of one graph launch — those sharing the launch's correlation id, or, where the
// trace has none, consecutive records of one graph on one device.
struct GraphReplay {
  int64_t pid = 0;
  int64_t graph_id = 0;
  int64_t correlation = 0;  // of the launch call; 0 = none
  int64_t api = -1;         // the launch call (trace.api_calls index); -1 when the trace has none
  int64_t device = 0;
  int64_t start_ns = 0, end_ns = 0;  // first record's start, last record's end
  int64_t busy_ns = 0;               // union of its records
  int64_t kernels = 0, memcpys = 0, memsets = 0;
  store::StringId first_kernel = 0;  // its first kernel's name (the trace's string id); 0 when it ran none
  int64_t first_node = 0;            // that kernel's graph node id; 0 when not recorded
  // The record is one interval for the whole replay (CUPTI GRAPH_TRACE, nsys --cuda-graph-trace=graph): what ran
  // inside was not recorded, so nodes and idle inside are unknown.
  bool whole = false;
  // GPU idle on the device from the previous replay's end to this one's start (other GPU work in between is not
  // idle); -1 for the first replay on its device.
  int64_t idle_before_ns = -1;
  int64_t eager_ops_before = 0;  // GPU records of no graph in that interval (a piecewise graph's eager segments)
};

// One graph's replays, summarized. Per-replay figures are means over its replays.
struct GraphStat {
  int64_t pid = 0;
  int64_t graph_id = 0;
  int64_t replays = 0;
  bool whole = false;  // recorded as one interval per replay (GraphReplay::whole)
  // GPU records per replay (kernels + copies + memsets) and kernels per replay: min and max over the replays
  // (equal for a graph that ran the same nodes every time).
  int64_t nodes_min = 0, nodes_max = 0, kernels_min = 0, kernels_max = 0;
  double gpu_us = 0;          // GPU busy per replay
  double span_us = 0;         // first start to last end per replay
  double idle_inside_us = 0;  // span - busy per replay
  // The launch call's duration per replay (cudaGraphLaunch, hipGraphLaunch), over the replays whose call is in the
  // trace (launch_calls of them).
  double launch_us = 0;
  int64_t launch_calls = 0;
  // GPU idle before each replay since the previous replay on the device (GraphReplay::idle_before_ns), over the
  // replays that have a previous one (idle_before_count); its median too.
  double idle_before_us = 0, idle_before_median_us = 0;
  int64_t idle_before_count = 0;
  int64_t eager_ops_before = 0;  // summed GraphReplay::eager_ops_before
  std::string first_kernel;      // name of the first kernel of its first replay ("" when none)
  // Where it was captured or built (store `graphs`, schema v4): the innermost Python frame of the creating
  // thread's stack — of the graph it was instantiated or cloned from when its own row has none, else of its
  // first kernel's node (graph_nodes, followed to the node it was cloned from) — else the innermost native
  // frame past the profiler and CUDA's libraries (the program's call), else the innermost frame; "" when the
  // trace does not say.
  std::string captured_at;
  store::GraphKind kind = store::GraphKind::Unknown;  // of the graph (or the one it came from) that has the stack
};

struct GraphTable {
  // meta gpu.graph_records: "nodes", "graph", or "" (the trace does not say; see docs/schema.md)
  std::string records;
  // "trace": graph ids as the trace gave them; "kernel-sequence": the importer numbered the graphs by the
  // sequence of records of their replays (meta gpu.graph_ids)
  std::string ids = "trace";
  std::vector<GraphReplay> replays;  // in start order
  std::vector<GraphStat> graphs;     // most GPU time first
  int64_t gpu_records = 0;           // kernels + copies + memsets in the trace
  int64_t replayed_records = 0;      // ... of them inside replays
  int64_t eager_kernels = 0;         // kernels outside any replay
  bool empty() const { return replays.empty(); }
};

// Finds the replays of `t` and sums them up per graph. Empty table when the trace has no graph replay.
GraphTable graph_table(const store::Trace& t);
// True for a launch call that replays a graph: cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch (with nsys's
// version suffixes).
bool is_graph_launch(const std::string& api_name);

}  // namespace stepscope::analyzer
