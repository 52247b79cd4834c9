#include "timers.h"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>

#include <algorithm>

#include "core/collector_state.h"

namespace stepscope::collector {
namespace {

int move_fd_high(int fd) {
  // Keep our descriptors out of the low numbers a program may expect to get from open().
  int hi = fcntl(fd, F_DUPFD_CLOEXEC, 900);
  if (hi < 0) return fd;
  close(fd);
  return hi;
}

bool arm_perf_event(ThreadState* ts, int32_t tid) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = static_cast<uint64_t>(g->period_ns);
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.wakeup_events = 1;
  int fd = static_cast<int>(syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) return false;
  fd = move_fd_high(fd);
  f_owner_ex owner{F_OWNER_TID, tid};
  if (fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, g->signo) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) != 0 || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
    close(fd);
    return false;
  }
  ts->perf_fd = fd;
  ts->timer_kind = TimerKind::PerfEvent;
  return true;
}

bool arm_posix_timer(ThreadState* ts, int32_t tid, bool wall) {
  // A thread's CPU clock can be named by tid from any thread: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED).
  clockid_t clk = wall ? CLOCK_MONOTONIC : static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  sigevent sev{};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = g->signo;
  sev._sigev_un._tid = tid;
  timer_t t;
  if (timer_create(clk, &sev, &t) != 0) return false;
  itimerspec its{};
  its.it_interval.tv_sec = g->period_ns / 1000000000;
  its.it_interval.tv_nsec = g->period_ns % 1000000000;
  // Stagger the first expiry so threads are not sampled in lockstep.
  int64_t first = g->period_ns / 2 + (tid * 7919LL) % std::max<int64_t>(1, g->period_ns / 2);
  its.it_value.tv_sec = first / 1000000000;
  its.it_value.tv_nsec = first % 1000000000;
  if (timer_settime(t, 0, &its, nullptr) != 0) {
    timer_delete(t);
    return false;
  }
  ts->timer = t;
  ts->timer_kind = wall ? TimerKind::WallTimer : TimerKind::CpuTimer;
  return true;
}

}  // namespace

bool arm_timer(ThreadState* ts, int32_t tid) {
  if (g->config.wall) return arm_posix_timer(ts, tid, true);
  if (g->timer_kind != TimerKind::CpuTimer && arm_perf_event(ts, tid)) return true;
  return arm_posix_timer(ts, tid, false);
}

void disarm_timer(ThreadState* ts) {
  if (ts->timer_kind == TimerKind::PerfEvent && ts->perf_fd >= 0) {
    ioctl(ts->perf_fd, PERF_EVENT_IOC_DISABLE, 0);
    close(ts->perf_fd);
    ts->perf_fd = -1;
  } else if (ts->timer_kind == TimerKind::CpuTimer || ts->timer_kind == TimerKind::WallTimer) {
    timer_delete(ts->timer);
  }
  ts->timer_kind = TimerKind::None;
}

}  // namespace stepscope::collector
