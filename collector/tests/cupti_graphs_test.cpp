// CUDA graphs through the collector's own code, without a GPU: CUPTI activity records of graph replays (CUDA
// 13's cupti_activity.h structs, walked by libcupti's cuptiActivityGetNextRecord in decode_activity_buffer)
// and the resource callbacks of a stream capture, an instantiation, explicit construction and a clone
// (CUpti_GraphData as CUPTI hands it to GraphBuilds, the recorder's handler). CUPTI's id queries
// (cuptiGetGraphId and kin) need a driver: here a handle's id is its address minus kHandleBase. Stacks stand
// in as interned Python frames under the keys GraphBuilds asked for; the rows go through take_graph_stacks
// (the collector thread's step) into a real store.
#include <cupti.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "activity_buffer.h"
#include "gpu/cupti_api_classes.h"
#include "gpu/cupti_decode.h"
#include "gpu/cupti_graphs.h"
#include "gpu/graph_stacks.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using collector::cupti::GraphApi;
using collector::cupti::GraphBuilds;
using collector::cupti::GraphRows;
using test::ActivityBuffer;

namespace {

constexpr uintptr_t kHandleBase = 0x10000;
template <class H>
H handle(uint64_t id) {
  return reinterpret_cast<H>(kHandleBase + id);
}
bool graph_id(CUgraph g, uint32_t* id) {
  return *id = uint32_t(reinterpret_cast<uintptr_t>(g) - kHandleBase), true;
}
bool exec_id(CUgraphExec g, uint32_t* id) {
  return *id = uint32_t(reinterpret_cast<uintptr_t>(g) - kHandleBase), true;
}
bool node_id(CUgraphNode n, uint64_t* id) {
  return *id = uint64_t(reinterpret_cast<uintptr_t>(n) - kHandleBase), true;
}

// The stacks the program's threads would have queued: key -1, -2, ... in order of capture.
int64_t g_keys = 0;
int64_t next_key() {
  return -++g_keys;
}

CUpti_GraphData graph_data(uint64_t graph, uint64_t original_graph = 0) {
  CUpti_GraphData d{};
  d.graph = graph ? handle<CUgraph>(graph) : nullptr;
  d.originalGraph = original_graph ? handle<CUgraph>(original_graph) : nullptr;
  return d;
}
CUpti_GraphData node_data(uint64_t graph, uint64_t node, CUgraphNodeType type, uint64_t original_node = 0) {
  CUpti_GraphData d = graph_data(graph);
  d.node = handle<CUgraphNode>(node);
  d.originalNode = original_node ? handle<CUgraphNode>(original_node) : nullptr;
  d.nodeType = type;
  return d;
}
CUpti_GraphData exec_data(uint64_t exec, uint64_t graph) {
  CUpti_GraphData d = graph_data(graph);
  d.graphExec = handle<CUgraphExec>(exec);
  return d;
}

// A runtime call and the driver call inside it, as CUPTI calls back for both.
void api(GraphBuilds& b, GraphApi a, bool enter, GraphRows& out) {
  b.on_api(a, enter, out);  // runtime enter / driver exit
  b.on_api(a, enter, out);  // driver enter / runtime exit
}

// The program: graph 1 captured from a stream (lines 30, 42-44 of train.py), instantiated as executable graph
// 9 at line 50 (its nodes 101-104 copies of 11-14); graph 2 built explicitly (line 60, node 21 at line 61),
// cloned into graph 3 at line 70 (node 31 a copy of 21); a child-graph node 22 added to graph 2 at line 80
// (graph 3 cloned into it: node 41 a copy of 31). Returns the rows; `line_of_key` says which line each
// captured stack is.
GraphRows build_graphs(std::map<int64_t, int>& line_of_key) {
  g_keys = 0;
  GraphBuilds b(4321, {graph_id, exec_id, node_id}, next_key);
  GraphRows out;
  auto expect_stack = [&](int line) { line_of_key[-g_keys] = line; };
  api(b, GraphApi::CaptureBegin, true, out);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, graph_data(1), 1000, out);
  expect_stack(30);
  api(b, GraphApi::CaptureBegin, false, out);
  // Three kernels and a memset launched into the capturing stream: each a node, made in its launch call.
  const CUgraphNodeType types[] = {CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL,
                                   CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_KERNEL};
  for (int i = 0; i < 4; ++i) {
    b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(1, 11 + i, types[i]), 1100 + i, out);
    expect_stack(42 + i);
  }
  api(b, GraphApi::CaptureEnd, true, out);
  api(b, GraphApi::CaptureEnd, false, out);
  // Instantiation: each node copied (announced created, then cloned), the executable graph announced between.
  api(b, GraphApi::Instantiate, true, out);
  for (int i = 0; i < 2; ++i) {
    b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(1, 101 + i, types[i]), 1200, out);
    b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node_data(1, 101 + i, types[i], 11 + i), 1201, out);
  }
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, exec_data(9, 1), 1202, out);
  expect_stack(50);
  for (int i = 2; i < 4; ++i)  // these announced cloned only
    b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node_data(1, 101 + i, types[i], 11 + i), 1203, out);
  b.on_api(GraphApi::Instantiate, false, out);
  CHECK(out.nodes.size() == 4);  // the copies wait for the runtime call's end, not the driver call's
  b.on_api(GraphApi::Instantiate, false, out);
  // Explicit construction: cudaGraphCreate and cudaGraphAddKernelNode (no call of theirs is watched).
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, graph_data(2), 2000, out);
  expect_stack(60);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(2, 21, CU_GRAPH_NODE_TYPE_KERNEL), 2001,
                out);
  expect_stack(61);
  api(b, GraphApi::Clone, true, out);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPH_CLONED, graph_data(3, 2), 3000, out);
  expect_stack(70);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node_data(3, 31, CU_GRAPH_NODE_TYPE_KERNEL, 21), 3001,
                out);
  api(b, GraphApi::Clone, false, out);
  // A child-graph node: the node itself made here (its stack: the call's, taken as the call ends), the
  // child's nodes copied into it.
  api(b, GraphApi::AddChildGraph, true, out);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(2, 22, CU_GRAPH_NODE_TYPE_GRAPH), 4000, out);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node_data(5, 41, CU_GRAPH_NODE_TYPE_KERNEL, 31), 4001,
                out);
  b.on_api(GraphApi::AddChildGraph, false, out);
  b.on_api(GraphApi::AddChildGraph, false, out);
  expect_stack(80);
  CHECK(b.stacks_taken() == 10);  // lines 30, 42-45, 50, 60, 61, 70, 80
  return out;
}

// One replay of executable graph 9 launched with correlation id `corr`: its three kernels and its memset, and
// the cudaGraphLaunch that launched it.
void replay(ActivityBuffer& b, uint32_t corr, uint64_t t) {
  const char* names[] = {"fwd_a", "fwd_b", "", "fwd_c"};
  for (int i = 0; i < 4; ++i) {
    if (i == 2) {
      auto& m = b.add<CUpti_ActivityMemset4>();
      m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
      m.start = t + 20, m.end = t + 25;
      m.bytes = 256;
      m.streamId = 7;
      m.correlationId = corr;
      m.graphId = 9;
      m.graphNodeId = 103;
      m.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
      continue;
    }
    auto& k = b.add<CUpti_ActivityKernel10>();
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = t + 10 * i, k.end = t + 10 * i + 8;
    k.streamId = 7;
    k.correlationId = corr;
    k.graphId = 9;
    k.graphNodeId = 101 + i;
    k.name = names[i];
  }
  auto& a = b.add<CUpti_ActivityAPI>();
  a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  a.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000;
  a.start = t - 5, a.end = t - 1;
  a.processId = 4321;
  a.threadId = 4322;
  a.correlationId = corr;
}

// The innermost frame's line of a stack (the Python line here).
int line_of(const store::Trace& t, int64_t stack) {
  for (const auto& s : t.stacks)
    if (s.id == stack)
      for (const auto& f : t.frames)
        if (f.id == s.frame) return f.line;
  return 0;
}

}  // namespace

TEST_CASE("graph API calls are known by CUPTI's names, suffixes and all") {
  using collector::cupti::classify_graph_api;
  using store::ApiKind;
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaStreamBeginCapture_v10000") == GraphApi::CaptureBegin);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaStreamBeginCapture_ptsz_v10000") == GraphApi::CaptureBegin);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaStreamBeginCaptureToGraph_v12030") ==
        GraphApi::CaptureBegin);
  CHECK(classify_graph_api(ApiKind::Driver, "cuStreamBeginCapture_v2_ptsz") == GraphApi::CaptureBegin);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaStreamEndCapture_ptsz_v10000") == GraphApi::CaptureEnd);
  CHECK(classify_graph_api(ApiKind::Driver, "cuStreamEndCapture") == GraphApi::CaptureEnd);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphInstantiateWithFlags_v11040") ==
        GraphApi::Instantiate);
  CHECK(classify_graph_api(ApiKind::Driver, "cuGraphInstantiate_v2") == GraphApi::Instantiate);
  CHECK(classify_graph_api(ApiKind::Driver, "cuGraphInstantiateWithParams_ptsz") == GraphApi::Instantiate);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphClone_v10000") == GraphApi::Clone);
  CHECK(classify_graph_api(ApiKind::Driver, "cuGraphAddChildGraphNode") == GraphApi::AddChildGraph);
  // Launches and uploads make nothing, but tell the recorder a graph ran while CUPTI was attached.
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphLaunch_v10000") == GraphApi::Launch);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphLaunch_ptsz_v10000") == GraphApi::Launch);
  CHECK(classify_graph_api(ApiKind::Driver, "cuGraphLaunch") == GraphApi::Launch);
  CHECK(classify_graph_api(ApiKind::Driver, "cuGraphUpload_ptsz") == GraphApi::Launch);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphExecKernelNodeSetParams_v10010") == GraphApi::None);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphExecUpdate_v10020") == GraphApi::None);
  CHECK(classify_graph_api(ApiKind::Runtime, "cudaGraphCreate_v10000") == GraphApi::None);
  CHECK(classify_graph_api(ApiKind::Driver, "cudaStreamBeginCapture_v10000") ==
        GraphApi::None);  // not a driver name

  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  const auto rt = collector::cupti::graph_api_table(ApiKind::Runtime);
  const auto drv = collector::cupti::graph_api_table(ApiKind::Driver);
  REQUIRE(rt.size() == CUPTI_RUNTIME_TRACE_CBID_SIZE);
  REQUIRE(drv.size() == CUPTI_DRIVER_TRACE_CBID_SIZE);
  CHECK(rt[CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000] == GraphApi::CaptureBegin);
  CHECK(rt[CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000] == GraphApi::CaptureEnd);
  CHECK(rt[CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000] == GraphApi::Instantiate);
  CHECK(rt[CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000] == GraphApi::Launch);
  CHECK(drv[CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch] == GraphApi::Launch);
  CHECK(drv[CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2] == GraphApi::CaptureBegin);
  CHECK(drv[CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags] == GraphApi::Instantiate);
  CHECK(drv[CUPTI_DRIVER_TRACE_CBID_cuGraphClone] == GraphApi::Clone);
  // The calls whose enter and exit the graph callbacks watch: a handful, and the graph launches and uploads.
  size_t watched = 0, launches = 0;
  for (auto a : rt) watched += a != GraphApi::None, launches += a == GraphApi::Launch;
  for (auto a : drv) watched += a != GraphApi::None, launches += a == GraphApi::Launch;
  CHECK(watched - launches == 28);
  CHECK(launches == 8);  // cudaGraphLaunch, cudaGraphUpload, cuGraphLaunch, cuGraphUpload, each with _ptsz
}

TEST_CASE(
    "CUDA graph replays: each node's kernel, memset and copy with its graph, node and launch, and the line "
    "that captured it") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  std::map<int64_t, int> line_of_key;
  GraphRows built = build_graphs(line_of_key);

  // Two replays (launch correlation ids 70 and 71), a copy outside any graph and a memcpy node of graph 12.
  ActivityBuffer buf;
  replay(buf, 70, 10000);
  replay(buf, 71, 20000);
  auto& m = buf.add<CUpti_ActivityMemcpy6>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
  m.start = 30000, m.end = 30100;
  m.bytes = 4;
  m.correlationId = 72;
  auto& gm = buf.add<CUpti_ActivityMemcpy6>();  // a memcpy node of another executable graph
  gm.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  gm.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  gm.start = 40000, gm.end = 40100;
  gm.bytes = 64;
  gm.correlationId = 73;
  gm.graphId = 12;
  gm.graphNodeId = 1201;
  collector::cupti::DecodeState st;
  st.pid = 4321;
  store::Trace rows;
  REQUIRE(collector::cupti::decode_activity_buffer(buf.bytes.data(), buf.used, rows, st) == 12);
  rows.graphs = built.graphs;
  rows.graph_nodes = built.nodes;

  // The collector thread: the stacks interned (one Python frame each, its line), then the rows that name
  // them.
  store::Trace written;
  store::Process proc;
  proc.pid = 4321;
  proc.name = written.intern("train");
  written.add(proc);
  std::map<int64_t, int64_t> stack_of_key;
  for (const auto& [key, line] : line_of_key) {
    store::Frame f;
    f.id = int64_t(written.frames.size()) + 1;
    f.kind = store::FrameKind::Python;
    f.file = written.intern("train.py");
    f.symbol = written.intern("capture");
    f.line = line;
    written.add(f);
    written.add(store::Stack{int64_t(written.stacks.size()) + 1, 0, f.id});
    stack_of_key[key] = written.stacks.back().id;
  }
  std::vector<int64_t> keys;
  collector::take_graph_stacks(
      rows, [&](int64_t key) { return stack_of_key.count(key) ? stack_of_key[key] : int64_t(0); },
      [&](const auto& r) { written.add(r); }, keys);
  CHECK(keys.size() == 10);
  for (const auto& g : rows.graphs) written.add(g);
  for (const auto& n : rows.graph_nodes) written.add(n);
  rows.graphs.clear();
  rows.graph_nodes.clear();
  test::ScratchDir dir("collector_cupti_graphs");
  const std::string db = dir.file("graphs.db");
  {
    store::StoreWriter w(db);
    w.append(written);
    w.append(rows);
    w.set_meta("gpu.graph_records", "nodes");
    w.close();
  }
  const store::Trace t = store::StoreReader(db).load();
  CHECK(t.meta.at("gpu.graph_records") == "nodes");

  // Per replay: its 3 kernels and its memset, all of graph 9, each on its own node, joined to its
  // cudaGraphLaunch.
  REQUIRE(t.kernels.size() == 6);
  REQUIRE(t.memsets.size() == 2);
  REQUIRE(t.memcpys.size() == 2);
  std::map<int64_t, std::vector<int64_t>> nodes_of_launch;
  for (const auto& k : t.kernels) {
    CHECK(k.graph_id == 9);
    CHECK(k.pid == 4321);
    nodes_of_launch[k.correlation].push_back(k.graph_node_id);
  }
  for (const auto& s : t.memsets) {
    CHECK(s.graph_id == 9);
    CHECK(s.graph_node_id == 103);
    nodes_of_launch[s.correlation].push_back(s.graph_node_id);
  }
  REQUIRE(nodes_of_launch.size() == 2);
  for (auto& [corr, nodes] : nodes_of_launch) {
    std::sort(nodes.begin(), nodes.end());
    CHECK(nodes == std::vector<int64_t>{101, 102, 103, 104});
    int launches = 0;
    for (const auto& a : t.api_calls)
      if (a.correlation == corr) launches += t.str(a.name) == "cudaGraphLaunch";
    CHECK(launches == 1);
  }
  const auto plain =
      std::find_if(t.memcpys.begin(), t.memcpys.end(), [](auto& c) { return c.correlation == 72; });
  REQUIRE(plain != t.memcpys.end());
  CHECK(plain->graph_id == 0);
  CHECK(plain->graph_node_id == 0);
  const auto node_copy =
      std::find_if(t.memcpys.begin(), t.memcpys.end(), [](auto& c) { return c.correlation == 73; });
  REQUIRE(node_copy != t.memcpys.end());
  CHECK(node_copy->graph_id == 12);
  CHECK(node_copy->graph_node_id == 1201);

  // The graphs: kind, source and the line that made each.
  std::map<int64_t, const store::Graph*> graph;
  for (const auto& g : t.graphs) {
    CHECK(g.pid == 4321);
    CHECK_FALSE(graph.count(g.graph_id));
    graph[g.graph_id] = &g;
  }
  REQUIRE(graph.size() == 4);
  CHECK(graph[1]->kind == store::GraphKind::Capture);
  CHECK(graph[1]->created == 1000);
  CHECK(line_of(t, graph[1]->stack) == 30);
  CHECK(graph[9]->kind == store::GraphKind::Instantiated);
  CHECK(graph[9]->source_graph_id == 1);
  CHECK(line_of(t, graph[9]->stack) == 50);
  CHECK(graph[2]->kind == store::GraphKind::Explicit);
  CHECK(line_of(t, graph[2]->stack) == 60);
  CHECK(graph[3]->kind == store::GraphKind::Clone);
  CHECK(graph[3]->source_graph_id == 2);
  CHECK(line_of(t, graph[3]->stack) == 70);

  // The nodes: one row each (the instantiation's copies announced twice too), copies with their source and no
  // stack, the nodes made one by one with theirs.
  std::map<int64_t, const store::GraphNode*> node;
  for (const auto& n : t.graph_nodes) {
    CHECK(n.pid == 4321);
    CHECK_FALSE(node.count(n.node_id));
    node[n.node_id] = &n;
  }
  REQUIRE(node.size() == 12);
  for (int i = 0; i < 4; ++i) {
    const auto* captured = node[11 + i];
    CHECK(captured->graph_id == 1);
    CHECK(captured->source_node_id == 0);
    CHECK(captured->created == 1100 + i);
    CHECK(line_of(t, captured->stack) == 42 + i);
    const auto* copy = node[101 + i];
    CHECK(copy->graph_id == 9);  // the executable graph's, as the replay's records name it
    CHECK(copy->source_node_id == 11 + i);
    CHECK(copy->stack == 0);
  }
  CHECK(node[13]->kind == store::GraphNodeKind::Memset);
  CHECK(node[101]->kind == store::GraphNodeKind::Kernel);
  CHECK(line_of(t, node[21]->stack) == 61);
  CHECK(node[31]->graph_id == 3);
  CHECK(node[31]->source_node_id == 21);
  CHECK(node[22]->kind == store::GraphNodeKind::Graph);
  CHECK(line_of(t, node[22]->stack) == 80);
  CHECK(node[41]->source_node_id == 31);
  CHECK(node[41]->stack == 0);

  // What the analysis asks: for each replayed kernel, the line that captured it — its node's source's stack.
  std::map<std::string, int> line_of_kernel;
  for (const auto& k : t.kernels) {
    const store::GraphNode* n = node.at(k.graph_node_id);
    for (int hops = 0; n->source_node_id && hops < 8; ++hops) n = node.at(n->source_node_id);
    line_of_kernel[t.str(k.name)] = line_of(t, n->stack);
  }
  CHECK(line_of_kernel == std::map<std::string, int>{{"fwd_a", 42}, {"fwd_b", 43}, {"fwd_c", 45}});
}

TEST_CASE("a graph replay as one interval (--cuda-graphs graph): CUPTI's graph trace record") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  ActivityBuffer b;
  auto& g = b.add<CUpti_ActivityGraphTrace2>();
  g.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
  g.start = 5000, g.end = 5600;
  g.deviceId = 0;
  g.contextId = 1;
  g.streamId = 7;
  g.graphId = 9;
  g.correlationId = 70;
  collector::cupti::DecodeState st;
  st.pid = 4321;
  st.correlation_base = int64_t(1) << 32;  // after a re-attach
  store::Trace rows;
  REQUIRE(collector::cupti::decode_activity_buffer(b.bytes.data(), b.used, rows, st) == 1);
  REQUIRE(rows.kernels.size() == 1);
  const auto& k = rows.kernels[0];
  CHECK(rows.str(k.name) == "CUDA graph 9");
  CHECK(k.start == 5000);
  CHECK(k.end == 5600);
  CHECK(k.stream == 7);
  CHECK(k.graph_id == 9);
  CHECK(k.graph_node_id == 0);
  CHECK(k.correlation == (int64_t(1) << 32) + 70);
}

TEST_CASE(
    "replays CUPTI traced no launch for (the kinds off, the graph instrumented) are left out and counted") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  // The H200 proof of 2026-11-30: after a window's end CUPTI went on recording every node of every replay of
  // a graph instantiated while it traced, all under the last traced launch's correlation id.
  ActivityBuffer b;
  replay(b, 70, 10000);
  replay(b, 71, 20000);
  auto kernel = [&b](uint32_t corr, int64_t node, uint64_t t) {
    auto& k = b.add<CUpti_ActivityKernel10>();
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = t, k.end = t + 8;
    k.correlationId = corr;
    k.graphId = 9;
    k.graphNodeId = uint64_t(node);
    k.name = "fwd";
  };
  kernel(70, 101, 15000);  // inside the window: a node run twice by one launch (a conditional body) is kept
  auto nodes_only = [&](uint64_t t) {  // a replay whose cudaGraphLaunch CUPTI did not trace: the last id, 71
    kernel(71, 101, t);
    kernel(71, 102, t + 10);
    kernel(71, 104, t + 30);
    auto& m = b.add<CUpti_ActivityMemset4>();
    m.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    m.start = t + 20, m.end = t + 25;
    m.correlationId = 71;
    m.graphId = 9;
    m.graphNodeId = 103;
  };
  nodes_only(30000);
  nodes_only(40000);
  // One interval a replay (--cuda-graphs graph): the same, keyed by the graph.
  for (uint64_t t : {50000, 60000}) {
    auto& g = b.add<CUpti_ActivityGraphTrace2>();
    g.kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
    g.start = t, g.end = t + 500;
    g.graphId = 12;
    g.correlationId = 80;
  }
  kernel(0, 101, 61000);  // no launch id: never taken for a repeat
  kernel(0, 101, 62000);
  collector::cupti::DecodeState st;
  st.pid = 4321;
  st.untraced_from = 25000;  // the window ended here
  store::Trace rows;
  REQUIRE(collector::cupti::decode_activity_buffer(b.bytes.data(), b.used, rows, st) ==
          2 * 5 + 1 + 2 * 4 + 2 + 2);
  // Replays 70 and 71 whole (3 kernels and a memset each) and 70's repeated node, the first graph-trace
  // interval, the two records without a launch id; neither untraced replay.
  CHECK(rows.kernels.size() == 3 + 3 + 1 + 1 + 2);
  CHECK(rows.memsets.size() == 2);
  for (const auto& k : rows.kernels) CHECK((k.start < 30000 || k.start == 50000 || k.correlation == 0));
  CHECK(st.untraced_replay_records == 4 + 4 + 1);
  // The next window opens: a launch's records inside it are kept, a repeat included.
  st.untraced_to = 65000;
  ActivityBuffer c;
  replay(c, 72, 70000);
  replay(c, 72, 80000);
  store::Trace more;
  collector::cupti::decode_activity_buffer(c.bytes.data(), c.used, more, st);
  CHECK(more.kernels.size() == 6);
  CHECK(st.untraced_replay_records == 9);
  // A re-attach: CUPTI's ids start again, nothing of the old ones is remembered.
  st.forget_replays();
  CHECK(st.window_top == 0);
  CHECK(st.replay_nodes.empty());
}

TEST_CASE(
    "one thread's instantiation holds its copies while another thread's capture is written at once") {
  g_keys = 0;
  GraphBuilds b(4321, {graph_id, exec_id, node_id}, next_key);
  GraphRows a_rows, b_rows;
  api(b, GraphApi::Instantiate, true, a_rows);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED, node_data(1, 101, CU_GRAPH_NODE_TYPE_KERNEL, 11), 10,
                a_rows);
  std::thread other([&] {
    b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(2, 21, CU_GRAPH_NODE_TYPE_KERNEL), 20,
                  b_rows);
  });
  other.join();
  CHECK(a_rows.nodes.empty());
  REQUIRE(b_rows.nodes.size() == 1);
  CHECK(b_rows.nodes[0].node_id == 21);
  CHECK(b_rows.nodes[0].stack == -1);  // made one by one on its thread: that thread's stack
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, exec_data(9, 1), 30, a_rows);
  api(b, GraphApi::Instantiate, false, a_rows);
  REQUIRE(a_rows.nodes.size() == 1);
  CHECK(a_rows.nodes[0].graph_id == 9);
  CHECK(a_rows.nodes[0].source_node_id == 11);
  REQUIRE(a_rows.graphs.size() == 1);
  CHECK(a_rows.graphs[0].stack == -2);
  // An exit whose enter came before the callbacks were on changes nothing; a node made afterwards is written.
  b.on_api(GraphApi::Clone, false, a_rows);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(2, 22, CU_GRAPH_NODE_TYPE_KERNEL), 40,
                a_rows);
  CHECK(a_rows.nodes.size() == 2);
  CHECK(b.stacks_taken() == 3);
}

TEST_CASE("no stack taken (--cuda-stacks-per-s 0, a full queue): the rows are written without one") {
  GraphBuilds b(4321, {graph_id, exec_id, node_id}, [] { return int64_t(0); });
  GraphRows out;
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, graph_data(2), 1, out);
  b.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(2, 21, CU_GRAPH_NODE_TYPE_KERNEL), 2, out);
  REQUIRE(out.graphs.size() == 1);
  REQUIRE(out.nodes.size() == 1);
  CHECK(out.graphs[0].stack == 0);
  CHECK(out.nodes[0].stack == 0);
  CHECK(b.stacks_taken() == 0);
  // And with no id (CUPTI could not say), no row.
  GraphBuilds none(4321, {}, [] { return int64_t(0); });
  none.on_resource(CUPTI_CBID_RESOURCE_GRAPH_CREATED, graph_data(3), 3, out);
  none.on_resource(CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED, node_data(3, 31, CU_GRAPH_NODE_TYPE_KERNEL), 4,
                   out);
  CHECK(out.graphs.size() == 1);
  CHECK(out.nodes.size() == 1);
}
