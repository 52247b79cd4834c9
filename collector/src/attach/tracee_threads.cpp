// Stopping, listing and releasing the target's threads under ptrace; see tracee_threads.h.
#include "tracee_threads.h"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <set>
#include <string>

#include "attach_support.h"
#include "process_status.h"
#include "target_deadline.h"

namespace stepscope::collector::attach {
namespace {

// For the threads to reach their ptrace stops, not counting their waits for a CPU (target_deadline.h).
constexpr int64_t kStopTimeoutNs = 2000000000;

}  // namespace

bool in_syscall(const user_regs_struct& r) {
  return static_cast<long>(r.orig_rax) >= 0;
}

bool waiting_syscall(long nr) {
  static const std::set<long> kWaiting = {
      SYS_read,   SYS_poll,       SYS_select,          SYS_pause,    SYS_nanosleep,       SYS_wait4,
      SYS_futex,  SYS_epoll_wait, SYS_clock_nanosleep, SYS_pselect6, SYS_ppoll,           SYS_epoll_pwait,
      SYS_accept, SYS_accept4,    SYS_recvfrom,        SYS_recvmsg,  SYS_rt_sigtimedwait, SYS_rt_sigsuspend,
      SYS_waitid, SYS_sched_yield};
  return kWaiting.count(nr) > 0;
}

void Stopped::stop_all() {
  std::set<pid_t> seen;
  for (bool fresh = true; fresh;) {
    fresh = false;
    for (pid_t tid : list_tasks()) {
      if (!seen.insert(tid).second) continue;
      fresh = true;
      if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
        const int err = errno;
        if (err == ESRCH) {
          if (tid == pid_ && !alive()) throw ProcessExited{};
          continue;  // the thread exited meanwhile
        }
        throw AttachError(explain_ptrace_failure(pid_, err));
      }
      threads_.push_back({tid, 0, {}});
      if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 && errno != ESRCH) {
        threads_.back().tid = -tid;  // seized but not interruptible: detach only
      }
    }
  }
  TargetDeadline deadline(pid_, 0, kStopTimeoutNs, kStopTimeoutNs * kStarvedCapFactor);
  for (auto& t : threads_) {
    if (t.tid < 0) continue;
    if (!wait_stop(t, deadline)) t.tid = 0;
  }
  std::erase_if(threads_, [](const Tracee& t) { return t.tid <= 0; });
  if (threads_.empty()) throw ProcessExited{};
  for (auto& t : threads_)
    if (ptrace(PTRACE_GETREGS, t.tid, nullptr, &t.regs) != 0) throw ProcessExited{};
}

void Stopped::release_all(pid_t keep) {
  for (auto& t : threads_)
    if (t.tid != keep) ptrace(PTRACE_DETACH, t.tid, nullptr, reinterpret_cast<void*>(long(t.pending_signal)));
  std::erase_if(threads_, [keep](const Tracee& t) { return t.tid != keep; });
}

bool Stopped::alive() const {
  return kill(pid_, 0) == 0 || errno == EPERM;
}

std::vector<pid_t> Stopped::list_tasks() {
  std::vector<pid_t> tids = task_ids(pid_);
  if (tids.empty()) throw ProcessExited{};
  return tids;
}

bool Stopped::wait_stop(Tracee& t, TargetDeadline& deadline) {
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(t.tid, &st, __WALL | WNOHANG);
    if (r < 0) return false;
    if (r == 0) {
      if (deadline.expired()) {
        throw AttachError("thread " + std::to_string(t.tid) + " of process " + std::to_string(pid_) +
                          " did not stop within 2 s" + deadline.starved_words() + " (uninterruptible sleep?)");
      }
      timespec ts{0, 100000};
      nanosleep(&ts, nullptr);
      continue;
    }
    if (WIFEXITED(st) || WIFSIGNALED(st)) {
      if (t.tid == pid_) throw ProcessExited{};
      return false;
    }
    if (WIFSTOPPED(st)) {
      if ((st >> 16) == PTRACE_EVENT_STOP) return true;
      t.pending_signal = WSTOPSIG(st);
      return true;
    }
  }
}

}  // namespace stepscope::collector::attach
