// A rule looks at the analysed trace and reports findings. One class per rule, one rule per file;
// thresholds are named constants documented in docs/rules.md. Rule ids are public (CI filters on them).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer::rules {

class Rule {
 public:
  virtual ~Rule() = default;
  virtual const char* id() const = 0;
  virtual void run(const detail::Context& ctx, std::vector<FindingResult>& out) const = 0;
};

std::unique_ptr<Rule> make_input_bound_rule();
std::unique_ptr<Rule> make_launch_overhead_rule();
std::unique_ptr<Rule> make_small_gemm_loop_rule();
std::unique_ptr<Rule> make_sync_stall_rule();
std::unique_ptr<Rule> make_pageable_memcpy_rule();
std::unique_ptr<Rule> make_no_tensor_cores_rule();

// Every rule, in a fixed order.
std::vector<std::unique_ptr<Rule>> all_rules();

// Helpers shared by the rules.
std::string format_us(double ns);      // "1.23 ms", "45.6 µs"
std::string format_pct(double frac);   // "12.3%"
// Ranges of evidence, capped so findings stay small on long traces.
inline constexpr size_t kMaxRangesPerFinding = 64;

}  // namespace stepscope::analyzer::rules
