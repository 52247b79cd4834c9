#include "stepscope/store/records.h"

#include <algorithm>
#include <limits>

namespace stepscope::store {

const char* to_string(CopyKind k) {
  switch (k) {
    case CopyKind::HtoD: return "HtoD";
    case CopyKind::DtoH: return "DtoH";
    case CopyKind::DtoD: return "DtoD";
    case CopyKind::PtoP: return "PtoP";
    case CopyKind::HtoH: return "HtoH";
    default: return "unknown";
  }
}
const char* to_string(MemoryKind k) {
  switch (k) {
    case MemoryKind::Pageable: return "pageable";
    case MemoryKind::Pinned: return "pinned";
    case MemoryKind::Device: return "device";
    case MemoryKind::Managed: return "managed";
    default: return "unknown";
  }
}
const char* to_string(SyncType t) {
  switch (t) {
    case SyncType::Event: return "event";
    case SyncType::StreamWaitEvent: return "stream_wait_event";
    case SyncType::Stream: return "stream";
    case SyncType::Context: return "context";
    default: return "unknown";
  }
}
const char* to_string(ApiKind k) { return k == ApiKind::Driver ? "driver" : "runtime"; }
const char* to_string(RangeSource s) {
  switch (s) {
    case RangeSource::Nvtx: return "nvtx";
    case RangeSource::Annotation: return "annotation";
    case RangeSource::Op: return "op";
    case RangeSource::Python: return "python";
    case RangeSource::GpuAnnotation: return "gpu_annotation";
  }
  return "unknown";
}
const char* to_string(FrameKind k) { return k == FrameKind::Python ? "python" : "native"; }
const char* to_string(Severity s) {
  switch (s) {
    case Severity::High: return "high";
    case Severity::Medium: return "medium";
    default: return "low";
  }
}

std::string graph_records_of(const Trace& t) {
  if (auto it = t.meta.find("gpu.graph_records"); it != t.meta.end()) return it->second;
  auto named = [](const auto& rows) {
    return std::any_of(rows.begin(), rows.end(),
                       [](const auto& r) { return r.graph_id != 0 && r.graph_node_id != 0; });
  };
  if (named(t.kernels) || named(t.memcpys) || named(t.memsets)) return "nodes";
  auto src = t.meta.find("source_format");
  const bool recording =
      t.meta.count("recorder") || (src != t.meta.end() && src->second == "stepscope-collector");
  return recording ? "graph" : "";
}

const char* to_string(GraphKind k) {
  switch (k) {
    case GraphKind::Capture: return "capture";
    case GraphKind::Explicit: return "explicit";
    case GraphKind::Instantiated: return "instantiated";
    case GraphKind::Clone: return "clone";
    default: return "unknown";
  }
}
const char* to_string(GraphNodeKind k) {
  switch (k) {
    case GraphNodeKind::Kernel: return "kernel";
    case GraphNodeKind::Memcpy: return "memcpy";
    case GraphNodeKind::Memset: return "memset";
    case GraphNodeKind::Host: return "host";
    case GraphNodeKind::Graph: return "graph";
    case GraphNodeKind::Empty: return "empty";
    case GraphNodeKind::WaitEvent: return "wait_event";
    case GraphNodeKind::EventRecord: return "event_record";
    case GraphNodeKind::ExtSemaphoreSignal: return "ext_semaphore_signal";
    case GraphNodeKind::ExtSemaphoreWait: return "ext_semaphore_wait";
    case GraphNodeKind::MemAlloc: return "mem_alloc";
    case GraphNodeKind::MemFree: return "mem_free";
    case GraphNodeKind::BatchMemOp: return "batch_mem_op";
    case GraphNodeKind::Conditional: return "conditional";
    default: return "unknown";
  }
}

std::pair<int64_t, int64_t> Trace::time_span() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  auto span = [&](const auto& rows) {
    for (const auto& r : rows) {
      lo = std::min(lo, r.start);
      hi = std::max(hi, r.end);
    }
  };
  span(kernels);
  span(memcpys);
  span(memsets);
  span(syncs);
  span(api_calls);
  span(ranges);
  span(data_waits);
  span(steps);
  for (const auto& s : samples) {
    lo = std::min(lo, s.time);
    hi = std::max(hi, s.time);
  }
  if (lo > hi) return {0, 0};
  return {lo, hi};
}

}  // namespace stepscope::store
