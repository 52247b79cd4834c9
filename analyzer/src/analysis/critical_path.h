// The critical-path walk over a built Context (analysis room internal).
#pragma once

#include "analysis/context.h"
#include "stepscope/analyzer/critical_path.h"

namespace stepscope::analyzer::detail {

// keep_segments: fill CriticalPaths::path.
CriticalPaths critical_paths(const Context& ctx, bool keep_segments = false);

}  // namespace stepscope::analyzer::detail
