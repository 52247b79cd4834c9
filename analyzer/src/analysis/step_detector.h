// Finds training/inference steps, trying sources in a fixed order (docs/analysis-json.md, "Steps"):
// explicit markers (--step-regex, `record --step-func`, stepscope API steps, ProfilerStep#N, NVTX), optimizer markers, data-loader
// boundaries, periodicity of the kernel-name sequence, and otherwise one window over the whole run.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/correlation_index.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer::detail {

struct DetectedSteps {
  std::string source = "none";  // regex|step-func|api|profiler-step|nvtx|optimizer|dataloader|periodic|none
  std::vector<StepWindow> windows;  // sorted by start, non-overlapping
  // periodic: the share of the sequence that repeats with the period found (1 = every element); others: 1.
  // none: 0 when a periodic unit was looked for and not found.
  double confidence = 1.0;
  std::string periodic_basis;       // periodic: "kernels" or "host ranges"
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
  // ... unless at least this share of the repeats each hold a point where host and device meet (a device-to-host
  // copy or a synchronization): iterations of a loop (a training step reading its loss, a solver's time step
  // reducing its dt, a decode step returning its tokens), whatever one-off work runs before or after them. The
  // layers of one forward pass never wait for the host between them.
  static constexpr double kIterationMeetShare = 0.90;
  // Autocorrelation of a name sequence: the period p is taken when at least this share of elements equals the one
  // p later, over at least kMinPeriodicRepeats repeats; periods up to kMaxPeriod elements, over at most
  // kMaxPeriodicWindow elements of the sequence (bounded work on 10M-kernel traces).
  static constexpr double kPeriodicMinMatch = 0.90;
  static constexpr int kMinPeriodicRepeats = 3;
  static constexpr size_t kMaxPeriod = 4096;
  static constexpr size_t kMaxPeriodicWindow = 20000;

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
  // The repeating unit of the kernel-name sequence (or, without kernels, of the top-level host ranges).
  bool from_autocorrelation(DetectedSteps& out) const;
  void whole_run(DetectedSteps& out) const;
  // Whether kIterationMeetShare of the windows hold a device-to-host copy or a synchronization.
  bool windows_meet_host(const std::vector<StepWindow>& w) const;
  // Sorted times of device-to-host copies, sync records and blocking API calls; gathered once, on first use.
  const std::vector<int64_t>& host_meets() const;
  int64_t thread_last_end(int64_t pid, int64_t tid) const;
  int64_t thread_first_start(int64_t pid, int64_t tid) const;
  // A kernel's launch call (api_calls row), -1: none; the index is built on first use.
  int64_t launch_of(const store::Kernel& k) const;

  const store::Trace& t_;
  mutable std::optional<std::vector<int64_t>> meets_;
  mutable std::optional<CorrelationIndex> launches_;
};

}  // namespace stepscope::analyzer::detail
