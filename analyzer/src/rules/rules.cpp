#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "format/units.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {

// The order is the order in which rules claim idle time (SavingsLedger): waits for data and for syncs first (their
// cause is the host's), then a loop of small GEMMs (its gaps are also launch gaps, and one batched GEMM is the
// narrower cure), then what remains of the host-bound idle — dispatch gaps, then the host's longer computations —
// then copies and math.
std::vector<std::unique_ptr<Rule>> all_rules() {
  std::vector<std::unique_ptr<Rule>> r;
  r.push_back(make_input_bound_rule());
  r.push_back(make_sync_stall_rule());
  r.push_back(make_small_gemm_loop_rule());
  r.push_back(make_launch_overhead_rule());
  r.push_back(make_host_compute_rule());
  r.push_back(make_pageable_memcpy_rule());
  r.push_back(make_no_tensor_cores_rule());
  return r;
}

std::optional<SeverityDecision> decide_severity(double share, double high_at, double medium_at) {
  SeverityDecision d;
  d.share = share, d.high_at = high_at, d.medium_at = medium_at;
  if (share < kMinReportedShare) return std::nullopt;
  d.severity = share >= high_at * (1.0 + kThresholdMargin)    ? store::Severity::High
               : share >= medium_at * (1.0 - kThresholdMargin) ? store::Severity::Medium
                                                                : store::Severity::Low;
  d.near_threshold = std::abs(share - high_at) < kThresholdMargin * high_at ||
                     std::abs(share - medium_at) < kThresholdMargin * medium_at;
  return d;
}

void write_severity_evidence(JsonWriter& w, const SeverityDecision& d) {
  w.kv("share_for_severity", d.share).kv("high_at", d.high_at).kv("medium_at", d.medium_at);
  w.kv("threshold_margin", kThresholdMargin).kv("near_threshold", d.near_threshold);
}

void drop_negligible(const detail::Context& ctx, std::vector<FindingResult>& findings) {
  // Judged against the steady steps, as severities are: a warm-up step thousands of times the others (a short
  // trace's lazy module loading) made a finding of 80% of the steady step "negligible" over the whole run.
  const double steady = double(ctx.steady_step_ns), traced = double(ctx.traced_step_ns);
  const double scale = steady > 0 && traced > steady ? traced / steady : 1.0;
  findings.erase(
      std::remove_if(findings.begin(), findings.end(),
                     [scale](const FindingResult& f) { return f.share * scale < kMinReportedShare; }),
      findings.end());
}

int64_t claim_idle_in_step(const detail::Context& ctx, detail::SavingsLedger& ledger, size_t step, detail::IdleKind kind,
                           bool dispatch_only) {
  int64_t fresh = 0;
  for_each_idle_in_step(ctx, step, [&](const detail::IdleSegment& seg, int64_t s0, int64_t s1) {
    if (seg.kind == kind && (!dispatch_only || seg.dispatch)) fresh += ledger.claim(s0, s1);
  });
  return fresh;
}

std::optional<SeverityDecision> conclude_finding(const detail::Context& ctx, const std::map<int32_t, int64_t>& saved_per_step,
                                                 double high_at, double medium_at, FindingResult& f) {
  double saved = 0, steady_saved = 0;
  for (const auto& [s, ns] : saved_per_step) {
    if (ns <= 0) continue;
    f.steps.push_back(ctx.steps[size_t(s)].index), saved += double(ns);
    if (ctx.steady[size_t(s)]) steady_saved += double(ns);
  }
  if (f.steps.empty()) return std::nullopt;
  f.est_savings_us_per_step = saved / double(f.steps.size()) / 1000.0;
  f.share = saved / double(ctx.traced_step_ns);
  auto decision = decide_severity(steady_share(ctx, steady_saved), high_at, medium_at);
  if (decision) f.severity = decision->severity;
  return decision;
}

double steady_share(const detail::Context& ctx, double ns_over_steady_steps) {
  return ctx.steady_step_ns > 0 ? ns_over_steady_steps / double(ctx.steady_step_ns) : 0.0;
}

std::string format_us(double ns) { return units::format_ns_fixed(ns); }

std::string format_pct(double frac) { return fmt::format("{:.1f}%", frac * 100.0); }

}  // namespace stepscope::analyzer::rules
