// CUDA graphs and their nodes from CUPTI's resource callbacks (see cupti_graphs.h).
//
// What CUPTI does (its documentation, NVIDIA's cuda_graphs_trace sample, XLA's and Proton's tracers): a node
// is created (GRAPHNODE_CREATED) on the thread that adds it, inside that call — the launch a stream capture
// turns into a node, or cudaGraphAdd*Node. Instantiation and cloning copy every node (GRAPHNODE_CLONED: the
// new node and the one it copies; a GRAPHNODE_CREATED for the copy may come first) and announce the new graph
// (GRAPHEXEC_CREATED: the executable graph and the graph it came from; GRAPH_CLONED: the clone and its
// original). A replay's kernels carry the executable graph's node ids, so a copy keeps its source node, whose
// row holds the stack.
#include "gpu/cupti_graphs.h"

#include <unordered_map>

namespace stepscope::collector::cupti {
namespace {

// What the calling thread is inside, and the nodes an instantiation or clone made, written when it ends: by
// then the executable graph's id is known (GRAPHEXEC_CREATED may come before or after the copies).
struct ThreadBuild {
  uint16_t depth[size_t(GraphApi::Count)] = {};
  uint32_t exec_id = 0;
  std::vector<store::GraphNode> held;
  std::unordered_map<int64_t, size_t> held_at;  // node id -> index in held (graphs of thousands of nodes)
  bool in(GraphApi a) const { return depth[size_t(a)] != 0; }
  bool copying() const {
    return in(GraphApi::Instantiate) || in(GraphApi::Clone) || in(GraphApi::AddChildGraph);
  }
  bool capturing() const { return in(GraphApi::CaptureBegin) || in(GraphApi::CaptureEnd); }
};
thread_local ThreadBuild t_build;

}  // namespace

int64_t GraphBuilds::stack() {
  const int64_t key = capture_stack_ ? capture_stack_() : 0;
  if (key) stacks_.fetch_add(1, std::memory_order_relaxed);
  return key;
}

void GraphBuilds::on_api(GraphApi api, bool enter, GraphRows& out) {
  ThreadBuild& t = t_build;
  if (api == GraphApi::None || api == GraphApi::Count) return;
  uint16_t& d = t.depth[size_t(api)];
  if (enter) {
    ++d;
    return;
  }
  if (d == 0) return;  // entered before the callbacks were on
  --d;
  if (t.copying()) return;  // the runtime call's driver call ended, or a nested one: the outermost writes
  if (!t.held.empty()) {
    // A node made here that copies none (the child-graph node itself, say): made at this call, its stack.
    int64_t key = 0;
    for (auto& n : t.held) {
      if (n.source_node_id) continue;
      if (!key) key = stack();
      n.stack = key;
    }
    for (auto& n : t.held) {
      if (t.exec_id) n.graph_id = t.exec_id;  // an instantiation's copies: its executable graph's
      out.nodes.push_back(n);
    }
    t.held.clear();
    t.held_at.clear();
  }
  t.exec_id = 0;
}

void GraphBuilds::on_resource(CUpti_CallbackId cbid, const CUpti_GraphData& d, int64_t now, GraphRows& out) {
  ThreadBuild& t = t_build;
  auto graph_id = [this](CUgraph g) {
    uint32_t id = 0;
    return g && ids_.graph && ids_.graph(g, &id) ? int64_t(id) : int64_t(0);
  };
  auto node_id = [this](CUgraphNode n) {
    uint64_t id = 0;
    return n && ids_.node && ids_.node(n, &id) ? int64_t(id) : int64_t(0);
  };
  auto graph = [&](int64_t id, store::GraphKind kind, int64_t source, bool with_stack) {
    if (!id) return;
    store::Graph g;
    g.pid = pid_;
    g.graph_id = id;
    g.kind = kind;
    g.source_graph_id = source;
    g.created = now;
    g.stack = with_stack ? stack() : 0;
    out.graphs.push_back(g);
  };
  switch (cbid) {
    case CUPTI_CBID_RESOURCE_GRAPH_CREATED:
      // Inside an instantiation a graph of CUDA's own: no kind the program chose, no stack of its.
      if (t.capturing())
        graph(graph_id(d.graph), store::GraphKind::Capture, 0, true);
      else if (t.copying())
        graph(graph_id(d.graph), store::GraphKind::Unknown, 0, false);
      else
        graph(graph_id(d.graph), store::GraphKind::Explicit, 0, true);
      break;
    case CUPTI_CBID_RESOURCE_GRAPH_CLONED:
      graph(graph_id(d.graph), store::GraphKind::Clone, graph_id(d.originalGraph),
            t.in(GraphApi::Clone) && !t.in(GraphApi::Instantiate));
      break;
    case CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED: {
      uint32_t id = 0;
      if (!d.graphExec || !ids_.exec || !ids_.exec(d.graphExec, &id) || !id) break;
      if (t.in(GraphApi::Instantiate)) t.exec_id = id;  // its copies' graph (outside one: none held)
      graph(id, store::GraphKind::Instantiated, graph_id(d.graph), true);
      break;
    }
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED:
    case CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED: {
      store::GraphNode n;
      n.pid = pid_;
      n.node_id = node_id(d.node);
      if (!n.node_id) break;
      n.graph_id = graph_id(d.graph);
      n.kind = store::GraphNodeKind(int32_t(d.nodeType) + 1);  // CUgraphNodeType + 1: 0 stays unknown
      n.created = now;
      if (cbid == CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED) n.source_node_id = node_id(d.originalNode);
      if (t.copying()) {
        // Held until the call ends: a copy announced twice (created, then cloned) is one row, with its
        // source.
        auto [at, fresh] = t.held_at.emplace(n.node_id, t.held.size());
        if (fresh)
          t.held.push_back(n);
        else if (n.source_node_id)
          t.held[at->second].source_node_id = n.source_node_id;
        break;
      }
      // Made one by one (a launch under stream capture, cudaGraphAdd*Node): where the program made it.
      if (!n.source_node_id) n.stack = stack();
      out.nodes.push_back(n);
      break;
    }
    default:
      break;
  }
}

}  // namespace stepscope::collector::cupti
