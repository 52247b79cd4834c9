#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace stepscope::collector::checkup {
namespace {

// The collector samples with perf_event_open(PERF_COUNT_SW_TASK_CLOCK) per thread (timers.cpp) and falls back
// to timer_create on the thread's CPU clock where that is refused: the same call is tried here.
void check_perf_events(Printer& p) {
  bool exists = false;
  const std::string value = read_trimmed("/proc/sys/kernel/perf_event_paranoid", &exists);
  const std::string what = "perf_event_paranoid";
  const std::string shown = exists ? value : "absent (a kernel without perf events?)";
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = 1000000;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  const int fd = int(syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
  const int err = errno;
  if (fd >= 0) {
    close(fd);
    p.line(Verdict::Ok, what,
           shown +
               ": stepscope's per-thread task-clock perf events are allowed here (sampling at the "
               "asked --cpu-hz)" +
               (exists && std::atoi(value.c_str()) > 2 ? "; this process is privileged (CAP_PERFMON or root)"
                                                       : ""));
    return;
  }
  const std::string fallback = strf(
      "perf_event_open is refused (%s): stepscope falls back to timer_create on each thread's CPU clock, "
      "which fires on the scheduler tick (often 250 Hz) whatever --cpu-hz asks",
      std::strerror(err));
  if (exists && std::atoi(value.c_str()) <= 2)
    p.line(Verdict::Warn, what, shown + ": " + fallback,
           "a seccomp profile or security module forbids perf_event_open (containers: --cap-add PERFMON or a "
           "seccomp profile that allows it)");
  else
    p.line(
        Verdict::Warn, what, shown + ": " + fallback,
        "sudo sysctl kernel.perf_event_paranoid=2 (or run as root / grant CAP_PERFMON) for the asked rate");
}

}  // namespace

const DoctorCheck kPerfEventsCheck = {"perf_event_paranoid",
                                      [](Printer& p, DoctorContext&) { check_perf_events(p); }};

}  // namespace stepscope::collector::checkup
