// Shared plumbing for the CUDA samples: exit codes, checked CUDA/cuBLAS calls, the no-device path,
// step/data-wait markers (stepscope.h + NVTX) and step-time statistics.
#pragma once

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#if __has_include("stepscope.h")
#include "stepscope.h"
#else
// Built without the collector's header: markers become no-ops, the sample still runs.
static inline void stepscope_step(void) {}
static inline void stepscope_data_wait_begin(void) {}
static inline void stepscope_data_wait_end(void) {}
#endif

namespace sample {

// Exit codes shared by every CUDA sample (documented in samples/README.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitVerifyFailed = 1,  // ran, but the GPU result differs from the CPU reference
  kExitUsage = 2,         // bad command line
  kExitNoDevice = 3,      // no CUDA driver or no CUDA device: nothing was run
  kExitCudaError = 4,     // a CUDA or cuBLAS call failed while running
};

inline const char*& program_name() {
  static const char* name = "sample";
  return name;
}

[[noreturn]] inline void fail_cuda(const char* what, const char* err_name, const char* err_text,
                                   const char* file, int line) {
  std::fprintf(stderr, "%s: CUDA error: %s failed: %s (%s) at %s:%d\n", program_name(), what, err_name,
               err_text, file, line);
  std::exit(kExitCudaError);
}

#define SAMPLE_CUDA_CHECK(call)                                                                    \
  do {                                                                                             \
    cudaError_t sample_err_ = (call);                                                              \
    if (sample_err_ != cudaSuccess)                                                                \
      ::sample::fail_cuda(#call, cudaGetErrorName(sample_err_), cudaGetErrorString(sample_err_),   \
                          __FILE__, __LINE__);                                                     \
  } while (0)

// A kernel launch: checks the launch itself (bad configuration) without synchronizing.
#define SAMPLE_CUDA_CHECK_LAUNCH() SAMPLE_CUDA_CHECK(cudaGetLastError())

// Parses the command line; bad input exits kExitUsage with CLI11's message, --help exits 0.
inline void parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --help-all
    std::exit(app.exit(e));
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    std::exit(kExitUsage);
  }
}

// Picks device 0, or exits kExitNoDevice with one clear line when there is no driver or no GPU.
inline void require_cuda_device() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr,
                 "%s: error: no CUDA device (cudaGetDeviceCount: %s: %s); this sample needs an NVIDIA GPU "
                 "and driver (exit code %d)\n",
                 program_name(), err == cudaSuccess ? "cudaSuccess" : cudaGetErrorName(err),
                 err == cudaSuccess ? "0 devices" : cudaGetErrorString(err), static_cast<int>(kExitNoDevice));
    std::exit(kExitNoDevice);
  }
  cudaDeviceProp prop{};
  SAMPLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  SAMPLE_CUDA_CHECK(cudaSetDevice(0));
  // Lines starting "device:" and "time:" vary between machines and runs; every other line is deterministic.
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
}

// One NVTX range for the scope (named so that `stepscope record`'s default regexes see it).
class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

// Marks a data wait for both stepscope (stepscope.h) and NVTX tools ("next_batch").
class DataWait {
 public:
  DataWait() : range_("next_batch") { stepscope_data_wait_begin(); }
  ~DataWait() { stepscope_data_wait_end(); }

 private:
  NvtxRange range_;
};

using Clock = std::chrono::steady_clock;
inline double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Summary of per-step durations in microseconds.
struct StepStats {
  double median_us = 0, mean_us = 0, min_us = 0, max_us = 0;
  size_t count = 0;
};

inline StepStats summarize(std::vector<double> us) {
  StepStats s;
  if (us.empty()) return s;
  s.count = us.size();
  double sum = 0;
  for (double v : us) sum += v;
  s.mean_us = sum / us.size();
  std::sort(us.begin(), us.end());
  s.min_us = us.front();
  s.max_us = us.back();
  s.median_us = us.size() % 2 ? us[us.size() / 2] : 0.5 * (us[us.size() / 2 - 1] + us[us.size() / 2]);
  return s;
}

// Timings are tagged "time:" so the rest of stdout (configuration, checksum, verification) can be
// compared from run to run.
inline void print_step_time(const char* label, const StepStats& s) {
  std::printf("time: %s: step median %.2f us, mean %.2f us, min %.2f us, max %.2f us (%zu samples)\n",
               label, s.median_us, s.mean_us, s.min_us, s.max_us, s.count);
}

// Records an event every `window` steps on `stream` (no host blocking in the loop); after the run,
// window durations / window give the step time on the GPU timeline — the seed article's method.
class WindowTimer {
 public:
  WindowTimer(cudaStream_t stream, int steps, int window) : stream_(stream), window_(std::max(1, window)) {
    int marks = steps / window_ + 1;
    events_.resize(marks);
    for (auto& e : events_) SAMPLE_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~WindowTimer() {
    for (auto& e : events_) cudaEventDestroy(e);
  }
  WindowTimer(const WindowTimer&) = delete;
  WindowTimer& operator=(const WindowTimer&) = delete;

  // Call before step `step` begins (0-based) and once more with step == steps after the last one (a loop cut
  // short, e.g. by a time limit, calls it with the steps it did).
  void before_step(int step) {
    if (step % window_ == 0 && step / window_ < static_cast<int>(events_.size())) {
      SAMPLE_CUDA_CHECK(cudaEventRecord(events_[step / window_], stream_));
      recorded_ = static_cast<size_t>(step / window_) + 1;
    }
  }
  // After the stream has drained: per-step microseconds, one value per full window recorded.
  std::vector<double> per_step_us() const {
    std::vector<double> out;
    for (size_t i = 1; i < recorded_; ++i) {
      float ms = 0;
      SAMPLE_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
      out.push_back(ms * 1000.0 / window_);
    }
    return out;
  }

 private:
  cudaStream_t stream_;
  int window_;
  std::vector<cudaEvent_t> events_;
  size_t recorded_ = 0;  // events_[0, recorded_) were recorded
};

// Setup and read-back copies go through pinned staging memory, so the only pageable copies a trace of a
// sample shows are the ones the sample is about (input_bound without --prefetch).
template <typename T>
void copy_to_device(T* dst, const std::vector<T>& src) {
  if (src.empty()) return;
  T* staging = nullptr;
  SAMPLE_CUDA_CHECK(cudaMallocHost(&staging, src.size() * sizeof(T)));
  std::copy(src.begin(), src.end(), staging);
  SAMPLE_CUDA_CHECK(cudaMemcpy(dst, staging, src.size() * sizeof(T), cudaMemcpyHostToDevice));
  SAMPLE_CUDA_CHECK(cudaFreeHost(staging));
}

template <typename T>
void copy_to_host(std::vector<T>& dst, const T* src) {
  if (dst.empty()) return;
  T* staging = nullptr;
  SAMPLE_CUDA_CHECK(cudaMallocHost(&staging, dst.size() * sizeof(T)));
  SAMPLE_CUDA_CHECK(cudaMemcpy(staging, src, dst.size() * sizeof(T), cudaMemcpyDeviceToHost));
  std::copy(staging, staging + dst.size(), dst.begin());
  SAMPLE_CUDA_CHECK(cudaFreeHost(staging));
}

// Compares GPU values with a CPU reference; prints the verdict on stdout.
inline bool report_verification(const char* what, double max_abs_err, double tolerance, size_t checked) {
  bool ok = max_abs_err <= tolerance && std::isfinite(max_abs_err);
  std::printf("verification: %s (%s: %zu values vs CPU reference, max abs error %.3g, tolerance %.3g)\n",
              ok ? "PASS" : "FAIL", what, checked, max_abs_err, tolerance);
  return ok;
}

}  // namespace sample
