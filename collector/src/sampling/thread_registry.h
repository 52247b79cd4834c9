// The registry of sampled threads: each thread's ring and timer, found by tid (the handler's open-addressing
// table), registered by the thread itself (pthread_create interposer) or found by /proc/self/task polling.
// Never used from the signal handler.
#pragma once
#include <cstdint>

namespace stepscope::collector {

struct ThreadState;

// Registers `tid` (own = the calling thread registering itself); null when not sampled.
ThreadState* register_thread(int32_t tid, bool own);
// Registers the calling thread: alternate signal stack, ring, timer, t_state.
void register_current_thread();
// Takes a thread out of the table and disarms its timer; the drain frees it. Needs Globals::reg_mu.
void retire_locked(ThreadState* ts);
void free_thread_state(ThreadState* ts);
// Forgets every registered thread and every row, meta entry and counter not yet written: at a window's end, and
// in a forked child (`after_fork`: the parent's perf-event descriptors are shared, so ours are only closed).
void reset_recorded_state(bool after_fork);
// pthread key destructor: retires the exiting thread.
void on_thread_exit(void* ts);
// Registers threads that appeared without our pthread_create (e.g. created before the collector loaded) and
// retires polled ones that are gone.
void poll_tasks();

}  // namespace stepscope::collector
