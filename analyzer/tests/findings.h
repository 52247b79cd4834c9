// Looking a finding up by rule in an analysis (one run or the ranks of a job), for the analyzer tests.
#pragma once

#include <string>

#include "stepscope/analyzer/analysis.h"

namespace stepscope::test {

// The first finding of `rule` in `a` (an Analysis or a MultiRankAnalysis), or nullptr; points into `a`.
template <class AnyAnalysis>
const analyzer::FindingResult* find_finding(const AnyAnalysis& a, const std::string& rule) {
  for (const auto& f : a.findings)
    if (f.rule == rule) return &f;
  return nullptr;
}

}  // namespace stepscope::test
