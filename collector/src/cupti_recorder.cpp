// CUDA activity through CUPTI: injection entry point, activity buffers from a bounded pool, periodic and final
// flush, record decoding, and CUPTI timestamps put on CLOCK_MONOTONIC (see docs/collector.md, "Clocks").
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cupti.h>
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "collector_internal.h"
#include "cupti_api.h"
#include "cupti_api_classes.h"
#include "cupti_decode.h"
#include "cupti_recorder_state.h"
#include "gpu_window.h"

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
  *size = *buffer ? kBufferBytes : 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid_size) {
  if (!t_our_flush) mark_collector_thread(current_tid());  // CUPTI's worker thread (periodic flushes)
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
    rec->free_buffers.push_back(buffer);
  }
  std::lock_guard<std::mutex> lk(rec->mu);
  set_process_meta("cupti.dropped_records", std::to_string(rec->dropped_records));
  set_process_meta("cupti.records", std::to_string(rec->state.records));
}

// API-enter callbacks of the blocking calls (cupti_api_classes.h): the calling thread's stack.
void CUPTIAPI api_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER || !rec || !rec->tracing.load(std::memory_order_relaxed)) return;
  capture_call_stack(cb->correlationId);
}

// Lean API selection per id; false when this libcupti cannot select (then all APIs are recorded).
bool select_api_ids(bool enable) {
  for (uint32_t id : rec->lean_runtime_ids)
    if (api->enable_runtime_api(id, enable ? 1 : 0) != CUPTI_SUCCESS) return false;
  for (uint32_t id : rec->lean_driver_ids)
    if (api->enable_driver_api(id, enable ? 1 : 0) != CUPTI_SUCCESS) return false;
  return true;
}

std::string window_text() {
  const Config& c = config();
  if (c.gpu_window_m <= 0 || c.gpu_window_n >= c.gpu_window_m) return "all";
  return std::to_string(c.gpu_window_n) + "/" + std::to_string(c.gpu_window_m);
}


}  // namespace

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
  std::lock_guard<std::mutex> lk(rec->mu);
  if (rec->started.load() || rec->failed) return;
  std::string err;
  auto fail = [&](const std::string& status) {
    rec->failed = true;
    set_process_meta("cupti.status", status);
  };
  if (!load_library(&err)) return fail(err);
  // One subscriber per process through CUDA 13: if Kineto or nsys holds it, record CPU data only. We keep ours
  // when stacks at blocking calls are wanted (the callback API delivers them).
  CUpti_SubscriberHandle sub{};
  bool subscribed = false;
  if (api->subscribe) {
    CUptiResult r = api->subscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(api_callback), nullptr);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      return fail("another CUPTI subscriber (Kineto, Nsight Systems?) is present: recording CPU data only");
    subscribed = r == CUPTI_SUCCESS;
  }
  // CUDA rows on the OS thread that made them (gettid, as samples), not CUPTI's default pthread_t value.
  // Before any kind is enabled, as CUPTI requires.
  if (!api->set_thread_id_type || api->set_thread_id_type(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) != CUPTI_SUCCESS)
    set_process_meta("cupti.thread_ids", "default (cuptiSetThreadIdType failed): API rows carry CUPTI's ids");
  else
    set_process_meta("cupti.thread_ids", "system");
  rec->state.pid = getpid();
  rec->state.clock_offset = 0;
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
        rec->state.clock_offset = (a + (b - a) / 2) - static_cast<int64_t>(c);
      }
    }
    set_process_meta("cupti.clock", "offset " + std::to_string(rec->state.clock_offset) + " ns (cuptiGetTimestamp)");
  } else {
    set_process_meta("cupti.clock", "CLOCK_MONOTONIC (timestamp callback)");
  }
  CUptiResult r = CUPTI_SUCCESS;
  if (!rec->callbacks_registered) {
    r = api->register_callbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks: " + result_text(r));
    rec->callbacks_registered = true;
  }
  // Lean API tracing: only the classes of cupti_api_classes.h, chosen per callback id. Falls back to every
  // runtime and driver call when this libcupti cannot select ids (or `--cuda-api all`).
  rec->lean = false;
  if (!config().cuda_api_all && api->enable_runtime_api && api->enable_driver_api) {
    rec->lean_runtime_ids = lean_callback_ids(store::ApiKind::Runtime, false);
    rec->lean_driver_ids = lean_callback_ids(store::ApiKind::Driver, false);
    rec->lean = !rec->lean_runtime_ids.empty() && !rec->lean_driver_ids.empty();
  }
  std::vector<CUpti_ActivityKind> kinds = {CUPTI_ACTIVITY_KIND_DEVICE,          CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                           CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
                                           CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_MARKER,
                                           CUPTI_ACTIVITY_KIND_GRAPH_TRACE,     CUPTI_ACTIVITY_KIND_OVERHEAD};
  if (!rec->lean) kinds.insert(kinds.begin() + 4, {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER});
  std::string disabled;
  rec->switched_kinds.clear();
  for (auto k : kinds) {
    r = api->enable(k);
    if (r != CUPTI_SUCCESS) {
      if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
        if (subscribed && api->unsubscribe) api->unsubscribe(sub);
        return fail("cuptiActivityEnable failed: " + result_text(r) + " (no CUDA driver or GPU?)");
      }
      disabled += (disabled.empty() ? "" : ",") + std::to_string(int(k));
    } else if (k != CUPTI_ACTIVITY_KIND_DEVICE) {
      rec->switched_kinds.push_back(int(k));
    }
  }
  if (rec->lean && !select_api_ids(true)) {
    rec->lean = false;
    for (auto k : {CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
      if (api->enable(k) == CUPTI_SUCCESS) rec->switched_kinds.push_back(int(k));
  }
  set_process_meta("cupti.api_tracing",
                   rec->lean ? "lean (" + std::to_string(rec->lean_runtime_ids.size()) + " runtime + " +
                                   std::to_string(rec->lean_driver_ids.size()) + " driver callback ids)"
                   : config().cuda_api_all ? "all"
                                           : "all (this libcupti cannot select API ids)");
  // Stacks at blocking calls: API-enter callbacks of those ids only.
  size_t stack_ids = 0;
  if (subscribed && api->enable_callback && config().cuda_stacks_per_s > 0) {
    for (auto kind : {store::ApiKind::Runtime, store::ApiKind::Driver})
      for (uint32_t id : lean_callback_ids(kind, true))
        if (api->enable_callback(1, sub,
                                 kind == store::ApiKind::Runtime ? CUPTI_CB_DOMAIN_RUNTIME_API
                                                                 : CUPTI_CB_DOMAIN_DRIVER_API,
                                 id) == CUPTI_SUCCESS)
          ++stack_ids;
  } else if (subscribed && api->unsubscribe) {
    api->unsubscribe(sub);
    subscribed = false;
  }
  rec->has_subscriber = subscribed;
  rec->subscriber = sub;
  set_process_meta("cupti.stack_callback_ids", std::to_string(stack_ids));
  if (api->flush_period) api->flush_period(500);  // a killed process loses at most ~0.5 s of GPU activity
  {
    std::lock_guard<std::mutex> wl(rec->window_mu);
    rec->window_start = now_ns();
    rec->switched = false;
    rec->window_source.clear();
    rec->tracing.store(true);
  }
  set_process_meta("gpu.window", window_text());
  rec->started.store(true);
  set_process_meta("cupti.status", disabled.empty() ? "recording" : "recording (kinds not enabled: " + disabled + ")");
}

void flush(bool final_flush) {
  if (!rec || !rec->started.load() || !api) return;
  flush_all(final_flush ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  if (!final_flush) return;
  std::lock_guard<std::mutex> wl(rec->window_mu);
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

void tracing_off_locked(int64_t t) {
  if (!rec->tracing.load()) return;
  rec->tracing.store(false);
  for (int k : rec->switched_kinds) api->disable(CUpti_ActivityKind(k));
  if (rec->lean) select_api_ids(false);
  flush_all(0);
  rec->switched = true;
  store::GpuWindow w{rec->window_start, t, getpid()};
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  p.gpu_windows.push_back(w);
}

void tracing_on_locked(int64_t t) {
  if (rec->tracing.load()) return;
  for (int k : rec->switched_kinds) api->enable(CUpti_ActivityKind(k));
  if (rec->lean) select_api_ids(true);
  rec->window_start = t;
  rec->tracing.store(true);
}

// GPU windows (gpu_window.h), counted by the first step source to report a step.
void on_step(const char* source, int64_t steps) {
  if (!rec || !rec->started.load() || !api || !api->disable) return;
  const Config& c = config();
  if (c.gpu_window_m <= 0 || c.gpu_window_n >= c.gpu_window_m) return;
  std::lock_guard<std::mutex> wl(rec->window_mu);
  if (rec->window_source.empty()) rec->window_source = source;
  if (rec->window_source != source) return;
  switch (window_switch(steps, c.gpu_window_n, c.gpu_window_m)) {
    case WindowSwitch::Off: tracing_off_locked(now_ns()); break;
    case WindowSwitch::On: tracing_on_locked(now_ns()); break;
    case WindowSwitch::None: break;
  }
}

// The end of an attach window: flush what is buffered, switch every traced kind and API id off and release our
// subscriber, so a dormant collector costs the GPU work nothing; the next window's start enables them again.
void stop() {
  if (!rec || !rec->started.load() || !api) return;
  flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  {
    std::lock_guard<std::mutex> wl(rec->window_mu);
    if (rec->tracing.load()) {
      rec->tracing.store(false);
      if (api->disable)
        for (int k : rec->switched_kinds) api->disable(CUpti_ActivityKind(k));
      if (rec->lean) select_api_ids(false);
    }
  }
  if (rec->has_subscriber && api->unsubscribe) api->unsubscribe(rec->subscriber);
  rec->has_subscriber = false;
  rec->started.store(false);
}

void after_fork_child() {
  // CUDA does not survive fork; a child that uses CUDA initializes it anew and the driver calls us again.
  if (rec) {
    rec->started.store(false);
    rec->failed = false;
    rec->tracing.store(false);
    new (&rec->window_mu) std::mutex();
    rec->calibration_done = false;
  }
}

}  // namespace stepscope::collector::cupti

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  stepscope::collector::cupti::start_if_possible("injection");
  return 1;
}
