// ptrace of one stopped thread: registers, remote system calls, running injected code; see remote_call.h.
#include "remote_call.h"

#include <elf.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <string>

#include "attach_support.h"
#include "remote_memory.h"
#include "target_deadline.h"

#if !defined(__x86_64__)
#error "stepscope attach injects x86-64 code"
#endif

namespace stepscope::collector::attach {
namespace {

constexpr size_t kXstateBytes = 64 * 1024;  // large enough for AVX-512 and AMX state

}  // namespace

SavedRegisters SavedRegisters::save(const Tracee& t) {
  SavedRegisters s;
  s.regs = t.regs;
  s.xstate.resize(kXstateBytes);
  iovec xiov{s.xstate.data(), s.xstate.size()};
  s.have_xstate = ptrace(PTRACE_GETREGSET, t.tid, reinterpret_cast<void*>(NT_X86_XSTATE), &xiov) == 0;
  s.xstate.resize(s.have_xstate ? xiov.iov_len : 0);
  s.have_fpregs = !s.have_xstate && ptrace(PTRACE_GETFPREGS, t.tid, nullptr, &s.fpregs) == 0;
  return s;
}

void SavedRegisters::restore(pid_t tid) const {
  ptrace(PTRACE_SETREGS, tid, nullptr, &regs);
  if (have_xstate) {
    iovec xiov{const_cast<uint8_t*>(xstate.data()), xstate.size()};
    ptrace(PTRACE_SETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &xiov);
  }
  if (have_fpregs) ptrace(PTRACE_SETFPREGS, tid, nullptr, &fpregs);
}

void set_registers(pid_t tid, const user_regs_struct& regs) {
  if (ptrace(PTRACE_SETREGS, tid, nullptr, &regs) != 0) throw ProcessExited{};
}

void run_until_trap(pid_t pid, Tracee& t, int timeout_ms, int resume_signal) {
  if (ptrace(PTRACE_CONT, t.tid, nullptr, reinterpret_cast<void*>(long(resume_signal))) != 0)
    throw ProcessExited{};
  // The other threads are stopped: only this one's waits for a CPU are not counted.
  const int64_t budget_ns = int64_t(timeout_ms) * 1000000;
  TargetDeadline deadline(pid, t.tid, budget_ns, budget_ns * kStarvedCapFactor);
  int64_t sleep_ns = 20000;
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(t.tid, &st, __WALL | WNOHANG);
    if (r < 0) throw ProcessExited{};
    if (r == 0) {
      if (deadline.expired())
        throw AttachError("the injected call in process " + std::to_string(pid) + " did not return within " +
                          std::to_string(timeout_ms / 1000) + " s" + deadline.starved_words());
      timespec ts{0, sleep_ns};
      nanosleep(&ts, nullptr);
      sleep_ns = std::min<int64_t>(sleep_ns * 2, 1000000);
      continue;
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
      throw AttachError("process " + std::to_string(pid) +
                        " was killed by its seccomp filter (SIGSYS) while loading the collector");
    if (WIFEXITED(st) || WIFSIGNALED(st)) throw ProcessExited{};
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st);
    if (debug_enabled()) {
      user_regs_struct at{};
      ptrace(PTRACE_GETREGS, t.tid, nullptr, &at);
      STEPSCOPE_ATTACH_DEBUG_LOG("thread %d stopped: signal %d event %d at %llx", int(t.tid), sig, st >> 16,
                                 (unsigned long long)at.rip);
    }
    if ((st >> 16) == PTRACE_EVENT_STOP) sig = 0;
    if (sig == SIGTRAP) return;
    if (ptrace(PTRACE_CONT, t.tid, nullptr, reinterpret_cast<void*>(long(sig))) != 0) throw ProcessExited{};
  }
}

long remote_syscall(pid_t pid, Tracee& t, long nr, std::initializer_list<uint64_t> args) {
  const uint64_t ip = t.regs.rip;
  // The 8-byte word read and written must not run past ip's page: take the one ending at ip + 3 when needed.
  const uint64_t word_at = ((ip & (kPageBytes - 1)) <= kPageBytes - 8) ? ip : ip + 3 - 8;
  const int shift = int(ip - word_at) * 8;
  const uint64_t saved = peek(t.tid, word_at);
  const uint64_t code = 0xcc050fULL;  // syscall; int3
  poke(t.tid, word_at, (saved & ~(0xffffffULL << shift)) | (code << shift));
  user_regs_struct r = t.regs;
  r.rax = static_cast<uint64_t>(nr);
  r.orig_rax =
      static_cast<uint64_t>(-1);  // not in a system call: the kernel must not rewind rip to restart one
  r.rip = ip;
  unsigned long long* regs[] = {&r.rdi, &r.rsi, &r.rdx, &r.r10, &r.r8, &r.r9};
  int i = 0;
  for (uint64_t a : args) *regs[i++] = a;
  long result = 0;
  try {
    if (ptrace(PTRACE_SETREGS, t.tid, nullptr, &r) != 0) throw ProcessExited{};
    run_until_trap(pid, t, 5000);
    user_regs_struct out{};
    if (ptrace(PTRACE_GETREGS, t.tid, nullptr, &out) != 0) throw ProcessExited{};
    result = static_cast<long>(out.rax);
  } catch (...) {
    ptrace(PTRACE_POKEDATA, t.tid, reinterpret_cast<void*>(word_at), reinterpret_cast<void*>(saved));
    throw;
  }
  poke(t.tid, word_at, saved);
  return result;
}

long remote_mmap(pid_t pid, Tracee& t, uint64_t bytes, int prot) {
  return remote_syscall(pid, t, SYS_mmap,
                        {0, bytes, uint64_t(prot), MAP_PRIVATE | MAP_ANONYMOUS, uint64_t(-1), 0});
}

user_regs_struct call_registers(const user_regs_struct& saved, uint64_t entry) {
  user_regs_struct call = saved;
  call.rsp = (saved.rsp - 128 - 256) & ~uint64_t{15};  // below the red zone, 16-byte aligned at each call
  call.rip = entry;
  call.orig_rax = static_cast<uint64_t>(-1);
  call.rax = 0;
  call.eflags &= ~uint64_t{0x400};  // DF clear, as the ABI requires at a call
  return call;
}

}  // namespace stepscope::collector::attach
