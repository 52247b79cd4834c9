#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <unistd.h>

#include <cstdlib>

namespace stepscope::collector::checkup {
namespace {

// `stepscope attach` needs ptrace; the same rules as the injector's error messages (attach/injector.cpp).
void check_ptrace(Printer& p) {
  bool exists = false;
  const std::string value = read_trimmed("/proc/sys/kernel/yama/ptrace_scope", &exists);
  const bool cap = have_capability(19);  // CAP_SYS_PTRACE
  const std::string what = "ptrace_scope";
  if (geteuid() == 0 && !cap) {
    p.line(
        Verdict::Warn, what,
        (exists ? value : std::string("absent (no Yama module)")) +
            ": stepscope runs as root without CAP_SYS_PTRACE (a container?): attach fails",
        "add the capability (docker run --cap-add SYS_PTRACE; Kubernetes securityContext.capabilities.add: "
        "[SYS_PTRACE])");
    return;
  }
  const std::string capped = cap ? "; this process has CAP_SYS_PTRACE" : "";
  if (!exists) {
    p.line(Verdict::Ok, what,
           "absent (no Yama module): `stepscope attach` may attach to any process of the same user" + capped);
    return;
  }
  const int scope = std::atoi(value.c_str());
  if (scope == 0) {
    p.line(Verdict::Ok, what,
           value + ": `stepscope attach` may attach to any process of the same user" + capped);
  } else if (scope == 1 && cap) {
    p.line(Verdict::Ok, what,
           value + ": attach is limited to descendants, but this process has CAP_SYS_PTRACE");
  } else if (scope == 1) {
    p.line(Verdict::Warn, what, value + ": `stepscope attach` works only on stepscope's own descendants",
           "sudo sysctl kernel.yama.ptrace_scope=0, or run stepscope as root (record --paused with "
           "start/stop needs no ptrace)");
  } else if (scope == 2 && cap) {
    p.line(Verdict::Ok, what, value + ": attach needs CAP_SYS_PTRACE, which this process has");
  } else if (scope == 2) {
    p.line(
        Verdict::Warn, what, value + ": `stepscope attach` needs CAP_SYS_PTRACE",
        "run stepscope as root, or sudo sysctl kernel.yama.ptrace_scope=1 to attach to its own descendants");
  } else {
    p.line(Verdict::Warn, what,
           value + ": ptrace is disabled: `stepscope attach` is impossible until a reboot",
           "use stepscope record (record --paused with start/stop needs no ptrace); only a reboot lowers it");
  }
}

}  // namespace

const DoctorCheck kPtraceCheck = {"ptrace_scope", [](Printer& p, DoctorContext&) { check_ptrace(p); }};

}  // namespace stepscope::collector::checkup
