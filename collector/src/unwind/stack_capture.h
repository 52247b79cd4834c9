// What the sampling handler keeps of an interrupted thread so that it can be unwound later, on the collector
// thread: its registers and a copy of its stack from the stack pointer up (the way `perf record --call-graph
// dwarf` does). Everything here but thread_stack_bounds() is async-signal-safe: no allocation, no locks, no
// TLS through __tls_get_addr, no loader calls.
#pragma once
#include <ucontext.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace stepscope::collector::unwind {

// DWARF register numbers of x86-64 (libunwind's UNW_X86_64_*): rax rdx rcx rbx rsi rdi rbp rsp r8–r15 rip.
constexpr int kRegisterCount = 17;
constexpr int kRegSp = 7;
constexpr int kRegIp = 16;
struct Registers {
  uint64_t r[kRegisterCount];
};

// The interrupted context's general registers.
void registers_from(const ucontext_t* uc, Registers* out);

// The thread's stack as pthread knows it: [lo, hi), the stack pointer always inside while the thread runs on
// it. {0, 0} when unknown (a thread found by polling, or a program on stacks of its own).
struct StackBounds {
  uintptr_t lo = 0, hi = 0;
};
// The calling thread's bounds (pthread_getattr_np). Not async-signal-safe: call when registering the thread.
StackBounds thread_stack_bounds();

struct StackCopy {
  size_t bytes = 0;     // copied from sp up
  bool capped = false;  // stopped at the window's size before the stack's end: the unwind may be truncated
  bool faulted = false; // nothing could be read at sp
};

// Where fault-safe copies of one thread's stack stopped (copy_stack). Kept by the thread itself (its sampling
// handler, or a capture outside one), lock-free.
struct SeenStackTop {
  std::atomic<uintptr_t> top{0};
  std::atomic<uint32_t> copies{0};
};
// One copy in this many reads past the remembered end, so an end that moved up (memory mapped above it later)
// is found: a fault every 64 samples instead of every sample.
constexpr uint32_t kSeenTopRecheck = 64;

// Copies up to `max` bytes from `sp` up into `dst`. Inside known bounds a plain copy; otherwise a fault-safe
// read (read_own) that stops at the first unreadable page. `seen`, when given, remembers where such a read of
// the same thread's stack stopped: a later copy from below it stops there too instead of taking the same
// fault again (a handled fault costs several µs, most of an unregistered thread's sample). A read that stops
// short moves it; a stack pointer at or above it is read as if it were not known; a recheck that reads past
// it forgets it.
StackCopy copy_stack(uintptr_t sp, const StackBounds& bounds, uint8_t* dst, size_t max,
                     SeenStackTop* seen = nullptr);

// Fault-safe read of this process's memory (process_vm_readv): false when any of it is unmapped.
bool read_own_memory(void* dst, uintptr_t addr, size_t n);

}  // namespace stepscope::collector::unwind
