// The what-if replay over a built Context (analysis room internal).
#pragma once

#include <vector>

#include "analysis/context.h"
#include "analysis/critical_path.h"
#include "stepscope/analyzer/what_if.h"

namespace stepscope::analyzer::detail {

// Replays the steady GPU-traced steps unchanged and with the cure of each finding in `findings` that has one;
// `loader_workers`: the prefetching input pipeline's workers (AnalyzeOptions::what_if_loader_workers);
// `timelines`: the critical path's host timelines, reused when they hold the thread it replays.
WhatIf what_if(const Context& ctx, const std::vector<FindingResult>& findings, int loader_workers,
               const HostTimelines* timelines = nullptr);

}  // namespace stepscope::analyzer::detail
