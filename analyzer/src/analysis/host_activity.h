// What the host ran during given stretches of time: the evidence behind "the GPU waited for the host", and on
// runs without GPU activity, where the training thread spent its steps.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer::detail {

// Where the host was during `intervals` (sorted, disjoint), named `window` in the result. With CPU samples: the
// training thread's samples by function (Context::training_*), each worth the part of one sampling period
// (Context::sample_period_ns) inside the window (HostActivity), the other threads apart;
// without samples: the exclusive time of the innermost op/annotation/Python ranges on the threads that drive the
// GPU. Longest first, at most `top` functions.
HostActivity host_activity(const Context& ctx, const std::vector<Interval>& intervals, size_t top, std::string window);

// What one CPU sample stands for: 1 / meta collector.cpu_hz when the collector's timer counts the thread's own
// time exactly (perf_event task-clock; CLOCK_MONOTONIC under --wall), else the median spacing of consecutive
// samples on one thread. 0 when the trace has no samples.
int64_t sample_period_ns(const store::Trace& t, std::string* source = nullptr);

// The thread that runs the steps and issues the GPU work, chosen from the step windows, then the launching threads,
// then the most on-CPU samples; {0, 0} when the trace has no samples. `reason` says which.
struct ThreadKey {
  int64_t pid = 0, tid = 0;
};
ThreadKey training_thread(const Context& ctx, std::string* reason = nullptr);

// Display name of a sampled stack: its innermost Python frame (the line of the user's program) when it has one,
// else the innermost symbolized native frame outside the C library, the vDSO, the dynamic loader and the profiler
// (stepscope's collector, CUPTI): those and addresses without a symbol fold into their caller. Empty when the stack is the profiler's own work.
class SampleNamer {
 public:
  explicit SampleNamer(const store::Trace& t);
  const std::string& name(int64_t stack);
  // Every function of the program on the stack, each once however often it recurses: name(stack) and, on a
  // stack without Python frames, each symbolized native frame of the program (the C library's, the loader's
  // and the profiler's left out); on a Python stack its Python frames (the interpreter's own native frames
  // are not the program's functions), never the collector's hooks. Empty when name(stack) is.
  const std::vector<std::string>& inclusive_names(int64_t stack);

 private:
  enum class Module : uint8_t { User, System, Profiler };
  // Calls visit(frame) for each frame of the stack, innermost first, until it returns false.
  template <class Visit>
  void walk(int64_t stack, Visit&& visit) const;
  Module module_kind(store::StringId m);
  bool named(const store::Frame& f) const;
  const store::Trace& t_;
  std::unordered_map<int64_t, size_t> stack_pos_, frame_pos_;
  std::unordered_map<store::StringId, Module> modules_;
  std::unordered_map<int64_t, std::string> names_;
  std::unordered_map<int64_t, std::vector<std::string>> inclusive_;
};

}  // namespace stepscope::analyzer::detail
