// CUDA graphs as the program builds them, from CUPTI's resource callbacks: each graph's kind (stream capture,
// explicit, instantiated, clone) and source graph, each node's source node, and the stack of the thread that
// captured or created it. A kernel replayed from a graph names its node (kernels.graph_node_id): that
// executable node's source node holds the line that captured it (docs/collector.md, "CUDA graphs").
//
// The recorder's subscriber calls GraphBuilds on the program's threads; tests call it with synthetic callback
// data. Rows whose stack was captured carry its key (negative, see capture_creation_stack) in `stack` until
// the collector thread puts the unwound stack in its place.
#pragma once

#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "gpu/cupti_api_classes.h"
#include "stepscope/store/records.h"

namespace stepscope::collector::cupti {

// CUPTI's id of a graph, an executable graph and a node (cuptiGetGraphId, cuptiGetGraphExecId,
// cuptiGetGraphNodeId); false when it has none. They need a driver: tests give their own.
struct GraphIdQueries {
  bool (*graph)(CUgraph, uint32_t*) = nullptr;
  bool (*exec)(CUgraphExec, uint32_t*) = nullptr;
  bool (*node)(CUgraphNode, uint64_t*) = nullptr;
};

struct GraphRows {
  std::vector<store::Graph> graphs;
  std::vector<store::GraphNode> nodes;
  bool empty() const { return graphs.empty() && nodes.empty(); }
  void clear() {
    graphs.clear();
    nodes.clear();
  }
};

class GraphBuilds {
 public:
  // `capture_stack`: captures the calling thread's stack, returns its key (< 0) or 0 when it took none.
  GraphBuilds(int64_t pid, GraphIdQueries ids, int64_t (*capture_stack)()) noexcept
      : pid_(pid), ids_(ids), capture_stack_(capture_stack) {}

  // The calling thread enters or leaves a CUDA call of `api` (its enter and exit callbacks). Leaving the
  // outermost instantiation, clone or child-graph addition writes the nodes it made to `out`.
  void on_api(GraphApi api, bool enter, GraphRows& out);
  // One resource callback (CUPTI_CBID_RESOURCE_GRAPH*) with its CUpti_GraphData, on the calling thread.
  void on_resource(CUpti_CallbackId cbid, const CUpti_GraphData& d, int64_t now, GraphRows& out);

  uint64_t stacks_taken() const { return stacks_.load(std::memory_order_relaxed); }

 private:
  int64_t stack();
  int64_t pid_;
  GraphIdQueries ids_;
  int64_t (*capture_stack_)();
  std::atomic<uint64_t> stacks_{0};
};

}  // namespace stepscope::collector::cupti
