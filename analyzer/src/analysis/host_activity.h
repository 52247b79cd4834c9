// What the host ran during given stretches of time: the evidence behind "the GPU waited for the host", and on
// runs without GPU activity, where the training thread spent its steps.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

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
  const std::string& name(int64_t stack) { return text(name_id(stack)); }
  // name(stack) as an id of text(); 0 is the empty name (the profiler's own work).
  uint32_t name_id(int64_t stack);
  // Every function of the program on the stack, each once however often it recurses: name(stack) and, on a
  // stack without Python frames, each symbolized native frame of the program (the C library's, the loader's
  // and the profiler's left out); on a Python stack its Python frames (the interpreter's own native frames
  // are not the program's functions), never the collector's hooks. Ids of text(), ascending; empty when
  // name(stack) is.
  const std::vector<uint32_t>& inclusive_ids(int64_t stack);
  const std::string& text(uint32_t id) const { return texts_.get(store::StringId(id)); }
  uint32_t intern(const std::string& s) { return uint32_t(texts_.intern(s)); }

 private:
  enum class Module : uint8_t { User, System, Profiler };
  // What the namer asks of a frame, worked out once per frame: a stack of a 5 kHz recording of `import torch`
  // shares most of its 70 frames with thousands of others (issue 53: 439,000 stack nodes for 35,000 samples).
  struct FrameFacts {
    bool known = false;
    bool profiler_python = false, profiler_owned = false, named = false;
    Module module = Module::User;
    uint32_t display = 0;  // frame_display_name(full), interned
  };
  // Calls visit(frame, facts) for each frame of the stack, innermost first, until it returns false.
  template <class Visit>
  void walk(int64_t stack, Visit&& visit);
  const FrameFacts& facts(size_t frame_pos);
  Module module_kind(store::StringId m);
  bool named(const store::Frame& f) const;
  // Position of an id in its table: a vector when the ids are dense (a store's are 1..n), else a hash map.
  class Positions {
   public:
    template <class Rows>
    explicit Positions(const Rows& rows);
    int64_t find(int64_t id) const;

   private:
    std::vector<int32_t> dense_;
    std::unordered_map<int64_t, size_t> sparse_;
  };
  const store::Trace& t_;
  Positions stack_pos_, frame_pos_;
  std::vector<FrameFacts> frames_;
  std::unordered_map<store::StringId, Module> modules_;
  store::StringTable texts_;  // display names; id 0 is ""
  std::unordered_map<int64_t, uint32_t> names_;
  std::unordered_map<int64_t, std::vector<uint32_t>> inclusive_;
};

}  // namespace stepscope::analyzer::detail
