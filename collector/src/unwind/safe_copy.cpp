#include "unwind/safe_copy.h"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <initializer_list>

// rdi = dst, rsi = src, rdx = n → rax = bytes not copied. A fault at the `rep movsb` resumes at ..._resume
// with rcx = bytes left (string instructions fault between elements, their registers up to date).
extern "C" size_t stepscope_guarded_copy(void* dst, const void* src, size_t n);
extern "C" char stepscope_guarded_copy_at[], stepscope_guarded_copy_resume[];
asm(R"(
  .text
  .p2align 4
  .globl stepscope_guarded_copy
  .hidden stepscope_guarded_copy
  .type stepscope_guarded_copy, @function
stepscope_guarded_copy:
  mov %rdx, %rcx
  .globl stepscope_guarded_copy_at
  .hidden stepscope_guarded_copy_at
stepscope_guarded_copy_at:
  rep movsb
  xor %eax, %eax
  ret
  .globl stepscope_guarded_copy_resume
  .hidden stepscope_guarded_copy_resume
stepscope_guarded_copy_resume:
  mov %rcx, %rax
  ret
  .size stepscope_guarded_copy, . - stepscope_guarded_copy
)");

namespace stepscope::collector::unwind {
namespace {

// The kernel's struct sigaction (rt_sigaction), read and written by system call: the collector interposes
// sigaction() for its termination stand-ins, and the per-sample check must not go through libc.
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

struct sigaction g_previous[2];  // SIGSEGV, SIGBUS: what was installed before the guard
bool g_installed = false;
std::atomic<uint64_t> g_faults{0};  // faults the guard turned into short copies
// 0: no scope; 1: in a scope, the guard not checked yet (checked at the first read that needs it, so a sample
// of native code with known stack bounds makes no system call); 2: guarded; 3: not guarded.
__thread int t_scope __attribute__((tls_model("initial-exec"))) = 0;

int slot(int sig) {
  return sig == SIGBUS ? 1 : 0;
}

void on_fault(int sig, siginfo_t* info, void* ucv) {
  auto* uc = static_cast<ucontext_t*>(ucv);
  if (uc->uc_mcontext.gregs[REG_RIP] == reinterpret_cast<greg_t>(stepscope_guarded_copy_at)) {
    uc->uc_mcontext.gregs[REG_RIP] = reinterpret_cast<greg_t>(stepscope_guarded_copy_resume);
    g_faults.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // Not ours: as if the guard were not there.
  const struct sigaction& prev = g_previous[slot(sig)];
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) prev.sa_sigaction(sig, info, ucv);
    return;
  }
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) {
    // Back to the default, and return: the faulting instruction runs again and the default action ends the
    // process, with the same signal and core dump as without the guard.
    KernelSigaction dfl{};
    dfl.handler = nullptr;  // SIG_DFL
    syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
    return;
  }
  prev.sa_handler(sig);
}

bool guard_installed(int sig) {
  KernelSigaction cur{};
  if (syscall(SYS_rt_sigaction, sig, nullptr, &cur, sizeof cur.mask) != 0) return false;
  return cur.handler == reinterpret_cast<void*>(&on_fault);
}

}  // namespace

bool install_fault_guard() {
  if (g_installed) return guard_installed(SIGSEGV) && guard_installed(SIGBUS);
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS}) {
    if (sigaction(sig, nullptr, &g_previous[slot(sig)]) != 0) return false;
  }
  for (int sig : {SIGSEGV, SIGBUS}) {
    if (sigaction(sig, &sa, nullptr) != 0) return false;
  }
  g_installed = true;
  return true;
}

FaultGuardScope::FaultGuardScope() {
  t_scope = g_installed ? 1 : 3;
}

FaultGuardScope::~FaultGuardScope() {
  t_scope = 0;
}

bool FaultGuardScope::active() const {
  return fault_guard_active();
}

bool fault_guard_active() {
  if (t_scope == 1) {
    const int saved = errno;
    t_scope = guard_installed(SIGSEGV) && guard_installed(SIGBUS) ? 2 : 3;
    errno = saved;
  }
  return t_scope == 2;
}

long read_own(const iovec* local, const iovec* remote, unsigned long n, pid_t pid) {
  if (fault_guard_active()) {
    long got = 0;
    for (unsigned long k = 0; k < n; ++k) {
      const auto addr = reinterpret_cast<uintptr_t>(remote[k].iov_base);
      const size_t len = remote[k].iov_len;
      const size_t c = addr < 4096 || addr + len < addr
                           ? 0
                           : len - stepscope_guarded_copy(local[k].iov_base, remote[k].iov_base, len);
      got += static_cast<long>(c);
      if (c != len) break;
    }
    return got;
  }
  const int saved = errno;
  // getpid() is a plain system call since glibc 2.25 (no cached pid to go stale across fork or clone).
  const long got =
      syscall(SYS_process_vm_readv, static_cast<long>(pid ? pid : getpid()), local, n, remote, n, 0ul);
  errno = saved;
  return got > 0 ? got : 0;
}

uint64_t guarded_read_faults() {
  return g_faults.load(std::memory_order_relaxed);
}

size_t read_memory(void* dst, uintptr_t addr, size_t n) {
  if (n == 0 || addr < 4096 || addr + n < addr) return 0;
  const iovec local{dst, n}, remote{reinterpret_cast<void*>(addr), n};
  return static_cast<size_t>(read_own(&local, &remote, 1));
}

}  // namespace stepscope::collector::unwind
