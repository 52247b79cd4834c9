// The text report's "GPU breakdowns" section: HTA's kernel-type, launch, queue and annotation breakdowns.
#include <fmt/format.h>

#include "report/report_util.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

using report_util::format_us;
using report_util::printable;
using report_util::shorten;

std::string render_gpu_breakdowns_text(const GpuBreakdowns& b, size_t max_rows) {
  if (b.empty()) return "";
  std::string o = "\nGPU breakdowns (Holistic Trace Analysis' definitions, whole trace)\n";
  if (!b.kernel_types.empty()) {
    o += "  kernel types:";
    for (const auto& k : b.kernel_types)
      o += fmt::format(" {} {} ({:.1f}%);", k.type, format_us(double(k.ns) / 1e3), k.percent);
    o.back() = '\n';
  }
  if (const LaunchStats& l = b.launch; l.count > 0) {
    o += fmt::format("  {} launches joined with their GPU work: launch call mean {} (p90 {}), GPU work mean {} (p90 {}), "
                     "launch delay mean {} (p90 {}, max {})\n",
                     l.count, format_us(l.cpu_duration.mean_us), format_us(l.cpu_duration.p90_us),
                     format_us(l.gpu_duration.mean_us), format_us(l.gpu_duration.p90_us),
                     format_us(l.launch_delay.mean_us), format_us(l.launch_delay.p90_us),
                     format_us(l.launch_delay.max_us));
    o += fmt::format("  {} GPU ops shorter than their launch call; {} launch calls over {:g} µs; {} launch delays over "
                     "{:g} µs\n",
                     l.gpu_shorter_than_cpu, l.cpu_over_cutoff, LaunchStats::kRuntimeCutoffUs, l.delay_over_cutoff,
                     LaunchStats::kLaunchDelayCutoffUs);
  }
  size_t shown = 0;
  for (const auto& q : b.queues) {
    if (shown++ == max_rows) {
      o += fmt::format("  … {} more streams (see --format json)\n", b.queues.size() - max_rows);
      break;
    }
    o += fmt::format("  queue on GPU {} stream {}: mean {:.1f}, median {:g}, max {:g} outstanding ops ({} at the "
                     "max){}\n",
                     q.device, q.stream, q.mean, q.p50, q.max, format_us(double(q.ns_at_max) / 1e3),
                     q.max >= 1024 ? " — CUDA's launch queue is full: launches block the host" : "");
  }
  shown = 0;
  for (const auto& a : b.annotations) {
    if (shown++ == max_rows) break;
    o += fmt::format("  GPU annotation {}: {} × {} = {}\n", printable(shorten(a.name, 60)), a.count,
                     format_us(a.mean_us), format_us(a.sum_us));
  }
  return o;
}

}  // namespace stepscope::analyzer
