// Renderings of a DiffResult: JSON ("stepscope.diff/1"), JUnit XML, Markdown (GitHub step summary) and text.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "report/report_util.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

using namespace report_util;

namespace {

constexpr size_t kNameChars = 90;

std::string value_str(const MetricDiff& m, double v) {
  if (!std::isfinite(v)) return "n/a";
  return m.relative ? format_us(v) : format_share(v);
}

std::string change_str(const MetricDiff& m, double c) {
  if (!std::isfinite(c)) return "n/a";
  return m.relative ? format_signed_percent(c) : format_signed_pp(c);
}

std::string threshold_str(const MetricDiff& m) {
  std::string t = m.relative ? fmt::format("{:.1f}%", m.threshold * 100) : fmt::format("{:.1f} pp", m.threshold * 100);
  return "±" + t;
}

std::string ci_str(const MetricDiff& m) {
  if (!m.ci_valid) return "n/a";
  return change_str(m, m.ci_lo) + " … " + change_str(m, m.ci_hi);
}

std::string p_str(double p) {
  if (!std::isfinite(p)) return "n/a";
  if (p < 0.0001) return "<0.0001";
  return fmt::format("{:.4f}", p);
}

std::string test_str(const MetricDiff& m) {
  if (!m.tested) return "too few steps";
  return fmt::format("p={} (Holm {})", p_str(m.p_value), p_str(m.p_adjusted));
}

std::string metric_line(const MetricDiff& m) {
  return fmt::format("{}: {} → {} ({}; 95% CI {}; threshold {}; {}): {}", m.title, value_str(m, m.base), value_str(m, m.now),
                     change_str(m, m.change), ci_str(m), threshold_str(m), test_str(m), to_string(m.verdict));
}

std::string files_str(const DiffSide& s) {
  std::string out;
  for (const auto& f : s.files) out += (out.empty() ? "" : ", ") + f;
  return out;
}

std::string severity_or_dash(bool has, store::Severity s) { return has ? store::to_string(s) : "-"; }

std::string fmt_us_per_step(double us) { return format_us(us); }

std::string signed_us(double us) { return (us >= 0 ? "+" : "-") + format_us(std::fabs(us)); }

}  // namespace

std::string diff_to_json(const DiffResult& d) {
  std::string out;
  JsonWriter w(out);
  w.begin_object();
  w.kv("schema", "stepscope.diff/1");
  w.kv("verdict", d.regression ? "regression" : "no-regression");
  w.kv("exit_code", d.exit_code());
  for (int side = 0; side < 2; ++side) {
    const DiffSide& s = side == 0 ? d.base : d.now;
    w.key(side == 0 ? "base" : "new").begin_object();
    w.key("files").begin_array();
    for (const auto& f : s.files) w.value(valid_utf8(f));
    w.end_array();
    w.kv("steps", s.steps);
    w.kv("steps_dropped", s.steps_dropped);
    w.kv("gpu_traced_steps", s.gpu_traced_steps);
    w.key("step_sources").begin_array();
    for (const auto& f : s.step_sources) w.value(f);
    w.end_array();
    w.kv("has_gpu", s.has_gpu);
    w.end_object();
  }
  const auto& c = d.config;
  w.key("config").begin_object();
  w.key("thresholds").begin_object();
  w.kv("step_time_median", c.step_time_median).kv("step_time_p90", c.step_time_p90);
  w.kv("gpu_busy_share", c.gpu_busy_share).kv("data_wait_share", c.data_wait_share);
  w.kv("launch_idle_share", c.launch_idle_share).kv("sync_idle_share", c.sync_idle_share);
  w.kv("kernel_regression_us", c.kernel_regression_us).kv("kernel_regression_ratio", c.kernel_regression_ratio);
  w.end_object();
  w.key("test").begin_object();
  w.kv("alpha", c.alpha).kv("skip_first_steps", c.skip_first_steps).kv("seed", c.seed);
  w.kv("bootstrap_resamples", c.bootstrap_resamples);
  w.end_object();
  w.key("report").begin_object();
  w.kv("top_kernels", c.top_kernels).kv("fail_on_new_findings", c.fail_on_new_findings);
  w.end_object();
  w.end_object();

  w.key("metrics").begin_array();
  for (const auto& m : d.metrics) {
    w.begin_object();
    w.kv("id", m.id).kv("title", m.title).kv("unit", m.relative ? "us" : "share");
    w.kv("change_kind", m.relative ? "relative" : "absolute");
    w.kv("base", m.base).kv("new", m.now).kv("change", m.change);
    w.key("ci95");
    if (m.ci_valid) {
      w.begin_array().value(m.ci_lo).value(m.ci_hi).end_array();
    } else {
      w.null();
    }
    if (!m.relative) {
      w.kv("time_change", m.time_change);
      w.kv("base_time_us", m.base_time_us).kv("new_time_us", m.new_time_us);
      w.kv("base_step_us", m.base_step_us).kv("new_step_us", m.new_step_us);
      w.key("time_ci95");
      if (m.time_ci_valid)
        w.begin_array().value(m.time_ci_lo).value(m.time_ci_hi).end_array();
      else
        w.null();
      w.kv("time_p_value", m.time_p_value);
    }
    w.kv("threshold", m.threshold).kv("exceeds_threshold", m.exceeds_threshold);
    w.kv("higher_is_worse", m.higher_is_worse);
    w.kv("tested", m.tested).kv("p_value", m.p_value).kv("p_adjusted", m.p_adjusted).kv("significant", m.significant);
    w.kv("verdict", to_string(m.verdict));
    if (!m.note.empty()) w.kv("note", m.note);
    w.end_object();
  }
  w.end_array();

  auto kernel_list = [&](const char* key, const std::vector<KernelDiff>& v, bool sampled = false) {
    w.key(key).begin_array();
    for (const auto& k : v) {
      w.begin_object();
      w.kv("name", valid_utf8(k.name));
      w.kv("base_us_per_step", k.base_us_per_step).kv("new_us_per_step", k.new_us_per_step);
      w.kv("delta_us_per_step", k.delta_us_per_step());
      w.kv("base_count_per_step", k.base_count_per_step).kv("new_count_per_step", k.new_count_per_step);
      if (sampled) w.kv("noise_us_per_step", k.noise_us_per_step);
      w.kv("fails", k.fails);
      w.end_object();
    }
    w.end_array();
  };
  w.key("kernels").begin_object();
  kernel_list("changed", d.kernel_changes);
  kernel_list("added", d.kernels_added);
  kernel_list("removed", d.kernels_removed);
  w.kv("added_total", d.kernels_added_total).kv("removed_total", d.kernels_removed_total);
  w.kv("regressions", d.kernel_regressions);
  w.end_object();
  w.key("ops").begin_object();
  kernel_list("changed", d.ops.changed);
  kernel_list("added", d.ops.added);
  kernel_list("removed", d.ops.removed);
  w.kv("added_total", d.ops.added_total).kv("removed_total", d.ops.removed_total);
  w.kv("regressions", d.ops.regressions);
  w.end_object();
  if (!d.host_functions.empty() || d.host_functions.within_noise > 0) {
    w.key("host_functions").begin_object();
    kernel_list("changed", d.host_functions.changed, true);
    kernel_list("added", d.host_functions.added, true);
    kernel_list("removed", d.host_functions.removed, true);
    w.kv("added_total", d.host_functions.added_total).kv("removed_total", d.host_functions.removed_total);
    w.kv("within_noise", d.host_functions.within_noise);
    w.end_object();
  }

  w.key("findings").begin_array();
  for (const auto& f : d.findings) {
    w.begin_object();
    w.kv("rule", f.rule).kv("status", to_string(f.status));
    w.key("base_severity");
    if (f.has_base) w.value(store::to_string(f.base_severity)); else w.null();
    w.key("new_severity");
    if (f.has_new) w.value(store::to_string(f.new_severity)); else w.null();
    w.kv("base_share", f.base_share).kv("new_share", f.new_share);
    w.kv("summary", valid_utf8(f.summary)).kv("fails", f.fails);
    w.end_object();
  }
  w.end_array();
  w.key("notes").begin_array();
  for (const auto& n : d.notes) w.value(valid_utf8(n));
  w.end_array();
  if (!d.ranks_json.empty()) w.key("ranks").raw(d.ranks_json);
  w.end_object();
  out += '\n';
  return out;
}

std::string diff_to_junit(const DiffResult& d) {
  int failures = 0, tests = 0;
  std::string cases;
  auto testcase = [&](const std::string& name, const std::string& failure_message, const std::string& failure_body,
                      const std::string& out) {
    ++tests;
    cases += fmt::format("    <testcase classname=\"stepscope.diff\" name=\"{}\" time=\"0\">\n", xml_escape(name));
    if (!failure_message.empty()) {
      ++failures;
      cases += fmt::format("      <failure type=\"regression\" message=\"{}\">{}</failure>\n", xml_escape(failure_message),
                           xml_escape(failure_body));
    }
    if (!out.empty()) cases += "      <system-out>" + xml_escape(out) + "</system-out>\n";
    cases += "    </testcase>\n";
  };
  for (const auto& m : d.metrics) {
    std::string line = metric_line(m);
    if (!m.note.empty()) line += "\nnote: " + m.note;
    if (m.verdict == Verdict::Regression)
      testcase(m.id, fmt::format("{} regressed: {} → {} ({}, threshold {})", m.title, value_str(m, m.base),
                                 value_str(m, m.now), change_str(m, m.change), threshold_str(m)),
               line, "");
    else
      testcase(m.id, "", "", line);
  }
  {
    std::string body, failing;
    for (const auto& f : d.findings) {
      body += fmt::format("{} {} (base {}, new {}): {}\n", to_string(f.status), f.rule, severity_or_dash(f.has_base, f.base_severity),
                          severity_or_dash(f.has_new, f.new_severity), f.summary);
      if (f.fails) failing += (failing.empty() ? "" : ", ") + f.rule;
    }
    if (body.empty()) body = "no findings on either side\n";
    testcase("findings", failing.empty() ? "" : "new findings: " + failing, failing.empty() ? "" : body,
             failing.empty() ? body : "");
  }
  auto level_case = [&](const char* what, const std::vector<KernelDiff>& changed, const std::vector<KernelDiff>& added,
                        const std::vector<KernelDiff>& removed, int64_t regressions) {
    std::string body, failing;
    for (const auto& k : changed) {
      body += fmt::format("changed {} per step: {} → {}  {}{}\n", signed_us(k.delta_us_per_step()),
                          fmt_us_per_step(k.base_us_per_step), fmt_us_per_step(k.new_us_per_step), k.name,
                          k.fails ? "  [fails]" : "");
      if (k.fails) failing += (failing.empty() ? "" : ", ") + shorten(k.name, 60);
    }
    for (const auto& k : added) {
      body += fmt::format("added {} per step  {}{}\n", fmt_us_per_step(k.new_us_per_step), k.name, k.fails ? "  [fails]" : "");
      if (k.fails) failing += (failing.empty() ? "" : ", ") + shorten(k.name, 60);
    }
    for (const auto& k : removed)
      body += fmt::format("removed {} per step  {}\n", fmt_us_per_step(k.base_us_per_step), k.name);
    if (body.empty()) body = fmt::format("no {}-level changes\n", std::string(what).substr(0, std::string(what).size() - 1));
    if (regressions > 0)
      testcase(what, fmt::format("{} {} grew past {:g} µs per step and {:g}%: {}", regressions, what,
                                 d.config.kernel_regression_us, 100 * d.config.kernel_regression_ratio, failing),
               body, "");
    else
      testcase(what, "", "", body);
  };
  level_case("kernels", d.kernel_changes, d.kernels_added, d.kernels_removed, d.kernel_regressions);
  level_case("ops", d.ops.changed, d.ops.added, d.ops.removed, d.ops.regressions);
  std::string props;
  props += fmt::format("      <property name=\"base\" value=\"{}\"/>\n", xml_escape(files_str(d.base)));
  props += fmt::format("      <property name=\"new\" value=\"{}\"/>\n", xml_escape(files_str(d.now)));
  props += fmt::format("      <property name=\"base_steps\" value=\"{}\"/>\n", d.base.steps);
  props += fmt::format("      <property name=\"new_steps\" value=\"{}\"/>\n", d.now.steps);
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format("<testsuites name=\"stepscope diff\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"0\">\n", tests, failures);
  o += fmt::format("  <testsuite name=\"stepscope.diff\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"0\">\n",
                   tests, failures);
  o += "    <properties>\n" + props + "    </properties>\n";
  o += cases;
  o += "  </testsuite>\n</testsuites>\n";
  return o;
}

namespace {

// Without GPU activity on either side the GPU shares are zeros compared with zeros: the text and Markdown
// tables leave them out and say so once (JSON and JUnit keep every metric, a fixed schema).
bool metric_shown(const DiffResult& d, const MetricDiff& m) {
  if (d.base.has_gpu || d.now.has_gpu) return true;
  return m.id != "gpu_busy_share" && m.id != "launch_idle_share" && m.id != "sync_idle_share";
}

constexpr const char* kNoGpuNote =
    "no GPU activity on either side: the GPU shares (busy, launch idle, sync idle) are left out";

}  // namespace

std::string diff_to_markdown(const DiffResult& d) {
  std::string o;
  o += d.regression ? "## stepscope diff: ❌ regression\n\n" : "## stepscope diff: ✅ no regression\n\n";
  o += fmt::format("**Base:** {} ({} steps)  \n**New:** {} ({} steps)\n\n", markdown_escape(files_str(d.base)), d.base.steps,
                   markdown_escape(files_str(d.now)), d.now.steps);
  o += "| Metric | Base | New | Change | 95% CI | Threshold | Test | Verdict |\n|---|---:|---:|---:|---|---:|---|---|\n";
  for (const auto& m : d.metrics) {
    if (!metric_shown(d, m)) continue;
    const char* icon = m.verdict == Verdict::Regression ? "❌ " : m.verdict == Verdict::Improvement ? "✅ " : "";
    o += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {}{} |\n", m.title, value_str(m, m.base), value_str(m, m.now),
                     change_str(m, m.change), ci_str(m), threshold_str(m), test_str(m), icon, to_string(m.verdict));
  }
  o += "\n";
  const bool no_gpu = !d.base.has_gpu && !d.now.has_gpu;
  bool any_note = !d.notes.empty() || no_gpu;
  for (const auto& m : d.metrics)
    if (!m.note.empty() && metric_shown(d, m)) {
      o += "- " + m.title + ": " + markdown_escape(m.note) + "\n";
      any_note = true;
    }
  if (no_gpu) o += std::string("- Note: ") + kNoGpuNote + "\n";
  for (const auto& n : d.notes) o += "- Note: " + markdown_escape(n) + "\n";
  if (any_note) o += "\n";

  o += "### Findings\n\n";
  if (d.findings.empty()) {
    o += "No findings on either side.\n\n";
  } else {
    o += "| Status | Rule | Base | New | Summary |\n|---|---|---|---|---|\n";
    for (const auto& f : d.findings)
      o += fmt::format("| {}{} | `{}` | {} | {} | {} |\n", f.fails ? "❌ " : "", to_string(f.status), markdown_escape(f.rule),
                       severity_or_dash(f.has_base, f.base_severity), severity_or_dash(f.has_new, f.new_severity),
                       markdown_escape(f.summary));
    o += "\n";
  }

  auto level_md = [&](const char* title, const char* noun, const std::vector<KernelDiff>& changed,
                      const std::vector<KernelDiff>& added, const std::vector<KernelDiff>& removed,
                      int64_t added_total, int64_t removed_total, const NameLevelDiff* sampled = nullptr) {
    // Sampled rows count samples, not calls, and carry their noise (two standard errors) beside the change.
    const char* counts = sampled ? "Samples / step" : "Calls / step";
    auto noise = [&](const KernelDiff& k) {
      return sampled ? " ±" + format_us(k.noise_us_per_step) : std::string();
    };
    o += fmt::format("### {} time per step\n\n", title);
    if (changed.empty() && added.empty() && removed.empty())
      o += fmt::format("No {}-level changes.\n\n", noun);
    if (!changed.empty()) {
      o += fmt::format(
          "Largest changes:\n\n| {} | Base / step | New / step | Δ / step | {} (base → new) |\n"
          "|---|---:|---:|---:|---:|\n",
          title, counts);
      for (const auto& k : changed)
        o += fmt::format("| {}{} | {} | {} | {}{} | {:.1f} → {:.1f} |\n", k.fails ? "❌ " : "",
                         markdown_escape(shorten(k.name, kNameChars)), format_us(k.base_us_per_step),
                         format_us(k.new_us_per_step), signed_us(k.delta_us_per_step()), noise(k),
                         k.base_count_per_step, k.new_count_per_step);
      o += "\n";
    }
    if (!added.empty()) {
      o += fmt::format("Added {}s ({} in all, largest shown):\n\n| {} | New / step | {} |\n|---|---:|---:|\n",
                       noun, added_total, title, counts);
      for (const auto& k : added)
        o += fmt::format("| {}{} | {}{} | {:.1f} |\n", k.fails ? "❌ " : "",
                         markdown_escape(shorten(k.name, kNameChars)), format_us(k.new_us_per_step), noise(k),
                         k.new_count_per_step);
      o += "\n";
    }
    if (!removed.empty()) {
      o += fmt::format(
          "Removed {}s ({} in all, largest shown):\n\n| {} | Base / step | {} |\n|---|---:|---:|\n", noun,
          removed_total, title, counts);
      for (const auto& k : removed)
        o += fmt::format("| {} | {}{} | {:.1f} |\n", markdown_escape(shorten(k.name, kNameChars)),
                         format_us(k.base_us_per_step), noise(k), k.base_count_per_step);
      o += "\n";
    }
    if (sampled && sampled->within_noise > 0)
      o += fmt::format(
          "{} {}{}{} changed within their sampling noise (two standard errors of their sample "
          "counts), not shown.\n\n",
          sampled->within_noise, sampled->empty() ? "" : "more ", noun,
          sampled->within_noise == 1 ? "" : "s");
  };
  level_md("Kernel", "kernel", d.kernel_changes, d.kernels_added, d.kernels_removed, d.kernels_added_total,
           d.kernels_removed_total);
  if (!d.ops.empty())
    level_md("Op", "op", d.ops.changed, d.ops.added, d.ops.removed, d.ops.added_total, d.ops.removed_total);
  if (!d.host_functions.empty() || d.host_functions.within_noise > 0)
    level_md("Host function", "host function", d.host_functions.changed, d.host_functions.added,
             d.host_functions.removed, d.host_functions.added_total, d.host_functions.removed_total,
             &d.host_functions);
  if (d.config.kernel_regression_us > 0)
    o += fmt::format("Kernels and ops fail past +{:g} µs per step and +{:g}% of their base (new ones past {:g} µs): "
                     "{} kernels, {} ops.\n\n",
                     d.config.kernel_regression_us, 100 * d.config.kernel_regression_ratio,
                     d.config.kernel_regression_us, d.kernel_regressions, d.ops.regressions);
  return o;
}

std::string diff_to_text(const DiffResult& d, int columns) {
  std::string o;
  o += fmt::format("stepscope diff: {}\n", d.regression ? "REGRESSION" : "no regression");
  o += fmt::format("  base: {} ({} steps compared)\n  new:  {} ({} steps compared)\n\n", printable(files_str(d.base)),
                   d.base.steps, printable(files_str(d.now)), d.now.steps);
  // One row a metric takes 122 columns ("improvement" its longest verdict); a narrower terminal gets the
  // statistics on a second line under each row (a row that wraps is no table).
  constexpr int kWideTable = 122;
  if (columns <= 0 || columns >= kWideTable) {
    o += fmt::format("{:<20} {:>10} {:>10} {:>9} {:>21} {:>9}  {:<24} {}\n", "metric", "base", "new",
                     "change", "95% CI", "threshold", "test", "verdict");
    for (const auto& m : d.metrics)
      if (metric_shown(d, m))
        o += fmt::format("{:<20} {:>10} {:>10} {:>9} {:>21} {:>9}  {:<24} {}\n", m.title,
                         value_str(m, m.base), value_str(m, m.now), change_str(m, m.change), ci_str(m),
                         threshold_str(m), test_str(m), to_string(m.verdict));
  } else {
    o += fmt::format("{:<20} {:>10} {:>10} {:>9}  {}\n", "metric", "base", "new", "change", "verdict");
    for (const auto& m : d.metrics)
      if (metric_shown(d, m))
        o += fmt::format("{:<20} {:>10} {:>10} {:>9}  {}\n    95% CI {}, threshold {}, {}\n", m.title,
                         value_str(m, m.base), value_str(m, m.now), change_str(m, m.change),
                         to_string(m.verdict), ci_str(m), threshold_str(m),
                         m.tested ? test_str(m) : std::string("too few steps to test"));
  }
  for (const auto& m : d.metrics)
    if (!m.note.empty() && metric_shown(d, m)) o += "note (" + m.title + "): " + m.note + "\n";
  if (!d.base.has_gpu && !d.now.has_gpu) o += std::string("note: ") + kNoGpuNote + "\n";
  for (const auto& n : d.notes) o += "note: " + printable(n) + "\n";
  if (!d.findings.empty()) {
    o += "\nFindings\n";
    // The summary whole: cut in its middle, "(35.97 ms…taLoader runs" lost the figure it was about.
    for (const auto& f : d.findings)
      o += fmt::format("  {:<12} {:<18} {:>6} → {:<6} {}{}\n", to_string(f.status), f.rule,
                       severity_or_dash(f.has_base, f.base_severity),
                       severity_or_dash(f.has_new, f.new_severity), printable(f.summary),
                       f.fails ? "  [fails]" : "");
  }
  if (!d.kernel_changes.empty() || !d.kernels_added.empty() || !d.kernels_removed.empty()) {
    o += "\nKernel time per step\n";
    for (const auto& k : d.kernel_changes)
      o += fmt::format("  changed {:>10} ({} → {})  {}{}\n", signed_us(k.delta_us_per_step()), format_us(k.base_us_per_step),
                       format_us(k.new_us_per_step), printable(shorten(k.name, kNameChars)), k.fails ? "  [fails]" : "");
    for (const auto& k : d.kernels_added)
      o += fmt::format("  added   {:>10}  {}{}\n", format_us(k.new_us_per_step), printable(shorten(k.name, kNameChars)),
                       k.fails ? "  [fails]" : "");
    for (const auto& k : d.kernels_removed)
      o += fmt::format("  removed {:>10}  {}\n", format_us(k.base_us_per_step), printable(shorten(k.name, kNameChars)));
    if (d.kernels_added_total > int64_t(d.kernels_added.size()) || d.kernels_removed_total > int64_t(d.kernels_removed.size()))
      o += fmt::format("  ({} kernels added and {} removed in all)\n", d.kernels_added_total, d.kernels_removed_total);
  }
  if (!d.ops.empty()) {
    o += "\nOp time per step\n";
    for (const auto& k : d.ops.changed)
      o += fmt::format("  changed {:>10} ({} → {})  {}{}\n", signed_us(k.delta_us_per_step()), format_us(k.base_us_per_step),
                       format_us(k.new_us_per_step), printable(shorten(k.name, kNameChars)), k.fails ? "  [fails]" : "");
    for (const auto& k : d.ops.added)
      o += fmt::format("  added   {:>10}  {}{}\n", format_us(k.new_us_per_step), printable(shorten(k.name, kNameChars)),
                       k.fails ? "  [fails]" : "");
    for (const auto& k : d.ops.removed)
      o += fmt::format("  removed {:>10}  {}\n", format_us(k.base_us_per_step), printable(shorten(k.name, kNameChars)));
  }
  if (!d.host_functions.empty() || d.host_functions.within_noise > 0) {
    // CPU runs: the training thread's self time per function, from its samples (no kernels to compare).
    // With its noise (two standard errors of the sample counts): a change within it is not listed.
    o += "\nHost function time per step (training thread, sampled)\n";
    for (const auto& k : d.host_functions.changed)
      o += fmt::format("  changed {:>10} ±{:<8} ({} → {})  {}\n", signed_us(k.delta_us_per_step()),
                       format_us(k.noise_us_per_step), format_us(k.base_us_per_step),
                       format_us(k.new_us_per_step), printable(shorten(short_symbol(k.name), kNameChars)));
    for (const auto& k : d.host_functions.added)
      o += fmt::format("  added   {:>10} ±{:<8}  {}\n", format_us(k.new_us_per_step),
                       format_us(k.noise_us_per_step), printable(shorten(short_symbol(k.name), kNameChars)));
    for (const auto& k : d.host_functions.removed)
      o += fmt::format("  removed {:>10} ±{:<8}  {}\n", format_us(k.base_us_per_step),
                       format_us(k.noise_us_per_step), printable(shorten(short_symbol(k.name), kNameChars)));
    const int64_t quiet = d.host_functions.within_noise;
    if (quiet > 0 && d.host_functions.empty())
      o += fmt::format("  no function changed beyond its sampling noise ({} within it)\n", quiet);
    else if (quiet > 0)
      o += fmt::format("  ({} more changed within their sampling noise, not shown)\n", quiet);
  }
  if (d.kernel_regressions > 0 || d.ops.regressions > 0)
    o += fmt::format("\n{} kernels and {} ops grew past +{:g} µs per step and +{:g}% of their base: the diff fails\n",
                     d.kernel_regressions, d.ops.regressions, d.config.kernel_regression_us,
                     100 * d.config.kernel_regression_ratio);
  return o;
}

}  // namespace stepscope::analyzer
