// The sampling signal's handler: capture only (PCs, Python frames, on/off CPU) into the thread's ring.
#pragma once
#include <signal.h>
#include <ucontext.h>

#include "core/collector_state.h"

namespace stepscope::collector {

// Installed with SA_SIGINFO | SA_RESTART | SA_ONSTACK for Globals::signo. Async-signal-safe.
void on_sample_signal(int, siginfo_t*, void* ucontext);

// The largest record capture_record() writes (header, the stack window, the Python frames).
inline size_t max_record_bytes() {
  return sizeof(SampleHeader) + g->stack_window + sizeof(python::RawPyFrame) * kMaxPy;
}
// Fills `rec` (max_record_bytes() of room) with one record of the interrupted (or getcontext'ed) context:
// `h` completed with registers, stack size and flags, then the stack copy and the Python frames. Returns the
// record's length. Async-signal-safe: the handler and the stacks at blocking CUDA calls share it. `seen_top`:
// the thread's ThreadState::stack_seen_top (unwind::copy_stack).
size_t capture_record(const ucontext_t* uc, const unwind::StackBounds& bounds, SampleHeader& h, uint8_t* rec,
                      unwind::SeenStackTop* seen_top = nullptr);

}  // namespace stepscope::collector
