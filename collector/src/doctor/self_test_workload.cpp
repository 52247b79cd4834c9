#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#ifdef STEPSCOPE_DOCTOR_CUDA
#include <cuda.h>
#endif

#include "doctor/doctor_check.h"
#include "launcher/launcher_clock.h"

namespace stepscope::collector {
namespace checkup {
namespace {

// The same one-instruction kernel as the collector's launch-cost calibration (cupti_calibration.cpp).
constexpr const char* kPtx =
    ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry stepscope_doctor_empty()\n{\n  ret;\n}\n";
// Named so the self-test can find it in the stacks; noinline keeps it a frame of its own.
[[gnu::noinline]] uint64_t doctor_burn_cpu(int64_t until_ns) {
  uint64_t x = 88172645463325252ULL;
  while (mono_ns() < until_ns)
    for (int i = 0; i < 20000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
  return x;
}

std::atomic<uint64_t> g_sink{0};

struct CudaLoop {
  int64_t tid = 0, launches = 0, syncs = 0;
  std::string status = "skipped: libcuda.so.1 not found";
};

#ifdef STEPSCOPE_DOCTOR_CUDA
// Runs on ss-doctor-cuda: every driver call of the workload is made here, so the API rows must carry its tid.
void cuda_loop(void* cuda, int64_t until_ns, CudaLoop& r) {
  pthread_setname_np(pthread_self(), kCudaThreadName);
  r.tid = gettid();
#define STEPSCOPE_SYM(name) auto name##_fn = reinterpret_cast<decltype(&name)>(dlsym(cuda, #name))
  STEPSCOPE_SYM(cuInit);
  STEPSCOPE_SYM(cuDeviceGet);
  STEPSCOPE_SYM(cuDevicePrimaryCtxRetain);
  STEPSCOPE_SYM(cuCtxSetCurrent);
  STEPSCOPE_SYM(cuModuleLoadData);
  STEPSCOPE_SYM(cuModuleGetFunction);
  STEPSCOPE_SYM(cuModuleUnload);
  STEPSCOPE_SYM(cuStreamCreate);
  STEPSCOPE_SYM(cuLaunchKernel);
  STEPSCOPE_SYM(cuStreamSynchronize);
  STEPSCOPE_SYM(cuGetErrorName);
#undef STEPSCOPE_SYM
  // Versioned exports: the unversioned names are the CUDA 3.x ABI.
  auto release_fn =
      reinterpret_cast<decltype(&cuDevicePrimaryCtxRelease_v2)>(dlsym(cuda, "cuDevicePrimaryCtxRelease_v2"));
  auto stream_destroy_fn = reinterpret_cast<decltype(&cuStreamDestroy_v2)>(dlsym(cuda, "cuStreamDestroy_v2"));
  if (!cuInit_fn || !cuDeviceGet_fn || !cuDevicePrimaryCtxRetain_fn || !cuCtxSetCurrent_fn ||
      !cuModuleLoadData_fn || !cuModuleGetFunction_fn || !cuModuleUnload_fn || !cuStreamCreate_fn ||
      !cuLaunchKernel_fn || !cuStreamSynchronize_fn || !release_fn || !stream_destroy_fn) {
    r.status = "failed: libcuda.so.1 lacks a driver entry point";
    return;
  }
  auto ok = [&](CUresult res, const char* call) {
    if (res == CUDA_SUCCESS) return true;
    const char* n = nullptr;
    if (cuGetErrorName_fn) cuGetErrorName_fn(res, &n);
    r.status = strf("failed: %s returned %s (%d)", call, n ? n : "an error", int(res));
    return false;
  };
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  CUstream stream = nullptr;
  if (ok(cuInit_fn(0), "cuInit") && ok(cuDeviceGet_fn(&dev, 0), "cuDeviceGet") &&
      ok(cuDevicePrimaryCtxRetain_fn(&ctx, dev), "cuDevicePrimaryCtxRetain") &&
      ok(cuCtxSetCurrent_fn(ctx), "cuCtxSetCurrent") &&
      ok(cuModuleLoadData_fn(&mod, kPtx), "cuModuleLoadData") &&
      ok(cuModuleGetFunction_fn(&fn, mod, kKernelName), "cuModuleGetFunction") &&
      ok(cuStreamCreate_fn(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    r.status = "ok";
    // Batches of 100 launches and a sync, 10 ms apart: tens of thousands of kernels, not millions of rows.
    while (r.status == "ok" && mono_ns() < until_ns) {
      for (int i = 0; i < 100; ++i) {
        if (!ok(cuLaunchKernel_fn(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr), "cuLaunchKernel"))
          break;
        ++r.launches;
      }
      if (r.status == "ok" && ok(cuStreamSynchronize_fn(stream), "cuStreamSynchronize")) ++r.syncs;
      timespec pause{0, 10000000};
      nanosleep(&pause, nullptr);
    }
  }
  if (stream) stream_destroy_fn(stream);
  if (mod) cuModuleUnload_fn(mod);
  if (ctx) {
    cuCtxSetCurrent_fn(nullptr);
    release_fn(dev);
  }
}
#endif

}  // namespace
}  // namespace checkup

using namespace checkup;

int doctor_workload(double seconds, const std::string& report_path) {
  const int64_t until = mono_ns() + int64_t(seconds * 1e9);
  struct Burner {
    int64_t tid = 0;
    double cpu_s = 0;
  };
  Burner burners[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([i, until, &burners] {
      pthread_setname_np(pthread_self(), kCpuThreadNames[i]);
      burners[i].tid = gettid();
      g_sink += doctor_burn_cpu(until);
      burners[i].cpu_s = thread_cpu_s();
    });
  CudaLoop cuda;
#ifdef STEPSCOPE_DOCTOR_CUDA
  if (void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))
    threads.emplace_back([h, until, &cuda] { cuda_loop(h, until, cuda); });
#else
  cuda.status = "skipped: built without CUPTI";
#endif
  g_sink += doctor_burn_cpu(until);
  const double main_cpu = thread_cpu_s();
  for (auto& t : threads) t.join();
  std::FILE* f = stdout;
  if (!report_path.empty()) {  // private, like the recordings beside it
    const int fd = open(report_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !(f = fdopen(fd, "w"))) return 1;
  }
  std::fprintf(f, "pid %d\n", int(getpid()));
  std::fprintf(f, "thread %d %.6f main\n", int(getpid()), main_cpu);
  for (int i = 0; i < 2; ++i)
    std::fprintf(f, "thread %lld %.6f %s\n", (long long)burners[i].tid, burners[i].cpu_s, kCpuThreadNames[i]);
  std::fprintf(f, "cuda %lld %lld %lld %s\n", (long long)cuda.tid, (long long)cuda.launches,
               (long long)cuda.syncs, cuda.status.c_str());
  if (f != stdout) std::fclose(f);
  return 0;
}

}  // namespace stepscope::collector
