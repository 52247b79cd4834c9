// Finds training/inference steps, trying sources in a fixed order (docs/analysis-json.md, "Steps"):
// explicit markers (--step-regex, `record --step-func`, stepscope API steps, ProfilerStep#N, NVTX), optimizer markers, data-loader
// boundaries, periodicity of the kernel-name sequence, and otherwise one window over the whole run.
#pragma once

#include <string>
#include <vector>

#include "analysis/context.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer::detail {

struct DetectedSteps {
  std::string source = "none";  // regex|step-func|api|profiler-step|nvtx|optimizer|dataloader|pattern|none
  std::vector<StepWindow> windows;  // sorted by start, non-overlapping
};

class StepDetector {
 public:
  // Minimum repeats of the kernel sequence before the pattern source trusts it.
  static constexpr int kMinPatternSteps = 2;
  // Minimum kernels per repeat of the pattern.
  static constexpr int kMinPatternKernels = 3;
  // Pattern segments may differ in kernel count by at most this fraction.
  static constexpr double kPatternLengthTolerance = 0.10;
  // Kernels outside the repeats whose names never occur inside them: at most this share of one repeat.
  static constexpr double kPatternForeignShare = 0.05;

  explicit StepDetector(const store::Trace& trace) : t_(trace) {}
  DetectedSteps detect(const std::string& step_regex) const;

 private:
  bool from_regex(const std::string& re, DetectedSteps& out) const;
  // Rows of the store's `steps` table with this source (the collector's step-func/api/nvtx/optimizer/dataloader).
  bool from_store_steps(const char* source, DetectedSteps& out) const;
  bool from_ranges(bool (*match)(std::string_view), const char* source, DetectedSteps& out) const;
  bool from_optimizer(DetectedSteps& out) const;
  bool from_dataloader(DetectedSteps& out) const;
  bool from_pattern(DetectedSteps& out) const;
  void whole_run(DetectedSteps& out) const;
  int64_t thread_last_end(int64_t pid, int64_t tid) const;
  int64_t thread_first_start(int64_t pid, int64_t tid) const;

  const store::Trace& t_;
};

}  // namespace stepscope::analyzer::detail
