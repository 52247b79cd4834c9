// The sampling signal's handler: capture only (PCs, Python frames, on/off CPU) into the thread's ring.
#pragma once
#include <signal.h>
#include <ucontext.h>

#include "core/collector_state.h"

namespace stepscope::collector {

// Installed with SA_SIGINFO | SA_RESTART | SA_ONSTACK for Globals::signo. Async-signal-safe.
void on_sample_signal(int, siginfo_t*, void* ucontext);

// The handler's deepest use of the stack below its own first frame: its frames down to a guarded copy, then a
// nested frame of the fault guard's signal (the kernel's signal frame, as large as the one this delivery
// wrote and at most AT_MINSIGSTKSZ with a red zone and alignment, and on_fault's frame). Measured by
// collector_signal_safety_test, which paints an alternate stack and reads how deep it was written: the frames
// took under 1 KiB (docs/collector.md, "The handler's stack").
constexpr size_t kHandlerOwnFramesBytes = 2048;
// kHandlerOwnFramesBytes + the largest kernel signal frame here (getauxval(AT_MINSIGSTKSZ), at least 2 KiB).
// The handler asks for less where it reads the frame the kernel wrote (x86-64: signal_handler.cpp,
// kernel_frame_of).
size_t handler_stack_need();

// The largest record capture_record() writes (header, the stack window, the Python frames).
inline size_t max_record_bytes() {
  return sizeof(SampleHeader) + g->stack_window + sizeof(python::RawPyFrame) * kMaxPy;
}
// Fills `rec` (max_record_bytes() of room) with one record of the interrupted (or getcontext'ed) context:
// `h` completed with registers, stack size and flags, then the stack copy and the Python frames. Returns the
// record's length. Async-signal-safe: the handler and the stacks at blocking CUDA calls share it. `seen_top`:
// the thread's ThreadState::stack_seen_top (unwind::copy_stack).
// `scratch`: the Python frame reader's working memory, the calling thread's own (ThreadState::py_scratch).
size_t capture_record(const ucontext_t* uc, const unwind::StackBounds& bounds, SampleHeader& h, uint8_t* rec,
                      python::CaptureScratch& scratch, unwind::SeenStackTop* seen_top = nullptr);

}  // namespace stepscope::collector
