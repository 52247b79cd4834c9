// Per-thread sampling timers: perf_event task-clock where allowed, else a timer_create thread CPU clock, or
// CLOCK_MONOTONIC for wall-clock sampling. Each delivers Globals::signo to its own thread.
#pragma once
#include <cstdint>

namespace stepscope::collector {

struct ThreadState;

// Arms a timer for `tid` per the configuration; false when none could be armed (the thread goes unsampled).
bool arm_timer(ThreadState* ts, int32_t tid);
void disarm_timer(ThreadState* ts);

}  // namespace stepscope::collector
