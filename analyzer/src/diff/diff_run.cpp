// Kept apart from diff.cpp: this is the only diff code that needs analyze().
#include "stepscope/analyzer/diff.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>

namespace stepscope::analyzer {

namespace {

// "train_step (python_input_bound.py:61)" → "train_step (python_input_bound.py)"; other names unchanged.
std::string without_python_line(const std::string& name) {
  if (name.empty() || name.back() != ')') return name;
  const size_t colon = name.rfind(':');
  const size_t open = name.rfind(" (");
  if (colon == std::string::npos || open == std::string::npos || colon < open || colon + 2 >= name.size())
    return name;
  for (size_t i = colon + 1; i + 1 < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return name;
  return name.substr(0, colon) + ")";
}

}  // namespace

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
  // A Python function is compared whole, whatever lines its samples were at ("train_step (x.py:61)" and
  // "(x.py:62)" were two rows, each a few samples).
  const HostActivity& h = r.analysis.host_activity;
  if (h.window == "steps" && h.source == "samples") {
    std::map<std::string, size_t> row_of;
    for (const auto& f : h.functions) {
      if (f.time_ns <= 0) continue;  // listed for their inclusive time only
      std::string name = without_python_line(f.name);
      if (!f.on_cpu) name += " (off CPU)";
      auto [it, fresh] = row_of.try_emplace(name, r.host_functions.size());
      if (fresh) r.host_functions.push_back(KernelStat{name, 0, 0, 0, 0});
      KernelStat& k = r.host_functions[it->second];
      k.count += f.samples;
      k.total_ns += f.time_ns;
    }
  }
  return r;
}

}  // namespace stepscope::analyzer
