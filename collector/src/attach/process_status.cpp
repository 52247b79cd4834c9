// /proc/PID/status and /proc/PID/stat, and the one-line reason a ptrace was refused; see process_status.h.
#include "process_status.h"

#include <dirent.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "attach_support.h"

namespace stepscope::collector::attach {
namespace {

std::string user_name(uid_t uid) {
  passwd pw{}, *res = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return res->pw_name;
  return "uid " + std::to_string(uid);
}

bool have_cap_sys_ptrace() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0)
      return (std::stoull(line.substr(7), nullptr, 16) >> 19) & 1;  // CAP_SYS_PTRACE
  return false;
}

int read_int_file(const std::string& path, int fallback) {
  std::ifstream f(path);
  int v = fallback;
  if (!(f >> v)) return fallback;
  return v;
}

}  // namespace

ProcessStatus read_status(pid_t pid) {
  std::ifstream f(proc(pid, "status"));
  if (!f) throw AttachError("no such process: " + std::to_string(pid));
  ProcessStatus s;
  std::string line;
  while (std::getline(f, line)) {
    auto value = [&](size_t n) { return line.substr(n); };
    if (line.rfind("Name:", 0) == 0)
      s.name = value(5).substr(value(5).find_first_not_of(" \t"));
    else if (line.rfind("Uid:", 0) == 0)
      s.uid = static_cast<uid_t>(std::stoul(value(4)));
    else if (line.rfind("TracerPid:", 0) == 0)
      s.tracer = std::stoi(value(10));
    else if (line.rfind("Seccomp:", 0) == 0)
      s.seccomp = std::stoi(value(8));
  }
  return s;
}

bool read_stat(pid_t pid, ProcessStat& out) {
  std::ifstream f(proc(pid, "stat"));
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream rest(line.substr(paren + 1));
  long pgrp, session, tty, tpgid;  // fields 5-8, between the parent (4) and the flags (9)
  return bool(rest >> out.state >> out.ppid >> pgrp >> session >> tty >> tpgid >> out.flags);
}

std::vector<pid_t> task_ids(pid_t pid) {
  std::vector<pid_t> tids;
  if (DIR* d = opendir(proc(pid, "task").c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.push_back(pid_t(std::atoi(e->d_name)));
    closedir(d);
  }
  return tids;
}

std::string explain_ptrace_failure(pid_t pid, int err) {
  const std::string p = "process " + std::to_string(pid);
  if (err == ESRCH) return "no such process: " + std::to_string(pid);
  if (err != EPERM) return "cannot ptrace " + p + ": " + std::strerror(err);
  ProcessStatus st;
  try {
    st = read_status(pid);
  } catch (const AttachError&) {
    return "no such process: " + std::to_string(pid);
  }
  const std::string who = p + " (" + st.name + ")";
  if (st.tracer != 0) {
    std::string tracer_name;
    try {
      tracer_name = " (" + read_status(st.tracer).name + ")";
    } catch (const AttachError&) {
    }
    return who + " is already traced by process " + std::to_string(st.tracer) + tracer_name +
           ": detach the debugger or profiler first";
  }
  const bool cap = have_cap_sys_ptrace();
  const int scope = read_int_file("/proc/sys/kernel/yama/ptrace_scope", -1);
  if (scope == 3)
    return "ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3; only a reboot resets it)";
  if (scope == 2 && !cap)
    return "ptrace is restricted to CAP_SYS_PTRACE (kernel.yama.ptrace_scope = 2): run stepscope as root, or "
           "set "
           "kernel.yama.ptrace_scope = 1";
  if (st.uid != geteuid() && !cap)
    return who + " belongs to " + user_name(st.uid) + " and stepscope runs as " + user_name(geteuid()) +
           " without CAP_SYS_PTRACE: run stepscope as that user or as root";
  if (geteuid() == 0 && !cap)
    return "stepscope runs as root without CAP_SYS_PTRACE (a container?): add the capability (docker run "
           "--cap-add SYS_PTRACE; Kubernetes securityContext.capabilities.add: [SYS_PTRACE])";
  if (scope == 1 && !cap)
    return "kernel.yama.ptrace_scope = 1 lets a process trace only its own descendants: run stepscope as "
           "root, "
           "or set kernel.yama.ptrace_scope = 0 (sysctl -w kernel.yama.ptrace_scope=0)";
  return "ptrace of " + who +
         " is not permitted: the process is not dumpable (setuid, prctl PR_SET_DUMPABLE 0) "
         "or a security module (AppArmor, SELinux) or a seccomp filter on stepscope forbids it";
}

// A kernel thread has no user address space to map into.
bool is_kernel_thread(pid_t pid) {
  constexpr unsigned long kPfKthread = 0x00200000;
  ProcessStat st;
  return read_stat(pid, st) && (st.flags & kPfKthread) != 0;
}

}  // namespace stepscope::collector::attach
