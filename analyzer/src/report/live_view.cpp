#include "stepscope/analyzer/live_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "stepscope/analyzer/display_names.h"

namespace stepscope::analyzer {
namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

std::string fit(std::string s, size_t width) {
  if (s.size() > width && width > 1) s = s.substr(0, width - 1) + "~";
  return s;
}

const char* severity_name(store::Severity s) {
  switch (s) {
    case store::Severity::High:
      return "high";
    case store::Severity::Medium:
      return "medium";
    default:
      return "low";
  }
}

}  // namespace

LiveView live_view(const store::Trace& t, const Analysis& a, size_t max_rows) {
  LiveView v;
  const auto& s = a.summary;
  v.step_source = s.step_source;
  v.has_gpu = s.has_gpu;
  v.gpu_busy_share = s.gpu_busy_share;
  v.data_wait_share = s.data_wait_share;
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& x : t.samples) {
    lo = std::min(lo, x.time);
    hi = std::max(hi, x.time);
  }
  std::vector<double> durs;
  int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& st : a.steps) {
    durs.push_back(double(st.dur_ns) / 1e6);
    first = std::min(first, st.start_ns);
    last = std::max(last, st.start_ns + st.dur_ns);
  }
  if (!durs.empty()) {
    lo = std::min(lo, first);
    hi = std::max(hi, last);
  }
  v.window_s = hi > lo ? double(hi - lo) / 1e9 : 0;
  v.steps = int64_t(a.steps.size());
  if (v.steps > 1 && last > first) v.steps_per_s = double(v.steps) / (double(last - first) / 1e9);
  v.step_p50_ms = percentile(durs, 0.5);
  v.step_p95_ms = percentile(durs, 0.95);
  if (a.steps.empty()) v.note = steps_advice(s);

  const HostActivity& h = a.host_activity;
  if (h.tid)
    v.thread = fmt::format("{} (pid {}, tid {})", h.thread_name.empty() ? "?" : h.thread_name, h.pid, h.tid);
  int64_t total = 0;
  for (const auto& f : h.functions) total += f.time_ns;
  for (const auto& f : h.functions) {
    if (v.functions.size() >= max_rows || total <= 0) break;
    if (f.time_ns <= 0) continue;  // a caller listed for its total time only: top shows self time
    v.functions.push_back({f.name, double(f.time_ns) / double(total), f.on_cpu});
  }

  // The innermost Python line of each of the training thread's samples. The collector's own Python (its start-up
  // after an attach, the step trampolines, the hooks' code) is the profiler's time, left out as the host
  // functions above leave it out: a user must not read "hooks_bootstrap.py:42" as a line of the trainer.
  if (h.tid) {
    std::unordered_map<int64_t, size_t> stack_at, frame_at;
    for (size_t i = 0; i < t.stacks.size(); ++i) stack_at[t.stacks[i].id] = i;
    for (size_t i = 0; i < t.frames.size(); ++i) frame_at[t.frames[i].id] = i;
    constexpr int64_t kNoLine = 0, kProfilers = -1;
    std::unordered_map<int64_t, int64_t> line_of_stack;  // stack id → frame id of its innermost Python frame
    std::map<std::pair<std::string, bool>, int64_t> counts;
    int64_t n = 0;
    for (const auto& x : t.samples) {
      if (x.pid != h.pid || x.tid != h.tid || !x.stack) continue;
      auto [it, fresh] = line_of_stack.try_emplace(x.stack, kNoLine);
      if (fresh) {
        for (int64_t id = x.stack, guard = 0; id && guard < 4096; ++guard) {
          auto sa = stack_at.find(id);
          if (sa == stack_at.end()) break;
          const auto& node = t.stacks[sa->second];
          id = node.parent;
          auto fa = frame_at.find(node.frame);
          if (fa == frame_at.end()) continue;
          const store::Frame& f = t.frames[fa->second];
          if (is_profiler_owned_python_frame(t, f)) {
            it->second = kProfilers;
            break;
          }
          if (f.kind == store::FrameKind::Python && it->second == kNoLine)
            it->second = is_profiler_python_frame(t, f) ? kProfilers : node.frame;
        }
      }
      if (it->second == kProfilers) continue;
      n += x.periods;
      if (it->second == kNoLine) continue;
      const auto& f = t.frames[frame_at[it->second]];
      counts[{frame_display_name(t, f), x.on_cpu}] += x.periods;
    }
    std::vector<LiveLine> lines;
    for (const auto& [k, c] : counts) lines.push_back({k.first, n ? double(c) / double(n) : 0, k.second});
    std::sort(lines.begin(), lines.end(),
              [](const LiveLine& x, const LiveLine& y) { return x.share > y.share; });
    if (lines.size() > max_rows) lines.resize(max_rows);
    v.python_lines = std::move(lines);
  }

  for (const auto& f : a.findings)
    // The saving before the summary: a line cut at the terminal's edge kept the words and lost the figure.
    v.findings.push_back(fmt::format("[{}] {} ~{:.2f} ms per affected step: {}", severity_name(f.severity),
                                     f.rule, f.est_savings_us_per_step / 1000.0, f.summary));
  return v;
}

std::string render_live_view(const LiveView& v, const std::string& title, int width) {
  const size_t w = size_t(std::max(40, width));
  std::string out;
  auto line = [&](const std::string& s) { out += fit(s, w) + "\n"; };
  line(title);
  line(fmt::format("window {:.1f} s  {} steps ({})  {:.2f}/s  step p50 {:.2f} ms  p95 {:.2f} ms", v.window_s,
                   v.steps, v.step_source, v.steps_per_s, v.step_p50_ms, v.step_p95_ms));
  if (v.has_gpu)
    line(
        fmt::format("GPU busy {:.1f}%   data wait {:.1f}%", 100 * v.gpu_busy_share, 100 * v.data_wait_share));
  else
    line(fmt::format("GPU busy -- (no GPU activity traced)   data wait {:.1f}%", 100 * v.data_wait_share));
  if (!v.note.empty()) line(v.note);
  line("");
  line("Top host functions" + (v.thread.empty() ? std::string() : " of the training thread " + v.thread));
  if (v.functions.empty()) line("  (no samples yet)");
  for (const auto& f : v.functions)
    line(fmt::format("  {:5.1f}%  {}{}", 100 * f.share, f.name, f.on_cpu ? "" : "  (off CPU)"));
  line("");
  line("Top Python lines");
  if (v.python_lines.empty()) line("  (no Python frames)");
  for (const auto& f : v.python_lines)
    line(fmt::format("  {:5.1f}%  {}{}", 100 * f.share, f.name, f.on_cpu ? "" : "  (off CPU)"));
  line("");
  line("Findings");
  if (v.findings.empty()) line("  none in this window");
  for (const auto& f : v.findings) line("  " + f);
  return out;
}

}  // namespace stepscope::analyzer
