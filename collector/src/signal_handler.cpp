#include "signal_handler.h"

#include <sys/syscall.h>
#include <ucontext.h>

#include <algorithm>
#include <cerrno>

#include "collector_state.h"

namespace stepscope::collector {
namespace {

// True when the thread was blocked in a system call when the signal came: the kernel either rewound the
// instruction pointer onto the `syscall` instruction to restart it (SA_RESTART) or made it return -EINTR.
// A thread that is merely waiting for a CPU (preempted in user code) counts as on-CPU.
bool interrupted_in_syscall(const ucontext_t* uc) {
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const long ax = static_cast<long>(uc->uc_mcontext.gregs[REG_RAX]);
  const auto* p = reinterpret_cast<const volatile uint8_t*>(ip);
  // 0x0f starts a two-byte opcode, so p[1] is mapped whenever p[0] is 0x0f.
  if (p[0] == 0x0f && p[1] == 0x05) return true;
  // The two bytes before ip: only within ip's own (mapped) page.
  if ((ip & 4095) >= 2 && ax == -EINTR && p[-2] == 0x0f && p[-1] == 0x05) return true;
  return false;
}

// Blocked in libc in a system call that malloc never makes while it holds a lock: a wait of its own (a futex wait,
// poll, read, sleep …), being restarted (ip on the `syscall` instruction, rax its number) or returning -EINTR
// (malloc's mmap/brk/munmap/madvise never do).
bool blocked_outside_malloc(const ucontext_t* uc) {
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const long ax = static_cast<long>(uc->uc_mcontext.gregs[REG_RAX]);
  const auto* p = reinterpret_cast<const volatile uint8_t*>(ip);
  if ((ip & 4095) >= 2 && ax == -EINTR && p[-2] == 0x0f && p[-1] == 0x05) return true;
  if (p[0] != 0x0f || p[1] != 0x05) return false;
  switch (ax) {
    case SYS_futex: case SYS_poll: case SYS_ppoll: case SYS_select: case SYS_pselect6: case SYS_epoll_wait:
    case SYS_epoll_pwait: case SYS_nanosleep: case SYS_clock_nanosleep: case SYS_read: case SYS_recvfrom:
    case SYS_recvmsg: case SYS_accept: case SYS_accept4: case SYS_wait4: case SYS_pause: case SYS_rt_sigtimedwait:
      return true;
    default:
      return false;
  }
}

// A thread found by /proc/self/task polling (attach, or a thread the interposer did not start) meets libunwind in
// this handler: its first unwind allocates libunwind's TLS block with malloc. That is safe only when the thread
// was not running libc code (where malloc's locks are held) — outside libc, or blocked in libc in a wait of its
// own — and memory is there: glibc aborts the process when the block cannot be allocated. Until then its samples
// keep the leaf only.
bool first_unwind_is_safe(const ucontext_t* uc) {
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  if (ip >= g->libc_lo && ip < g->libc_hi && !blocked_outside_malloc(uc)) return false;
  return memory_for_first_unwind();
}

}  // namespace

void on_sample_signal(int, siginfo_t*, void* ucv) {
  const int saved_errno = errno;
  const int64_t t_enter = clock_ns(CLOCK_MONOTONIC);
  struct InHandler {  // lock-free count: the end of a window frees the rings only when no handler runs
    InHandler() { g->in_handler.fetch_add(1, std::memory_order_acq_rel); }
    ~InHandler() { g->in_handler.fetch_sub(1, std::memory_order_release); }
  } in_handler;
  if (g->state.load(std::memory_order_acquire) != kRunning) {
    errno = saved_errno;
    return;
  }
  ThreadState* ts = t_state;
  const int32_t tid = ts ? ts->tid.load(std::memory_order_relaxed) : sys_gettid();
  if (!ts) ts = lookup(tid);
  if (!ts) {
    g->counters.unknown_thread.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  auto* uc = static_cast<ucontext_t*>(ucv);
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  void** pcs = ts->pcs;
  int n = 0;
  if (ip >= g->ldso_lo && ip < g->ldso_hi) {
    // Interrupted inside the dynamic loader: unwinding would re-enter it (dl_iterate_phdr). Leaf only.
    pcs[0] = reinterpret_cast<void*>(ip);
    n = 1;
    g->counters.in_loader.fetch_add(1, std::memory_order_relaxed);
  } else if (!ts->unwinder_ready.load(std::memory_order_acquire) && !first_unwind_is_safe(uc)) {
    pcs[0] = reinterpret_cast<void*>(ip);
    n = 1;
    g->counters.unwind_deferred.fetch_add(1, std::memory_order_relaxed);
  } else {
    ts->unwinder_ready.store(true, std::memory_order_release);
    const int got = p_unw_backtrace(pcs, kMaxPcs + 16);
    int start = -1;
    for (int i = 0; i < got && i < 16; ++i)
      if (reinterpret_cast<uintptr_t>(pcs[i]) == ip) {
        start = i;
        break;
      }
    if (start < 0) {
      pcs[0] = reinterpret_cast<void*>(ip);
      n = 1;
      g->counters.unwind_failed.fetch_add(1, std::memory_order_relaxed);
    } else {
      pcs += start;
      n = std::min(got - start, kMaxPcs);
    }
  }
  int n_py = 0;
#if STEPSCOPE_HAVE_PYTHON
  if (g->python_ready.load(std::memory_order_acquire)) n_py = python::capture_current_thread(ts->py, kMaxPy);
  if (n_py < 0) n_py = 0;
#endif
  SampleHeader h{};
  h.time = t_enter;
  h.tid = tid;
  h.n_pcs = static_cast<uint16_t>(n);
  h.n_py = static_cast<uint16_t>(n_py);
  h.on_cpu = 1;
  if (ts->timer_kind == TimerKind::WallTimer && interrupted_in_syscall(uc)) h.on_cpu = 0;
  if (ts->ring.push(&h, sizeof h, pcs, sizeof(void*) * n, ts->py, sizeof(python::RawPyFrame) * n_py))
    g->counters.samples.fetch_add(1, std::memory_order_relaxed);
  else
    g->counters.dropped_ring_full.fetch_add(1, std::memory_order_relaxed);
  const int64_t bucket = std::min<int64_t>((clock_ns(CLOCK_MONOTONIC) - t_enter) / 100, 63);
  g->counters.handler_hist[bucket].fetch_add(1, std::memory_order_relaxed);
  errno = saved_errno;
}

}  // namespace stepscope::collector
