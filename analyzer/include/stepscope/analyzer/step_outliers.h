// Slow steps explained: which steps took longer than the median step by more than the run's own noise, which
// breakdown category grew against the median step, and the biggest contributor to that growth (the kernel,
// host op, API call, Python line or wait that took longer than it does in the median step). docs/report.md.
#pragma once

#include <string>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// A step is slow when it exceeds the median step by more than kSlowStepNoiseSigmas times the run's noise
// (1.4826 × the median absolute deviation of step durations, a robust standard deviation) and by at least
// kSlowStepMinShare of the median (a perfectly regular run has no noise; 5% is below what a person notices).
inline constexpr double kSlowStepNoiseSigmas = 3.0;
inline constexpr double kSlowStepMinShare = 0.05;
// Fewer steps give no trustworthy median.
inline constexpr size_t kSlowStepMinSteps = 5;
// Slow steps explained (the slowest); the rest are counted.
inline constexpr size_t kSlowStepsExplained = 20;

// The parts of a step's time (StepBreakdown fields), in display order. The explanation walks this table, so a
// new breakdown category is one entry here: its key, its label and the contributor kinds that can explain it.
struct StepCategory {
  const char* key;    // "gpu_busy", "data_wait", ... (JSON)
  const char* label;  // "GPU busy", "data wait", ... (reports, GUI)
  int64_t StepBreakdown::*field;
  const char* contributors;  // comma-separated contributor kinds: kernel, copy, wait, op, call, sync, function
};
const std::vector<StepCategory>& step_categories();
// The median of per-step figures as every view computes it: the middle value, the mean of the two middle ones for
// an even count (SlowStep::category_median_ns; the GUI's step details beside each category).
int64_t median_of_steps(std::vector<int64_t> values);
const StepCategory* find_step_category(const std::string& key);
// The category's label in every view; without GPU activity the host's words ("waiting for input", "the
// training thread's own work") for the two categories such a step has.
const char* step_category_label(const StepCategory& c, bool has_gpu);

// The contributor's name as displayed (C++ symbols shortened, display_names.h).
std::string contributor_display_name(const SlowStep& s);

// `training_pid`: the process of the thread that runs the steps (0: unknown); functions sampled in other processes
// (DataLoader workers) are named "[another process]"; `training_tid` (0: unknown): wall-clock samples of other
// threads blocked off the CPU are not counted (an idle pool thread is not what made a step slow). No contributor grew by more than its step's excess or its
// category's growth.
StepOutliers explain_slow_steps(const store::Trace& trace, const std::vector<StepBreakdown>& steps,
                                int64_t training_pid = 0, int64_t training_tid = 0);


}  // namespace stepscope::analyzer
