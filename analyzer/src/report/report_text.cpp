// Plain-text report for a terminal: summary, a step table with a stacked bar per step, the breakdown totals,
// top kernels, top host functions during GPU idle and the findings ordered by estimated saving.
#include <fmt/format.h>

#include <algorithm>

#include "report/report_util.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

using namespace report_util;

namespace {

constexpr size_t kMaxTextSteps = 60;
constexpr int kBarWidth = 40;

std::string step_bar(const StepBreakdown& s, int64_t max_dur) {
  if (max_dur <= 0) return "";
  const int64_t parts[] = {s.gpu_busy_ns, s.launch_idle_ns, s.data_wait_ns, s.sync_idle_ns, s.other_idle_ns};
  const char glyphs[] = {'#', 'L', 'D', 'S', '.'};
  std::string bar;
  double acc = 0;
  int drawn = 0;
  for (int i = 0; i < 5; ++i) {
    acc += double(std::max<int64_t>(parts[i], 0));
    int upto = static_cast<int>(acc / double(max_dur) * kBarWidth + 0.5);
    upto = std::min(upto, kBarWidth);
    for (; drawn < upto; ++drawn) bar += glyphs[i];
  }
  return bar;
}

std::string indent_lines(const std::string& text, const std::string& prefix) {
  std::string out = prefix;
  for (char c : text) {
    out += c;
    if (c == '\n') out += prefix;
  }
  return out;
}

}  // namespace

std::string render_text_report(const Analysis& a) {
  std::string o;
  const auto& sm = a.summary;
  o += fmt::format("stepscope report: {}\n", printable(a.source_file.empty() ? "(trace)" : a.source_file));
  if (!sm.has_gpu) o += "No GPU activity in this trace: the breakdown below covers host time only.\n";
  o += fmt::format("GPU work: {} kernels, {} memcpys, {} memsets; busy {} over a span of {}\n", sm.kernels, sm.memcpys,
                   sm.memsets, format_us(sm.gpu_busy_us), format_us(sm.gpu_span_us));
  o += fmt::format("Steps: {} (source: {}); GPU busy {} of step time; data wait {}\n", sm.steps, sm.step_source,
                   format_share(sm.gpu_busy_share), format_share(sm.data_wait_share));

  if (!a.steps.empty()) {
    int64_t max_dur = 0;
    double tot[6] = {0, 0, 0, 0, 0, 0};
    for (const auto& s : a.steps) {
      max_dur = std::max(max_dur, s.dur_ns);
      tot[0] += double(s.dur_ns), tot[1] += double(s.gpu_busy_ns), tot[2] += double(s.launch_idle_ns);
      tot[3] += double(s.data_wait_ns), tot[4] += double(s.sync_idle_ns), tot[5] += double(s.other_idle_ns);
    }
    o += "\nSteps  (bar: # GPU busy, L launch idle, D data wait, S sync idle, . other idle)\n";
    o += fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {:<6}  {}\n", "step", "duration", "gpu busy",
                     "launch", "data wait", "sync", "other", "bound", "");
    size_t shown = 0;
    for (const auto& s : a.steps) {
      if (shown++ == kMaxTextSteps) {
        o += fmt::format("   … {} more steps (see --format html or json)\n", a.steps.size() - kMaxTextSteps);
        break;
      }
      o += fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {:<6}  {}\n", s.index,
                       format_us(double(s.dur_ns) / 1e3), format_us(double(s.gpu_busy_ns) / 1e3),
                       format_us(double(s.launch_idle_ns) / 1e3), format_us(double(s.data_wait_ns) / 1e3),
                       format_us(double(s.sync_idle_ns) / 1e3), format_us(double(s.other_idle_ns) / 1e3),
                       bound_name(s.bound), step_bar(s, max_dur));
    }
    if (tot[0] > 0) {
      o += fmt::format("Breakdown of {} summed step time: GPU busy {}, launch idle {}, data wait {}, sync idle {}, other {}\n",
                       format_us(tot[0] / 1e3), format_share(tot[1] / tot[0]), format_share(tot[2] / tot[0]),
                       format_share(tot[3] / tot[0]), format_share(tot[4] / tot[0]), format_share(tot[5] / tot[0]));
    }
  }

  if (!a.top_kernels.empty()) {
    o += "\nTop kernels by time\n";
    o += fmt::format("{:>10} {:>8} {:>10}  {}\n", "total", "count", "mean", "kernel");
    for (const auto& k : a.top_kernels)
      o += fmt::format("{:>10} {:>8} {:>10}  {}\n", format_us(double(k.total_ns) / 1e3), k.count,
                       format_us(k.mean_ns() / 1e3), printable(shorten(k.name, 100)));
  }

  if (!a.idle_host_top.empty()) {
    o += "\nTop CPU functions while the GPU was idle\n";
    for (const auto& f : a.idle_host_top)
      o += fmt::format("{:>10} {:>8}  {}\n", format_us(double(f.time_ns) / 1e3),
                       f.samples ? fmt::format("{} smp", f.samples) : std::string("-"), printable(shorten(f.name, 100)));
  }

  o += "\nFindings";
  if (a.findings.empty()) {
    o += ": none\n";
  } else {
    o += " (by estimated saving)\n";
    for (const auto& f : a.findings) {
      std::string sev = store::to_string(f.severity);
      std::transform(sev.begin(), sev.end(), sev.begin(), [](unsigned char c) { return char(std::toupper(c)); });
      o += fmt::format("\n[{}] {}: {}\n", sev, printable(f.rule), printable(f.summary));
      std::string steps;
      for (size_t i = 0; i < f.steps.size() && i < 20; ++i) steps += (i ? "," : "") + std::to_string(f.steps[i]);
      if (f.steps.size() > 20) steps += ",…";
      o += fmt::format("  steps: {}   est. saving: {} per step ({} of step time)\n", steps.empty() ? "-" : steps,
                       format_us(f.est_savings_us_per_step), format_share(f.share));
      if (!f.suggestion.empty()) o += "  suggestion:\n" + indent_lines(printable(f.suggestion, true), "    ") + "\n";
      if (!f.evidence_json.empty() && f.evidence_json != "{}")
        o += "  evidence:\n" + indent_lines(printable(pretty_json(f.evidence_json), true), "    ") + "\n";
    }
  }
  return o;
}

}  // namespace stepscope::analyzer
