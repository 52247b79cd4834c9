// Small helpers every injection unit shares: the monotonic clock, hex formatting, /proc paths, the
// STEPSCOPE_ATTACH_DEBUG trace and ProcessExited (the target is gone). Includes nothing of the other units.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "launcher/launcher_clock.h"
#include "stepscope/collector/attach.h"

namespace stepscope::collector::attach {

// Thrown by the units when the target (or the thread being used) exited; inject() turns it into
// AttachError("process PID exited during attach").
struct ProcessExited {};

constexpr uint64_t kPageBytes = 4096;  // the target's pages (x86-64)

inline bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STEPSCOPE_ATTACH_DEBUG");
    return v && *v && *v != '0';
  }();
  return on;
}

inline std::string fmt_hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

// "/proc/PID/what".
inline std::string proc(pid_t pid, const std::string& what) {
  return "/proc/" + std::to_string(pid) + "/" + what;
}

}  // namespace stepscope::collector::attach

// One line on stderr when STEPSCOPE_ATTACH_DEBUG is set.
#define STEPSCOPE_ATTACH_DEBUG_LOG(...)                    \
  do {                                                     \
    if (::stepscope::collector::attach::debug_enabled()) { \
      std::fprintf(stderr, "stepscope attach: ");          \
      std::fprintf(stderr, __VA_ARGS__);                   \
      std::fprintf(stderr, "\n");                          \
    }                                                      \
  } while (0)
