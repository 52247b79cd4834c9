// Test-only preload library: samples the process with SIGPROF, captures Python frames in the signal handler
// through collector/src/python exactly as the collector does, and writes them resolved when the Python
// script calls stepscope_probe_dump(path) through ctypes. Also counts the native _PyEval_EvalFrameDefault
// frames of each sample (libunwind), to check the splice rule: one evaluator frame per is_entry frame. Every
// other sample reads through the collector's fault guard (unwind/safe_copy.h), the others by system call.
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "python_frames.h"
#include "unwind/safe_copy.h"

namespace py = stepscope::collector::python;

namespace {
constexpr int kMaxSamples = 8000;
constexpr int kMaxFrames = 48;
struct Sample {
  int count;
  int native_eval;
  py::RawPyFrame frames[kMaxFrames];
};
Sample g_samples[kMaxSamples];
std::atomic<int> g_next{0};
std::atomic<bool> g_on{false};
std::atomic<int64_t> g_capture_ns{0}, g_captures{0};
// The frame reader's working memory, per thread as the collector's ThreadState holds it (preloaded: static
// TLS).
__thread py::CaptureScratch t_scratch __attribute__((tls_model("initial-exec")));

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

void on_prof(int, siginfo_t*, void*) {
  if (!g_on.load(std::memory_order_relaxed)) return;
  const int i = g_next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kMaxSamples) return;
  Sample& s = g_samples[i];
  const int64_t t0 = now_ns();
  if (i % 2 == 0) {  // every other sample reads with guarded copies, as the collector's handler does
    const stepscope::collector::unwind::FaultGuardScope guard;
    s.count = py::capture_current_thread(s.frames, kMaxFrames, t_scratch);
  } else {
    s.count = py::capture_current_thread(s.frames, kMaxFrames, t_scratch);
  }
  if (s.count > 0) g_capture_ns += now_ns() - t0, ++g_captures;
  void* pcs[256];
  const int depth = unw_backtrace(pcs, 256);
  s.native_eval = 0;
  for (int k = 0; k < depth; ++k)
    if (py::is_eval_frame(reinterpret_cast<uint64_t>(pcs[k]))) ++s.native_eval;
}

__attribute__((constructor)) void start() {
  if (!py::init()) {
    std::fprintf(stderr, "probe: %s\n", py::describe().c_str());
    return;
  }
  stepscope::collector::unwind::install_fault_guard();
  unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
  void* warm[8];
  unw_backtrace(warm, 8);
  struct sigaction sa {};
  sa.sa_sigaction = on_prof;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigaction(SIGPROF, &sa, nullptr);
  g_on = true;
  itimerval t{{0, 1000}, {0, 1000}};
  setitimer(ITIMER_PROF, &t, nullptr);
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int stepscope_probe_dump(const char* path) {
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  g_on = false;
  FILE* f = std::fopen(path, "w");
  if (!f) return -1;
  std::fprintf(f, "version %s\n", py::describe().c_str());
  std::fprintf(f, "capture_us %.2f\n", g_captures ? g_capture_ns.load() / 1000.0 / g_captures.load() : 0.0);
  const int n = std::min(g_next.load(), kMaxSamples);
  for (int i = 0; i < n; ++i) {
    const Sample& s = g_samples[i];
    std::fprintf(f, "sample %d", s.native_eval);
    for (int k = 0; k < s.count; ++k) {
      std::string fn, file;
      int line = 0;
      if (py::resolve(s.frames[k], fn, file, line))
        std::fprintf(f, "\t%s|%s|%d|%d", fn.c_str(), file.c_str(), line, s.frames[k].is_entry);
      else
        std::fprintf(f, "\t?|?|0|%d", s.frames[k].is_entry);
    }
    std::fprintf(f, "\n");
  }
  std::fclose(f);
  return n;
}
