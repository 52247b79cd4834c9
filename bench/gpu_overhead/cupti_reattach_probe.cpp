// Which ways of choosing CUDA API records work once CUDA has started? The collector selects API ids
// (cuptiActivityEnableDriverApi/RuntimeApi) so a trainer pays for ~3 API rows per kernel instead of ~19; on
// an H200 (CUDA 13 CUPTI, driver 580) that selection recorded nothing when CUPTI attached after CUDA
// initialized — a re-attach after cuptiFinalize, `stepscope attach` — while the RUNTIME/DRIVER activity kinds
// did. This probe measures each way in one process: attach, launch an empty kernel N times through the driver
// API, flush, count the launch's API rows, the other API rows and the kernels, and the host ns per launch;
// detach (cuptiFinalize in a driver call's exit callback, as the collector does) and try the next way.
//
//   cupti_reattach_probe [N]     # exit 0 measured, 2 usage, 3 no CUDA driver or device
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::atomic<long> launch_rows{0}, other_rows{0}, kernel_rows{0};
std::atomic<int> finalize_asked{0};
CUpti_SubscriberHandle subscriber;

struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuCtxGetDevice) get_device = nullptr;
  decltype(&cuModuleLoadData) module_load = nullptr;
  decltype(&cuModuleGetFunction) get_function = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuCtxSynchronize) sync = nullptr;
} drv;

constexpr const char* kPtx =
    ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry probe_empty()\n{\n  ret;\n}\n";

bool check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return true;
  const char* s = "?";
  cuptiGetResultString(r, &s);
  std::printf("  %s: %s\n", what, s);
  return false;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8u << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    if (r->kind == CUPTI_ACTIVITY_KIND_DRIVER || r->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
      const bool launch =
          r->kind == CUPTI_ACTIVITY_KIND_DRIVER && a->cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
      ++(launch ? launch_rows : other_rows);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      ++kernel_rows;
    }
  }
  std::free(buffer);
}

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  if (static_cast<const CUpti_CallbackData*>(data)->callbackSite == CUPTI_API_EXIT &&
      finalize_asked.exchange(0))
    check(cuptiFinalize(), "cuptiFinalize");
}

enum class Way { SelectIds, KindsThenDisableOthers, Kinds };
const char* way_name(Way w) {
  switch (w) {
    case Way::SelectIds:
      return "select the launch id only";
    case Way::KindsThenDisableOthers:
      return "DRIVER+RUNTIME kinds, then disable every other id";
    case Way::Kinds:
      return "DRIVER+RUNTIME kinds (every call)";
  }
  return "";
}

bool attach(Way way) {
  if (!check(cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(on_callback), nullptr),
             "cuptiSubscribe") ||
      !check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
             "cuptiActivityRegisterCallbacks") ||
      !check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable CONCURRENT_KERNEL"))
    return false;
  switch (way) {
    case Way::SelectIds:
      check(cuptiActivityEnableDriverApi(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 1),
            "cuptiActivityEnableDriverApi");
      break;
    case Way::KindsThenDisableOthers:
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enable DRIVER");
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable RUNTIME");
      for (int id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id)
        if (id != CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)
          cuptiActivityEnableDriverApi(CUpti_CallbackId(id), 0);
      for (int id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id)
        cuptiActivityEnableRuntimeApi(CUpti_CallbackId(id), 0);
      break;
    case Way::Kinds:
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enable DRIVER");
      check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable RUNTIME");
      break;
  }
  return true;
}

void detach() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
  finalize_asked = 1;
  CUdevice d;
  drv.get_device(&d);  // its exit callback finalizes
  if (finalize_asked.exchange(0)) std::printf("  the detach did not happen\n");
}

void measure(const std::string& label, CUfunction f, int n) {
  launch_rows = other_rows = kernel_rows = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) drv.launch(f, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  const auto t1 = std::chrono::steady_clock::now();
  drv.sync();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::printf("| %s | %d | %ld | %ld | %ld | %.0f |\n", label.c_str(), n, kernel_rows.load(),
              launch_rows.load(), other_rows.load(),
              std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
}

}  // namespace

int main(int argc, char** argv) {
  char* end = nullptr;
  const long n = argc > 1 ? std::strtol(argv[1], &end, 10) : 2000;
  if (argc > 2 || (argc > 1 && (*end || n < 1 || n > 10000000))) {
    std::fprintf(stderr, "usage: cupti_reattach_probe [LAUNCHES]  (1..10000000, default 2000)\n");
    return 2;
  }
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) {
    std::printf("cupti_reattach_probe: no CUDA driver (libcuda.so.1): run it on a GPU machine\n");
    return 3;
  }
#define STEPSCOPE_SYM(field, name) drv.field = reinterpret_cast<decltype(drv.field)>(dlsym(cuda, name))
  STEPSCOPE_SYM(init, "cuInit");
  STEPSCOPE_SYM(device_get, "cuDeviceGet");
  STEPSCOPE_SYM(retain, "cuDevicePrimaryCtxRetain");
  STEPSCOPE_SYM(set_current, "cuCtxSetCurrent");
  STEPSCOPE_SYM(get_device, "cuCtxGetDevice");
  STEPSCOPE_SYM(module_load, "cuModuleLoadData");
  STEPSCOPE_SYM(get_function, "cuModuleGetFunction");
  STEPSCOPE_SYM(launch, "cuLaunchKernel");
  STEPSCOPE_SYM(sync, "cuCtxSynchronize");
#undef STEPSCOPE_SYM
  // The control: ids selected before CUDA starts, as the collector's injection does.
  if (!attach(Way::SelectIds)) return 3;
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  if (drv.init(0) != CUDA_SUCCESS || drv.device_get(&dev, 0) != CUDA_SUCCESS ||
      drv.retain(&ctx, dev) != CUDA_SUCCESS || drv.set_current(ctx) != CUDA_SUCCESS ||
      drv.module_load(&mod, kPtx) != CUDA_SUCCESS ||
      drv.get_function(&fn, mod, "probe_empty") != CUDA_SUCCESS) {
    std::printf("cupti_reattach_probe: no CUDA device usable: run it on a GPU machine\n");
    return 3;
  }
  std::printf(
      "| attach | launches | kernel rows | cuLaunchKernel rows | other API rows | host ns/launch |\n");
  std::printf("|---|---|---|---|---|---|\n");
  measure(std::string("before CUDA started: ") + way_name(Way::SelectIds), fn, int(n));
  detach();
  measure("detached", fn, int(n));
  for (Way w : {Way::SelectIds, Way::KindsThenDisableOthers, Way::Kinds}) {
    if (!attach(w)) return 1;
    measure(std::string("after CUDA started: ") + way_name(w), fn, int(n));
    detach();
  }
  return 0;
}
