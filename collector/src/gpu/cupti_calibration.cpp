// The per-launch cost CUPTI tracing adds, measured in the process being recorded: the collector thread launches
// an empty kernel (a tiny PTX module through the driver API, on a stream of its own in the program's primary
// context) with CUDA activity on, then off — CUPTI detached, as between GPU windows (a short gap in the trace,
// recorded in gpu_windows like a window),
// and writes the difference of the fastest rounds to meta cupti.launch_cost_ns. Never creates a context: it
// waits until the program has initialized device 0. Any failure leaves the key absent and a note in
// cupti.calibration. Its kernels and API records are dropped from the trace (DecodeState::skip_*).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/collector_internal.h"
#include "gpu/cupti_api.h"
#include "gpu/cupti_recorder_state.h"

namespace stepscope::collector::cupti {
namespace {

constexpr const char* kKernelName = "stepscope_calibration_empty";
constexpr const char* kPtx =
    ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry stepscope_calibration_empty()\n{\n  ret;\n}\n";
constexpr int kLaunchesPerRound = 500;
constexpr int kRounds = 3;
constexpr int64_t kCheckPeriodNs = 1000000000;        // the calibration: a second after the context was seen
constexpr int64_t kContextCheckPeriodNs = 100000000;  // look for the program's context ten times a second

struct Driver {
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDevicePrimaryCtxGetState) primary_state = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) primary_retain = nullptr;
  decltype(&cuDevicePrimaryCtxRelease_v2) primary_release = nullptr;
  decltype(&cuCtxPushCurrent_v2) push = nullptr;
  decltype(&cuCtxPopCurrent_v2) pop = nullptr;
  decltype(&cuModuleLoadData) module_load = nullptr;
  decltype(&cuModuleGetFunction) get_function = nullptr;
  decltype(&cuModuleUnload) module_unload = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuStreamCreate) stream_create = nullptr;
  decltype(&cuStreamSynchronize) stream_sync = nullptr;
  decltype(&cuStreamDestroy_v2) stream_destroy = nullptr;

  bool load(void* h) {
#define STEPSCOPE_SYM(field, name) field = reinterpret_cast<decltype(field)>(dlsym(h, name))
    STEPSCOPE_SYM(device_get, "cuDeviceGet");
    STEPSCOPE_SYM(primary_state, "cuDevicePrimaryCtxGetState");
    STEPSCOPE_SYM(primary_retain, "cuDevicePrimaryCtxRetain");
    STEPSCOPE_SYM(primary_release, "cuDevicePrimaryCtxRelease_v2");
    STEPSCOPE_SYM(push, "cuCtxPushCurrent_v2");
    STEPSCOPE_SYM(pop, "cuCtxPopCurrent_v2");
    STEPSCOPE_SYM(module_load, "cuModuleLoadData");
    STEPSCOPE_SYM(get_function, "cuModuleGetFunction");
    STEPSCOPE_SYM(module_unload, "cuModuleUnload");
    STEPSCOPE_SYM(launch, "cuLaunchKernel");
    STEPSCOPE_SYM(stream_create, "cuStreamCreate");
    STEPSCOPE_SYM(stream_sync, "cuStreamSynchronize");
    STEPSCOPE_SYM(stream_destroy, "cuStreamDestroy_v2");
#undef STEPSCOPE_SYM
    return device_get && primary_state && primary_retain && primary_release && push && pop && module_load &&
           get_function && module_unload && launch && stream_create && stream_sync && stream_destroy;
  }
};

// Host time per launch of the fastest of kRounds rounds (ns); < 0 on a failed launch or once the program
// began to exit (before_exit waits for the calibration; CUDA is torn down after it).
double time_launches(const Driver& d, CUfunction f, CUstream s) {
  double best = -1;
  for (int round = 0; round < kRounds; ++round) {
    if (rec->exiting.load(std::memory_order_relaxed)) return -1;
    const int64_t t0 = now_ns();
    for (int i = 0; i < kLaunchesPerRound; ++i)
      if (d.launch(f, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr) != CUDA_SUCCESS) return -1;
    const int64_t t1 = now_ns();
    if (d.stream_sync(s) != CUDA_SUCCESS) return -1;
    const double per = double(t1 - t0) / kLaunchesPerRound;
    if (best < 0 || per < best) best = per;
  }
  return best;
}

}  // namespace

void calibrate_if_due() {
  if (!rec || !rec->started.load() || !api || rec->exiting.load()) return;
  if (rec->exit_hook_after_context && (rec->calibration_done || !config().calibrate || !api->disable)) return;
  const int64_t now = now_ns();
  if (now < rec->next_calibration_check) return;
  // Every 100 ms until device 0's context is up (the exit hook goes in then), every second after.
  rec->next_calibration_check = now + (rec->exit_hook_after_context ? kCheckPeriodNs : kContextCheckPeriodNs);
  // Held to the end, cleanup included: before_exit waits for it before CUDA's teardown may begin.
  std::lock_guard<std::mutex> cl(rec->calibration_mu);
  if (rec->exiting.load() || rec->lent.load()) return;  // lent: it runs after take_back
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) return;
  Driver d;
  const bool loaded = d.load(cuda);
  CUdevice dev = 0;
  unsigned flags = 0;
  int active = 0;
  if (loaded && (d.device_get(&dev, 0) != CUDA_SUCCESS || d.primary_state(dev, &flags, &active) != CUDA_SUCCESS ||
                 !active)) {
    dlclose(cuda);
    return;  // the program has not initialized device 0 yet
  }
  if (!rec->exit_hook_after_context) {
    // Again now that CUDA is up: the CUDA runtime's and the program's exit handlers are registered by now,
    // and this one, the last registered, runs before them. The calibration waits for a later check, so it
    // never runs without it.
    register_exit_hook();
    rec->exit_hook_after_context = true;
    rec->next_calibration_check = now + kCheckPeriodNs;
    dlclose(cuda);
    return;
  }
  rec->calibration_done = true;
  std::string failure;
  auto step = [&failure](CUresult r, const char* what) {
    if (r != CUDA_SUCCESS && failure.empty()) failure = std::string(what) + " returned " + std::to_string(int(r));
    return r == CUDA_SUCCESS;
  };
  if (!loaded) failure = "libcuda lacks a driver entry point";
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  CUstream stream = nullptr;
  bool pushed = false;
  double on = -1, off = -1;
  std::string off_method;
  if (failure.empty() && step(d.primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain") &&
      step(d.push(ctx), "cuCtxPushCurrent")) {
    pushed = true;
    if (step(d.module_load(&mod, kPtx), "cuModuleLoadData") &&
        step(d.get_function(&fn, mod, kKernelName), "cuModuleGetFunction") &&
        step(d.stream_create(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
      {
        std::lock_guard<std::mutex> lk(rec->mu);
        rec->state.skip_kernel = kKernelName;
        rec->state.skip_tid = current_tid();
      }
      // Under window_mu: no window switches meanwhile. Tracing goes on for the "on" rounds even between
      // windows (most of a tiny-step run is between windows) and comes back as it was.
      std::lock_guard<std::mutex> wl(rec->window_mu);
      const bool was_tracing = rec->tracing.load();
      if (!was_tracing && !tracing_on_locked()) failure = "CUPTI could not be attached for the on rounds";
      if (failure.empty()) {
        time_launches(d, fn, stream);  // warm-up: first launches load the module onto the GPU
        on = time_launches(d, fn, stream);
      }
      // The program began to exit: no detach and no more launches (before_exit waits for this lock).
      if (failure.empty() && !rec->exiting.load()) {
        // "Off" is CUPTI detached where it can be: disabled kinds alone keep most of CUPTI's launch cost.
        tracing_off_locked(now_ns(), -1);
        usleep(kMinDetachGraceNs / 1000);  // the program's kernels in flight end and their records come
        request_detach_locked();
        bool detached = false;
        if (rec->link.load() == int(Link::DetachRequested) &&
            d.launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr) == CUDA_SUCCESS) {
          detached = wait_detached_locked(2000000000LL);  // that launch's exit (or another call's) detaches
          d.stream_sync(stream);
        }
        if (!detached) settle_no_detach_locked();  // a graph pinned it meanwhile: no callbacks left on
        off_method = detached ? "CUPTI detached (cuptiFinalize)" : "CUDA activity disabled";
        off = time_launches(d, fn, stream);
        if (was_tracing && !tracing_on_locked())
          failure = "CUPTI could not be attached again after the off rounds";
      }
      if (failure.empty() && rec->exiting.load()) failure = "the program began to exit during it";
      if (failure.empty() && (on < 0 || off < 0)) failure = "an empty-kernel launch failed";
    }
  }
  if (stream) d.stream_destroy(stream);
  if (mod) d.module_unload(mod);
  if (pushed) {
    CUcontext popped = nullptr;
    d.pop(&popped);
  }
  if (ctx) d.primary_release(dev);
  dlclose(cuda);
  if (!failure.empty()) {
    set_process_meta("cupti.calibration", "failed: " + failure);
    return;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.0f", std::max(0.0, on - off));
  set_process_meta("cupti.launch_cost_ns", buf);
  set_process_meta("cupti.launch_cost_method",
                   "cuLaunchKernel of an empty PTX kernel on its own stream, fastest of " + std::to_string(kRounds) +
                       " rounds of " + std::to_string(kLaunchesPerRound) +
                       " launches, host ns per launch with CUDA activity on minus off (" + off_method + ")");
  std::snprintf(buf, sizeof buf, "on %.0f ns, off %.0f ns per launch", on, off);
  set_process_meta("cupti.calibration", buf + std::string(" (off: ") + off_method + ")");
}

}  // namespace stepscope::collector::cupti
