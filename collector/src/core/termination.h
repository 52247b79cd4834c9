// Termination signals. SIGINT, SIGTERM and SIGHUP with the default action would end the process without the
// final drain that exit() gets. Where the program left them at SIG_DFL, a stand-in handler asks the collector
// thread for its final pass, waits for it (bounded), restores SIG_DFL and re-raises: the process still dies of
// the same signal. sigaction()/signal() are interposed (termination.cpp) so the program never sees the
// stand-in: it reads SIG_DFL, and installing its own handler replaces the stand-in as it would replace SIG_DFL
// (CPython only installs its KeyboardInterrupt handler over SIG_DFL, so it must see SIG_DFL).
#pragma once

namespace stepscope::collector {

// `crash_signals`: SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT too (the flight recorder saves its window when the
// program crashes; the collector thread writes it while the crashing thread waits, bounded).
void install_termination_standins(bool crash_signals = false);

}  // namespace stepscope::collector
