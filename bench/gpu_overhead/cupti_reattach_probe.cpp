// Which ways of choosing CUDA API records work once CUDA has started? The collector selects API ids
// (cuptiActivityEnableDriverApi/RuntimeApi) so a trainer pays for ~3 API rows per kernel instead of ~19; on
// an H200 (CUDA 13 CUPTI, driver 580) that selection recorded nothing when CUPTI attached after CUDA
// initialized — a re-attach after cuptiFinalize, `stepscope attach` — while the RUNTIME/DRIVER activity kinds
// did. This probe measures each way in one process: attach, launch an empty kernel N times through the driver
// API, flush, count the launch's API rows, the other API rows and the kernels, and the host ns per launch;
// detach (cuptiFinalize in a driver call's exit callback, as the collector does) and try the next way.
//
//   cupti_reattach_probe [N]     # exit 0 measured, 2 usage, 3 no CUDA driver or device
//
// `--late-first WAY SECONDS` is `stepscope attach`'s case, in a process of its own: CUDA starts first, then
// CUPTI attaches for the first time in this process, WAY `kinds` (RUNTIME+DRIVER on) or `deselect` (and every
// other id switched off, as the collector does), with the collector's settings (system thread ids, 4 MB
// buffers, a 500 ms flush period), and the kernel is launched for SECONDS. It prints, per 100 ms of the
// records' own timestamps, how many kernel and launch API rows came, then the buffers asked for and the
// records CUPTI dropped: where launch rows stop while kernels go on, and whether a buffer or a drop goes with
// it (H100, 2026-11-27: `stepscope attach` to launch_bound kept 5,400 launch rows of 743,787 kernels).
#include <cuda.h>
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

std::atomic<long> launch_rows{0}, other_rows{0}, kernel_rows{0}, buffers_asked{0};
// --late-first: rows by the 100 ms bucket of their start (CUPTI's clock), from the first record's.
constexpr int kBuckets = 600;
std::atomic<long> bucket_kernels[kBuckets], bucket_launches[kBuckets];
std::atomic<uint64_t> first_start{0};
std::atomic<bool> bucketing{false};
void bucket(std::atomic<long>* b, uint64_t start) {
  uint64_t zero = 0;
  first_start.compare_exchange_strong(zero, start);
  const uint64_t t0 = first_start.load();
  const long i = start > t0 ? long((start - t0) / 100000000) : 0;
  if (i < kBuckets) ++b[i];
}
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

size_t buffer_bytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  ++buffers_asked;
  *size = buffer_bytes;
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
      const bool runtime_launch = r->kind == CUPTI_ACTIVITY_KIND_RUNTIME &&
                                  a->cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
      ++(launch || runtime_launch ? launch_rows : other_rows);
      if (bucketing && launch) bucket(bucket_launches, a->start);
    } else if (r->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      ++kernel_rows;
      if (bucketing) bucket(bucket_kernels, reinterpret_cast<const CUpti_ActivityKernel10*>(r)->start);
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

// CUDA on device 0 with the empty kernel loaded; false (said) when no device is usable.
bool start_cuda(CUcontext& ctx, CUfunction& fn) {
  CUdevice dev;
  CUmodule mod;
  if (drv.init(0) != CUDA_SUCCESS || drv.device_get(&dev, 0) != CUDA_SUCCESS ||
      drv.retain(&ctx, dev) != CUDA_SUCCESS || drv.set_current(ctx) != CUDA_SUCCESS ||
      drv.module_load(&mod, kPtx) != CUDA_SUCCESS ||
      drv.get_function(&fn, mod, "probe_empty") != CUDA_SUCCESS) {
    std::printf("cupti_reattach_probe: no CUDA device usable: run it on a GPU machine\n");
    return false;
  }
  return true;
}

// `stepscope attach`'s case (see the top): CUDA first, then CUPTI's first attach in this process.
int late_first(const char* way_arg, double seconds) {
  const bool deselect = std::string(way_arg) == "deselect";
  if (!deselect && std::string(way_arg) != "kinds") {
    std::fprintf(stderr, "cupti_reattach_probe: --late-first WAY is kinds or deselect, not %s\n", way_arg);
    return 2;
  }
  CUcontext ctx;
  CUfunction fn;
  if (!start_cuda(ctx, fn)) return 3;
  for (int i = 0; i < 1000; ++i)
    drv.launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);  // CUDA busy first
  drv.sync();
  buffer_bytes = 4u << 20;  // the collector's
  bucketing = true;
  const auto a0 = std::chrono::steady_clock::now();
  if (!check(cuptiSubscribe(&subscriber, reinterpret_cast<CUpti_CallbackFunc>(on_callback), nullptr),
             "cuptiSubscribe"))
    return 1;
  check(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM), "cuptiSetThreadIdType");
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  for (auto k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
                 CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER})
    check(cuptiActivityEnable(k), "cuptiActivityEnable");
  int off = 0;
  if (deselect) {
    for (int id = 1; id < CUPTI_DRIVER_TRACE_CBID_SIZE; ++id)
      if (id != CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel)
        off += cuptiActivityEnableDriverApi(CUpti_CallbackId(id), 0) == CUPTI_SUCCESS;
    for (int id = 1; id < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++id)
      if (id != CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
        off += cuptiActivityEnableRuntimeApi(CUpti_CallbackId(id), 0) == CUPTI_SUCCESS;
  }
  cuptiActivityFlushPeriod(500);
  const auto a1 = std::chrono::steady_clock::now();
  long launched = 0;
  const auto until = a1 + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 100; ++i, ++launched) drv.launch(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
  drv.sync();
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(ctx, 0, &dropped);
  size_t dropped_any = 0;
  cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped_any);
  std::printf(
      "late first attach, %s: attach took %.2f ms (%d ids switched off); %ld launches in %.1f s: %ld kernel "
      "rows, %ld launch rows, %ld other API rows; %ld buffers asked; dropped %zu (context) %zu (none)\n",
      way_arg, std::chrono::duration<double, std::milli>(a1 - a0).count(), off, launched, seconds,
      kernel_rows.load(), launch_rows.load(), other_rows.load(), buffers_asked.load(), dropped, dropped_any);
  std::printf("| 100 ms from the first record | kernel rows | cuLaunchKernel rows |\n|---|---|---|\n");
  for (int i = 0; i < kBuckets; ++i)
    if (bucket_kernels[i] || bucket_launches[i])
      std::printf("| %d | %ld | %ld |\n", i, bucket_kernels[i].load(), bucket_launches[i].load());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  char* end = nullptr;
  const bool late = argc == 4 && std::string(argv[1]) == "--late-first";
  const double seconds = late ? std::strtod(argv[3], &end) : 0;
  if (late && (*end || seconds <= 0 || seconds > 60)) {
    std::fprintf(stderr, "usage: cupti_reattach_probe --late-first kinds|deselect SECONDS  (0..60)\n");
    return 2;
  }
  const long n = late ? 0 : argc > 1 ? std::strtol(argv[1], &end, 10) : 2000;
  if (!late && (argc > 2 || (argc > 1 && (*end || n < 1 || n > 10000000)))) {
    std::fprintf(stderr,
                 "usage: cupti_reattach_probe [LAUNCHES]  (1..10000000, default 2000)\n"
                 "       cupti_reattach_probe --late-first kinds|deselect SECONDS\n");
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
  if (late) return late_first(argv[2], seconds);
  // The control: ids selected before CUDA starts, as the collector's injection does.
  if (!attach(Way::SelectIds)) return 3;
  CUcontext ctx;
  CUfunction fn;
  if (!start_cuda(ctx, fn)) return 3;
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
