// Kept apart from diff.cpp: this is the only diff code that needs analyze().
#include "stepscope/analyzer/diff.h"

namespace stepscope::analyzer {

DiffRun make_diff_run(const std::string& file, const store::Trace& trace, const AnalyzeOptions& options) {
  DiffRun r;
  r.file = file;
  r.analysis = analyze(trace, options);
  if (r.analysis.source_file.empty()) r.analysis.source_file = file;
  r.kernels = kernel_stats_by_name(trace, r.analysis.steps);
  r.ops = op_stats_by_name(trace, r.analysis.steps);
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
