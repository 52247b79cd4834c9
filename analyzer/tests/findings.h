// Looking a finding up by rule in an analysis, for the analyzer tests.
#pragma once

#include <string>

#include "stepscope/analyzer/analysis.h"

namespace stepscope::test {

// The first finding of `rule`, or nullptr; points into `a`.
inline const analyzer::FindingResult* find_finding(const analyzer::Analysis& a, const std::string& rule) {
  for (const auto& f : a.findings)
    if (f.rule == rule) return &f;
  return nullptr;
}

}  // namespace stepscope::test
