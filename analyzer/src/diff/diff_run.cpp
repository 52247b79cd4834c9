// Kept apart from diff.cpp: this is the only diff code that needs analyze().
#include "stepscope/analyzer/diff.h"

#include <algorithm>

namespace stepscope::analyzer {

DiffRun make_diff_run(const std::string& file, const store::Trace& trace, const AnalyzeOptions& options,
                      int skip_first_steps) {
  DiffRun r;
  r.file = file;
  r.analysis = analyze(trace, options);
  if (r.analysis.source_file.empty()) r.analysis.source_file = file;
  // The host steps the metrics compare, the warm-up left out as pool_steps leaves it (a V100 run's aten::item read
  // 6.16 ms a step over its 6 steps, warm-up included, where the 5 compared hold 6.43).
  std::vector<StepBreakdown> compared(r.analysis.steps);
  if (skip_first_steps > 0 && compared.size() >= size_t(skip_first_steps) + 2)
    compared.erase(compared.begin(), compared.begin() + skip_first_steps);
  r.table_steps = int64_t(compared.size());
  r.table_gpu_steps = std::count_if(compared.begin(), compared.end(), [](const StepBreakdown& s) { return s.gpu_traced; });
  r.kernels = kernel_stats_by_name(trace, compared);
  r.ops = op_stats_by_name(trace, compared);
  // No kernels to compare on a CPU run: its host functions say what grew instead.
  const HostActivity& h = r.analysis.host_activity;
  if (h.window == "steps" && h.source == "samples")
    for (const auto& f : h.functions) {
      if (f.time_ns <= 0) continue;  // listed for their inclusive time only
      KernelStat k;
      k.name = f.on_cpu ? f.name : f.name + " (off CPU)";
      k.count = f.samples;
      k.total_ns = f.time_ns;
      r.host_functions.push_back(std::move(k));
    }
  return r;
}

}  // namespace stepscope::analyzer
