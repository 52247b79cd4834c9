// The critical-path walk over a built Context (analysis room internal).
#pragma once

#include "analysis/context.h"
#include "stepscope/analyzer/critical_path.h"

namespace stepscope::analyzer::detail {

CriticalPaths critical_paths(const Context& ctx);

}  // namespace stepscope::analyzer::detail
