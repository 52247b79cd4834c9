#include "cupti_api_classes.h"

#include <cupti.h>

#include <string>

#include "gpu/cupti_api.h"
#include "gpu/cupti_decode.h"

namespace stepscope::collector::cupti {
namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}
bool contains(std::string_view s, std::string_view p) { return s.find(p) != std::string_view::npos; }
bool one_of(std::string_view s, std::initializer_list<std::string_view> names) {
  for (auto n : names)
    if (s == n) return true;
  return false;
}

// "cudaStreamSynchronize_ptsz_v7000" → "cudaStreamSynchronize".
std::string_view base_name(std::string_view n) {
  auto v = n.rfind("_v");
  if (v != std::string_view::npos && v + 2 < n.size() &&
      n.find_first_not_of("0123456789", v + 2) == std::string_view::npos)
    n = n.substr(0, v);
  for (std::string_view sfx : {"_ptsz", "_ptds"})
    if (ends_with(n, sfx)) n = n.substr(0, n.size() - sfx.size());
  return n;
}

}  // namespace

ApiTraits classify_api(store::ApiKind kind, std::string_view name) {
  const std::string_view n = base_name(name);
  ApiTraits t;
  if (kind == store::ApiKind::Runtime) {
    if (one_of(n, {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
                   "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch", "__cudaLaunchKernel", "cudaLaunch"}))
      t.cls = ApiClass::Launch;
    else if (starts_with(n, "cudaMemcpy"))
      t.cls = ApiClass::Copy, t.blocking = !contains(n, "Async");
    else if (starts_with(n, "cudaMemset"))
      t.cls = ApiClass::Memset;
    else if (one_of(n, {"cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaStreamSynchronize",
                        "cudaEventSynchronize"}))
      t.cls = ApiClass::Sync, t.blocking = true;
    else if (n == "cudaStreamWaitEvent")
      t.cls = ApiClass::Sync;  // the GPU waits, not the host
    else if (one_of(n, {"cudaStreamQuery", "cudaEventQuery"}))
      t.cls = ApiClass::Query;
    else if (one_of(n, {"cudaHostAlloc", "cudaMallocHost", "cudaHostRegister"}))
      t.cls = ApiClass::PinnedAlloc;
  } else {
    if (starts_with(n, "cuLaunch") || ends_with(n, "GraphLaunch"))
      t.cls = ApiClass::Launch;
    else if (starts_with(n, "cuMemcpy"))
      t.cls = ApiClass::Copy, t.blocking = !contains(n, "Async");
    else if (starts_with(n, "cuMemset"))
      t.cls = ApiClass::Memset;
    else if (one_of(n, {"cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize"}))
      t.cls = ApiClass::Sync, t.blocking = true;
    else if (n == "cuStreamWaitEvent")
      t.cls = ApiClass::Sync;
    else if (one_of(n, {"cuStreamQuery", "cuEventQuery"}))
      t.cls = ApiClass::Query;
    else if (one_of(n, {"cuMemHostAlloc", "cuMemAllocHost", "cuMemHostRegister"}))
      t.cls = ApiClass::PinnedAlloc;
  }
  return t;
}

std::vector<uint32_t> lean_callback_ids(store::ApiKind kind, bool blocking_only) {
  std::vector<uint32_t> ids;
  if (!api || !api->callback_name) return ids;
  const uint32_t size = kind == store::ApiKind::Runtime ? uint32_t(CUPTI_RUNTIME_TRACE_CBID_SIZE)
                                                        : uint32_t(CUPTI_DRIVER_TRACE_CBID_SIZE);
  const auto domain = kind == store::ApiKind::Runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
  for (uint32_t id = 1; id < size; ++id) {
    const char* name = nullptr;
    if (api->callback_name(domain, id, &name) != CUPTI_SUCCESS || !name) continue;
    ApiTraits t = classify_api(kind, name);
    if (t.cls != ApiClass::Other && (!blocking_only || t.blocking)) ids.push_back(id);
  }
  return ids;
}

GraphApi classify_graph_api(store::ApiKind kind, std::string_view name) {
  std::string_view n = base_name(name);
  const std::string_view prefix = kind == store::ApiKind::Runtime ? "cuda" : "cu";
  if (!starts_with(n, prefix)) return GraphApi::None;
  n.remove_prefix(prefix.size());
  // cudaStreamBeginCaptureToGraph adds to a graph the program made: its nodes are captured all the same.
  if (starts_with(n, "StreamBeginCapture")) return GraphApi::CaptureBegin;
  if (n == "StreamEndCapture") return GraphApi::CaptureEnd;
  if (starts_with(n, "GraphInstantiate")) return GraphApi::Instantiate;
  if (n == "GraphClone") return GraphApi::Clone;
  if (n == "GraphAddChildGraphNode") return GraphApi::AddChildGraph;
  if (n == "GraphLaunch" || n == "GraphUpload") return GraphApi::Launch;
  return GraphApi::None;
}

std::vector<GraphApi> graph_api_table(store::ApiKind kind) {
  std::vector<GraphApi> table;
  if (!api || !api->callback_name) return table;
  const uint32_t size = kind == store::ApiKind::Runtime ? uint32_t(CUPTI_RUNTIME_TRACE_CBID_SIZE)
                                                        : uint32_t(CUPTI_DRIVER_TRACE_CBID_SIZE);
  const auto domain =
      kind == store::ApiKind::Runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
  table.assign(size, GraphApi::None);
  for (uint32_t id = 1; id < size; ++id) {
    const char* name = nullptr;
    if (api->callback_name(domain, id, &name) == CUPTI_SUCCESS && name)
      table[id] = classify_graph_api(kind, name);
  }
  return table;
}

}  // namespace stepscope::collector::cupti
