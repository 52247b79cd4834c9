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
  return r;
}

}  // namespace stepscope::analyzer
