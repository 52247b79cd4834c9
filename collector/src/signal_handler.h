// The sampling signal's handler: capture only (PCs, Python frames, on/off CPU) into the thread's ring.
#pragma once
#include <signal.h>

namespace stepscope::collector {

// Installed with SA_SIGINFO | SA_RESTART | SA_ONSTACK for Globals::signo. Async-signal-safe.
void on_sample_signal(int, siginfo_t*, void* ucontext);

}  // namespace stepscope::collector
