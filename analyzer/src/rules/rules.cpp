#include <fmt/format.h>

#include "rules/rule.h"

namespace stepscope::analyzer::rules {

std::vector<std::unique_ptr<Rule>> all_rules() {
  std::vector<std::unique_ptr<Rule>> r;
  r.push_back(make_input_bound_rule());
  r.push_back(make_launch_overhead_rule());
  r.push_back(make_small_gemm_loop_rule());
  r.push_back(make_sync_stall_rule());
  r.push_back(make_pageable_memcpy_rule());
  r.push_back(make_no_tensor_cores_rule());
  return r;
}

std::string format_us(double ns) {
  double us = ns / 1000.0;
  if (us >= 1e6) return fmt::format("{:.2f} s", us / 1e6);
  if (us >= 1000) return fmt::format("{:.2f} ms", us / 1000);
  return fmt::format("{:.1f} µs", us);
}

std::string format_pct(double frac) { return fmt::format("{:.1f}%", frac * 100.0); }

}  // namespace stepscope::analyzer::rules
