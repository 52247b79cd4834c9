// Fault-safe reads of this process's memory without a system call per read: a copy whose faults a
// SIGSEGV/SIGBUS handler of the collector turns into a short count (async-profiler's SafeAccess, Go's and the
// JVM's safe fetch). The handler is installed once and passes every other fault on to the handler that was
// there before; a program that installs its own later (Python's faulthandler, a Rust runtime) replaces it,
// and reads go back to process_vm_readv. Everything here but install_fault_guard() is async-signal-safe.
#pragma once
#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>

namespace stepscope::collector::unwind {

// Installs the guard for SIGSEGV and SIGBUS (once per process; false when it could not). Not
// async-signal-safe.
bool install_fault_guard();

// Within its scope the calling thread reads with guarded copies, if the guard is still the installed handler
// of both signals: checked at the first read that needs it (two rt_sigaction system calls), so a scope
// without such a read costs nothing. For the sampling signal handler.
class FaultGuardScope {
 public:
  FaultGuardScope();
  ~FaultGuardScope();
  FaultGuardScope(const FaultGuardScope&) = delete;
  FaultGuardScope& operator=(const FaultGuardScope&) = delete;
  bool active() const;
};

// Reads `n` (local, remote) pairs of equal length from this process, in order, and stops at the first pair
// not read whole: the bytes read (0 when none). Guarded copies inside an active FaultGuardScope, one
// process_vm_readv otherwise (`pid`: this process's, which a caller may cache; 0: getpid()). errno is left as
// it was.
long read_own(const iovec* local, const iovec* remote, unsigned long n, pid_t pid = 0);

// Copies up to `n` bytes from `addr` upward: the bytes copied before the first unreadable one (read_own).
size_t read_memory(void* dst, uintptr_t addr, size_t n);
// Faults that guarded copies turned into short counts, in this process since it started.
uint64_t guarded_read_faults();
// Whether the calling thread is inside an active FaultGuardScope.
bool fault_guard_active();

}  // namespace stepscope::collector::unwind
