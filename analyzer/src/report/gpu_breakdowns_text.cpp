// The reports' "GPU breakdowns" section: HTA's kernel-type, launch, queue and annotation breakdowns, as tables the
// text, Markdown and HTML renderers each lay out.
#include "report/gpu_breakdowns_tables.h"

#include <fmt/format.h>

#include "report/report_util.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

using report_util::format_us;
using report_util::kJsonHint;
using report_util::printable;
using report_util::shorten;

std::vector<BreakdownTable> gpu_breakdown_tables(const GpuBreakdowns& b, size_t max_rows) {
  std::vector<BreakdownTable> out;
  if (!b.kernel_types.empty()) {
    BreakdownTable t{"Kernel types", {"type", "time", "share"}, {}, ""};
    for (const auto& k : b.kernel_types)
      t.rows.push_back({k.type, format_us(double(k.ns) / 1e3), fmt::format("{:.1f}%", k.percent)});
    out.push_back(std::move(t));
  }
  if (const LaunchStats& l = b.launch; l.count > 0) {
    BreakdownTable t{"Launches joined with their GPU work", {"", "mean", "p50", "p90", "p99", "max"}, {}, ""};
    auto row = [&t](const char* name, const Distribution& d) {
      t.rows.push_back({name, format_us(d.mean_us), format_us(d.p50_us), format_us(d.p90_us), format_us(d.p99_us),
                        format_us(d.max_us)});
    };
    row("launch call", l.cpu_duration);
    row("GPU work", l.gpu_duration);
    row("launch delay", l.launch_delay);
    t.note = fmt::format("{} launches; {} GPU ops shorter than their launch call; {} launch calls over {:g} µs; {} "
                         "launch delays over {:g} µs",
                         l.count, l.gpu_shorter_than_cpu, l.cpu_over_cutoff, LaunchStats::kRuntimeCutoffUs,
                         l.delay_over_cutoff, LaunchStats::kLaunchDelayCutoffUs);
    out.push_back(std::move(t));
  }
  if (!b.queues.empty()) {
    BreakdownTable t{"Queue length per stream (outstanding ops)", {"GPU", "stream", "mean", "median", "max", "time at max"},
                     {}, ""};
    for (size_t i = 0; i < b.queues.size() && i < max_rows; ++i) {
      const auto& q = b.queues[i];
      t.rows.push_back({std::to_string(q.device), std::to_string(q.stream), fmt::format("{:.1f}", q.mean),
                        fmt::format("{:g}", q.p50), fmt::format("{:g}{}", q.max, q.max >= 1024 ? " (full)" : ""),
                        format_us(double(q.ns_at_max) / 1e3)});
    }
    if (b.queues.size() > max_rows) t.note = fmt::format("… {} more streams (all in the JSON: {})", b.queues.size() - max_rows, kJsonHint);
    for (const auto& q : b.queues)
      if (q.max >= 1024) t.note += (t.note.empty() ? "" : "; ") + std::string("1024 outstanding ops: CUDA's launch queue "
                                                                              "is full and launches block the host");
    out.push_back(std::move(t));
  }
  if (!b.annotations.empty()) {
    BreakdownTable t{"GPU annotations", {"annotation", "count", "mean", "total"}, {}, ""};
    for (size_t i = 0; i < b.annotations.size() && i < max_rows; ++i) {
      const auto& a = b.annotations[i];
      t.rows.push_back({a.name, std::to_string(a.count), format_us(a.mean_us), format_us(a.sum_us)});
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::string render_gpu_breakdowns_text(const GpuBreakdowns& b, size_t max_rows) {
  const auto tables = gpu_breakdown_tables(b, max_rows);
  if (tables.empty()) return "";
  std::string o = "\nGPU breakdowns (Holistic Trace Analysis' definitions, whole trace)\n";
  for (const auto& t : tables) {
    o += "  " + t.title + ":";
    for (const auto& r : t.rows) {
      o += "\n   ";
      for (size_t c = 0; c < r.size(); ++c)
        o += " " + (t.head[c].empty() ? "" : t.head[c] + " ") + printable(shorten(r[c], 60)) + (c + 1 < r.size() ? "," : "");
    }
    if (!t.note.empty()) o += "\n    " + printable(t.note);
    o += "\n";
  }
  return o;
}

}  // namespace stepscope::analyzer
