// The analysis room's two halves of analyze() (pipeline/analyze.cpp runs the rules between them): the rules
// read a measured Context; what comes after them (statistics, the critical path, slow steps, HTA's
// breakdowns) reads the Context and fills the rest of the Analysis.
#pragma once

#include "analysis/context.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer::detail {

// Steps, the per-step breakdown, the training thread and the summary.
void measure(const store::Trace& trace, const AnalyzeOptions& options, Context& ctx, Analysis& a);
// Kernel statistics, utilization, host activity, per-device busy, the critical path, slow steps, breakdowns;
// moves the steps into `a`.
void complete(Context& ctx, const AnalyzeOptions& options, Analysis& a);

}  // namespace stepscope::analyzer::detail
