// Stacks at blocking CUDA calls: captured on the calling thread from CUPTI's API-enter callback the way the
// sampler captures (registers, stack copy, Python frames), queued for the collector thread, which unwinds and
// interns them like samples and attaches them to the API call of the same correlation id (api_calls.stack).
// Stacks where a CUDA graph or node is made (capture_creation_stack) are queued the same way under keys of
// their own, for the graph rows (cupti_graphs.h).
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
std::atomic<int64_t> g_creation_keys{0};   // capture_creation_stack's keys: -1, -2, ...
constexpr size_t kMaxQueuedStacks = 4096;  // bounded memory if the collector thread falls behind

// The capture itself, queued under `key` for the collector thread: the same as a sample's (registers and a
// stack copy, unwound there), no unwinding on the program's thread. `uc`: the caller's getcontext() (the
// caller's own registers, its return into the caller the leaf, skipped). False when it was not queued.
bool queue_stack(ucontext_t* uc, int64_t key, int64_t now) {
  PendingRows::CallStack cs;
  cs.correlation = key;
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
  cs.record.resize(capture_record(uc, ts ? ts->stack : unwind::StackBounds{}, h,
                                  reinterpret_cast<uint8_t*>(cs.record.data()), *scratch,
                                  ts ? &ts->stack_seen_top : nullptr));
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  if (p.call_stacks.size() >= kMaxQueuedStacks) {
    g->counters.call_stacks_skipped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  p.call_stacks.push_back(std::move(cs));
  g->counters.call_stacks.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool may_capture() {
  return running() && current_tid() != g->collector_tid.load(std::memory_order_relaxed) &&
         config().cuda_stacks_per_s > 0;
}

}  // namespace

void capture_call_stack(int64_t correlation) {
  if (!may_capture()) return;
  const int limit = config().cuda_stacks_per_s;
  // Rate limit: at most `limit` captures per one-second window and process.
  const int64_t now = now_ns();
  int64_t start = g_window_start_ns.load(std::memory_order_relaxed);
  if (now - start >= 1000000000LL && g_window_start_ns.compare_exchange_strong(start, now))
    g_in_window.store(0, std::memory_order_relaxed);
  if (g_in_window.fetch_add(1, std::memory_order_relaxed) >= limit) {
    g->counters.call_stacks_skipped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  ucontext_t uc;
  if (getcontext(&uc) == 0) queue_stack(&uc, correlation, now);
}

int64_t capture_creation_stack() {
  if (!may_capture()) return 0;
  const int64_t key = -g_creation_keys.fetch_add(1, std::memory_order_relaxed) - 1;
  ucontext_t uc;
  if (getcontext(&uc) != 0) return 0;
  return queue_stack(&uc, key, now_ns()) ? key : 0;
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
