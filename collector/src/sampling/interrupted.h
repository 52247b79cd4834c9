// Whether a sampled thread was inside a system call (off-CPU) when the signal came, read from the interrupted
// context alone: async-signal-safe, no system call of its own. Header-only so the signal path's unit test
// (collector/tests/signal_path_test.cpp) exercises the very code the handler runs.
#pragma once

#include <ucontext.h>

#include <cerrno>
#include <cstdint>

namespace stepscope::collector {

// True when the thread was blocked in a system call when the signal came: the kernel either rewound the
// instruction pointer onto the `syscall` instruction to restart it (SA_RESTART) or made it return -EINTR.
// A thread that is merely waiting for a CPU (preempted in user code) counts as on-CPU.
inline bool interrupted_in_syscall(const ucontext_t* uc) {
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const long ax = static_cast<long>(uc->uc_mcontext.gregs[REG_RAX]);
  const auto* p = reinterpret_cast<const volatile uint8_t*>(ip);
  // 0x0f starts a two-byte opcode, so p[1] is mapped whenever p[0] is 0x0f.
  if (p[0] == 0x0f && p[1] == 0x05) return true;
  // The two bytes before ip: only within ip's own (mapped) page.
  if ((ip & 4095) >= 2 && ax == -EINTR && p[-2] == 0x0f && p[-1] == 0x05) return true;
  return false;
}

}  // namespace stepscope::collector
