// What-if replay (docs/critical-path.md, "What-if replay"): the GPU-traced steps' dependency graph replayed
// forward — unchanged, then with each finding's cure applied as a transformation of the graph — to a
// predicted step time. A finding's replayed saving is the replayed step minus the step with its cure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stepscope::analyzer {

struct WhatIfCure {
  std::string rule;      // the finding's rule ("launch-overhead", ...)
  std::string cure;      // "cuda-graph", "fused", "prefetch", "async", "batched", "pinned"
  double step_us = 0;    // the predicted mean step with this cure
  double saving_us = 0;  // WhatIf::replayed_step_us − step_us
};

struct WhatIf {
  int64_t steps = 0;            // steady GPU-traced steps replayed
  double recorded_step_us = 0;  // their mean step, as recorded
  double identity_step_us = 0;  // the graph replayed unchanged, profiler cost kept: the model's own error
  double replayed_step_us =
      0;  // replayed unchanged with the profiler's cost per launch removed: the baseline
  std::vector<WhatIfCure> cures;  // one per finding with a cure (launch-overhead: cuda-graph, then fused)
  double combined_step_us = 0;    // every finding's cure at once (launch-overhead as cuda-graph)
  std::string note;               // why nothing was replayed, when steps == 0
  bool empty() const { return steps == 0; }
};

}  // namespace stepscope::analyzer
