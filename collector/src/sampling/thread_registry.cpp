#include "thread_registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/mman.h>

#include <algorithm>
#include <exception>
#include <cerrno>
#include <cstdlib>
#include <new>

#include "control/control_server.h"
#include "core/collector_state.h"
#include "sampling/timers.h"
#include "unwind/safe_copy.h"

namespace stepscope::collector {
namespace {

void table_remove_locked(ThreadState* ts) {
  const int32_t tid = ts->tid.load(std::memory_order_relaxed);
  uint32_t h = tid_hash(tid);
  for (int i = 0; i < kTableSize; ++i) {
    ThreadState* s = g->table[h].load(std::memory_order_relaxed);
    if (!s) return;
    if (s == ts) {
      g->table[h].store(kTombstone, std::memory_order_release);
      return;
    }
    h = (h + 1) & (kTableSize - 1);
  }
}

// The sampling signal runs on an alternate stack (SA_ONSTACK) on threads that register themselves: JIT code
// that keeps live data below its stack pointer past the 128-byte red zone (oneDNN's sgemm kernels inside
// TensorFlow do) would otherwise have it overwritten by the signal frame — the target then corrupts its heap.
// gperftools' SIGPROF crashes the same TensorFlow program that way; with the alternate stack it runs clean.
constexpr size_t kAltStackBytes = 64 * 1024;
__thread void* t_alt_stack __attribute__((tls_model("initial-exec"))) = nullptr;

void install_alt_stack() {
  stack_t cur{};
  if (sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;  // keep the program's own
  void* mem = mmap(nullptr, kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;
  stack_t st{};
  st.ss_sp = mem;
  st.ss_size = kAltStackBytes;
  if (sigaltstack(&st, nullptr) != 0) {
    munmap(mem, kAltStackBytes);
    return;
  }
  t_alt_stack = mem;
}

void remove_alt_stack() {
  if (!t_alt_stack) return;
  stack_t cur{};
  if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == t_alt_stack && !(cur.ss_flags & SS_ONSTACK)) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, nullptr) == 0) munmap(t_alt_stack, kAltStackBytes);
  }
  t_alt_stack = nullptr;
}

struct StartArgs {
  void* (*fn)(void*);
  void* arg;
};

void* thread_trampoline(void* p) {
  StartArgs a = *static_cast<StartArgs*>(p);
  std::free(p);
  // Nothing of the collector's may end the program's thread (an exception here would terminate it). Not catch
  // (...): a cancellation's forced unwind must go on.
  try {
    if (g && g->state.load() == kRunning) register_current_thread();
  } catch (const std::exception&) {
    g->counters.threads_unsampled.fetch_add(1);
  }
  return a.fn(a.arg);
}

}  // namespace

void retire_locked(ThreadState* ts) {
  table_remove_locked(ts);
  disarm_timer(ts);
  g->live.erase(std::remove(g->live.begin(), g->live.end(), ts), g->live.end());
  ts->next_retired = g->retired;
  g->retired = ts;
}

ThreadState* register_thread(int32_t tid, bool own) {
  // A thread registering itself knows its stack: the handler then copies it without a system call.
  const unwind::StackBounds bounds = own ? unwind::thread_stack_bounds() : unwind::StackBounds{};
  std::lock_guard<std::mutex> lk(g->reg_mu);
  if (g->state.load() != kRunning) return nullptr;
  if (ThreadState* old = lookup(tid)) {
    // /proc/self/task polling can see a thread that has just registered itself: keep that state (the
    // thread's t_state points to it). A thread registering itself replaces a polled or stale (tid reuse) one.
    if (!own) return old;
    retire_locked(old);
  }
  if (static_cast<int>(g->live.size()) >= kMaxLiveThreads) {
    g->counters.threads_unsampled.fetch_add(1);
    return nullptr;
  }
  const size_t bytes = sizeof(ThreadState) + g->ring_bytes;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    g->counters.threads_unsampled.fetch_add(1);
    return nullptr;
  }
  auto* ts = new (mem) ThreadState();
  ts->map_bytes = bytes;
  ts->own = own;
  ts->stack = bounds;
  ts->tid.store(tid);
  ts->ring.init(static_cast<uint8_t*>(mem) + sizeof(ThreadState), g->ring_bytes);
  uint32_t h = tid_hash(tid);
  for (int i = 0; i < kTableSize; ++i) {
    ThreadState* s = g->table[h].load(std::memory_order_relaxed);
    if (!s || s == kTombstone) break;
    h = (h + 1) & (kTableSize - 1);
  }
  g->table[h].store(ts, std::memory_order_release);
  g->live.push_back(ts);
  g->counters.threads_seen.fetch_add(1);
  if (!arm_timer(ts, tid)) {
    g->counters.threads_unsampled.fetch_add(1);
  } else if (g->timer_kind == TimerKind::None) {
    g->timer_kind = ts->timer_kind;
  }
  return ts;
}

void free_thread_state(ThreadState* ts) {
  size_t bytes = ts->map_bytes;
  ts->~ThreadState();
  munmap(ts, bytes);
}

void on_thread_exit(void* p) {
  auto* ts = static_cast<ThreadState*>(p);
  t_state = nullptr;  // before retiring: the drain frees retired states, and a late signal must not use it
  std::atomic_signal_fence(std::memory_order_seq_cst);
  remove_alt_stack();
  if (!g || !ts) return;
  std::lock_guard<std::mutex> lk(g->reg_mu);
  if (std::find(g->live.begin(), g->live.end(), ts) != g->live.end()) retire_locked(ts);
}

void register_current_thread() {
  if (g->windowed) return;  // found by /proc/self/task polling instead (Globals::windowed)
  install_alt_stack();
  t_state = nullptr;
  ThreadState* ts = register_thread(sys_gettid(), true);
  if (ts) {
    pthread_setspecific(g->key, ts);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_state = ts;
  }
}

void poll_tasks() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return;
  std::vector<int32_t> tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  std::sort(tids.begin(), tids.end());
  const int32_t self = g->collector_tid.load(), control = control::thread_id();
  std::vector<int32_t> fresh;
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    for (ThreadState* ts : std::vector<ThreadState*>(g->live))
      if (!ts->own && !std::binary_search(tids.begin(), tids.end(), ts->tid.load())) retire_locked(ts);
    for (int32_t tid : tids)
      if (tid != self && tid != control && !lookup(tid)) fresh.push_back(tid);
  }
  for (int32_t tid : fresh) register_thread(tid, false);
}

}  // namespace stepscope::collector

using namespace stepscope::collector;

// Interposed so every new thread registers itself (ring, stack bounds, its own timer) before user code.
__attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                          void* (*fn)(void*), void* arg) {
  if (!real_pthread_create) {
    real_pthread_create = reinterpret_cast<pthread_create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
    if (!real_pthread_create) return EAGAIN;
  }
  if (!running()) return real_pthread_create(thread, attr, fn, arg);
  auto* a = static_cast<StartArgs*>(std::malloc(sizeof(StartArgs)));
  if (!a) return real_pthread_create(thread, attr, fn, arg);
  a->fn = fn;
  a->arg = arg;
  int rc = real_pthread_create(thread, attr, thread_trampoline, a);
  if (rc != 0) std::free(a);
  return rc;
}


namespace stepscope::collector {

void reset_recorded_state(bool after_fork) {
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    for (auto& s : g->table) s.store(nullptr, std::memory_order_relaxed);
    for (ThreadState* ts : g->live) {
      if (after_fork && ts->timer_kind == TimerKind::PerfEvent && ts->perf_fd >= 0) close(ts->perf_fd);
      free_thread_state(ts);
    }
    for (ThreadState* ts = g->retired; ts;) {
      ThreadState* next = ts->next_retired;
      free_thread_state(ts);
      ts = next;
    }
    g->live.clear();
    g->retired = nullptr;
  }
  {
    std::lock_guard<std::mutex> lk(g->pending.mu);
    g->pending.rows = store::Trace();
    g->pending.step_sequences.clear();
    g->pending.call_stacks.clear();
    g->pending.gpu_windows.clear();
  }
  {
    std::lock_guard<std::mutex> lk(g->meta_mu);
    g->meta.clear();
  }
  if (after_fork) {
    // Not held across fork by the prepare handler: another parent thread may have owned it at the fork.
    new (&g->own_mu) std::mutex();
    g->own_tids.clear();
  } else {
    std::lock_guard<std::mutex> lk(g->own_mu);
    g->own_tids.clear();
  }
  auto& c = g->counters;
  for (auto* a :
       {&c.samples, &c.dropped_ring_full, &c.timer_overruns, &c.unknown_thread, &c.alt_stack_skipped,
        &c.threads_seen, &c.threads_unsampled, &c.call_stacks, &c.call_stacks_skipped})
    a->store(0);
  for (auto& b : c.handler_hist) b.store(0);
  c.guarded_faults_before = unwind::guarded_read_faults();
}

}  // namespace stepscope::collector
