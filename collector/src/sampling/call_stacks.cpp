// Stacks at blocking CUDA calls: captured on the calling thread from CUPTI's API-enter callback the way the
// sampler captures (registers, stack copy, Python frames), queued for the collector thread, which unwinds and
// interns them like samples and attaches them to the API call of the same correlation id (api_calls.stack).
#include <ucontext.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <new>

#include "core/collector_state.h"
#include "sampling/signal_handler.h"

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
  // The same capture as a sample's (registers and a stack copy, unwound on the collector thread): no unwinding
  // on the program's thread. getcontext() leaves this frame's registers, its return into this function the leaf.
  ucontext_t uc;
  if (getcontext(&uc) != 0) return;
  PendingRows::CallStack cs;
  cs.correlation = correlation;
  cs.tid = current_tid();
  cs.record.resize(max_record_bytes());
  SampleHeader h{};
  h.time = now;
  h.tid = cs.tid;
  h.on_cpu = 1;
  h.flags = kSampleSkipLeaf;
  ThreadState* ts = t_state;
  // Not the thread's ThreadState::py_scratch: a sample taken during this capture would use that one.
  auto scratch = std::make_unique<python::CaptureScratch>();
  cs.record.resize(capture_record(&uc, ts ? ts->stack : unwind::StackBounds{}, h,
                                  reinterpret_cast<uint8_t*>(cs.record.data()), *scratch,
                                  ts ? &ts->stack_seen_top : nullptr));
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
