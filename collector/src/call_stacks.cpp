// Stacks at blocking CUDA calls: captured on the calling thread from CUPTI's API-enter callback with the
// sampler's own unwinder and Python frame capture, queued for the collector thread, which interns them like
// samples and attaches them to the API call of the same correlation id (api_calls.stack).
#include <algorithm>
#include <new>
#include <cstring>

#include "collector_state.h"

namespace stepscope::collector {
namespace {
std::atomic<int64_t> g_window_start_ns{0};
std::atomic<int> g_in_window{0};
constexpr size_t kMaxQueuedStacks = 4096;  // bounded memory if the collector thread falls behind
}  // namespace

void capture_call_stack(int64_t correlation) {
  if (!running() || current_tid() == g->collector_tid.load(std::memory_order_relaxed)) return;
  const int limit = config().cuda_stacks_per_s;
  if (limit <= 0) return;
  // Rate limit: at most `limit` captures per one-second window and process.
  const int64_t now = now_ns();
  int64_t start = g_window_start_ns.load(std::memory_order_relaxed);
  if (now - start >= 1000000000LL && g_window_start_ns.compare_exchange_strong(start, now))
    g_in_window.store(0, std::memory_order_relaxed);
  if (g_in_window.fetch_add(1, std::memory_order_relaxed) >= limit) {
    g->counters.call_stacks_skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  void* pcs[kMaxPcs + 16];
  int n = p_unw_backtrace ? p_unw_backtrace(pcs, kMaxPcs + 16) : 0;
  const int skip = std::min(n, 1);  // this function
  n = std::min(n - skip, kMaxPcs);
  python::RawPyFrame py[kMaxPy];
  int n_py = 0;
#if STEPSCOPE_HAVE_PYTHON
  if (g->python_ready.load(std::memory_order_acquire)) n_py = std::max(0, python::capture_current_thread(py, kMaxPy));
#endif
  PendingRows::CallStack cs;
  cs.correlation = correlation;
  cs.tid = current_tid();
  cs.n_pcs = static_cast<uint16_t>(n);
  cs.n_py = static_cast<uint16_t>(n_py);
  cs.raw.assign(reinterpret_cast<const char*>(pcs + skip), sizeof(void*) * size_t(n));
  cs.raw.append(reinterpret_cast<const char*>(py), sizeof(python::RawPyFrame) * size_t(n_py));
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.call_stacks.size() >= kMaxQueuedStacks) {
    g->counters.call_stacks_skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  p.call_stacks.push_back(std::move(cs));
  g->counters.call_stacks.fetch_add(1, std::memory_order_relaxed);
}

void mark_collector_thread(int32_t tid) {
  if (!g || tid <= 0) return;
  std::lock_guard<std::mutex> lk(g->own_mu);
  // A thread of the collector's may start when the program has exhausted its memory: it then only goes
  // uncounted in the collector's own CPU time (an exception would end the program).
  try {
    if (std::find(g->own_tids.begin(), g->own_tids.end(), tid) == g->own_tids.end()) g->own_tids.push_back(tid);
  } catch (const std::bad_alloc&) {
  }
}

}  // namespace stepscope::collector
