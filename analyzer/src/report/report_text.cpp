// Plain-text report for a terminal: summary, a step table with a stacked bar per step, the breakdown totals,
// top kernels, top host functions during GPU idle and the findings ordered by estimated saving.
#include <fmt/format.h>

#include <algorithm>

#include "report/report_util.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"

namespace stepscope::analyzer {

using namespace report_util;

namespace {

constexpr size_t kMaxTextSteps = 60;

std::string step_bar(const StepBreakdown& s, int64_t max_dur, int width) {
  if (max_dur <= 0 || width <= 0) return "";
  const int64_t parts[] = {s.gpu_busy_ns,  s.launch_idle_ns, s.host_idle_ns, s.data_wait_ns,
                           s.sync_idle_ns, s.other_idle_ns,  s.profiler_ns};
  const char glyphs[] = {'#', 'L', 'H', 'D', 'S', '.', 'P'};
  std::string bar;
  double acc = 0;
  int drawn = 0;
  for (int i = 0; i < 7; ++i) {
    acc += double(std::max<int64_t>(parts[i], 0));
    int upto = static_cast<int>(acc / double(max_dur) * width + 0.5);
    upto = std::min(upto, width);
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

int step_bar_width(int figures, int columns) {
  constexpr int kBarWidth = 40, kNarrowestBar = 10;
  if (columns <= 0) return kBarWidth;
  return columns - figures >= kNarrowestBar ? std::min(kBarWidth, columns - figures) : 0;
}

std::string bound_and_bar(std::string_view bound, std::string_view bar) {
  return bar.empty() ? std::string(bound) : fmt::format("{:<6}  {}", bound, bar);
}

// Steps slower than the median by more than the run's noise, one line each on what grew (step_outliers.h).
std::string render_slow_steps_text(const Analysis& a) {
  const StepOutliers& o = a.step_outliers;
  if (o.median_ns <= 0) return "";
  std::string out = fmt::format("\nSlow steps{}: {} of {} steps exceed the median step ({}) by more than {} (run noise {})\n",
                                o.gpu_time ? " (in the GPU's time)" : "", o.slow_count, o.steps,
                                format_us(double(o.median_ns) / 1e3),
                                format_us(double(o.threshold_ns) / 1e3), format_us(double(o.noise_ns) / 1e3));
  for (const auto& s : o.slow) out += "  " + printable(s.explanation) + "\n";
  if (auto more = more_slow_steps_words(o); !more.empty()) out += "  … " + more + "\n";
  return out;
}

std::string render_text_report(const Analysis& a, int columns) {
  std::string o;
  const auto& sm = a.summary;
  o += fmt::format("stepscope report: {}\n", printable(a.source_file.empty() ? "(trace)" : a.source_file));
  if (auto note = malformed_events_note(sm); !note.empty()) o += note + "\n";
  if (!sm.has_gpu) o += no_gpu_note(sm) + "\n";
  const std::string confidence =
      sm.step_source == "periodic" ? fmt::format(", confidence {}", format_share(sm.step_confidence)) : "";
  if (sm.has_gpu) {
    o += fmt::format("GPU work: {} kernels, {} memcpys, {} memsets; busy {} over a span of {}\n", sm.kernels, sm.memcpys,
                     sm.memsets, format_us(sm.gpu_busy_us), format_us(sm.gpu_span_us));
    o += fmt::format("Steps: {} (source: {}{}); GPU busy {} of step time; GPU idle waiting for input {} (the training "
                     "loop waited {})\n",
                     sm.steps, sm.step_source, confidence, format_share(sm.gpu_busy_share),
                     format_share(sm.input_idle_share), format_share(sm.data_wait_share));
  } else {
    o += fmt::format("Steps: {} (source: {}{}); the training loop waited for input {} of step time and ran its own "
                     "work the rest\n",
                     sm.steps, sm.step_source, confidence, format_share(sm.data_wait_share));
  }
  if (auto note = gpu_window_note(sm); !note.empty()) o += note + "\n";
  if (auto advice = steps_advice(sm); !advice.empty()) o += advice + "\n";
  if (auto note = host_ahead_note(sm); !note.empty()) o += note + "\n";
  if (auto note = profiler_cost_note(sm); !note.empty()) o += note + "\n";

  if (!a.steps.empty()) {
    int64_t max_dur = 0;
    double tot[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t traced = 0;
    for (const auto& s : a.steps) {
      max_dur = std::max(max_dur, s.dur_ns);
      if (sm.has_gpu && !s.gpu_traced) continue;  // its GPU side is unknown
      ++traced;
      tot[0] += double(s.dur_ns), tot[1] += double(s.gpu_busy_ns), tot[2] += double(s.launch_idle_ns);
      tot[3] += double(s.data_wait_ns), tot[4] += double(s.sync_idle_ns), tot[5] += double(s.other_idle_ns);
      tot[6] += double(s.host_idle_ns), tot[7] += double(s.profiler_ns);
    }
    // The host runs ahead: its step windows are not the program's pace; the rows are the steps in the GPU's time.
    const auto& rows = step_rows(a);
    for (const auto& s : rows) max_dur = std::max(max_dur, s.dur_ns);
    if (auto note = step_rows_note(a); !note.empty()) o += "\n" + note;
    const int bar = step_bar_width(sm.has_gpu ? 93 : 49, columns);
    if (bar == 0) {
      o += "\nSteps\n";
    } else if (sm.has_gpu) {
      o += "\nSteps  (bar: # GPU busy, L launch idle, H host code between launches, D data wait, S sync idle, . other "
           "idle, P profiler cost)\n";
    } else {
      o += fmt::format("\nSteps  (bar: D {}, H {})\n", host_words(StepPart::Input),
                       host_words(StepPart::OwnWork));
    }
    if (sm.has_gpu) {
      o += fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {:<6}  {}\n", "step", "duration",
                       "gpu busy", "launch", "host", "data wait", "sync", "other", "bound", "");
    } else {
      o += fmt::format("{:>6} {:>10} {:>10} {:>10}  {:<6}  {}\n", "step", "duration", "input wait", "own work", "bound", "");
    }
    size_t shown = 0;
    for (const auto& s : rows) {
      if (shown++ == kMaxTextSteps) {
        o += fmt::format("   … {} more steps (see --format html or json)\n", rows.size() - kMaxTextSteps);
        break;
      }
      if (!sm.has_gpu) {
        o += fmt::format("{:>6} {:>10} {:>10} {:>10}  {}\n", s.index, format_us(double(s.dur_ns) / 1e3),
                         format_us(double(s.data_wait_ns) / 1e3), format_us(double(s.host_idle_ns) / 1e3),
                         bound_and_bar(bound_name(s.bound), step_bar(s, max_dur, bar)));
        continue;
      }
      o += fmt::format("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {}\n", s.index,
                       format_us(double(s.dur_ns) / 1e3), format_us(double(s.gpu_busy_ns) / 1e3),
                       format_us(double(s.launch_idle_ns) / 1e3), format_us(double(s.host_idle_ns) / 1e3),
                       format_us(double(s.data_wait_ns) / 1e3), format_us(double(s.sync_idle_ns) / 1e3),
                       format_us(double(s.other_idle_ns) / 1e3),
                       bound_and_bar(bound_name(s.bound), step_bar(s, max_dur, bar)));
    }
    if (tot[0] > 0 && !sm.has_gpu) {
      o += fmt::format("Breakdown of {} summed step time: {} {}, {} {}\n", format_us(tot[0] / 1e3),
                       host_words(StepPart::Input), format_share(tot[3] / tot[0]),
                       host_words(StepPart::OwnWork), format_share(tot[6] / tot[0]));
    } else if (tot[0] > 0) {
      o += fmt::format("Breakdown of {} summed time of {}: GPU busy {}, launch idle {}, host code between launches {}, "
                       "data wait {}, sync idle {}, other {}, profiler cost {}\n",
                       format_us(tot[0] / 1e3),
                       traced < a.steps.size() ? fmt::format("the {} GPU-traced steps", traced) : std::string("the steps"),
                       format_share(tot[1] / tot[0]), format_share(tot[2] / tot[0]),
                       format_share(tot[6] / tot[0]), format_share(tot[3] / tot[0]), format_share(tot[4] / tot[0]),
                       format_share(tot[5] / tot[0]), format_share(tot[7] / tot[0]));
    }
  }

  o += render_slow_steps_text(a);

  if (!a.top_kernels.empty()) {
    o += "\nTop kernels by time\n";
    o += fmt::format("{:>10} {:>8} {:>10}  {}\n", "total", "count", "mean", "kernel");
    for (const auto& k : a.top_kernels)
      o += fmt::format("{:>10} {:>8} {:>10}  {}\n", format_us(double(k.total_ns) / 1e3), k.count,
                       format_us(k.mean_ns() / 1e3), printable(shorten(short_symbol(k.name), 100)));
  }

  o += render_gpu_breakdowns_text(a.gpu_breakdowns, 8);
  o += render_graphs_text(a.graphs, 12);
  o += render_critical_path_text(a.critical_path);
  if (auto wi = what_if_sentence(a.what_if); !wi.empty()) o += "\nWhat-if replay\n" + wi + "\n";
  if (auto note = estimate_replay_note(a); !note.empty()) o += note + "\n";
  o += render_host_activity_text(a.host_activity, 15);

  o += "\nFindings";
  if (a.findings.empty()) {
    o += ": none\n";
  } else {
    o += " (by estimated saving)\n";
    if (auto note = warmup_share_note(a); !note.empty()) o += note + "\n";
    for (const auto& f : a.findings) {
      std::string sev = store::to_string(f.severity);
      std::transform(sev.begin(), sev.end(), sev.begin(), [](unsigned char c) { return char(std::toupper(c)); });
      o += fmt::format("\n[{}] {}: {}\n", sev, printable(f.rule), printable(f.summary));
      const std::string steps = compact_step_list(f.steps);
      o += fmt::format("  steps: {}   est. saving: {} per affected step ({} of step time)\n",
                       steps.empty() ? "-" : steps, format_us(f.est_savings_us_per_step),
                       format_share(f.share));
      if (!f.suggestion.empty()) o += "  suggestion:\n" + indent_lines(printable(f.suggestion, true), "    ") + "\n";
      if (!f.evidence_json.empty() && f.evidence_json != "{}")
        o += "  evidence:\n" + render_evidence_text(f.evidence_json, "    ");
    }
  }
  return o;
}

namespace {
const char* path_kind_words(PathKind k) {
  switch (k) {
    case PathKind::GpuCompute: return "GPU compute";
    case PathKind::GpuComm: return "GPU communication";
    case PathKind::GpuMemory: return "GPU copies and memsets";
    case PathKind::Launch: return "launches";
    case PathKind::Host: return "host code";
    case PathKind::DataWait: return "waiting for data";
    case PathKind::Sync: return "syncs";
    case PathKind::Other: return "other waits";
  }
  return "other";
}
}  // namespace

std::string critical_path_sentence(const CriticalPaths& cp) {
  if (cp.steps.empty() || cp.total_ns <= 0) return {};
  std::vector<int> order;
  for (int k = 0; k < kPathKinds; ++k)
    if (double(cp.ns[k]) >= 0.005 * double(cp.total_ns)) order.push_back(k);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return cp.ns[x] > cp.ns[y]; });
  std::string parts;
  for (int k : order)
    parts += (parts.empty() ? "" : ", ") +
             fmt::format("{} {}", path_kind_words(PathKind(k)), format_share(double(cp.ns[k]) / double(cp.total_ns)));
  return fmt::format("Critical path over the steady GPU-traced steps ({} of step time): {}", format_us(double(cp.total_ns) / 1e3),
                     parts);
}

std::string render_critical_path_text(const CriticalPaths& cp) {
  const std::string sentence = critical_path_sentence(cp);
  if (sentence.empty()) return {};
  std::string o = "\nCritical path\n" + sentence + "\n";
  const CriticalPath* slowest = nullptr;
  int64_t slowest_ns = -1;
  for (const auto& p : cp.steps) {
    int64_t d = 0;
    for (int64_t v : p.ns) d += v;
    if (d > slowest_ns) slowest = &p, slowest_ns = d;
  }
  if (slowest && !slowest->longest.empty()) {
    o += fmt::format("Longest stretches of the slowest step ({}, {}):\n", slowest->step, format_us(double(slowest_ns) / 1e3));
    for (const auto& sg : slowest->longest)
      o += fmt::format("  {:>10}  {:<22}  {}\n", format_us(double(sg.end - sg.start) / 1e3), path_kind_words(sg.kind),
                       printable(shorten(short_symbol(sg.what), 90)));
  }
  return o;
}

std::string what_if_sentence(const WhatIf& w) {
  if (w.empty()) return {};
  std::string o = fmt::format("Replayed over {} steady GPU-traced steps, the step takes {} unchanged ({} as recorded, "
                              "the profiler's launch cost removed)",
                              w.steps, format_us(w.replayed_step_us), format_us(w.recorded_step_us));
  for (const auto& c : w.cures)
    o += fmt::format("; {} {} ({}: saves {})", cure_phrase(c.cure), format_us(c.step_us), c.rule,
                     format_us(std::max(0.0, c.saving_us)));
  if (w.cures.size() > 1) o += fmt::format("; every cure at once {}", format_us(w.combined_step_us));
  return o + ".";
}

}  // namespace stepscope::analyzer
