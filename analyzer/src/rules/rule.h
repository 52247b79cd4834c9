// A rule looks at the analysed trace and reports findings. One class per rule, one rule per file;
// thresholds are named constants documented in docs/rules.md. Rule ids are public (CI filters on them).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer {
class JsonWriter;
}

namespace stepscope::analyzer::rules {

class Rule {
 public:
  virtual ~Rule() = default;
  virtual const char* id() const = 0;
  // `ledger` holds the idle earlier rules' savings explained: a rule counts only what is still unclaimed and claims
  // what it counts.
  virtual void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const = 0;
};

std::unique_ptr<Rule> make_input_bound_rule();
std::unique_ptr<Rule> make_launch_overhead_rule();
std::unique_ptr<Rule> make_host_compute_rule();
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

// A finding whose estimated saving is below this share of the summed step time is not reported: it is within the
// run's own noise and no change is worth making for it (docs/rules.md, "What is reported").
inline constexpr double kMinReportedShare = 0.01;
// A share within this relative margin of a severity threshold is reported as medium, never flipped between high and
// nothing by noise: the same program recorded for 60 or 600 steps gets the same verdict.
inline constexpr double kThresholdMargin = 0.10;

struct SeverityDecision {
  store::Severity severity = store::Severity::Medium;
  double share = 0, high_at = 0, medium_at = 0;
  bool near_threshold = false;  // within kThresholdMargin of high_at or medium_at
};
// high when share >= high_at * (1 + margin); medium when share >= medium_at * (1 - margin); low down to
// kMinReportedShare; below it nothing.
std::optional<SeverityDecision> decide_severity(double share, double high_at, double medium_at);
// The decision as evidence fields: "share_for_severity", "high_at", "medium_at", "near_threshold".
void write_severity_evidence(JsonWriter& w, const SeverityDecision& d);
// Removes findings whose saving is below kMinReportedShare of the steady steps' time.
void drop_negligible(const detail::Context& ctx, std::vector<FindingResult>& findings);

// Calls f(segment, start, end) for each classified idle segment overlapping step `step`, clipped to the step, in
// time order.
template <class F>
void for_each_idle_in_step(const detail::Context& ctx, size_t step, F&& f) {
  const int64_t a = ctx.windows[step].start, b = ctx.windows[step].end;
  auto it = std::upper_bound(ctx.idle.begin(), ctx.idle.end(), a,
                             [](int64_t x, const detail::IdleSegment& s) { return x < s.end; });
  for (; it != ctx.idle.end() && it->start < b; ++it) f(*it, std::max(a, it->start), std::min(b, it->end));
}

// Claims the idle segments of `kind` inside step `step` (only dispatch ones when `dispatch_only`) and returns the
// part not claimed before.
int64_t claim_idle_in_step(const detail::Context& ctx, detail::SavingsLedger& ledger, size_t step, detail::IdleKind kind,
                           bool dispatch_only = false);

// Concludes a finding from its saving per step (index into ctx.steps → ns): the affected steps, the mean saving per
// affected step, the share of the traced step time, and the severity from the steady steps' share. No value when
// no step saves anything or the share is too small to report (then `f` must not be reported).
std::optional<SeverityDecision> conclude_finding(const detail::Context& ctx, const std::map<int32_t, int64_t>& saved_per_step,
                                                 double high_at, double medium_at, FindingResult& f);

// Summed duration of the steady steps (Context::steady), the base of severity shares.
double steady_share(const detail::Context& ctx, double ns_over_steady_steps);

}  // namespace stepscope::analyzer::rules
