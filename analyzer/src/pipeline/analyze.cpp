// analyze(): the analysis room measures, the rules decide, the analysis room completes — the one place that
// knows both rooms (tests/rooms/check_rooms.py: pipeline sits above analysis and rules).
#include <algorithm>

#include "analysis/measure.h"
#include "rules/rule.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer {

Analysis analyze(const store::Trace& trace, const AnalyzeOptions& options) {
  Analysis a;
  detail::Context ctx;
  detail::measure(trace, options, ctx, a);
  detail::SavingsLedger ledger;
  for (const auto& rule : rules::all_rules()) rule->run(ctx, ledger, a.findings);
  rules::drop_negligible(ctx, a.findings);
  // Largest total saving first.
  std::stable_sort(a.findings.begin(), a.findings.end(), [](const FindingResult& x, const FindingResult& y) {
    return x.est_savings_us_per_step * double(x.steps.size()) >
           y.est_savings_us_per_step * double(y.steps.size());
  });
  detail::complete(ctx, options, a);
  return a;
}

}  // namespace stepscope::analyzer
