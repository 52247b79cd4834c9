// The host activity in words: the same heading and sentences in the terminal, Markdown and HTML.
#include <fmt/format.h>

#include "report/report_util.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

using namespace report_util;

namespace {

std::string ms_of(int64_t ns) { return format_us(double(ns) / 1e3); }

std::string thread_label(const std::string& name, int64_t pid, int64_t tid) {
  return fmt::format("{}(pid {}, tid {})", name.empty() ? "" : printable(name) + " ", pid, tid);
}

}  // namespace

std::string host_activity_heading(const HostActivity& h) {
  if (h.source == "ranges")  // no GPU work (window "steps"): no thread launched any
    return h.window == "steps" ? "Ops on the training threads during the steps"
                               : "Ops on the launching threads while the GPU waited for the host";
  return h.window == "steps" ? "Where the training thread spent the steps"
                             : "What the training thread ran while the GPU waited for the host";
}

std::string host_activity_sentence(const HostActivity& h) {
  const std::string in = h.window == "steps" ? fmt::format("in {} of steps", ms_of(h.window_ns))
                                             : fmt::format("in the {} the GPU waited for the host", ms_of(h.window_ns));
  if (h.source == "ranges")
    return fmt::format("Exclusive time of the innermost op or annotation on the {}, {}.",
                       h.window == "steps" ? "threads that run the steps" : "threads that launch GPU work",
                       in);
  if (h.source != "samples") return {};
  if (h.tid == 0)
    return fmt::format("No thread of the program ran the steps on CPU {}: the other threads' time follows.", in);
  std::string s = fmt::format("Training thread {} ({}): {} on CPU", thread_label(h.thread_name, h.pid, h.tid),
                              h.thread_reason, ms_of(h.on_cpu_ns));
  s += h.wall ? fmt::format(", {} off CPU (blocked)", ms_of(h.off_cpu_ns))
              : fmt::format(", {} not on CPU (blocked or waiting; `record --wall` shows where)", ms_of(h.off_cpu_ns));
  s += fmt::format(" {}; one sample = {} ({}).", in, ms_of(h.sample_period_ns), h.period_source);
  return s;
}

std::string host_activity_others_sentence(const HostActivity& h, size_t max_threads) {
  if (h.other_threads.empty()) return {};
  std::string s = "Other threads on CPU in the same window (not the training thread's time): ";
  for (size_t i = 0; i < h.other_threads.size() && i < max_threads; ++i) {
    const auto& o = h.other_threads[i];
    s += (i ? "; " : "") + thread_label(o.name, o.pid, o.tid) + (o.other_process ? ", another process" : "") + " " +
         ms_of(o.on_cpu_ns);
  }
  if (h.other_threads.size() > max_threads) s += fmt::format("; {} more", h.other_threads.size() - max_threads);
  return s + ".";
}

std::string render_host_activity_text(const HostActivity& h, size_t max_rows) {
  if (h.functions.empty() && h.other_threads.empty()) return {};
  std::string o = "\n" + host_activity_heading(h) + " (full names in the JSON: " + kJsonHint + ")\n";
  if (auto s = host_activity_sentence(h); !s.empty()) o += "  " + s + "\n";
  // Samples have stacks: self time (the innermost function) beside total time (anywhere on the stack).
  const bool total = h.source == "samples";
  if (total && !h.functions.empty()) o += fmt::format("  {:>10}  {:>10}  function\n", "self", "total");
  for (size_t i = 0; i < h.functions.size() && i < max_rows; ++i) {
    const auto& f = h.functions[i];
    const std::string times = total ? fmt::format("{:>10}  {:>10}", ms_of(f.time_ns), ms_of(f.inclusive_ns))
                                    : fmt::format("{:>10}", ms_of(f.time_ns));
    o += fmt::format("  {}  {}{}\n", times, printable(shorten(short_symbol(f.name), 100)),
                     f.on_cpu ? "" : "  (off CPU)");
  }
  if (auto s = host_activity_others_sentence(h); !s.empty()) o += "  " + s + "\n";
  return o;
}

}  // namespace stepscope::analyzer
