// One self-contained HTML file: inline CSS and SVG, no script and nothing fetched from the network, so it can
// be attached to a CI run or mailed. Every string that comes from a trace goes through html_escape().
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "report/gpu_breakdowns_tables.h"
#include "report/report_util.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"

namespace stepscope::analyzer {

using namespace report_util;

namespace {

constexpr int kChartWidth = 960;
constexpr int kChartHeight = 280;
constexpr int kMarginLeft = 64, kMarginRight = 36, kMarginTop = 12, kMarginBottom = 36;
constexpr size_t kMaxBars = 400;        // more steps than this are averaged into buckets
constexpr size_t kMaxStepRows = 500;    // step table rows
constexpr size_t kHtmlNameChars = 160;  // kernel names are shortened in cells, full in a tooltip

struct Component {
  const char* key;
  const char* label;
  const char* color;
};
constexpr Component kComponents[] = {
    {"busy", "GPU busy (compute)", "#4c78a8"}, {"launch", "launch idle", "#f58518"},
    {"data", "data wait", "#e45756"},          {"sync", "sync idle", "#b279a2"},
    {"other", "other idle", "#bab0ac"},        {"host", "host code between launches", "#eeca3b"},
    {"profiler", "profiler's own cost", "#9d755d"},
};
constexpr int kParts = int(std::size(kComponents));

// Without GPU activity only the wait for input and the training thread's own work are drawn, in the host's
// words.
bool shown_without_gpu(int c) {
  return std::string_view(kComponents[c].key) == "data" || std::string_view(kComponents[c].key) == "host";
}
std::string component_label(int c, bool has_gpu) {
  if (has_gpu) return kComponents[c].label;
  return host_words(std::string_view(kComponents[c].key) == "data" ? StepPart::Input : StepPart::OwnWork);
}

const char* kCss = R"css(
:root{--fg:#1d2330;--muted:#5b6475;--line:#d9dee7;--bg:#ffffff;--panel:#f6f8fb;--high:#c0392b;--medium:#d68910;--low:#2e86c1}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
header{padding:20px 32px;border-bottom:1px solid var(--line);background:var(--panel)}
header h1{margin:0 0 4px;font-size:22px}
header .file{color:var(--muted);font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;word-break:break-all}
main{padding:8px 32px 40px;max-width:1200px}
section{margin-top:28px}
h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:var(--panel);border:1px solid var(--line);border-radius:6px;padding:10px 14px;min-width:150px}
.card .v{font-size:20px;font-weight:600}
.card .k{color:var(--muted);font-size:12px}
.notice{background:#fff4e5;border:1px solid #f0c36d;border-radius:6px;padding:8px 12px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;word-break:break-all}
.finding{border:1px solid var(--line);border-left:6px solid var(--low);border-radius:6px;padding:10px 16px;margin:14px 0;background:#fff}
.finding.high{border-left-color:var(--high)}.finding.medium{border-left-color:var(--medium)}
.finding h3{margin:0 0 6px;font-size:16px}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;color:#fff;background:var(--low);vertical-align:middle}
.badge.high{background:var(--high)}.badge.medium{background:var(--medium)}
.meta{color:var(--muted)}
pre.evidence{max-height:420px}
div.evidence table{margin:.2em 0 .6em}div.evidence th{text-align:left;font-weight:600}
pre{background:var(--panel);border:1px solid var(--line);border-radius:4px;padding:8px 10px;overflow:auto;font-size:12px;white-space:pre-wrap;word-break:break-word}
.legend{display:flex;flex-wrap:wrap;gap:14px;margin:6px 0;font-size:12px}
.legend span{display:inline-flex;align-items:center;gap:5px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px}
svg{max-width:100%;height:auto;font-family:inherit}
svg text{font-size:11px;fill:var(--muted)}
svg .axis{stroke:#9aa3b2;stroke-width:1}
svg .grid{stroke:#e6e9ef;stroke-width:1}
footer{color:var(--muted);font-size:12px;margin-top:36px}
)css";

std::string num(double v) { return fmt::format("{:.2f}", v); }

// 1-2-5 tick step covering `max` in about `target` ticks.
double nice_step(double max, int target) {
  if (max <= 0) return 1;
  double raw = max / target;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double norm = raw / mag;
  double step = norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10;
  return step * mag;
}

struct Bar {
  std::string label;   // "step 3" or "steps 10–19"
  double parts[kParts] = {};  // µs (averaged over the bucket), in kComponents order
  double total() const {
    double t = 0;
    for (double p : parts) t += p;
    return t;
  }
  double dur_us = 0;
  const char* bound = "";
};

std::string steps_chart(const Analysis& a) {
  std::vector<Bar> bars;
  size_t n = a.steps.size();
  size_t per = (n + kMaxBars - 1) / kMaxBars;
  if (per == 0) per = 1;
  for (size_t i = 0; i < n; i += per) {
    size_t j = std::min(n, i + per);
    Bar b;
    for (size_t k = i; k < j; ++k) {
      const auto& s = a.steps[k];
      b.parts[0] += double(s.gpu_busy_ns) / 1e3;
      b.parts[1] += double(s.launch_idle_ns) / 1e3;
      b.parts[2] += double(s.data_wait_ns) / 1e3;
      b.parts[3] += double(s.sync_idle_ns) / 1e3;
      b.parts[4] += double(s.other_idle_ns) / 1e3;
      b.parts[5] += double(s.host_idle_ns) / 1e3;
      b.parts[6] += double(s.profiler_ns) / 1e3;
      b.dur_us += double(s.dur_ns) / 1e3;
    }
    double cnt = double(j - i);
    for (double& p : b.parts) p = std::max(0.0, p / cnt);
    b.dur_us /= cnt;
    if (j - i == 1) {
      b.label = fmt::format("step {}", a.steps[i].index);
      b.bound = bound_name(a.steps[i].bound);
    } else {
      b.label = fmt::format("steps {}–{} (mean)", a.steps[i].index, a.steps[j - 1].index);
    }
    bars.push_back(b);
  }
  double ymax = 0;
  for (const auto& b : bars) ymax = std::max({ymax, b.total(), b.dur_us});
  if (ymax <= 0) ymax = 1;
  bool ms = ymax >= 2000;
  double unit = ms ? 1000.0 : 1.0;
  double step = nice_step(ymax / unit, 5) * unit;
  double top = std::ceil(ymax / step) * step;
  int pw = kChartWidth - kMarginLeft - kMarginRight, ph = kChartHeight - kMarginTop - kMarginBottom;
  auto y_of = [&](double us) { return kMarginTop + ph - us / top * ph; };

  std::string o;
  o += fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="per-step breakdown">)",
                   kChartWidth, kChartHeight, kChartWidth, kChartHeight);
  for (double t = 0; t <= top + step * 0.01; t += step) {
    double y = y_of(t);
    o += fmt::format(R"(<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>)", kMarginLeft, kMarginLeft + pw, num(y), num(y));
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", kMarginLeft - 6, num(y + 4),
                     html_escape(fmt::format("{:g} {}", t / unit, ms ? "ms" : "µs")));
  }
  double slot = double(pw) / double(bars.size());
  double bw = std::max(1.0, slot * 0.75);
  for (size_t i = 0; i < bars.size(); ++i) {
    const auto& b = bars[i];
    double x = kMarginLeft + slot * double(i) + (slot - bw) / 2;
    double base = 0;
    o += "<g>";
    std::string parts;
    for (int c = 0; c < kParts; ++c)
      if (a.summary.has_gpu || shown_without_gpu(c))
        parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", component_label(c, a.summary.has_gpu),
                             format_us(b.parts[c]));
    o += fmt::format("<title>{}: {} — {}{}</title>", html_escape(b.label), html_escape(format_us(b.dur_us)),
                     html_escape(parts), *b.bound ? html_escape(std::string(" — bound: ") + b.bound) : std::string());
    for (int c = 0; c < kParts; ++c) {
      double h = b.parts[c];
      if (h <= 0) continue;
      double y1 = y_of(base + h), y0 = y_of(base);
      o += fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)", num(x), num(y1), num(bw),
                       num(std::max(0.0, y0 - y1)), kComponents[c].color);
      base += h;
    }
    o += "</g>";
  }
  o += fmt::format(R"(<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>)", kMarginLeft, kMarginLeft + pw,
                   kMarginTop + ph, kMarginTop + ph);
  // x labels: a handful of step indexes.
  size_t label_every = std::max<size_t>(1, bars.size() / 12);
  for (size_t i = 0; i < bars.size(); i += label_every) {
    double x = kMarginLeft + slot * (double(i) + 0.5);
    size_t first_step = i * per;
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(x), kMarginTop + ph + 16,
                     a.steps[first_step].index);
  }
  o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">step</text>)", kMarginLeft + pw / 2, kChartHeight - 4);
  o += "</svg>";
  return o;
}

std::string utilization_chart(const Analysis& a) {
  const auto& u = a.utilization;
  int pw = kChartWidth - kMarginLeft - kMarginRight, ph = 160;
  int height = kMarginTop + ph + kMarginBottom;
  double span_us = double(a.utilization_bucket_ns) * double(u.size()) / 1e3;
  std::string o;
  o += fmt::format(R"(<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" width="{}" height="{}" role="img" aria-label="GPU utilization over time">)",
                   kChartWidth, height, kChartWidth, height);
  for (int pct = 0; pct <= 100; pct += 25) {
    double y = kMarginTop + ph - pct / 100.0 * ph;
    o += fmt::format(R"(<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>)", kMarginLeft, kMarginLeft + pw, num(y), num(y));
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}%</text>)", kMarginLeft - 6, num(y + 4), pct);
  }
  // A step line: each bucket is a flat segment at its busy fraction.
  std::string path = fmt::format("M{},{}", kMarginLeft, kMarginTop + ph);
  double bw = double(pw) / double(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    double v = std::isfinite(u[i]) ? std::clamp(u[i], 0.0, 1.0) : 0.0;
    double y = kMarginTop + ph - v * ph;
    path += fmt::format(" L{},{} L{},{}", num(kMarginLeft + bw * double(i)), num(y), num(kMarginLeft + bw * double(i + 1)), num(y));
  }
  path += fmt::format(" L{},{} Z", kMarginLeft + pw, kMarginTop + ph);
  o += fmt::format(R"(<path d="{}" fill="#4c78a8" fill-opacity="0.35" stroke="#4c78a8" stroke-width="1"/>)", path);
  o += fmt::format(R"(<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>)", kMarginLeft, kMarginLeft + pw,
                   kMarginTop + ph, kMarginTop + ph);
  bool ms = span_us >= 2000;
  double unit = ms ? 1000.0 : 1.0;
  double step = nice_step(span_us / unit, 8) * unit;
  for (double t = 0; span_us > 0 && t <= span_us + step * 0.01; t += step) {
    double x = kMarginLeft + t / span_us * pw;
    o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{}</text>)", num(x), kMarginTop + ph + 16,
                     html_escape(fmt::format("{:g} {}", t / unit, ms ? "ms" : "µs")));
  }
  o += fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">time since first GPU activity (bucket {})</text>)",
                   kMarginLeft + pw / 2, height - 4, html_escape(format_us(double(a.utilization_bucket_ns) / 1e3)));
  o += "</svg>";
  return o;
}

std::string card(const std::string& value, const std::string& key) {
  return fmt::format(R"(<div class="card"><div class="v">{}</div><div class="k">{}</div></div>)", html_escape(value),
                     html_escape(key));
}

// Steps slower than the median by more than the run's noise: what grew, the biggest contributor, and a link
// to the step's row in the step table.
std::string slow_steps_html(const Analysis& a) {
  const StepOutliers& o = a.step_outliers;
  if (o.median_ns <= 0) return "";
  auto us = [](int64_t ns) { return html_escape(format_us(double(ns) / 1e3)); };
  std::string out = fmt::format(
      "<section id=\"slow-steps\"><h2>Slow steps</h2>\n<p>{} of {} steps{} exceed the median step ({}) by more than {} "
      "(the run's noise is {}).</p>\n",
      o.slow_count, o.steps, o.gpu_time ? " (in the GPU's time)" : "", us(o.median_ns), us(o.threshold_ns),
      us(o.noise_ns));
  if (!o.slow.empty()) {
    out += "<table><thead><tr><th class=\"n\">step</th><th class=\"n\">duration</th><th class=\"n\">over median</th>"
           "<th>grew</th><th>biggest contributor</th></tr></thead><tbody>\n";
    for (const auto& s : o.slow) {
      std::string who = "—";
      if (!s.contributor.empty())
        who = fmt::format("{} <span class=\"name\" title=\"{}\">{}</span> +{}", html_escape(s.contributor_kind),
                          html_escape(full_symbol(s.contributor)), html_escape(shorten(contributor_display_name(s), kHtmlNameChars)),
                          us(s.contributor_ns - s.contributor_median_ns));
      if (s.not_running)
        who = html_escape(not_running_words(s)) + (s.contributor.empty() ? "" : "; on CPU: " + who);
      const std::string grew =
          s.category.empty() ? html_escape(grew_words(s, a.summary.has_gpu))
                             : fmt::format("{} ({} vs {})", html_escape(grew_words(s, a.summary.has_gpu)),
                                           us(s.category_ns), us(s.category_median_ns));
      out += fmt::format(
          "<tr title=\"{}\"><td class=\"n\"><a href=\"#step-{}\">{}</a></td><td class=\"n\">{}</td>"
          "<td class=\"n\">+{}</td><td>{}</td><td>{}</td></tr>\n",
          html_escape(s.explanation), s.index, s.index, us(s.dur_ns), us(s.excess_ns), grew, who);
    }
    out += "</tbody></table>\n";
    if (auto more = more_slow_steps_words(o); !more.empty()) out += "<p>" + html_escape(more) + ".</p>\n";
  }
  return out + "</section>\n";
}

}  // namespace

std::string render_html_report(const Analysis& a) {
  const auto& sm = a.summary;
  std::string file = a.source_file.empty() ? "(trace)" : a.source_file;
  std::string o;
  o.reserve(64 * 1024);
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  o += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  // No script, no fetch: the policy makes that explicit to the browser as well.
  o += "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\n";
  o += "<title>stepscope report: " + html_escape(file) + "</title>\n<style>" + kCss + "</style>\n</head>\n<body>\n";
  o += "<header><h1>stepscope report</h1><div class=\"file\">" + html_escape(file) + "</div></header>\n<main>\n";

  // Summary
  double sum_dur = 0;
  std::vector<double> durs;
  for (const auto& s : a.steps) {
    sum_dur += double(s.dur_ns);
    durs.push_back(double(s.dur_ns) / 1e3);
  }
  std::sort(durs.begin(), durs.end());
  o += "<section id=\"summary\"><h2>Summary</h2>\n";
  if (auto note = malformed_events_note(sm); !note.empty()) o += "<p class=\"notice\">" + html_escape(note) + "</p>\n";
  if (!sm.has_gpu)
    o += "<p class=\"notice\">" + html_escape(no_gpu_note(sm)) + "</p>\n";
  if (auto note = gpu_window_note(sm); !note.empty()) o += "<p class=\"notice\">" + html_escape(note) + "</p>\n";
  if (auto cp = critical_path_sentence(a.critical_path); !cp.empty()) o += "<p>" + html_escape(cp) + ".</p>\n";
  if (auto wi = what_if_sentence(a.what_if); !wi.empty()) o += "<p>" + html_escape(wi) + "</p>\n";
  if (auto note = estimate_replay_note(a); !note.empty()) o += "<p class=\"notice\">" + html_escape(note) + "</p>\n";
  if (auto note = host_ahead_note(sm); !note.empty()) o += "<p class=\"notice\">" + html_escape(note) + "</p>\n";
  if (auto note = profiler_cost_note(sm); !note.empty()) o += "<p class=\"notice\">" + html_escape(note) + "</p>\n";
  if (auto advice = steps_advice(sm); !advice.empty())
    o += "<p class=\"notice\">" + html_escape(advice) + "</p>\n";
  o += "<div class=\"cards\">";
  o += card(std::to_string(sm.steps), "steps (source: " + sm.step_source + ")");
  if (!durs.empty()) o += card(format_us(durs[durs.size() / 2]), "median step time");
  if (sm.has_gpu) {
    o += card(format_share(sm.gpu_busy_share), "GPU busy share of step time");
    o += card(format_share(sm.input_idle_share), "GPU idle waiting for input");
  }
  o += card(format_share(sm.data_wait_share), "training loop waiting for input");
  o += card(std::to_string(a.findings.size()), "findings");
  if (sm.has_gpu) {
    o += card(fmt::format("{} / {} / {}", sm.kernels, sm.memcpys, sm.memsets), "kernels / memcpys / memsets");
    o += card(format_us(sm.gpu_busy_us) + " of " + format_us(sm.gpu_span_us), "GPU busy over its span");
  } else {
    o += card("none", "GPU activity (host time only)");
  }
  o += "</div>\n";
  if (sum_dur > 0) {
    double t[kParts] = {};
    for (const auto& s : a.steps) {
      t[0] += double(s.gpu_busy_ns), t[1] += double(s.launch_idle_ns), t[2] += double(s.data_wait_ns);
      t[3] += double(s.sync_idle_ns), t[4] += double(s.other_idle_ns), t[5] += double(s.host_idle_ns);
      t[6] += double(s.profiler_ns);
    }
    o += "<p>Summed step time " + html_escape(format_us(sum_dur / 1e3)) + ": ";
    bool first = true;
    for (int c = 0; c < kParts; ++c)
      if (sm.has_gpu || shown_without_gpu(c)) {
        o += fmt::format("{}{} {}", first ? "" : ", ", html_escape(component_label(c, sm.has_gpu)),
                         html_escape(format_share(t[c] / sum_dur)));
        first = false;
      }
    o += ".</p>\n";
  }
  o += "</section>\n";

  // Findings
  o += "<section id=\"findings\"><h2>Findings</h2>\n";
  if (a.findings.empty()) o += "<p>No findings.</p>\n";
  if (auto note = warmup_share_note(a); !note.empty()) o += "<p class=\"notice\">" + html_escape(note) + "</p>\n";
  for (const auto& f : a.findings) {
    const char* sev = store::to_string(f.severity);
    o += fmt::format("<article class=\"finding {}\"><h3>{} <span class=\"badge {}\">{}</span></h3>\n", sev,
                     html_escape(f.rule), sev, sev);
    o += "<p>" + html_escape(f.summary) + "</p>\n";
    o += "<p class=\"meta\">Estimated saving: <strong>" + html_escape(format_us(f.est_savings_us_per_step)) +
         "</strong> per affected step (" + html_escape(format_share(f.share)) + " of step time)";
    if (!f.steps.empty()) {
      std::string steps;
      for (size_t i = 0; i < f.steps.size() && i < 40; ++i) steps += (i ? ", " : "") + std::to_string(f.steps[i]);
      if (f.steps.size() > 40) steps += ", …";
      o += " · steps " + html_escape(steps);
    }
    o += "</p>\n";
    if (!f.suggestion.empty()) o += "<h4>Suggestion</h4>\n<pre><code>" + html_escape(f.suggestion) + "</code></pre>\n";
    if (!f.evidence_json.empty() && f.evidence_json != "{}") {
      // Evidence a person reads (rows and small tables); the raw JSON stays, folded, beneath it.
      o += "<h4>Evidence</h4>\n<div class=\"evidence\">" + render_evidence_html(f.evidence_json) + "</div>\n";
      std::string ev = pretty_json(f.evidence_json);
      size_t lines = size_t(std::count(ev.begin(), ev.end(), '\n')) + 1;
      o += fmt::format("<details><summary>Raw evidence (JSON, {} lines)</summary><pre class=\"evidence\"><code>", lines) +
           html_escape(ev) + "</code></pre></details>\n";
    }
    o += "</article>\n";
  }
  o += "</section>\n";

  // Steps
  if (!a.steps.empty()) {
    o += "<section id=\"steps\"><h2>Per-step breakdown</h2>\n<div class=\"legend\">";
    for (int c = 0; c < kParts; ++c)
      if (sm.has_gpu || shown_without_gpu(c))
        o += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", kComponents[c].color,
                         html_escape(component_label(c, sm.has_gpu)));
    o += "</div>\n" + steps_chart(a) + "\n";
    if (sm.has_gpu)
      o += "<details><summary>Step table</summary><table><thead><tr><th class=\"n\">step</th><th "
           "class=\"n\">duration</th>"
           "<th class=\"n\">GPU busy</th><th class=\"n\">launch idle</th><th class=\"n\">host code</th><th "
           "class=\"n\">data wait</th>"
           "<th class=\"n\">sync idle</th><th class=\"n\">other idle</th><th "
           "class=\"n\">profiler</th><th>bound</th>"
           "<th class=\"n\">kernels</th></tr></thead><tbody>\n";
    else
      o += "<details><summary>Step table</summary><table><thead><tr><th class=\"n\">step</th><th "
           "class=\"n\">duration</th>"
           "<th class=\"n\">" +
           html_escape(host_words(StepPart::Input)) + "</th><th class=\"n\">" +
           html_escape(host_words(StepPart::OwnWork)) + "</th><th>bound</th></tr></thead><tbody>\n";
    // The host runs ahead: the table's rows are the steps in the GPU's time (the chart keeps the host's windows).
    const auto& rows = step_rows(a);
    if (auto note = step_rows_note(a); !note.empty()) o += "<p class=\"meta\">" + html_escape(note) + "</p>";
    // The first kMaxStepRows steps, and every slow step after them: the slow-step list links to their rows.
    std::set<int64_t> slow;
    for (const auto& s : a.step_outliers.slow) slow.insert(s.index);
    size_t shown = 0, listed = 0;
    for (const auto& s : rows) {
      if (shown++ >= kMaxStepRows && !slow.count(s.index)) continue;
      ++listed;
      if (!sm.has_gpu) {
        o += fmt::format(
            "<tr id=\"step-{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
            "<td class=\"n\">{}</td><td>{}</td></tr>\n",
            s.index, s.index, html_escape(format_us(double(s.dur_ns) / 1e3)),
            html_escape(format_us(double(s.data_wait_ns) / 1e3)),
            html_escape(format_us(double(s.host_idle_ns) / 1e3)), bound_name(s.bound));
        continue;
      }
      o += fmt::format("<tr id=\"step-{}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                       "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                       "<td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td></tr>\n",
                       s.index, s.index, html_escape(format_us(double(s.dur_ns) / 1e3)),
                       html_escape(format_us(double(s.gpu_busy_ns) / 1e3)),
                       html_escape(format_us(double(s.launch_idle_ns) / 1e3)),
                       html_escape(format_us(double(s.host_idle_ns) / 1e3)),
                       html_escape(format_us(double(s.data_wait_ns) / 1e3)),
                       html_escape(format_us(double(s.sync_idle_ns) / 1e3)),
                       html_escape(format_us(double(s.other_idle_ns) / 1e3)),
                       html_escape(format_us(double(s.profiler_ns) / 1e3)), bound_name(s.bound), s.kernels);
    }
    o += "</tbody></table>";
    if (rows.size() > listed)
      o += fmt::format("<p class=\"meta\">… {} more steps (the JSON report has them all).</p>",
                       rows.size() - listed);
    o += "</details>\n</section>\n";
  }

  o += slow_steps_html(a);

  // Utilization
  if (!a.utilization.empty() && a.utilization_bucket_ns > 0) {
    o += "<section id=\"utilization\"><h2>GPU utilization over time</h2>\n" + utilization_chart(a) + "\n</section>\n";
  }

  // Kernels
  if (!a.top_kernels.empty()) {
    o += "<section id=\"kernels\"><h2>Top kernels by time</h2>\n<table><thead><tr><th>kernel</th><th class=\"n\">total</th>"
         "<th class=\"n\">count</th><th class=\"n\">mean</th><th class=\"n\">min</th><th class=\"n\">max</th></tr></thead><tbody>\n";
    for (const auto& k : a.top_kernels) {
      o += fmt::format("<tr><td class=\"name\" title=\"{}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                       "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                       html_escape(full_symbol(k.name)), html_escape(shorten(short_symbol(k.name), kHtmlNameChars)),
                       html_escape(format_us(double(k.total_ns) / 1e3)), k.count, html_escape(format_us(k.mean_ns() / 1e3)),
                       html_escape(format_us(double(k.min_ns) / 1e3)), html_escape(format_us(double(k.max_ns) / 1e3)));
    }
    o += "</tbody></table>\n</section>\n";
  }

  if (const auto tables = gpu_breakdown_tables(a.gpu_breakdowns, 8); !tables.empty()) {
    o += "<section id=\"breakdowns\"><h2>GPU breakdowns (Holistic Trace Analysis' definitions)</h2>\n";
    for (const auto& t : tables) {
      o += "<h3>" + html_escape(t.title) + "</h3>\n<table><thead><tr>";
      for (size_t c = 0; c < t.head.size(); ++c)
        o += (c == 0 ? "<th>" : "<th class=\"n\">") + html_escape(t.head[c]) + "</th>";
      o += "</tr></thead><tbody>\n";
      for (const auto& r : t.rows) {
        o += "<tr>";
        for (size_t c = 0; c < r.size(); ++c)
          o += (c == 0 ? "<td class=\"name\" title=\"" + html_escape(r[c]) + "\">" : std::string("<td class=\"n\">")) +
               html_escape(c == 0 ? shorten(r[c], kHtmlNameChars) : r[c]) + "</td>";
        o += "</tr>\n";
      }
      o += "</tbody></table>\n";
      if (!t.note.empty()) o += "<p>" + html_escape(t.note) + "</p>\n";
    }
    o += "</section>\n";
  }

  if (!a.graphs.empty()) {
    const BreakdownTable t = graph_table_rows(a.graphs, 12);
    o += "<section id=\"graphs\"><h2>CUDA graphs</h2>\n<p>" + html_escape(graph_sentence(a.graphs)) +
         "</p>\n<table><thead><tr>";
    for (size_t c = 0; c < t.head.size(); ++c)
      o += (c + 1 == t.head.size() ? "<th>" : "<th class=\"n\">") + html_escape(t.head[c]) + "</th>";
    o += "</tr></thead><tbody>\n";
    for (const auto& r : t.rows) {
      o += "<tr>";
      for (size_t c = 0; c < r.size(); ++c)
        o += (c + 1 == r.size() ? "<td class=\"name\" title=\"" + html_escape(r[c]) + "\">" : std::string("<td class=\"n\">")) +
             html_escape(c + 1 == r.size() ? shorten(r[c], kHtmlNameChars) : r[c]) + "</td>";
      o += "</tr>\n";
    }
    o += "</tbody></table>\n";
    if (!t.note.empty()) o += "<p>" + html_escape(t.note) + "</p>\n";
    o += "</section>\n";
  }

  // Where the training thread was while the GPU waited for it (no GPU: during the steps)
  if (const auto& h = a.host_activity; !h.functions.empty() || !h.other_threads.empty()) {
    o += "<section id=\"host\"><h2>" + html_escape(host_activity_heading(h)) + "</h2>\n";
    if (auto s = host_activity_sentence(h); !s.empty()) o += "<p>" + html_escape(s) + "</p>\n";
    if (!h.functions.empty()) {
      // Samples: self time beside total (inclusive) time; ops (ranges) have their exclusive time only.
      const bool total = h.source == "samples";
      o += fmt::format(
          "<table><thead><tr><th>function</th><th class=\"n\">{}</th>{}<th "
          "class=\"n\">samples</th></tr></thead><tbody>\n",
          total ? "self" : "time", total ? "<th class=\"n\">total</th>" : "");
      for (const auto& f : h.functions)
        o += fmt::format(
            "<tr><td class=\"name\" title=\"{}\">{}{}</td><td class=\"n\">{}</td>{}<td "
            "class=\"n\">{}</td></tr>\n",
            html_escape(f.name), html_escape(shorten(short_symbol(f.name), kHtmlNameChars)),
            f.on_cpu ? "" : " (off CPU)", html_escape(format_us(double(f.time_ns) / 1e3)),
            total ? "<td class=\"n\">" + html_escape(format_us(double(f.inclusive_ns) / 1e3)) + "</td>" : "",
            f.samples);
      o += "</tbody></table>\n";
    }
    if (auto s = host_activity_others_sentence(h); !s.empty()) o += "<p>" + html_escape(s) + "</p>\n";
    o += "</section>\n";
  }

  o += "<footer>Generated by stepscope. Shares are fractions of summed step time; estimated savings are per affected step.</footer>\n";
  o += "</main>\n</body>\n</html>\n";
  return o;
}

}  // namespace stepscope::analyzer
