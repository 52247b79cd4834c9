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
#include <string>
#include <vector>

#include "collector_internal.h"
#include "cupti_api.h"
#include "cupti_decode.h"

namespace stepscope::collector::cupti {
namespace {

constexpr size_t kBufferBytes = 4 << 20;  // as Kineto
constexpr int kMaxBuffers = 32;           // 128 MB cap; beyond it CUPTI drops records and counts them

struct Recorder {
  std::mutex mu;
  std::vector<uint8_t*> free_buffers;
  int allocated = 0;
  uint64_t buffers_refused = 0;
  uint64_t dropped_records = 0;
  DecodeState state;
  std::atomic<bool> started{false};
  bool failed = false;
};
Recorder* rec = nullptr;

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

void CUPTIAPI no_op_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}


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
  // One subscriber per process through CUDA 13: if Kineto or nsys holds it, record CPU data only.
  if (api->subscribe) {
    CUpti_SubscriberHandle sub{};
    CUptiResult r = api->subscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(no_op_callback), nullptr);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      return fail("another CUPTI subscriber (Kineto, Nsight Systems?) is present: recording CPU data only");
    if (r == CUPTI_SUCCESS && api->unsubscribe) api->unsubscribe(sub);
  }
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
  CUptiResult r = api->register_callbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) return fail("cuptiActivityRegisterCallbacks: " + result_text(r));
  const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_DEVICE,          CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                      CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
                                      CUPTI_ACTIVITY_KIND_RUNTIME,         CUPTI_ACTIVITY_KIND_DRIVER,
                                      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_MARKER,
                                      CUPTI_ACTIVITY_KIND_GRAPH_TRACE,     CUPTI_ACTIVITY_KIND_OVERHEAD};
  std::string disabled;
  for (auto k : kinds) {
    r = api->enable(k);
    if (r != CUPTI_SUCCESS) {
      if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || k == CUPTI_ACTIVITY_KIND_RUNTIME)
        return fail("cuptiActivityEnable failed: " + result_text(r) + " (no CUDA driver or GPU?)");
      disabled += (disabled.empty() ? "" : ",") + std::to_string(int(k));
    }
  }
  if (api->flush_period) api->flush_period(500);  // a killed process loses at most ~0.5 s of GPU activity
  rec->started.store(true);
  set_process_meta("cupti.status", disabled.empty() ? "recording" : "recording (kinds not enabled: " + disabled + ")");
}

void flush(bool final_flush) {
  if (!rec || !rec->started.load() || !api) return;
  api->flush_all(final_flush ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
}

void after_fork_child() {
  // CUDA does not survive fork; a child that uses CUDA initializes it anew and the driver calls us again.
  if (rec) {
    rec->started.store(false);
    rec->failed = false;
  }
}

}  // namespace stepscope::collector::cupti

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  stepscope::collector::cupti::start_if_possible("injection");
  return 1;
}
