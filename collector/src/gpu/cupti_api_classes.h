// Which CUDA runtime / driver API calls the collector records by default ("lean" tracing) and at which it
// captures the calling thread's stack. THE one place that decides it; docs/collector.md lists the classes.
// Classification is by the API's name (CUPTI's cuptiGetCallbackName), so every version suffix and per-thread
// default-stream variant (_ptsz, _ptds) of an entry point is covered without a hand-kept list of ids.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::collector::cupti {

enum class ApiClass {
  Other,        // not recorded in lean mode
  Launch,       // kernel and graph launches: cudaLaunchKernel*, cuLaunchKernel*, cu/cudaGraphLaunch, ...
  Copy,         // cudaMemcpy*, cuMemcpy*
  Memset,       // cudaMemset*, cuMemset*
  Sync,         // device/context/stream/event synchronize, stream-wait-event
  Query,        // stream/event query (a polling loop of queries is a sync in disguise)
  PinnedAlloc,  // cudaHostAlloc, cudaMallocHost, cudaHostRegister, cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister
};

struct ApiTraits {
  ApiClass cls = ApiClass::Other;
  bool blocking = false;  // the host thread may wait for the GPU: its stack is captured (rate-limited)
};

// `name` as CUPTI names it, with or without a "_vNNNN" version and "_ptsz"/"_ptds" suffix.
ApiTraits classify_api(store::ApiKind kind, std::string_view name);

// The callback ids of `kind`'s domain that lean tracing records (blocking_only: those whose stacks are captured).
// Uses CUPTI's callback names: requires load_library(); empty when the names are unavailable.
std::vector<uint32_t> lean_callback_ids(store::ApiKind kind, bool blocking_only);

// The CUDA calls inside which a graph or its nodes come into being other than one by one: a stream capture's
// begin and end (the captured graph), an instantiation (the executable graph, its nodes cloned), a clone and
// a child-graph node (the child's nodes cloned into it). Their enter and exit callbacks tell the graph
// callbacks (cupti_graphs.h) what the thread is doing. A graph's launch or upload (Launch) makes nothing: it
// tells the recorder that a graph ran while CUPTI was attached, after which CUPTI must never detach
// (docs/collector.md, "CUDA graphs keep CUPTI attached").
enum class GraphApi : uint8_t {
  None,
  CaptureBegin,
  CaptureEnd,
  Instantiate,
  Clone,
  AddChildGraph,
  Launch,
  Count
};
GraphApi classify_graph_api(store::ApiKind kind, std::string_view name);
// Callback id -> GraphApi for `kind`'s domain (index: the id), from CUPTI's names; requires load_library().
std::vector<GraphApi> graph_api_table(store::ApiKind kind);

}  // namespace stepscope::collector::cupti
