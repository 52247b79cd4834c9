// The launcher's clock: CLOCK_MONOTONIC in ns, the clock of the collector's rows.
#pragma once

#include <time.h>

#include <cstdint>

namespace stepscope::collector {

inline int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace stepscope::collector
