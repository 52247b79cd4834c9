// A cross-rank rule looks at the aligned ranks and reports findings. One class per rule, one rule per file;
// thresholds are named constants documented in docs/rules.md ("Several ranks").
#pragma once

#include <memory>
#include <vector>

#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::analyzer::multirank {

class MultiRankRule {
 public:
  virtual ~MultiRankRule() = default;
  virtual const char* id() const = 0;
  virtual void run(const MultiRankAnalysis& m, std::vector<FindingResult>& out) const = 0;
};

std::unique_ptr<MultiRankRule> make_straggler_rule();
std::unique_ptr<MultiRankRule> make_exposed_comm_rule();

// Median of `v` (the lower middle element for an even count: a real rank's figure, not an average).
int64_t median_of(std::vector<int64_t> v);

}  // namespace stepscope::analyzer::multirank
