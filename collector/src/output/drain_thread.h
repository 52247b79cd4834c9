// The collector thread: every drain period (Globals::drain_period_ms) it drains the rings and the pending
// rows into this process's partial store, polls /proc/self/task, writes status meta and commits; at stop,
// exit or a termination signal it makes a final pass. It takes no signals and is never sampled.
#pragma once

namespace stepscope::collector {

// Starts the collector thread (Globals::thread); on failure the collector turns itself off.
void start_collector_thread();

}  // namespace stepscope::collector
