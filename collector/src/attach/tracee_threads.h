// Every thread of the target stopped under ptrace (PTRACE_SEIZE + PTRACE_INTERRUPT), their registers as they
// stopped, and their release (PTRACE_DETACH, delivering the signal each had pending); whether a stopped
// thread is in a system call, and whether that call is one it waits in.
#pragma once

#include <sys/types.h>
#include <sys/user.h>

#include <cstdint>
#include <vector>

namespace stepscope::collector::attach {

class TargetDeadline;

struct Tracee {
  pid_t tid = 0;
  int pending_signal = 0;  // a signal it was about to receive when it stopped: delivered at detach
  user_regs_struct regs{};
};

// Stopped inside a system call (orig_rax holds its number).
bool in_syscall(const user_regs_struct& r);

// Blocking system calls inside which a thread holds no lock that dlopen needs (it is waiting, not working):
// a thread stopped in one may run the injected call; the call is restarted afterwards.
bool waiting_syscall(long nr);

// The stopped threads of one process; the destructor releases every thread still held.
class Stopped {
 public:
  explicit Stopped(pid_t pid) : pid_(pid) {}
  ~Stopped() { release_all(); }
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;

  std::vector<Tracee>& threads() { return threads_; }

  // PTRACE_SEIZE + PTRACE_INTERRUPT every thread, re-listing /proc/PID/task until no new one appears; then
  // waits for each stop and reads each thread's registers. Throws AttachError (ptrace refused, explained; a
  // thread that does not stop within 2 s) or ProcessExited.
  void stop_all();

  // Detaches every thread but `keep`, delivering the signals they had pending.
  void release_all(pid_t keep = 0);

  bool alive() const;

 private:
  std::vector<pid_t> list_tasks();
  // Waits for the thread's interrupt stop; a signal that arrived first is remembered and the thread is left
  // in that signal-delivery stop (also a stop). False when the thread exited.
  bool wait_stop(Tracee& t, TargetDeadline& deadline);

  pid_t pid_;
  std::vector<Tracee> threads_;
};

}  // namespace stepscope::collector::attach
