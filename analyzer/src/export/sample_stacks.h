// The CPU samples as every stack export shows them (folded, speedscope, SVG): one walk over the store's
// stacks, so the three name, order and count the same frames.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

struct SampleStacks {
  // Distinct frame names as the GUI shows them (frame_display_name), with "[stepscope hook]", "[off CPU]".
  std::vector<std::string> frames;
  // Distinct stacks: indexes into `frames`, outermost first, the leaf last; empty for a sample without one.
  std::vector<std::vector<int32_t>> stacks;
  struct Weighted {
    int32_t stack;   // index into `stacks`
    int64_t weight;  // sampling periods
  };
  struct Thread {
    int64_t pid = 0, tid = 0;
    std::string process, thread;    // "name (pid)", "name (tid)"
    std::vector<Weighted> samples;  // in the trace's (time) order
    int64_t total = 0;              // sum of the weights
  };
  std::vector<Thread> threads;  // by (pid, tid)
  int64_t total = 0;
};

// Walks every sample's stack once per distinct stack. The collector's own Python hook frames
// (is_profiler_python_frame) are left out — time in them alone is "[stepscope hook]" — and an off-CPU sample
// (`record --wall`) ends in "[off CPU]".
SampleStacks sample_stacks(const store::Trace& t);

}  // namespace stepscope::analyzer
