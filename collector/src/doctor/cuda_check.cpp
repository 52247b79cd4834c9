#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <dlfcn.h>

#include <vector>

#ifdef STEPSCOPE_DOCTOR_CUDA
#include <cuda.h>
#include <cupti.h>

#include "gpu/cupti_library.h"
#include "gpu/cupti_subscribe.h"
#endif

namespace stepscope::collector::checkup {
namespace {

#ifdef STEPSCOPE_DOCTOR_CUDA
std::string cuda_version(int v) {
  return strf("%d.%d", v / 1000, (v % 1000) / 10);
}

void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

GpuState check_cuda(Printer& p) {
  GpuState g;
  bool driver_ok = false;
  int driver_version = 0;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    p.line(Verdict::Fail, "CUDA driver",
           "no CUDA driver (libcuda.so.1 not found): stepscope records CPU data only",
           "install the NVIDIA driver / run on a GPU machine", "CUDA activity (no driver)");
    g.why_not = "no CUDA driver";
  } else {
    // The driver stays loaded: unloading it after cuInit is not safe.
    auto get_version = reinterpret_cast<decltype(&cuDriverGetVersion)>(dlsym(cuda, "cuDriverGetVersion"));
    auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(cuda, "cuInit"));
    auto count = reinterpret_cast<decltype(&cuDeviceGetCount)>(dlsym(cuda, "cuDeviceGetCount"));
    auto device = reinterpret_cast<decltype(&cuDeviceGet)>(dlsym(cuda, "cuDeviceGet"));
    auto name = reinterpret_cast<decltype(&cuDeviceGetName)>(dlsym(cuda, "cuDeviceGetName"));
    auto error_name = reinterpret_cast<decltype(&cuGetErrorName)>(dlsym(cuda, "cuGetErrorName"));
    const std::string path = loaded_path(cuda);
    auto err = [&](CUresult r) {
      const char* n = nullptr;
      if (error_name) error_name(r, &n);
      return strf("%s (%d)", n ? n : "CUDA error", int(r));
    };
    if (!get_version || !init || !count || !device || !name) {
      p.line(Verdict::Fail, "CUDA driver", path + " lacks the driver API entry points stepscope needs",
             "reinstall the NVIDIA driver", "CUDA activity (broken driver)");
      g.why_not = "the CUDA driver is incomplete";
    } else {
      get_version(&driver_version);
      const std::string ver = cuda_version(driver_version) + " (" + path + ")";
      int n = 0;
      if (CUresult r = init(0); r != CUDA_SUCCESS) {
        const std::string todo =
            r == CUDA_ERROR_NO_DEVICE
                ? "no GPU is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES, and --gpus all in "
                  "a container"
                : "check nvidia-smi; a driver/kernel-module mismatch needs a reboot or reloading "
                  "the nvidia module";
        p.line(Verdict::Fail, "CUDA driver", ver + "; cuInit: " + err(r), todo,
               "CUDA activity (cuInit failed)");
        g.why_not = "cuInit failed: " + err(r);
      } else if (CUresult c = count(&n); c != CUDA_SUCCESS || n == 0) {
        p.line(Verdict::Fail, "CUDA driver",
               ver + "; no CUDA device" + (c != CUDA_SUCCESS ? ": " + err(c) : ""),
               "check nvidia-smi and CUDA_VISIBLE_DEVICES", "CUDA activity (no device)");
        g.why_not = "no CUDA device";
      } else {
        std::vector<std::string> names;
        for (int i = 0; i < n; ++i) {
          CUdevice d = 0;
          char buf[256] = {};
          names.push_back(device(&d, i) == CUDA_SUCCESS && name(buf, sizeof buf, d) == CUDA_SUCCESS ? buf
                                                                                                    : "?");
        }
        p.line(Verdict::Ok, "CUDA driver",
               ver + strf("; cuInit ok; %d device%s: ", n, n == 1 ? "" : "s") + join(names, ", "));
        driver_ok = true;
      }
    }
  }

  // The runtime is the program's business (PyTorch and JAX bring their own): reported, never a failure.
  void* rt = nullptr;
  for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
    if ((rt = dlopen(n, RTLD_LAZY | RTLD_LOCAL))) break;
  if (!rt) {
    p.line(Verdict::Warn, "CUDA runtime", "no libcudart.so.13, .12 or libcudart.so on the loader path",
           "nothing to do for PyTorch or JAX (they bring their own); CUDA C++ programs need the toolkit's");
  } else {
    using RuntimeVersion = int (*)(int*);
    auto get = reinterpret_cast<RuntimeVersion>(dlsym(rt, "cudaRuntimeGetVersion"));
    int v = 0;
    if (get) get(&v);
    const std::string detail =
        (v ? cuda_version(v) : std::string("version unknown")) + " (" + loaded_path(rt) + ")";
    if (driver_ok && v > driver_version)
      p.line(Verdict::Warn, "CUDA runtime",
             detail + " is newer than the driver supports (" + cuda_version(driver_version) + ")",
             "programs built with it fail with cudaErrorInsufficientDriver: update the driver");
    else
      p.line(Verdict::Ok, "CUDA runtime", detail + "; programs may bring their own (PyTorch does)");
    dlclose(rt);
  }

  // libcupti exactly as the collector finds it (cupti_library.h).
  void* cupti = nullptr;
  std::vector<std::string> tried;
  for (const char* n : cupti::kLibraryNames) {
    if ((cupti = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    tried.push_back(n);
  }
  if (!cupti) {
    p.line(Verdict::Fail, "CUPTI", "cannot load libcupti (tried " + join(tried, ", ") + ")",
           "install the CUDA toolkit's CUPTI or the nvidia-cuda-cupti wheel and put its lib folder on "
           "LD_LIBRARY_PATH",
           "CUDA activity (no CUPTI)");
    if (g.why_not.empty()) g.why_not = "no CUPTI";
    return g;
  }
  auto get_version = reinterpret_cast<decltype(&cuptiGetVersion)>(dlsym(cupti, "cuptiGetVersion"));
  auto subscribe = reinterpret_cast<decltype(&cuptiSubscribe)>(dlsym(cupti, "cuptiSubscribe"));
  auto unsubscribe = reinterpret_cast<decltype(&cuptiUnsubscribe)>(dlsym(cupti, "cuptiUnsubscribe"));
  auto result_string =
      reinterpret_cast<decltype(&cuptiGetResultString)>(dlsym(cupti, "cuptiGetResultString"));
  uint32_t api_version = 0;
  if (get_version) get_version(&api_version);
  p.line(Verdict::Ok, "CUPTI", strf("API version %u (", api_version) + loaded_path(cupti) + ")");
  if (!subscribe || !unsubscribe) {
    p.line(Verdict::Fail, "CUPTI subscription", "this libcupti has no cuptiSubscribe",
           "use the CUPTI of a CUDA toolkit", "CUDA activity (CUPTI cannot subscribe)");
    if (g.why_not.empty()) g.why_not = "CUPTI cannot subscribe";
    return g;
  }
  CUpti_SubscriberHandle sub{};
  const cupti::Subscription subscription =
      cupti::subscribe_named(cupti, subscribe, &sub, no_callback, nullptr);
  const CUptiResult r = subscription.result;
  const char* rs = nullptr;
  if (result_string) result_string(r, &rs);
  const std::string result = rs ? rs : strf("CUPTI result %d", int(r));
  if (r == CUPTI_SUCCESS) {
    unsubscribe(sub);
    p.line(Verdict::Ok, "CUPTI subscription", "cuptiSubscribe succeeds (then cuptiUnsubscribe)");
    if (driver_ok) g.usable = true;
  } else if (!driver_ok) {
    // Without a working driver CUPTI cannot subscribe (CUPTI_ERROR_UNKNOWN here): part of the driver's
    // result.
    p.line(Verdict::Skip, "CUPTI subscription",
           "cuptiSubscribe returns " + result +
               ", as expected without a working CUDA driver (see the driver line)");
  } else {
    std::string todo;
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
      todo =
          "profiling is restricted to administrators: run as root or load the nvidia module with "
          "NVreg_RestrictProfilingToAdminUsers=0";
    else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      todo = cupti::holder_words(subscription.holder) +
             " holds CUPTI in this process (CUDA_INJECTION64_PATH is set?): run doctor outside it";
    else
      todo = strf(
          "this CUPTI (API version %u) may not match the driver (CUDA %s): use the CUPTI of the driver's "
          "CUDA version (LD_LIBRARY_PATH)",
          api_version, cuda_version(driver_version).c_str());
    p.line(Verdict::Fail, "CUPTI subscription", "cuptiSubscribe returns " + result, todo,
           "CUDA activity (CUPTI cannot subscribe)");
    g.why_not = "CUPTI cannot subscribe";
  }
  return g;
}
#else
GpuState check_cuda(Printer& p) {
  p.line(Verdict::Fail, "CUDA",
         "this stepscope was built without CUPTI (STEPSCOPE_WITH_CUDA=OFF): it records CPU data only",
         "rebuild with the CUDA toolkit's CUPTI (or the nvidia-cuda-cupti wheel, scripts/install-deps.sh)",
         "CUDA activity (built without CUPTI)");
  return GpuState{false, "built without CUPTI"};
}
#endif

}  // namespace

const DoctorCheck kCudaCheck = {"CUDA", [](Printer& p, DoctorContext& ctx) { ctx.gpu = check_cuda(p); }};

}  // namespace stepscope::collector::checkup
