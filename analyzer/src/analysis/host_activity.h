// What the host ran during given stretches of time: the evidence behind "the GPU waited for the host".
#pragma once

#include <cstddef>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer::detail {

// Where the host was during `intervals` (sorted, disjoint): CPU samples by leaf function when the trace has samples
// (the collector's own threads left out), else the exclusive time of the innermost op/annotation/Python ranges on
// the threads that drive the GPU. Longest first, at most `top`.
std::vector<HostFunctionStat> host_activity(const Context& ctx, const std::vector<Interval>& intervals, size_t top);

}  // namespace stepscope::analyzer::detail
