// Running things in one stopped thread of the target: its registers saved and restored exactly, a system call
// made by it (an mmap allocating memory in the target), and machine code written into the target run until
// its int3.
#pragma once

#include <sys/types.h>
#include <sys/user.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tracee_threads.h"

namespace stepscope::collector::attach {

// Everything the program can see of a thread: general registers and the extended (FPU/SSE/AVX) state.
struct SavedRegisters {
  user_regs_struct regs{};
  std::vector<uint8_t> xstate;  // NT_X86_XSTATE, as long as the kernel returned it
  user_fpregs_struct fpregs{};
  bool have_xstate = false, have_fpregs = false;

  // The registers `t` stopped with (t.regs) and its extended state, read now.
  static SavedRegisters save(const Tracee& t);
  // Puts them back into thread `tid` (errors ignored: the thread may be gone).
  void restore(pid_t tid) const;
};

// Sets the thread's general registers; throws ProcessExited when it is gone.
void set_registers(pid_t tid, const user_regs_struct& regs);

// Resumes the thread and waits for its int3 (SIGTRAP). Signals meant for the program meanwhile are delivered
// to it (its handlers run as they would have); interrupt stops are passed over. Throws AttachError after
// `timeout_ms` of the thread's time (its waits for a CPU not counted, up to 8 times that of wall time; see
// target_deadline.h) or when a seccomp filter killed the process, ProcessExited when it exited.
void run_until_trap(pid_t pid, Tracee& t, int timeout_ms, int resume_signal = 0);

// A system call made by the stopped thread: `syscall; int3` written over the bytes at its instruction pointer
// (every thread is stopped, so no other runs them), then put back. Returns the raw result (-errno on
// failure). Leaves the thread's registers as the call left them: restore them afterwards.
long remote_syscall(pid_t pid, Tracee& t, long nr, std::initializer_list<uint64_t> args);

// Allocates `bytes` of private anonymous memory with protection `prot` in the target (a remote mmap);
// returns its address, or -errno.
long remote_mmap(pid_t pid, Tracee& t, uint64_t bytes, int prot);

// The registers that run machine code at `entry` on the thread saved as `saved`: the stack pointer below the
// red zone (and 256 bytes more, the gap where the code may store results, at [rsp]) and 16-byte aligned, not
// in a system call (orig_rax -1: the kernel must not rewind rip to restart one), the direction flag clear as
// the ABI requires at a call. Run it with set_registers + run_until_trap.
user_regs_struct call_registers(const user_regs_struct& saved, uint64_t entry);

}  // namespace stepscope::collector::attach
