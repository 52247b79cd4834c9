// CUDA activity through CUPTI: injection entry point, activity buffers from a bounded pool, periodic and final
// flush, record decoding, and CUPTI timestamps put on CLOCK_MONOTONIC (see docs/collector.md, "Clocks").
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cupti.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "core/collector_internal.h"
#include "gpu/cupti_api.h"
#include "gpu/cupti_api_classes.h"
#include "gpu/cupti_decode.h"
#include "gpu/cupti_recorder_state.h"
#include "gpu/cupti_subscribe.h"
#include "gpu/gpu_window.h"

namespace stepscope::collector::cupti {

Recorder* rec = nullptr;

namespace {

constexpr size_t kBufferBytes = 4 << 20;  // as Kineto
constexpr int kMaxBuffers = 32;           // 128 MB cap; beyond it CUPTI drops records and counts them

// True while this thread runs a flush we asked for: the buffer callback then runs on a program thread, which
// must not be taken for CUPTI's own buffer thread.
thread_local bool t_our_flush = false;

void flush_all(uint32_t flags) {
  t_our_flush = true;
  api->flush_all(flags);
  t_our_flush = false;
}

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (api && api->result_string) api->result_string(r, &s);
  return std::string(s ? s : "CUPTI error") + " (" + std::to_string(int(r)) + ")";
}

uint64_t CUPTIAPI monotonic_timestamp() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *max_records = 0;
  std::lock_guard<std::mutex> lk(rec->mu);
  if (!rec->free_buffers.empty()) {
    *buffer = rec->free_buffers.back();
    rec->free_buffers.pop_back();
  } else if (rec->allocated < kMaxBuffers) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
    if (*buffer) ++rec->allocated;
  } else {
    *buffer = nullptr;
    ++rec->buffers_refused;
  }
  if (*buffer) rec->with_cupti.insert(*buffer);
  *size = *buffer ? kBufferBytes : 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid_size) {
  if (!t_our_flush) mark_collector_thread(current_tid());  // CUPTI's worker thread (periodic flushes)
  {
    // A buffer another profiler of this process handed to CUPTI before we registered again (lend_to): its
    // records are its own and its memory is not ours to reuse or free.
    std::lock_guard<std::mutex> lk(rec->mu);
    if (buffer && !rec->with_cupti.count(buffer)) {
      ++rec->foreign_buffers;
      set_process_meta("cupti.foreign_buffers", std::to_string(rec->foreign_buffers));
      return;
    }
  }
  if (buffer && valid_size > 0 && running()) {
    auto& p = pending();
    std::lock_guard<std::mutex> lk(p.mu);
    std::lock_guard<std::mutex> lk2(rec->mu);
    try {
      decode_activity_buffer(buffer, valid_size, p.rows, rec->state);
    } catch (...) {
    }
  }
  size_t dropped = 0;
  if (api->dropped && api->dropped(ctx, stream, &dropped) == CUPTI_SUCCESS && dropped) {
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->dropped_records += dropped;
  }
  if (buffer) {
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->with_cupti.erase(buffer);
    rec->free_buffers.push_back(buffer);
  }
  std::lock_guard<std::mutex> lk(rec->mu);
  set_process_meta("cupti.dropped_records", std::to_string(rec->dropped_records));
  set_process_meta("cupti.records", std::to_string(rec->state.records));
  set_process_meta("cupti.syncs_without_thread", std::to_string(rec->state.syncs_without_thread));
  set_process_meta("cupti.incomplete_records", std::to_string(rec->state.incomplete_records));
  set_process_meta("cupti.untraced_replay_records", std::to_string(rec->state.untraced_replay_records));
}

void detach_here();
void identity_again();

// A graph is about to be instantiated or launched, or was instantiated, with CUPTI attached
// (Recorder::graphs_pinned): no detach from here on. A program thread's callback; no lock. The collector
// thread says so and switches the domains back off where a detach had been asked for
// (settle_no_detach_locked). Sequentially consistent with detach_here: either it sees the pin, or this sees
// its Detaching and lets that finalize end before the graph is made or run (bounded: a finalize that waited
// for this callback would deadlock otherwise), so the graph is made or launched detached.
void pin_here() {
  if (rec->graphs_pinned.load()) return;
  int64_t none = 0;
  rec->pinned_at.compare_exchange_strong(none, now_ns());
  if (!pin_attached(rec->graphs_pinned, rec->link)) return;
  for (int i = 0; i < 500 && rec->link.load() == int(Link::Detaching); ++i) usleep(100);
}

// CUDA graphs (cupti_graphs.h): the rows a callback made go to the pending rows.
thread_local GraphRows t_graph_rows;
void queue_graph_rows() {
  GraphRows& r = t_graph_rows;
  if (r.empty()) return;
  if (!running()) {
    r.clear();
    return;
  }
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  p.rows.graphs.insert(p.rows.graphs.end(), r.graphs.begin(), r.graphs.end());
  p.rows.graph_nodes.insert(p.rows.graph_nodes.end(), r.nodes.begin(), r.nodes.end());
  r.clear();
}

GraphApi graph_api_of(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  const auto& table = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? rec->graph_api_runtime : rec->graph_api_driver;
  return cbid < table.size() ? table[cbid] : GraphApi::None;
}

// The subscriber's callback: at API enter of the blocking calls (cupti_api_classes.h), the calling thread's
// stack; at any API exit while a detach is asked for, the detach itself; CUDA graphs and nodes as they are
// made (resource callbacks, and the enter and exit of the calls that make them other than one by one).
void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  if (!rec) return;
  if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
    if (cbid == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED) pin_here();
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    if (!rec->graphs || !rd || !rd->resourceDescriptor) return;
    rec->graphs->on_resource(cbid, *static_cast<const CUpti_GraphData*>(rd->resourceDescriptor), now_ns(),
                             t_graph_rows);
    return queue_graph_rows();
  }
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  const GraphApi graph_api = graph_api_of(domain, cbid);
  if ((graph_api == GraphApi::Launch || graph_api == GraphApi::Instantiate) &&
      cb->callbackSite == CUPTI_API_ENTER)
    pin_here();
  if (graph_api != GraphApi::None && graph_api != GraphApi::Launch && rec->graphs) {
    rec->graphs->on_api(graph_api, cb->callbackSite == CUPTI_API_ENTER, t_graph_rows);
    queue_graph_rows();
  }
  if (cb->callbackSite == CUPTI_API_EXIT) {
    if (rec->link.load(std::memory_order_acquire) == int(Link::DetachRequested)) detach_here();
    return;
  }
  // Not a blocking call (its callbacks are the graphs'): no stack at it.
  if (graph_api != GraphApi::None) return;
  if (cb->callbackSite != CUPTI_API_ENTER || !rec->tracing.load(std::memory_order_relaxed)) return;
  capture_call_stack(rec->correlation_base.load(std::memory_order_relaxed) + cb->correlationId);
}

bool query_graph_id(CUgraph g, uint32_t* id) {
  return api->graph_id && api->graph_id(g, id) == CUPTI_SUCCESS;
}
bool query_graph_exec_id(CUgraphExec g, uint32_t* id) {
  return api->graph_exec_id && api->graph_exec_id(g, id) == CUPTI_SUCCESS;
}
bool query_graph_node_id(CUgraphNode n, uint64_t* id) {
  return api->graph_node_id && api->graph_node_id(n, id) == CUPTI_SUCCESS;
}

// GPU window switches as intervals, for the flight recorder (take_switches). Its own small lock: detach_here
// records from a program thread that holds nothing else.
std::mutex g_switch_mu;
std::vector<std::pair<int64_t, int64_t>> g_switches;
void log_switch(int64_t start, int64_t end) {
  std::lock_guard<std::mutex> lk(g_switch_mu);
  if (g_switches.size() < 256) g_switches.emplace_back(start, end);
}

// At a CUDA call's exit on a program thread, NVIDIA's safe place for cuptiFinalize. Takes no lock: the thread
// that asked waits on `link`, never the other way round.
void detach_here() {
  // A pin calls the detach off (gpu_window.h); the collector thread turns the domains off again
  // (settle_no_detach_locked).
  if (!begin_detach(rec->link, rec->graphs_pinned)) return;
  const int64_t t0 = now_ns();
  t_our_flush = true;  // buffers CUPTI hands back while it finalizes come on this program thread
  const CUptiResult r = api->finalize();
  t_our_flush = false;
  rec->last_detach_ns.store(now_ns() - t0);
  log_switch(t0, now_ns());
  if (r == CUPTI_SUCCESS) {
    rec->domains_on.store(false);
    rec->link.store(int(Link::Detached), std::memory_order_release);
  } else {
    rec->finalize_failed = true;  // read under window_mu after `link` says Attached (release/acquire)
    rec->link.store(int(Link::Attached), std::memory_order_release);
  }
}

// Lean API selection per id; false when this libcupti cannot select (then all APIs are recorded).
bool select_api_ids(bool enable) {
  for (uint32_t id : rec->lean_runtime_ids)
    if (api->enable_runtime_api(id, enable ? 1 : 0) != CUPTI_SUCCESS) return false;
  for (uint32_t id : rec->lean_driver_ids)
    if (api->enable_driver_api(id, enable ? 1 : 0) != CUPTI_SUCCESS) return false;
  return true;
}

// The other way to lean, for an attach after CUDA started: with the RUNTIME/DRIVER kinds on, every id outside
// the lean lists switched off. How many ids it switched off (0: this libcupti cannot).
size_t deselect_other_api_ids() {
  size_t n = 0;
  for (auto kind : {store::ApiKind::Runtime, store::ApiKind::Driver}) {
    const std::vector<uint32_t>& keep = kind == store::ApiKind::Runtime ? rec->lean_runtime_ids : rec->lean_driver_ids;
    const uint32_t size = kind == store::ApiKind::Runtime ? uint32_t(CUPTI_RUNTIME_TRACE_CBID_SIZE)
                                                          : uint32_t(CUPTI_DRIVER_TRACE_CBID_SIZE);
    for (uint32_t id = 1; id < size; ++id) {
      if (std::binary_search(keep.begin(), keep.end(), id)) continue;
      const CUptiResult r =
          kind == store::ApiKind::Runtime ? api->enable_runtime_api(id, 0) : api->enable_driver_api(id, 0);
      if (r == CUPTI_SUCCESS) ++n;
    }
  }
  return n;
}

std::string window_text() {
  const Config& c = config();
  if (c.gpu_window_m <= 0 || c.gpu_window_n >= c.gpu_window_m) return "all";
  return std::to_string(c.gpu_window_n) + "/" + std::to_string(c.gpu_window_m);
}

// API-enter callbacks of the blocking calls only (the stacks at them); also after a cancelled detach.
size_t enable_stack_callbacks() {
  size_t n = 0;
  if (!rec->has_subscriber || !api->enable_callback || config().cuda_stacks_per_s <= 0) return 0;
  for (auto kind : {store::ApiKind::Runtime, store::ApiKind::Driver})
    for (uint32_t id : lean_callback_ids(kind, true))
      if (api->enable_callback(1, rec->subscriber,
                               kind == store::ApiKind::Runtime ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                               : CUPTI_CB_DOMAIN_DRIVER_API,
                               id) == CUPTI_SUCCESS)
        ++n;
  return n;
}

// CUDA graphs as they are built (cupti_graphs.h): the resource callbacks, and enter and exit of the calls
// that make a graph's nodes other than one by one. How many ids it enabled.
size_t enable_graph_api_callbacks() {
  size_t n = 0;
  for (auto domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API}) {
    const auto& table =
        domain == CUPTI_CB_DOMAIN_RUNTIME_API ? rec->graph_api_runtime : rec->graph_api_driver;
    for (uint32_t id = 0; id < table.size(); ++id)
      if (table[id] != GraphApi::None &&
          api->enable_callback(1, rec->subscriber, domain, id) == CUPTI_SUCCESS)
        ++n;
  }
  return n;
}

// What the graph callbacks read without a lock, made once per process before any callback of ours is on
// (right after the first subscription).
void prepare_graphs() {
  // The tables also serve the pin (Recorder::graphs_pinned), which needs no id queries.
  if (rec->graph_api_runtime.empty() && rec->graph_api_driver.empty()) {
    rec->graph_api_runtime = graph_api_table(store::ApiKind::Runtime);
    rec->graph_api_driver = graph_api_table(store::ApiKind::Driver);
  }
  if (rec->graphs || !api->graph_id || !api->graph_exec_id || !api->graph_node_id) return;
  rec->graphs = new GraphBuilds(getpid(), {query_graph_id, query_graph_exec_id, query_graph_node_id},
                                capture_creation_stack);
}

void enable_graph_callbacks() {
  if (!rec->has_subscriber || !api->enable_callback) return;
  // GRAPHEXEC_CREATED and the instantiate and launch calls pin (Recorder::graphs_pinned) even where the graph
  // rows cannot be made.
  size_t resource = 0;
  for (auto id : {CUPTI_CBID_RESOURCE_GRAPH_CREATED, CUPTI_CBID_RESOURCE_GRAPH_CLONED,
                  CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED, CUPTI_CBID_RESOURCE_GRAPHNODE_CREATED,
                  CUPTI_CBID_RESOURCE_GRAPHNODE_CLONED})
    if ((rec->graphs || id == CUPTI_CBID_RESOURCE_GRAPHEXEC_CREATED) &&
        api->enable_callback(1, rec->subscriber, CUPTI_CB_DOMAIN_RESOURCE, id) == CUPTI_SUCCESS)
      ++resource;
  set_process_meta("cupti.graph_callbacks",
                   std::to_string(resource) + " resource + " + std::to_string(enable_graph_api_callbacks()) +
                       " API callback ids" +
                       (rec->graphs ? "" : " (no graph rows: this libcupti lacks its graph id queries)"));
}

void enable_domains(bool on) {
  if (!rec->has_subscriber || !api->enable_domain) return;
  api->enable_domain(on ? 1 : 0, rec->subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
  api->enable_domain(on ? 1 : 0, rec->subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  rec->domains_on.store(on);
  if (!on) {  // a domain switch covers them too
    enable_stack_callbacks();
    if (api->enable_callback) enable_graph_api_callbacks();
  }
}

// The kinds and API ids that windows switch, off or on again (CUPTI attached all along).
// Lean by deselection, the ids stay as they are with the kinds off; switched on again, the kinds may record every
// id, so the others go off once more.
void kinds_off_locked() {
  for (int k : rec->switched_kinds) api->disable(CUpti_ActivityKind(k));
  if (rec->lean && !rec->lean_by_deselect) select_api_ids(false);
}
void kinds_on_locked() {
  for (int k : rec->switched_kinds) api->enable(CUpti_ActivityKind(k));
  if (!rec->lean) return;
  if (rec->lean_by_deselect)
    deselect_other_api_ids();
  else
    select_api_ids(true);
}

// A detach asked for but not begun (no CUDA call came yet) is called off; false when it had begun.
bool cancel_detach_locked() {
  int s = int(Link::DetachRequested);
  if (!rec->link.compare_exchange_strong(s, int(Link::Attached))) return false;
  enable_domains(false);
  return true;
}

bool can_detach() {
  return api->finalize && api->enable_domain && rec->has_subscriber && !rec->finalize_failed &&
         !rec->graphs_pinned.load(std::memory_order_acquire);
}

// Our subscription (stack, graph and detach callbacks), as "stepscope"; the graph tables made once it is
// ours.
Subscription subscribe_ours() {
  CUpti_SubscriberHandle sub{};
  const Subscription s = subscribe_named(api->library, api->subscribe, &sub,
                                         reinterpret_cast<CUpti_CallbackFunc>(api_callback), nullptr);
  rec->has_subscriber = s.result == CUPTI_SUCCESS;
  rec->subscriber = sub;
  if (rec->has_subscriber) prepare_graphs();
  return s;
}

// Where the kinds go on without our subscription (another profiler kept it after a lend): meta
// cupti.subscriber says who has it (`why`) and what is missing.
void say_no_subscriber(const std::string& why) {
  set_process_meta(
      "cupti.subscriber",
      why +
          ": no stacks at blocking calls or graph captures from here, and windows switch the kinds "
          "only");
}

// Subscribes, sets thread ids and clock, registers the buffers and enables the kinds, API ids and stack
// callbacks: the first attach and every attach after a detach. `in_cuda_init`: called by the driver's injection
// inside cuInit. "" on success, else why GPU recording stops.
std::string attach_cupti(bool in_cuda_init) {
  if (!rec->has_subscriber && api->subscribe) {
    const Subscription s = subscribe_ours();
    // One subscriber per process through CUDA 13: if Kineto or nsys holds it, record CPU data only — unless
    // it was lent (lend_to): then the activity kinds come back without our callbacks (no stacks at blocking
    // calls or graph captures, no detach).
    if (s.result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
      if (!rec->lent_count) return holder_words(s.holder) + " holds CUDA tracing: recording CPU data only";
      say_no_subscriber(holder_words(s.holder) + " took it while lent");
    }
  }
  if (rec->identity_set) {
    // Kept from an earlier attach; after a lend the other profiler's clock and thread id type are CUPTI's.
    if (rec->lent_count) identity_again();
  } else {
    // CUDA rows on the OS thread that made them (gettid, as samples), not CUPTI's default pthread_t value.
    // Before any kind is enabled, as CUPTI requires.
    if (!api->set_thread_id_type || api->set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) != CUPTI_SUCCESS)
      set_process_meta("cupti.thread_ids", "default (cuptiSetThreadIdType failed): API rows carry CUPTI's ids");
    else
      set_process_meta("cupti.thread_ids", "system");
    int64_t offset = 0;
    if (!api->register_timestamp || api->register_timestamp(monotonic_timestamp) != CUPTI_SUCCESS) {
      // Fallback calibration: CUPTI clock minus CLOCK_MONOTONIC, from the tightest of a few bracketed reads.
      int64_t best_gap = INT64_MAX;
      for (int i = 0; i < 16 && api->get_timestamp; ++i) {
        uint64_t c = 0;
        int64_t a = now_ns();
        if (api->get_timestamp(&c) != CUPTI_SUCCESS) break;
        int64_t b = now_ns();
        if (b - a < best_gap) {
          best_gap = b - a;
          offset = (a + (b - a) / 2) - static_cast<int64_t>(c);
        }
      }
      set_process_meta("cupti.clock", "offset " + std::to_string(offset) + " ns (cuptiGetTimestamp)");
    } else {
      set_process_meta("cupti.clock", "CLOCK_MONOTONIC (timestamp callback)");
    }
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->state.pid = getpid();
    rec->state.clock_offset = offset;
    rec->identity_set = true;
  }
  // Every attach: another profiler of the process (torch.profiler, between two windows) may have registered
  // its own buffer callbacks since ours, process-wide.
  const CUptiResult registered = api->register_callbacks(buffer_requested, buffer_completed);
  if (registered != CUPTI_SUCCESS) return "cuptiActivityRegisterCallbacks: " + result_text(registered);
  // Lean API tracing: only the classes of cupti_api_classes.h, chosen per callback id. Inside cuInit (the
  // injection) the ids are selected one by one. Attached once CUDA has started (stepscope attach, every
  // re-attach after a detach), CUPTI accepts selected ids and records none of them (H200, CUDA 13 CUPTI, driver
  // 580): there the RUNTIME/DRIVER kinds go on and every other id is switched off, which the probe showed
  // records the launches alone (H100, 2026-11-26). Every call with `--cuda-api all`, or when this libcupti
  // cannot select ids.
  rec->lean = false;
  rec->lean_by_deselect = false;
  if (!config().cuda_api_all && api->enable_runtime_api && api->enable_driver_api) {
    rec->lean_runtime_ids = lean_callback_ids(store::ApiKind::Runtime, false);
    rec->lean_driver_ids = lean_callback_ids(store::ApiKind::Driver, false);
    rec->lean = !rec->lean_runtime_ids.empty() && !rec->lean_driver_ids.empty();
    rec->lean_by_deselect = rec->lean && !in_cuda_init;
  }
  std::vector<CUpti_ActivityKind> kinds = {
      CUPTI_ACTIVITY_KIND_DEVICE,  CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMSET,  CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,   CUPTI_ACTIVITY_KIND_MARKER,
      CUPTI_ACTIVITY_KIND_OVERHEAD};
  if (!rec->lean || rec->lean_by_deselect)
    kinds.insert(kinds.begin() + 4, {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER});
  // CUDA graph replays: without GRAPH_TRACE, CUPTI records each node's kernel, copy and memset with its graph
  // node (and the replay's launch as correlation); with it, one record per replay instead.
  const bool graph_trace = !config().cuda_graph_nodes;
  if (graph_trace) kinds.push_back(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  std::string disabled;
  rec->switched_kinds.clear();
  for (auto k : kinds) {
    CUptiResult r = api->enable(k);
    if (r != CUPTI_SUCCESS) {
      if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        for (int done : rec->switched_kinds) api->disable(CUpti_ActivityKind(done));
        return "cuptiActivityEnable failed: " + result_text(r) + " (no CUDA driver or GPU?)";
      }
      disabled += (disabled.empty() ? "" : ",") + std::to_string(int(k));
    } else if (k != CUPTI_ACTIVITY_KIND_DEVICE) {
      rec->switched_kinds.push_back(int(k));
    }
  }
  // What a replay became: one interval only where GRAPH_TRACE is on (refused, the nodes' records come).
  set_process_meta("gpu.graph_records",
                   graph_trace && std::find(rec->switched_kinds.begin(), rec->switched_kinds.end(),
                                            int(CUPTI_ACTIVITY_KIND_GRAPH_TRACE)) != rec->switched_kinds.end()
                       ? "graph"
                       : "nodes");
  const int64_t select_t0 = now_ns();
  size_t deselected = 0;
  if (rec->lean_by_deselect) {
    deselected = deselect_other_api_ids();
    if (deselected == 0) rec->lean = rec->lean_by_deselect = false;  // the kinds stay on: every call
  } else if (rec->lean && !select_api_ids(true)) {
    rec->lean = false;
    for (auto k : {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
      if (api->enable(k) == CUPTI_SUCCESS) rec->switched_kinds.push_back(int(k));
  }
  const int64_t select_ns = now_ns() - select_t0;
  const std::string ids_text = std::to_string(rec->lean_runtime_ids.size()) + " runtime + " +
                               std::to_string(rec->lean_driver_ids.size()) + " driver callback ids";
  char took[64];
  std::snprintf(took, sizeof took, " in %.2f ms", select_ns / 1e6);
  set_process_meta("cupti.api_tracing",
                   rec->lean_by_deselect ? "lean (" + ids_text + "; attached after CUDA started: RUNTIME/DRIVER kinds, " +
                                               std::to_string(deselected) + " other ids switched off" + took + ")"
                   : rec->lean           ? "lean (" + ids_text + ")"
                   : config().cuda_api_all ? std::string("all")
                                           : std::string("all (this libcupti cannot select API ids)"));
  set_process_meta("cupti.stack_callback_ids", std::to_string(enable_stack_callbacks()));
  enable_graph_callbacks();
  if (api->flush_period) api->flush_period(500);  // a killed process loses at most ~0.5 s of GPU activity
  set_process_meta("cupti.status", disabled.empty() ? "recording" : "recording (kinds not enabled: " + disabled + ")");
  return "";
}

// meta cupti.lent: to whom, how often, how long in all (a lend still running counted to `t`). Needs
// window_mu.
void say_lent_locked(int64_t t) {
  if (!rec->lent_count) return;
  const int64_t ns = rec->lent_ns + (rec->lent.load() ? t - rec->lent_at : 0);
  char buf[240];
  std::snprintf(buf, sizeof buf, "%s: %lld time%s, %.3f s in all (the last from %.3f s CLOCK_MONOTONIC%s)",
                rec->lent_first.c_str(), static_cast<long long>(rec->lent_count),
                rec->lent_count == 1 ? "" : "s", ns / 1e9, rec->lent_at / 1e9,
                rec->lent.load() ? ", not given back" : "");
  set_process_meta("cupti.lent", buf);
  set_process_meta("cupti.lent_while_tracing", std::to_string(rec->lent_held));
}

// After a lend: the clock and thread ids again. Kineto registers its own timestamp callback (the TSC, raw)
// and CUPTI keeps one per process: left so, our rows after a profile would carry its ticks, not
// CLOCK_MONOTONIC.
void identity_again() {
  if (api->set_thread_id_type) api->set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
  if (api->register_timestamp && api->register_timestamp(monotonic_timestamp) != CUPTI_SUCCESS)
    set_process_meta("cupti.clock",
                     "the timestamp callback was refused after a lend: rows after it may carry "
                     "another clock");
}

// After a lend: our subscription again, with the stack and graph callbacks; where the other profiler kept it
// (Kineto never lets go of its own), the kinds go on without one and cupti.subscriber says what is missing.
// Needs window_mu, CUPTI attached.
void subscribe_again_locked() {
  if (!api->subscribe) return;
  const Subscription s = subscribe_ours();
  if (s.result != CUPTI_SUCCESS) {
    say_no_subscriber((s.result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                           ? holder_words(s.holder)
                           : "cuptiSubscribe: " + result_text(s.result)) +
                      " since " + rec->lent_to);
    return;
  }
  set_process_meta("cupti.stack_callback_ids", std::to_string(enable_stack_callbacks()));
  enable_graph_callbacks();
}

// A re-attach that failed half way: leave CUPTI detached (when it can be) rather than attached with nothing on,
// and record no more GPU activity in this run.
void give_up_locked(const std::string& why) {
  rec->failed = true;
  kinds_off_locked();
  if (can_detach()) request_detach_locked();
  set_process_meta("cupti.status", "re-attach after a detach failed: " + why + "; GPU activity stops here");
}

// Waits (at most `wait_ns`) while a program thread is inside cuptiFinalize.
void wait_out_detaching(int64_t wait_ns) {
  for (int64_t until = now_ns() + wait_ns;
       rec->link.load(std::memory_order_acquire) == int(Link::Detaching) && now_ns() < until;)
    usleep(100);
}

// Back to Attached with everything on, from wherever a detach got to: where CUPTI never left (a cancelled
// detach, a failed finalize) the kinds come back; after a detach it attaches anew. False when it cannot.
bool attach_again_locked() {
  if (rec->failed) return false;
  if (cancel_detach_locked()) {
    kinds_on_locked();
    return true;
  }
  // Detaching: a program thread is inside cuptiFinalize; it takes no lock we hold.
  wait_out_detaching(5000000000LL);
  const int s = rec->link.load(std::memory_order_acquire);
  if (s == int(Link::Attached)) {
    settle_no_detach_locked();
    kinds_on_locked();
    return true;
  }
  if (s != int(Link::Detached)) return false;
  const int64_t detach_ns = rec->last_detach_ns.load();
  rec->detach_ns_max = std::max(rec->detach_ns_max, detach_ns);
  ++rec->detaches;
  // CUPTI forgot everything: subscriber, buffer callbacks, thread id type, clock — and its correlation ids
  // start again, so the old ones must not name threads any more, and the rows of this attach get ids of their
  // own (the next 2^32: a launch joins its kernel, not a kernel of an earlier window with the same CUPTI id).
  // Buffers it held when it finalized never come back through buffer_completed: they are ours again.
  rec->has_subscriber = false;
  rec->identity_set = false;
  {
    std::lock_guard<std::mutex> lk(rec->mu);
    for (uint8_t* b : rec->with_cupti) rec->free_buffers.push_back(b);
    rec->with_cupti.clear();
    rec->state.correlation_tid.clear();
    rec->state.skipped_correlations.clear();
    rec->state.forget_replays();
    rec->state.give_up_held_syncs();
    rec->state.correlation_base += int64_t(1) << 32;
    rec->correlation_base.store(rec->state.correlation_base, std::memory_order_relaxed);
  }
  const int64_t t0 = now_ns();
  const std::string err = attach_cupti(false);
  const int64_t attach_ns = now_ns() - t0;
  if (!err.empty()) {
    rec->link.store(int(Link::Attached));  // what did attach (a subscriber) is detached again by give_up
    give_up_locked(err);
    return false;
  }
  rec->link.store(int(Link::Attached));
  ++rec->attaches;
  rec->attach_ns_max = std::max(rec->attach_ns_max, attach_ns);
  rec->schedule.set_switch_cost(detach_ns + attach_ns);
  char buf[160];
  std::snprintf(buf, sizeof buf, "%lld detaches, longest %.1f ms; %lld re-attaches, longest %.1f ms",
                static_cast<long long>(rec->detaches), rec->detach_ns_max / 1e6,
                static_cast<long long>(rec->attaches), rec->attach_ns_max / 1e6);
  set_process_meta("cupti.detach", buf);
  return true;
}


}  // namespace

// Where windows can no longer detach (a failed finalize, a CUDA graph: Recorder::graphs_pinned), the domains
// a detach request switched on go off again and cupti.detach says why, once. Needs window_mu, CUPTI attached.
void settle_no_detach_locked() {
  if (rec->link.load() != int(Link::Attached)) return;
  if (rec->finalize_failed) {
    if (!rec->domains_on.load()) return;
    enable_domains(false);
    set_process_meta("cupti.detach", "cuptiFinalize failed: windows disable the activity kinds only");
    return;
  }
  if (!rec->graphs_pinned.load()) return;
  if (rec->domains_on.load()) enable_domains(false);
  if (!rec->pin_said) {  // once a window (its end clears the meta)
    rec->pin_said = true;
    char buf[400];
    std::snprintf(
        buf, sizeof buf,
        "kept attached from %.3f s (CLOCK_MONOTONIC) after %lld detaches: a CUDA graph was instantiated "
        "or launched while CUPTI was attached, and a detach (cuptiFinalize) then faults its later "
        "replays; windows disable the activity kinds only, CUPTI's per-launch cost stays",
        rec->pinned_at.load() / 1e9, static_cast<long long>(rec->detaches));
    set_process_meta("cupti.detach", buf);
  }
}

void start_if_possible(const char* why) {
  if (!running() || config().no_gpu) return;
  if (!rec) rec = new Recorder();
  if (rec->started.load() || rec->failed) return;
  const bool injected = std::strcmp(why, "injection") == 0;
  if (!injected) {
    // Not called by the driver: only go on when CUDA is already initialized in this process (late load).
    void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!cuda) return;
    dlclose(cuda);
  }
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (rec->started.load() || rec->failed || rec->exiting.load()) return;  // no attach during the exit
  if (rec->lent.load()) {
    rec->start_deferred = true;  // the other profiler registered its callbacks: ours wait for take_back
    return;
  }
  std::string err;
  if (!load_library(&err)) {
    rec->failed = true;
    set_process_meta("cupti.status", err);
    return;
  }
  if (rec->attached_once && (rec->link.load() != int(Link::Attached) || rec->has_subscriber)) {
    // A later attach window after a detach (or a detach still asked for): attach again, or switch on.
    if (!attach_again_locked()) return;
  } else {
    // The first attach, or a later window after a stop() that could not detach and released the subscriber.
    err = attach_cupti(injected);
    if (!err.empty()) {
      if (rec->has_subscriber && api->unsubscribe) api->unsubscribe(rec->subscriber);
      rec->has_subscriber = false;
      rec->failed = true;
      set_process_meta("cupti.status", err);
      return;
    }
    rec->attached_once = true;
    register_exit_hook();
  }
  rec->owner_pid.store(getpid());
  rec->schedule = WindowSchedule(config().gpu_window_n, config().gpu_window_m);
  rec->window_start = now_ns();
  rec->switched = false;
  rec->window_driver = WindowDriver();
  rec->detach_due = 0;
  rec->tracing.store(true);
  set_process_meta("gpu.window", window_text());
  rec->started.store(true);
}

namespace {

// The run's end, or an attach window's (stop): the GPU window still open gets its gpu_windows row, a run never
// switched off says it was traced whole. Before 2026-11-30 an attach window's end wrote neither (stop runs
// before the final flush, which then returned early): the H200 proof's attach store had a row only for the
// part before the calibration's detach, and its other 761,355 kernels read as outside any window. Needs
// window_mu.
void end_of_windows_locked() {
  if (rec->graphs) set_process_meta("cupti.graph_stacks", std::to_string(rec->graphs->stacks_taken()));
  if (!rec->switched) {
    // Never switched off (no step markers, or fewer steps than one window): the whole run was traced.
    if (window_text() != "all") set_process_meta("gpu.window_requested", window_text());
    set_process_meta("gpu.window", "all");
    return;
  }
  if (rec->tracing.load()) {
    store::GpuWindow w{rec->window_start, now_ns(), getpid()};
    auto& p = pending();
    std::lock_guard<std::mutex> lk(p.mu);
    p.gpu_windows.push_back(w);
  }
}

}  // namespace

void flush(bool final_flush) {
  if (!rec || !rec->started.load() || !api) return;
  std::lock_guard<std::mutex> wl(rec->window_mu);
  // Once the program is exiting, before_exit flushed while CUDA lived; libcupti may be gone by the final
  // pass.
  const bool exiting = rec->exiting.load();
  if (rec->lent.load()) {
    // CUPTI's buffers are the other profiler's now; ours came back when it was lent.
    if (final_flush) {
      say_lent_locked(now_ns());
      end_of_windows_locked();
    }
    return;
  }
  if (rec->link.load() != int(Link::Attached) && (exiting || !cancel_detach_locked())) {
    // Detaching or detached: everything was flushed before the detach was asked for, and CUPTI must not be
    // called while it finalizes.
    if (final_flush && rec->switched) set_process_meta("gpu.window", window_text());
    return;
  }
  if (!exiting) flush_all(final_flush ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  if (!final_flush) return;
  {
    // Syncs still waiting for their API record will not get it: counted, not written on thread 0.
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->state.give_up_held_syncs();
    set_process_meta("cupti.syncs_without_thread", std::to_string(rec->state.syncs_without_thread));
  }
  end_of_windows_locked();
}

void tracing_off_locked(int64_t t, int64_t detach_after_ns) {
  if (!rec->tracing.load()) return;
  rec->tracing.store(false);
  {
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->state.untraced_from = t;  // records starting from here are outside a window (DecodeState::untraced_replay)
    rec->state.untraced_to = INT64_MAX;
  }
  kinds_off_locked();
  flush_all(0);
  log_switch(t, now_ns());
  rec->switched = true;
  rec->detach_due = detach_after_ns >= 0 && can_detach() ? t + detach_after_ns : 0;
  store::GpuWindow w{rec->window_start, t, getpid()};
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  p.gpu_windows.push_back(w);
}

namespace {
// A window opens now: records from here on are inside it (DecodeState::untraced_replay). Needs window_mu.
void window_opens_locked() {
  rec->window_start = now_ns();
  {
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->state.untraced_to = rec->window_start;
  }
  rec->tracing.store(true);
}
}  // namespace

bool tracing_on_locked() {
  if (rec->tracing.load()) return true;
  rec->detach_due = 0;
  const int64_t t0 = now_ns();
  const bool attached = attach_again_locked();
  log_switch(t0, now_ns());
  if (!attached) return false;
  // The window opens once CUPTI is back: a re-attach takes ~12 ms on the program's thread (H200), and the step
  // that paid for it is the profiler's cost, not a traced step (too little of it lies inside the window).
  window_opens_locked();
  return true;
}

void request_detach_locked() {
  if (!can_detach() || rec->tracing.load() || rec->link.load() != int(Link::Attached)) return;
  rec->detach_due = 0;
  flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // nothing stays buffered in a CUPTI about to forget it
  // Callbacks first, then the request: once `link` says so, a program thread may be inside cuptiFinalize, and
  // no call of ours may touch CUPTI (the exit callbacks of the blocking calls are on already).
  enable_domains(true);  // the next runtime or driver call's exit, on any thread, detaches
  rec->link.store(int(Link::DetachRequested), std::memory_order_release);
}

bool wait_detached_locked(int64_t wait_ns) {
  for (int64_t until = now_ns() + wait_ns; now_ns() < until; usleep(100)) {
    const int s = rec->link.load(std::memory_order_acquire);
    if (s == int(Link::Detached)) return true;
    if (s == int(Link::Attached)) return false;
  }
  return false;
}

void detach_if_due() {
  if (!rec || !rec->started.load() || !api || rec->exiting.load()) return;
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (rec->exiting.load() || rec->lent.load()) return;
  settle_no_detach_locked();
  if (rec->detach_due == 0 || now_ns() < rec->detach_due) return;
  request_detach_locked();
}

// GPU windows (gpu_window.h), counted by the first step source to report a step.
void on_step(const char* source, int32_t tid) {
  if (!rec || !rec->started.load() || !api || !api->disable) return;
  const Config& c = config();
  if (c.gpu_window_m <= 0 || c.gpu_window_n >= c.gpu_window_m) return;  // "all"
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (rec->failed || rec->exiting.load()) return;  // no re-attach while CUDA may be tearing down
  if (rec->lent.load()) return;                    // the schedule counts the steps after take_back
  const int64_t t = now_ns();
  const int64_t drivers = rec->window_driver.drivers();
  if (!rec->window_driver.drives(source, tid, t)) return;
  // A new driver's first interval spans the old one's quiet end: no step's pace.
  if (drivers > 0 && rec->window_driver.drivers() != drivers) rec->schedule.forget_last_step();
  switch (rec->schedule.at_step(t)) {
    case WindowSwitch::Off: {
      tracing_off_locked(t, rec->schedule.detach_this_phase() ? rec->schedule.detach_grace_ns() : -1);
      const WindowSchedule& w = rec->schedule;
      if (w.budget_off_ns() > 0 && w.budget_off_ns() >= w.min_off_ns()) {
        char buf[200];
        std::snprintf(
            buf, sizeof buf,
            "off phase %.2f s (tracing's cost within %.1f%% of the wall time: a step %.1f us traced, "
            "%.1f us attached in the grace, %.1f us detached)",
            w.min_off_ns() / 1e9, kGpuCostBudget * 100, w.traced_step_ns() / 1e3, w.grace_step_ns() / 1e3,
            w.detached_step_ns() / 1e3);
        set_process_meta("gpu.window_budget", buf);
      }
      break;
    }
    case WindowSwitch::On: tracing_on_locked(); break;
    case WindowSwitch::None: break;
  }
}

void take_switches(std::vector<std::pair<int64_t, int64_t>>& out) {
  std::lock_guard<std::mutex> lk(g_switch_mu);
  out.insert(out.end(), g_switches.begin(), g_switches.end());
  g_switches.clear();
}

void arm_window(int steps) {
  if (!rec || !rec->started.load() || !api || !api->disable) return;
  const Config& c = config();
  if (c.gpu_window_m <= 0 || c.gpu_window_n >= c.gpu_window_m) return;  // "all": traced already
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (rec->lent.load()) return;
  rec->schedule.arm(steps);
}

// The end of an attach window: flush what is buffered, switch every traced kind and API id off and detach
// CUPTI (where the library can), so a dormant collector costs the GPU work nothing and another tool may
// subscribe; the next window's start attaches again.
void stop() {
  if (!rec || !rec->started.load() || !api) return;
  std::lock_guard<std::mutex> wl(rec->window_mu);
  // Pinned with a detach still asked for: it will not happen, so the dormant collector must not keep every
  // callback on waiting for it.
  if (rec->graphs_pinned.load() && !rec->exiting.load()) cancel_detach_locked();
  rec->pin_said = false;  // the window's meta goes with its part
  if (rec->lent.load()) {
    // The other profiler's trace goes on: no kind switched, nothing flushed or finalized under it (our
    // subscription went at the lend); take_back then finds the window closed.
    end_of_windows_locked();
    rec->tracing_at_lend = false;
  } else if (rec->link.load() == int(Link::Attached) && !rec->exiting.load()) {
    end_of_windows_locked();
    if (rec->tracing.load()) {
      rec->tracing.store(false);
      if (api->disable) kinds_off_locked();
    }
    if (can_detach()) {
      request_detach_locked();
    } else {
      flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      if (rec->has_subscriber && api->unsubscribe) api->unsubscribe(rec->subscriber);
      rec->has_subscriber = false;
    }
  }
  rec->tracing.store(false);
  rec->started.store(false);
}

bool lend_to(const char* who) {
  if (!running() || config().no_gpu) return false;
  if (!rec) rec = new Recorder();
  // A calibration under way (its launches, its detach) ends first.
  std::lock_guard<std::mutex> cl(rec->calibration_mu);
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (rec->lent.load() || rec->exiting.load()) return false;
  const int64_t t = now_ns();
  rec->lent_to = who && *who ? who : "another profiler";
  rec->lent_at = t;
  rec->tracing_at_lend = false;
  rec->lent.store(true);
  if (rec->lent_count++ == 0) rec->lent_first = rec->lent_to;
  const bool held = rec->started.load() && api && !rec->failed;
  if (held) ++rec->lent_held;
  if (api && rec->attached_once) {
    // Started or not (a window closed, a failed re-attach): a program thread inside cuptiFinalize ends first,
    // and a detach asked for and not begun is called off (it would finalize CUPTI under the other's trace).
    // Detached, CUPTI holds nothing of ours.
    wait_out_detaching(5000000000LL);
    if (rec->link.load() == int(Link::Attached) || cancel_detach_locked()) {
      if (held) {
        rec->tracing_at_lend = rec->tracing.load();
        if (rec->tracing.load()) tracing_off_locked(t, -1);  // the window's row; kinds off
        rec->detach_due = 0;
        // Every buffer back through our callbacks before the other's replace them.
        flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      }
      // And the subscription: Kineto's first profile subscribes (libkineto_init) and, refused, traces no CUDA
      // at all ("CUPTI initialization failed - CUDA profiler activities will be missing").
      if (rec->has_subscriber && api->unsubscribe) api->unsubscribe(rec->subscriber);
      rec->has_subscriber = false;
      rec->domains_on.store(false);
    }
  }
  say_lent_locked(t);
  if (held && rec->lent_held == 1)
    std::fprintf(
        stderr,
        "stepscope: %s traces CUDA in process %d: stepscope's GPU tracing pauses while it runs (its CPU "
        "and Python recording go on)\n",
        rec->lent_to.c_str(), int(getpid()));
  return held;
}

void take_back() {
  if (!rec) return;
  bool start_now = false;
  {
    std::lock_guard<std::mutex> cl(rec->calibration_mu);
    std::lock_guard<std::mutex> wl(rec->window_mu);
    if (!rec->lent.load()) return;
    const int64_t t = now_ns();
    rec->lent.store(false);
    rec->lent_ns += t - rec->lent_at;
    say_lent_locked(t);
    rec->schedule.forget_last_step();  // the lent span is no step's pace
    rec->window_driver.restart(t);
    if (!running() || rec->exiting.load() || rec->failed) return;
    if (!rec->started.load()) {
      start_now = std::exchange(rec->start_deferred, false);
    } else if (api && rec->link.load() == int(Link::Attached)) {
      // The other profiler's buffer callbacks are CUPTI's: ours again. Its kinds went off as it stopped.
      const CUptiResult r = api->register_callbacks(buffer_requested, buffer_completed);
      if (r != CUPTI_SUCCESS) {
        give_up_locked("cuptiActivityRegisterCallbacks after " + rec->lent_to + ": " + result_text(r));
        return;
      }
      identity_again();
      if (!rec->has_subscriber) subscribe_again_locked();
      if (rec->tracing_at_lend) {
        kinds_on_locked();
        window_opens_locked();
      } else if (can_detach() && rec->schedule.detach_this_phase()) {
        rec->detach_due = t + kMinDetachGraceNs;  // the off phase goes on detached
      }
    }
    // Detached: the next window attaches again (subscribing anew, or without a subscriber: attach_cupti).
  }
  if (start_now) start_if_possible("take back");
}

void after_fork_child() {
  // CUDA does not survive fork; a child that uses CUDA initializes it anew and the driver calls us again.
  if (rec) {
    rec->lent.store(false);  // the parent's profiler is the parent's
    rec->start_deferred = false;
    rec->lent_count = rec->lent_ns = rec->lent_held = 0;
    rec->started.store(false);
    rec->failed = false;
    rec->tracing.store(false);
    new (&rec->window_mu) std::mutex();
    // The parent's collector thread may have held it at the fork; the child's before_exit takes it.
    new (&rec->calibration_mu) std::mutex();
    // The child's CUDA numbers its ids from 1 in a process of its own: nothing of the parent's decoding
    // applies.
    new (&rec->mu) std::mutex();
    rec->state = DecodeState{};
    rec->correlation_base.store(0);
    rec->graphs = nullptr;  // the parent's (its pid): the child's first subscription makes its own
    rec->exit_hook_after_context = false;
    rec->calibration_done = false;
    // The child's CUDA, if any, starts from nothing: a first attach, not a re-attach.
    rec->link.store(int(Link::Attached));
    rec->attached_once = false;
    rec->has_subscriber = false;
    rec->identity_set = false;
    rec->finalize_failed.store(false);
    rec->graphs_pinned.store(false);  // the child's graphs are its own (CUDA does not survive fork)
    rec->pinned_at.store(0);
    rec->pin_said = false;
    rec->domains_on.store(false);
    rec->detach_due = 0;
    rec->exiting.store(false);
  }
}

namespace {

// The program's exit (atexit), before CUDA's teardown: see register_exit_hook. Waits for a window switch or a
// calibration under way (bounded: the calibration stops at its next round of launches), flushes what CUPTI
// holds while CUDA still lives, and says when the calibration never ran. The H100 proof of 2026-11-27 saw
// launch_bound (0.45 s of steps) end with SIGSEGV under `record`: its exit fell on the calibration's check,
// ~1 s after CUDA started, and the collector thread launched into a CUDA being torn down.
void before_exit() {
  if (!rec || rec->owner_pid.load() != getpid() || rec->exiting.exchange(true)) return;
  std::lock_guard<std::mutex> cl(rec->calibration_mu);
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (!api || !rec->attached_once) return;
  // A detach under way (a program thread inside cuptiFinalize) ends first; one asked for but not begun is
  // called off — also after an attach window's end (started false), or CUDA's teardown calls would finalize
  // CUPTI.
  wait_out_detaching(2000000000LL);
  const bool attached = rec->link.load() == int(Link::Attached) || cancel_detach_locked();
  if (!rec->started.load() || rec->lent.load()) return;  // lent: CUPTI's buffers are the other profiler's
  if (!rec->calibration_done && config().calibrate)
    set_process_meta(
        "cupti.calibration",
        "not run: the program ended before its check (about a second after CUDA started); the analysis "
        "uses the default launch cost");
  if (attached) flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

}  // namespace

void register_exit_hook() {
  std::atexit(before_exit);
}

}  // namespace stepscope::collector::cupti

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  stepscope::collector::cupti::start_if_possible("injection");
  return 1;
}
