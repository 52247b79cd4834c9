// Markdown report sized for a GitHub Actions step summary: GFM tables only, no raw HTML, every trace-derived
// name escaped so it can neither inject markup nor break a table.
#include <fmt/format.h>

#include <algorithm>

#include "report/gpu_breakdowns_tables.h"
#include "report/report_util.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"

namespace stepscope::analyzer {

using namespace report_util;

namespace {
constexpr size_t kMaxMdSteps = 50;
constexpr size_t kMdNameChars = 90;
// What grew in each slow step against the median step (step_outliers.h).
std::string slow_steps_markdown(const Analysis& a) {
  const StepOutliers& o = a.step_outliers;
  if (o.median_ns <= 0) return "";
  auto us = [](int64_t ns) { return format_us(double(ns) / 1e3); };
  std::string out = fmt::format("### Slow steps\n\n{} of {} steps{} exceed the median step ({}) by more than {} (run noise {}).\n\n",
                                o.slow_count, o.steps, o.gpu_time ? " (in the GPU's time)" : "", us(o.median_ns),
                                us(o.threshold_ns), us(o.noise_ns));
  if (o.slow.empty()) return out;
  out += "| Step | Duration | Over median | Grew | Biggest contributor |\n|---:|---:|---:|---|---|\n";
  for (const auto& s : o.slow) {
    std::string who = "—";
    if (!s.contributor.empty())
      who = fmt::format("{} {} +{}", s.contributor_kind,
                        markdown_code_span(shorten(contributor_display_name(s), kMdNameChars), true),
                        us(s.contributor_ns - s.contributor_median_ns));
    if (s.not_running) who = not_running_words(s) + (s.contributor.empty() ? "" : "; on CPU: " + who);
    out += fmt::format("| {} | {} | +{} | {} | {} |\n", s.index, us(s.dur_ns), us(s.excess_ns),
                       markdown_escape(grew_words(s, a.summary.has_gpu)), who);
  }
  if (auto more = more_slow_steps_words(o); !more.empty()) out += "\n" + more + ".\n";
  return out + "\n";
}

// `t` as a Markdown table and its note; the column `text_column` is left-aligned, the others (numbers) right.
std::string breakdown_table_markdown(const BreakdownTable& t, size_t text_column) {
  std::string o = "|";
  for (const auto& h : t.head) o += " " + markdown_escape(h) + " |";
  o += "\n|";
  for (size_t c = 0; c < t.head.size(); ++c) o += c == text_column ? "---|" : "---:|";
  o += "\n";
  for (const auto& r : t.rows) {
    o += "|";
    for (const auto& cell : r) o += " " + markdown_escape(shorten(cell, kMdNameChars)) + " |";
    o += "\n";
  }
  o += t.note.empty() ? "\n" : "\n" + markdown_escape(t.note) + "\n\n";
  return o;
}

}  // namespace

std::string render_markdown_report(const Analysis& a) {
  std::string o;
  const auto& sm = a.summary;
  o += fmt::format("## stepscope report: {}\n\n", markdown_escape(a.source_file.empty() ? "(trace)" : a.source_file));
  if (auto note = malformed_events_note(sm); !note.empty()) o += "> " + markdown_escape(note) + "\n\n";
  if (!sm.has_gpu) o += "> " + markdown_escape(no_gpu_note(sm)) + "\n\n";
  o += "| | |\n|---|---|\n";
  o += fmt::format("| Steps | {} (source: `{}`) |\n", sm.steps, markdown_escape(sm.step_source));
  if (auto note = gpu_window_note(sm); !note.empty()) o += fmt::format("| GPU windows | {} |\n", markdown_escape(note));
  if (auto cp = critical_path_sentence(a.critical_path); !cp.empty())
    o += fmt::format("| Critical path | {} |\n", markdown_escape(cp.substr(cp.find(": ") + 2)));
  if (auto wi = what_if_sentence(a.what_if); !wi.empty())
    o += fmt::format("| What-if replay | {} |\n", markdown_escape(wi));
  if (auto note = estimate_replay_note(a); !note.empty())
    o += fmt::format("| estimate vs replay | {} |\n", markdown_escape(note));
  if (auto note = host_ahead_note(sm); !note.empty()) o += fmt::format("| host ahead | {} |\n", markdown_escape(note));
  if (auto note = profiler_cost_note(sm); !note.empty()) o += fmt::format("| profiler cost | {} |\n", markdown_escape(note));
  if (sm.has_gpu) {
    o += fmt::format("| GPU busy share of step time | {} |\n", format_share(sm.gpu_busy_share));
    o += fmt::format("| GPU idle waiting for input | {} |\n", format_share(sm.input_idle_share));
    o += fmt::format("| Training loop waiting for input | {} |\n", format_share(sm.data_wait_share));
    o += fmt::format("| GPU work | {} kernels, {} memcpys, {} memsets |\n", sm.kernels, sm.memcpys,
                     sm.memsets);
    o += fmt::format("| GPU busy / span | {} / {} |\n", format_us(sm.gpu_busy_us), format_us(sm.gpu_span_us));
  } else {
    // Host time only: the step is the loop's wait for input and its own work, in the text report's words.
    o += fmt::format("| Training loop {} | {} |\n", host_words(StepPart::Input),
                     format_share(sm.data_wait_share));
    o += fmt::format("| {} | {} |\n", capitalized(host_words(StepPart::OwnWork)),
                     format_share(1.0 - sm.data_wait_share));
  }
  o += fmt::format("| Findings | {} |\n\n", a.findings.size());
  if (auto advice = steps_advice(sm); !advice.empty()) o += "> " + markdown_escape(advice) + "\n\n";

  o += "### Findings\n\n";
  if (a.findings.empty()) {
    o += "No findings.\n\n";
  } else {
    o += "| Severity | Rule | Est. saving / affected step | Share of step time | Summary "
         "|\n|---|---|---:|---:|---|\n";
    for (const auto& f : a.findings)
      o += fmt::format("| {} | `{}` | {} | {} | {} |\n", store::to_string(f.severity), markdown_escape(f.rule),
                       format_us(f.est_savings_us_per_step), format_share(f.share), markdown_escape(f.summary));
    o += "\n";
    if (auto note = warmup_share_note(a); !note.empty()) o += markdown_escape(note) + "\n\n";
    for (const auto& f : a.findings) {
      o += fmt::format("#### `{}` ({})\n\n{}\n\n", markdown_escape(f.rule), store::to_string(f.severity),
                       markdown_escape(f.summary));
      if (!f.steps.empty()) {
        std::string steps;
        for (size_t i = 0; i < f.steps.size() && i < 30; ++i) steps += (i ? ", " : "") + std::to_string(f.steps[i]);
        if (f.steps.size() > 30) steps += ", …";
        o += "Steps: " + steps + "\n\n";
      }
      if (!f.suggestion.empty()) {
        std::string s = valid_utf8(f.suggestion);
        std::string fence = code_fence_for(s);
        o += "Suggestion:\n\n" + fence + "\n" + s + "\n" + fence + "\n\n";
      }
      if (!f.evidence_json.empty() && f.evidence_json != "{}") {
        o += "Evidence:\n\n" + render_evidence_markdown(f.evidence_json) + "\n";
      }
    }
  }

  if (!a.steps.empty()) {
    // The host runs ahead: the rows are the steps in the GPU's time.
    const auto& rows = step_rows(a);
    o += "### Steps\n\n";
    if (auto note = step_rows_note(a); !note.empty()) o += note + "\n\n";
    if (sm.has_gpu)
      o += "| Step | Duration | GPU busy | Launch idle | Host code | Data wait | Sync idle | Other idle | "
           "Profiler | Bound |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
    else
      o += fmt::format("| Step | Duration | {} | {} | Bound |\n|---:|---:|---:|---:|---|\n",
                       capitalized(host_words(StepPart::Input)), capitalized(host_words(StepPart::OwnWork)));
    size_t shown = 0;
    for (const auto& s : rows) {
      if (shown++ == kMaxMdSteps) break;
      if (!sm.has_gpu) {
        o += fmt::format("| {} | {} | {} | {} | {} |\n", s.index, format_us(double(s.dur_ns) / 1e3),
                         format_us(double(s.data_wait_ns) / 1e3), format_us(double(s.host_idle_ns) / 1e3),
                         bound_name(s.bound));
        continue;
      }
      o += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", s.index, format_us(double(s.dur_ns) / 1e3),
                       format_us(double(s.gpu_busy_ns) / 1e3), format_us(double(s.launch_idle_ns) / 1e3),
                       format_us(double(s.host_idle_ns) / 1e3), format_us(double(s.data_wait_ns) / 1e3),
                       format_us(double(s.sync_idle_ns) / 1e3), format_us(double(s.other_idle_ns) / 1e3),
                       format_us(double(s.profiler_ns) / 1e3), bound_name(s.bound));
    }
    if (rows.size() > kMaxMdSteps) o += fmt::format("\n… and {} more steps.\n", rows.size() - kMaxMdSteps);
    o += "\n";
  }

  o += slow_steps_markdown(a);

  if (!a.top_kernels.empty()) {
    o += "### Top kernels by time\n\n| Kernel | Total | Count | Mean |\n|---|---:|---:|---:|\n";
    for (const auto& k : a.top_kernels)
      o += fmt::format("| {} | {} | {} | {} |\n", markdown_escape(shorten(short_symbol(k.name), kMdNameChars)),
                       format_us(double(k.total_ns) / 1e3), k.count, format_us(k.mean_ns() / 1e3));
    o += "\n";
  }
  if (const auto tables = gpu_breakdown_tables(a.gpu_breakdowns, 8); !tables.empty()) {
    o += "### GPU breakdowns (Holistic Trace Analysis' definitions)\n\n";
    for (const auto& t : tables) {
      o += "**" + markdown_escape(t.title) + "**\n\n" + breakdown_table_markdown(t, 0);
    }
  }
  if (!a.graphs.empty()) {
    const BreakdownTable t = graph_table_rows(a.graphs, 12);
    o += "### CUDA graphs\n\n" + markdown_escape(graph_sentence(a.graphs)) + "\n\n" +
         breakdown_table_markdown(t, t.head.size() - 1);
  }
  if (const auto& h = a.host_activity; !h.functions.empty() || !h.other_threads.empty()) {
    o += "### " + host_activity_heading(h) + "\n\n";
    if (auto s = host_activity_sentence(h); !s.empty()) o += markdown_escape(s) + "\n\n";
    if (!h.functions.empty()) {
      // Samples: self time beside total (inclusive) time; ops (ranges) have their exclusive time only.
      const bool total = h.source == "samples";
      o += total ? "| Function | Self | Total | Samples |\n|---|---:|---:|---:|\n" : "| Function | Time | Samples |\n|---|---:|---:|\n";
      for (const auto& f : h.functions)
        o += fmt::format("| {}{} | {}{} | {} |\n", markdown_escape(shorten(short_symbol(f.name), kMdNameChars)),
                         f.on_cpu ? "" : " (off CPU)", format_us(double(f.time_ns) / 1e3),
                         total ? " | " + format_us(double(f.inclusive_ns) / 1e3) : "", f.samples);
      o += "\n";
    }
    if (auto s = host_activity_others_sentence(h); !s.empty()) o += markdown_escape(s) + "\n\n";
  }
  return o;
}

}  // namespace stepscope::analyzer
