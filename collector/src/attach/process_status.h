// What /proc says of a process before anything is stopped: its status and stat lines, and why ptrace of it
// was refused (one line naming the setting to change). The first unit of the injection; see
// docs/collector.md.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace stepscope::collector::attach {

// Reads /proc/PID/status: the real uid and a few fields; throws AttachError("no such process") when absent.
struct ProcessStatus {
  std::string name;
  uid_t uid = 0;
  pid_t tracer = 0;
  int seccomp = 0;
};
ProcessStatus read_status(pid_t pid);

// /proc/PID/stat past the command name (which may hold spaces and parentheses): state, parent, flags.
struct ProcessStat {
  char state = 0;
  pid_t ppid = 0;
  unsigned long flags = 0;  // PF_KTHREAD (0x00200000): a kernel thread
};
// False when the process is gone or its stat cannot be read. A thread's id reads that thread's stat.
bool read_stat(pid_t pid, ProcessStat& out);

// The ids of the process's threads (/proc/PID/task), empty when it is gone.
std::vector<pid_t> task_ids(pid_t pid);

// A kernel thread has no user address space to map into.
bool is_kernel_thread(pid_t pid);

// Why ptrace(PTRACE_SEIZE) of `pid` failed with `err`, as one line naming the setting to change.
std::string explain_ptrace_failure(pid_t pid, int err);

}  // namespace stepscope::collector::attach
