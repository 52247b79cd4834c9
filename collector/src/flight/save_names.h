// How flight saves are named (docs/flight.md): "<UTC time>-<label>" folders, merged into
// <prefix>-<folder>.db. Shared by the collector (which makes the folders) and the launcher (which names the
// exit save).
#pragma once

#include <time.h>

#include <cstdio>
#include <string>

namespace stepscope::collector::flight {

// "<flight folder>/.counts-<pid>-<image>": "HELD UNSAVED", how many of that process image's triggers the
// hourly limit held back so far, and how many found no save folder (it could not be made). <image> tells an
// exec'd image of the same pid from the one before it, whose counts stay.
inline constexpr const char* kTriggerCountsPrefix = ".counts-";

// The wall-clock time in UTC to the millisecond: "20261126-143943.872" (sorts as it happened).
inline std::string utc_stamp() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d-%02d%02d%02d.%03ld", t.tm_year + 1900, t.tm_mon + 1, t.tm_mday,
                t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000);
  return buf;
}

}  // namespace stepscope::collector::flight
