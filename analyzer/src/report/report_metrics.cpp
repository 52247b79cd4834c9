// `stepscope report --format metrics`: one flat JSON object of numbers per run, named so that
// `mlflow.log_metrics(d)` and TensorBoard's `add_scalar(name, value)` take it as it is (docs/report.md).
#include <algorithm>
#include <cmath>
#include <map>

#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"

namespace stepscope::analyzer {

namespace {

constexpr Bound kBounds[] = {Bound::Input, Bound::Launch, Bound::Sync,    Bound::Host,
                             Bound::Gpu,   Bound::Other,  Bound::Untraced};

// Nearest-rank percentile (the JSON's percentiles are too), in ms; 0 without steps.
double percentile_ms(std::vector<int64_t> durs, double p) {
  if (durs.empty()) return 0;
  std::sort(durs.begin(), durs.end());
  const size_t rank = size_t(std::ceil(p * double(durs.size())));
  return double(durs[std::clamp<size_t>(rank, 1, durs.size()) - 1]) / 1e6;
}

int severity_number(store::Severity s) {
  switch (s) {
    case store::Severity::High:
      return 3;
    case store::Severity::Medium:
      return 2;
    case store::Severity::Low:
    default:
      return 1;
  }
}

}  // namespace

std::string render_metrics_report(const Analysis& a) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  std::vector<int64_t> durs;
  int64_t total_ns = 0;
  std::map<Bound, int64_t> bound_ns;
  for (const auto& s : a.steps) {
    durs.push_back(s.dur_ns);
    total_ns += s.dur_ns;
    bound_ns[s.bound] += s.dur_ns;
  }
  w.kv("stepscope/steps", int64_t(a.steps.size()));
  // As every median step figure is computed: over the same host steps, the tracker's is the slow-step list's.
  w.kv("stepscope/step_median_ms", double(median_of_steps(durs)) / 1e6);
  w.kv("stepscope/step_p95_ms", percentile_ms(durs, 0.95));
  w.kv("stepscope/step_time_s", double(total_ns) / 1e9);
  w.kv("stepscope/data_wait_share", a.summary.data_wait_share);
  w.kv("stepscope/gpu_busy_share", a.summary.gpu_busy_share);
  // Every bound, present or not: a tracker's series stay the same from run to run.
  for (Bound b : kBounds)
    w.kv(std::string("stepscope/bound/") + to_string(b) + "_share",
         total_ns > 0 ? double(bound_ns[b]) / double(total_ns) : 0.0);
  w.kv("stepscope/findings", int64_t(a.findings.size()));
  std::map<std::string, int> seen;  // a rule found twice gets "-2" on its second name
  for (const auto& f : a.findings) {
    const int n = ++seen[f.rule];
    const std::string base = "stepscope/finding/" + f.rule + (n > 1 ? "-" + std::to_string(n) : "");
    w.kv(base + "/saving_ms_per_step", f.est_savings_us_per_step / 1e3);
    w.kv(base + "/share", f.share);
    w.kv(base + "/steps", int64_t(f.steps.size()));
    w.kv(base + "/severity", int64_t(severity_number(f.severity)));
  }
  w.end_object();
  out += "\n";
  return out;
}

}  // namespace stepscope::analyzer
