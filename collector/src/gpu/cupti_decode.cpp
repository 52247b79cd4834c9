// Decoding of CUPTI activity records into store rows (shared by the collector and its tests).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cupti.h>
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#include "cupti_decode.h"
#include "gpu/cupti_api.h"
#include "gpu/cupti_library.h"

namespace stepscope::collector::cupti {

Api* api = nullptr;

namespace {
std::mutex load_mu;

store::CopyKind copy_kind(uint8_t k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return store::CopyKind::HtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return store::CopyKind::DtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return store::CopyKind::DtoD;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return store::CopyKind::HtoH;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return store::CopyKind::PtoP;
    default: return store::CopyKind::Unknown;
  }
}

store::MemoryKind memory_kind(unsigned k) {
  switch (k) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return store::MemoryKind::Pageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return store::MemoryKind::Pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY:
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return store::MemoryKind::Device;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return store::MemoryKind::Managed;
    default: return store::MemoryKind::Unknown;
  }
}

store::SyncType sync_type(unsigned t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return store::SyncType::Event;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return store::SyncType::StreamWaitEvent;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return store::SyncType::Stream;
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return store::SyncType::Context;
    default: return store::SyncType::Unknown;
  }
}

const char* overhead_name(unsigned k) {
  switch (k) {
    case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "overhead: driver compiler";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "overhead: CUPTI buffer flush";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "overhead: CUPTI instrumentation";
    case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "overhead: CUPTI resource";
    case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "overhead: module loading";
    case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "overhead: lazy function loading";
    case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "overhead: command buffer full";
    case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "overhead: activity buffer request";
    default: return "overhead: unknown";
  }
}

}  // namespace

bool load_library(std::string* error) {
  std::lock_guard<std::mutex> lk(load_mu);
  if (api) return true;
  void* h = nullptr;
  std::string tried;
  for (const char* name : kLibraryNames) {
    h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (h) break;
    tried += std::string(tried.empty() ? "" : ", ") + name;
  }
  if (!h) {
    if (error) *error = "cannot load libcupti (tried " + tried + ")";
    return false;
  }
  auto* a = new Api();
  a->library = h;
#define STEPSCOPE_LOAD(field, sym) a->field = reinterpret_cast<decltype(a->field)>(dlsym(h, #sym))
  STEPSCOPE_LOAD(get_next_record, cuptiActivityGetNextRecord);
  STEPSCOPE_LOAD(register_callbacks, cuptiActivityRegisterCallbacks);
  STEPSCOPE_LOAD(enable, cuptiActivityEnable);
  STEPSCOPE_LOAD(flush_all, cuptiActivityFlushAll);
  STEPSCOPE_LOAD(flush_period, cuptiActivityFlushPeriod);
  STEPSCOPE_LOAD(dropped, cuptiActivityGetNumDroppedRecords);
  STEPSCOPE_LOAD(register_timestamp, cuptiActivityRegisterTimestampCallback);
  STEPSCOPE_LOAD(get_timestamp, cuptiGetTimestamp);
  STEPSCOPE_LOAD(result_string, cuptiGetResultString);
  STEPSCOPE_LOAD(callback_name, cuptiGetCallbackName);
  STEPSCOPE_LOAD(subscribe, cuptiSubscribe);
  STEPSCOPE_LOAD(unsubscribe, cuptiUnsubscribe);
  STEPSCOPE_LOAD(enable_callback, cuptiEnableCallback);
  STEPSCOPE_LOAD(disable, cuptiActivityDisable);
  STEPSCOPE_LOAD(set_thread_id_type, cuptiSetThreadIdType);
  STEPSCOPE_LOAD(enable_domain, cuptiEnableDomain);
  STEPSCOPE_LOAD(finalize, cuptiFinalize);
  STEPSCOPE_LOAD(enable_runtime_api, cuptiActivityEnableRuntimeApi);
  STEPSCOPE_LOAD(enable_driver_api, cuptiActivityEnableDriverApi);
  STEPSCOPE_LOAD(graph_id, cuptiGetGraphId);
  STEPSCOPE_LOAD(graph_exec_id, cuptiGetGraphExecId);
  STEPSCOPE_LOAD(graph_node_id, cuptiGetGraphNodeId);
#undef STEPSCOPE_LOAD
  if (!a->get_next_record || !a->register_callbacks || !a->enable || !a->flush_all) {
    if (error) *error = "libcupti lacks the activity API";
    delete a;
    return false;
  }
  api = a;
  return true;
}

std::string api_name(store::ApiKind kind, uint32_t cbid) {
  const char* name = nullptr;
  if (api && api->callback_name)
    api->callback_name(kind == store::ApiKind::Runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                       cbid, &name);
  if (name && *name) {
    std::string s(name);
    // CUPTI names versioned entry points "cudaLaunchKernel_v7000"; the stable name is what users search for.
    auto v = s.rfind("_v");
    if (v != std::string::npos && v + 2 < s.size() &&
        s.find_first_not_of("0123456789", v + 2) == std::string::npos)
      s.erase(v);
    return s;
  }
  return std::string(kind == store::ApiKind::Runtime ? "cuda runtime " : "cuda driver ") + std::to_string(cbid);
}

bool DecodeState::untraced_replay(uint32_t correlation, int64_t node, int64_t start) {
  if (!correlation || !node) return false;
  if (start < untraced_from || start >= untraced_to) {  // inside a window: kept, the highest id's nodes noted
    if (correlation > window_top) {
      window_top = correlation;
      window_top_nodes.clear();
    }
    if (correlation == window_top) window_top_nodes.push_back(node);
    return false;
  }
  auto at = replay_nodes.find(correlation);
  if (at == replay_nodes.end()) {
    if (replay_nodes.size() >= kReplaysKept) replay_nodes.erase(replay_nodes.begin());  // the lowest id
    at = replay_nodes.emplace(correlation, std::unordered_set<int64_t>{}).first;
    if (correlation == window_top) at->second.insert(window_top_nodes.begin(), window_top_nodes.end());
  }
  if (at->second.insert(node).second) return false;
  ++untraced_replay_records;
  return true;
}

size_t decode_activity_buffer(uint8_t* buffer, size_t valid_size, store::Trace& out, DecodeState& st) {
  size_t n = 0;
  CUpti_Activity* record = nullptr;
  std::vector<size_t> unresolved_syncs;  // indices into out.syncs whose API record may follow
  const int64_t off = st.clock_offset;
  auto t = [off](uint64_t v) { return static_cast<int64_t>(v) + off; };
  const int64_t base = st.correlation_base;
  auto corr = [base](uint32_t id) { return id ? base + int64_t(id) : int64_t(0); };
  // GPU work flushed before it ended (at a detach) has no time to keep: left out, counted.
  auto unfinished = [&st](uint64_t start, uint64_t end) {
    const bool no = start == 0 || end < start;
    st.incomplete_records += no;
    return no;
  };
  // Copies and memsets: the fields CUPTI's memcpy and memset records share, under the same names.
  auto copy_like = [&](auto& r, const auto* m) {
    r.start = t(m->start);
    r.end = t(m->end);
    r.device = m->deviceId;
    r.stream = m->streamId;
    r.correlation = corr(m->correlationId);
    r.bytes = static_cast<int64_t>(m->bytes);
    r.graph_id = m->graphId;
    r.graph_node_id = int64_t(m->graphNodeId);
    r.pid = st.pid;
  };
  while (api->get_next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    ++n;
    ++st.records;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        store::Kernel r;
        r.start = t(k->start);
        r.end = t(k->end);
        r.device = k->deviceId;
        r.context = k->contextId;
        r.stream = k->streamId;
        r.correlation = corr(k->correlationId);
        r.grid_x = k->gridX, r.grid_y = k->gridY, r.grid_z = k->gridZ;
        r.block_x = k->blockX, r.block_y = k->blockY, r.block_z = k->blockZ;
        r.registers = k->registersPerThread;
        r.shared_memory = int64_t(k->staticSharedMemory) + k->dynamicSharedMemory;
        if (k->name && !st.skip_kernel.empty() && st.skip_kernel == k->name) break;  // the collector's own calibration kernel
        if (unfinished(k->start, k->end)) break;
        // A graph replay's kernel: its graph, its node, and (correlation) the cudaGraphLaunch of the replay.
        r.graph_id = k->graphId;
        r.graph_node_id = int64_t(k->graphNodeId);
        if (r.graph_id && st.untraced_replay(k->correlationId, r.graph_node_id, r.start)) break;
        r.name = out.intern(k->name ? k->name : "");
        r.pid = st.pid;
        out.kernels.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        store::Memcpy r;
        copy_like(r, m);
        r.kind = copy_kind(m->copyKind);
        r.src_kind = memory_kind(m->srcKind);
        r.dst_kind = memory_kind(m->dstKind);
        if (unfinished(m->start, m->end)) break;
        if (r.graph_id && st.untraced_replay(m->correlationId, r.graph_node_id, r.start)) break;
        out.memcpys.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        store::Memset r;
        copy_like(r, m);
        r.mem_kind = memory_kind(m->memoryKind);
        if (unfinished(m->start, m->end)) break;
        if (r.graph_id && st.untraced_replay(m->correlationId, r.graph_node_id, r.start)) break;
        out.memsets.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        if (st.skip_tid && int64_t(a->threadId) == st.skip_tid) {  // the collector's own calibration
          if (st.skipped_correlations.size() > 100000) st.skipped_correlations.clear();
          st.skipped_correlations.insert(a->correlationId);
          break;
        }
        store::ApiCall r;
        r.start = t(a->start);
        r.end = t(a->end);
        r.pid = a->processId;
        r.tid = a->threadId;
        r.kind = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME ? store::ApiKind::Runtime : store::ApiKind::Driver;
        r.name = out.intern(api_name(r.kind, a->cbid));
        r.correlation = corr(a->correlationId);
        r.return_code = static_cast<int32_t>(a->returnValue);
        out.api_calls.push_back(r);
        if (st.correlation_tid.size() > 100000) st.correlation_tid.clear();
        st.correlation_tid[a->correlationId] = a->threadId;
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
        if (st.skipped_correlations.count(s->correlationId)) break;  // the calibration's cuStreamSynchronize
        store::Sync r;
        r.start = t(s->start);
        r.end = t(s->end);
        r.pid = st.pid;
        auto it = st.correlation_tid.find(s->correlationId);
        r.tid = it == st.correlation_tid.end() ? 0 : it->second;
        if (!r.tid) unresolved_syncs.push_back(out.syncs.size());
        r.type = sync_type(s->type);
        r.device = 0;
        r.stream = s->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? -1 : int64_t(s->streamId);
        r.correlation = corr(s->correlationId);
        out.syncs.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
        const int64_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
        if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
          auto it = st.open_markers.find(m->id);
          if (it == st.open_markers.end()) break;
          store::Range r;
          r.start = it->second.start;
          r.end = t(m->timestamp);
          r.pid = st.pid;
          r.tid = it->second.tid;
          r.domain = out.intern(it->second.domain);
          r.name = out.intern(it->second.name);
          r.source = store::RangeSource::Nvtx;
          out.ranges.push_back(r);
          st.open_markers.erase(it);
        } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
          st.open_markers[m->id] = {t(m->timestamp), tid, m->name ? m->name : "", m->domain ? m->domain : ""};
        } else {  // instantaneous mark: a zero-length range
          store::Range r;
          r.start = r.end = t(m->timestamp);
          r.pid = st.pid;
          r.tid = tid;
          r.domain = out.intern(m->domain ? m->domain : "");
          r.name = out.intern(m->name ? m->name : "");
          r.source = store::RangeSource::Nvtx;
          out.ranges.push_back(r);
        }
        break;
      }
      case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {
        // A whole graph launch as one GPU interval (--cuda-graphs graph): replays never read as idle.
        auto* gt = reinterpret_cast<const CUpti_ActivityGraphTrace2*>(record);
        store::Kernel r;
        r.start = t(gt->start);
        r.end = t(gt->end);
        r.device = gt->deviceId;
        r.context = gt->contextId;
        r.stream = gt->streamId;
        r.correlation = corr(gt->correlationId);
        r.graph_id = gt->graphId;
        if (st.untraced_replay(gt->correlationId, -int64_t(gt->graphId), r.start)) break;
        r.name = out.intern("CUDA graph " + std::to_string(gt->graphId));
        r.pid = st.pid;
        out.kernels.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        auto* o = reinterpret_cast<const CUpti_ActivityOverhead3*>(record);
        store::Range r;
        r.start = t(o->start);
        r.end = t(o->end);
        r.pid = st.pid;
        r.tid = o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? o->objectId.pt.threadId : 0;
        r.domain = out.intern("cupti");
        r.name = out.intern(overhead_name(o->overheadKind));
        r.source = store::RangeSource::Annotation;
        out.ranges.push_back(r);
        break;
      }
      case CUPTI_ACTIVITY_KIND_DEVICE: {
        auto* d = reinterpret_cast<const CUpti_ActivityDevice5*>(record);
        store::Device r;
        r.id = d->id;
        r.name = out.intern(d->name ? d->name : "");
        r.cc_major = static_cast<int32_t>(d->computeCapabilityMajor);
        r.cc_minor = static_cast<int32_t>(d->computeCapabilityMinor);
        r.sm_count = static_cast<int32_t>(d->numMultiprocessors);
        r.memory_bytes = static_cast<int64_t>(d->globalMemorySize);
        r.vendor = out.intern("nvidia");
        if (!st.devices_seen.insert(r.id).second) break;  // sent again after each re-attach
        out.devices.push_back(r);
        break;
      }
      default:
        ++st.unknown_records;
        break;
    }
  }
  // Syncs whose API record was not in this buffer wait for a later one (the calibration's are dropped once
  // their API record shows whose they were); ones held in earlier buffers are settled the same way.
  constexpr int kSyncHoldBuffers = 8;
  auto settle = [&st, &out](store::Sync& row) {  // true: written or dropped
    const uint32_t c = uint32_t(row.correlation);
    if (st.skipped_correlations.count(c)) return true;  // the collector's own calibration
    auto it = st.correlation_tid.find(c);
    if (it == st.correlation_tid.end()) return false;
    row.tid = it->second;
    out.syncs.push_back(row);
    return true;
  };
  std::vector<store::Sync> unresolved;
  for (auto i = unresolved_syncs.rbegin(); i != unresolved_syncs.rend(); ++i) {
    unresolved.push_back(out.syncs[*i]);
    out.syncs.erase(out.syncs.begin() + std::ptrdiff_t(*i));
  }
  std::vector<DecodeState::HeldSync> still;
  for (auto& h : st.held_syncs) {
    if (settle(h.row)) continue;
    if (++h.buffers > kSyncHoldBuffers) {
      ++st.syncs_without_thread;
      continue;
    }
    still.push_back(h);
  }
  for (auto i = unresolved.rbegin(); i != unresolved.rend(); ++i)
    if (!settle(*i)) still.push_back({*i, 0});
  st.held_syncs = std::move(still);
  return n;
}

}  // namespace stepscope::collector::cupti
