#include "signal_handler.h"

#include <sys/auxv.h>
#include <ucontext.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/collector_state.h"
#include "sampling/interrupted.h"
#include "unwind/safe_copy.h"

namespace stepscope::collector {

size_t handler_stack_need() {
#ifdef AT_MINSIGSTKSZ
  const size_t kernel_frame = std::max<size_t>(getauxval(AT_MINSIGSTKSZ), 2048);
#else
  const size_t kernel_frame = 4096;
#endif
  return kHandlerOwnFramesBytes + kernel_frame;
}

namespace {
// The kernel's signal frame as it wrote this delivery's, on x86-64: from the rt_sigframe (its return address,
// 8 bytes below the ucontext) to the end of the XSAVE area the ucontext points at, whose size the kernel
// keeps in that area's software-reserved bytes (struct _fpx_sw_bytes at byte 464: FP_XSTATE_MAGIC1,
// extended_size); plus the 128-byte red zone and the area's 64-byte alignment a nested delivery adds. The
// fault guard's nested frame is as large: the task's enabled state components size both. AT_MINSIGSTKSZ is
// what the largest task may need: 11,952 bytes on a Sapphire Rapids host (AMX's 8 KiB of tile state), where a
// task that never asked for AMX gets ~3.5 KB frames, so a 16 KiB alternate stack (Rust's threads, Go's) had
// every sample skipped. AT_MINSIGSTKSZ (with the red zone and alignment) stays the bound, and `largest` the
// answer where the frame cannot be read. Only a frame wholly inside the alternate stack [lo, hi) is read: a
// ucontext the kernel did not write (a chaining handler's) may point anywhere, and this runs unguarded.
size_t kernel_frame_of(const ucontext_t* uc, size_t largest, uintptr_t lo, uintptr_t hi) {
#if defined(__x86_64__)
  constexpr size_t kFxsaveBytes = 512, kSwBytesAt = 464, kNestedExtra = 8 + 128 + 64;
  const auto fp = reinterpret_cast<uintptr_t>(uc->uc_mcontext.fpregs);
  const auto base = reinterpret_cast<uintptr_t>(uc);
  if (base >= lo && fp > base && fp - base < largest && fp < hi && hi - fp >= kFxsaveBytes) {
    uint32_t sw[2];  // magic1, extended_size
    std::memcpy(sw, reinterpret_cast<const void*>(fp + kSwBytesAt), sizeof sw);
    if (sw[0] == 0x46505853u && sw[1] >= kFxsaveBytes && sw[1] <= hi - fp)
      return std::min(largest + kNestedExtra, fp + sw[1] - base + kNestedExtra);
  }
#else
  (void)uc, (void)lo, (void)hi;
#endif
  return largest;
}

// The sampling signal runs on the thread's alternate stack when it has one (SA_ONSTACK), and that may be the
// program's own: Python's faulthandler (on under pytest, torchrun, `python -X faulthandler`) installs
// SIGSTKSZ + AT_MINSIGSTKSZ bytes of heap, ~10 KiB. A handler that runs past its end writes into the heap
// below it. The kernel says where the stack is (uc_stack): no system call.
bool room_for_handler(const ucontext_t* uc) {
  const auto lo = reinterpret_cast<uintptr_t>(uc->uc_stack.ss_sp);
  const uintptr_t hi = lo + uc->uc_stack.ss_size;
  const auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (uc->uc_stack.ss_size == 0 || here < lo || here > hi) return true;  // on the thread's own stack
  return here - lo >=
         kHandlerOwnFramesBytes + kernel_frame_of(uc, g->handler_stack_need - kHandlerOwnFramesBytes, lo, hi);
}
}  // namespace

size_t capture_record(const ucontext_t* uc, const unwind::StackBounds& bounds, SampleHeader& h, uint8_t* rec,
                      [[maybe_unused]] python::CaptureScratch& scratch, unwind::SeenStackTop* seen_top) {
  unwind::registers_from(uc, &h.regs);
  uint8_t* stack = rec + sizeof(SampleHeader);
  const unwind::StackCopy copy =
      unwind::copy_stack(h.regs.r[unwind::kRegSp], bounds, stack, g->stack_window, seen_top);
  h.stack_bytes = static_cast<uint32_t>(copy.bytes);
  if (copy.capped) h.flags |= kSampleStackCapped;
  if (copy.faulted) h.flags |= kSampleStackUnreadable;
  const size_t stack_padded = (copy.bytes + 7) & ~size_t{7};
  int n_py = 0;
#if STEPSCOPE_HAVE_PYTHON
  if (g->python_ready.load(std::memory_order_acquire)) {
    // Written in place (RawPyFrame is 8-aligned, so is its offset), right after the stack copy.
    auto* py = reinterpret_cast<python::RawPyFrame*>(stack + stack_padded);
    n_py = std::max(0, python::capture_current_thread(py, kMaxPy, scratch));
  }
#endif
  h.n_py = static_cast<uint16_t>(n_py);
  std::memcpy(rec, &h, sizeof h);
  return sizeof h + stack_padded + sizeof(python::RawPyFrame) * size_t(n_py);
}

// Async-signal-safe by construction: it reads the interrupted registers, copies the stack window above the
// stack pointer (memory known mapped, or read fault-safely), reads the Python frames with fault-safe reads,
// and publishes one record in this thread's preallocated ring with atomics. No allocation, no lock, no TLS
// but the collector's own initial-exec t_state, no loader call, no unwinding: the collector thread unwinds
// the copy later (unwind/copied_stack_unwinder.h). scripts/stress-record.sh and the handler guard
// (collector/tests/safety) hold it to that.
void on_sample_signal(int, siginfo_t* si, void* ucv) {
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
  if (!room_for_handler(uc)) {
    g->counters.alt_stack_skipped.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  uint8_t* rec = ts->ring.reserve(max_record_bytes());
  if (!rec) {
    g->counters.dropped_ring_full.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  SampleHeader h{};
  h.time = t_enter;
  h.tid = tid;
  h.on_cpu = 1;
  if (ts->timer_kind == TimerKind::WallTimer && interrupted_in_syscall(uc)) h.on_cpu = 0;
  // A POSIX timer queues one signal at a time: expiries while it is pending (the thread runnable but not
  // running, on a busy machine) are counted in si_overrun, not lost. perf_event signals carry no such count.
  if (si && si->si_code == SI_TIMER && si->si_overrun > 0) {
    h.overruns = static_cast<uint32_t>(si->si_overrun);
    g->counters.timer_overruns.fetch_add(h.overruns, std::memory_order_relaxed);
  }
  {
    // Reads below are guarded copies, not system calls, when the guard is installed.
    const unwind::FaultGuardScope guard;
    ts->ring.commit(capture_record(uc, ts->stack, h, rec, ts->py_scratch, &ts->stack_seen_top));
  }
  g->counters.samples.fetch_add(1, std::memory_order_relaxed);
  g->counters.handler_hist[handler_bucket(clock_ns(CLOCK_MONOTONIC) - t_enter)].fetch_add(
      1, std::memory_order_relaxed);
  errno = saved_errno;
}

}  // namespace stepscope::collector
