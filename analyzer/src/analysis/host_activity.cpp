#include "analysis/host_activity.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>

#include "analysis/names.h"
#include "stepscope/analyzer/collector_threads.h"
#include "stepscope/analyzer/display_names.h"

namespace stepscope::analyzer::detail {

std::vector<HostFunctionStat> host_activity(const Context& ctx, const std::vector<Interval>& other, size_t top) {
  const store::Trace& t = ctx.t();
  if (other.empty()) return {};
  auto inside = [&](int64_t ts) {
    auto it = std::upper_bound(other.begin(), other.end(), ts, [](int64_t x, const Interval& i) { return x < i.end; });
    return it != other.end() && it->start <= ts;
  };
  std::unordered_map<std::string, HostFunctionStat> by;
  if (!t.samples.empty()) {
    std::unordered_map<int64_t, size_t> stack_pos, frame_pos;
    for (size_t i = 0; i < t.stacks.size(); ++i) stack_pos[t.stacks[i].id] = i;
    for (size_t i = 0; i < t.frames.size(); ++i) frame_pos[t.frames[i].id] = i;
    // The collector's own threads are the profiler's work, not the program's.
    const CollectorThreads collector_threads(t);
    CollectorModules collector_modules(t);
    int64_t n = 0;
    for (const auto& s : t.samples) {
      if (!s.on_cpu || !inside(s.time)) continue;
      if (collector_threads.contains(s)) continue;
      std::string name = "[unknown]";
      auto sp = stack_pos.find(s.stack);
      if (sp != stack_pos.end()) {
        auto fp = frame_pos.find(t.stacks[sp->second].frame);
        if (fp != frame_pos.end()) {
          if (collector_modules.contains(t.frames[fp->second])) continue;
          name = frame_display_name(t, t.frames[fp->second], /*full=*/true);
        }
      }
      by[name].samples++;
      ++n;
    }
    int64_t other_ns = 0;
    for (auto& i : other) other_ns += i.end - i.start;
    for (auto& [name, s] : by) {
      s.name = name;
      s.time_ns = n ? int64_t(double(other_ns) * double(s.samples) / double(n)) : 0;
    }
  } else {
    // Threads that drive the GPU: those with launch calls (or the step thread).
    std::unordered_map<int64_t, bool> launching;  // key: pid<<32 ^ tid
    auto key = [](int64_t pid, int64_t tid) { return (pid << 32) ^ tid; };
    for (size_t i = 0; i < t.api_calls.size(); ++i)
      if (ctx.api_op_count[i]) launching[key(t.api_calls[i].pid, t.api_calls[i].tid)] = true;
    for (const auto& w : ctx.windows) launching[key(w.pid, w.tid)] = true;
    std::vector<uint32_t> rs;
    for (uint32_t i = 0; i < t.ranges.size(); ++i) {
      const auto& r = t.ranges[i];
      if (r.source != store::RangeSource::GpuAnnotation && launching.count(key(r.pid, r.tid))) rs.push_back(i);
    }
    auto thread_then_time = [&](uint32_t x, uint32_t y) {
      const auto &p = t.ranges[x], &q = t.ranges[y];
      if (p.pid != q.pid || p.tid != q.tid) return std::make_pair(p.pid, p.tid) < std::make_pair(q.pid, q.tid);
      return p.start < q.start || (p.start == q.start && p.end > q.end);
    };
    if (!std::is_sorted(rs.begin(), rs.end(), thread_then_time)) std::sort(rs.begin(), rs.end(), thread_then_time);
    // Exclusive time of each range: a stack sweep per thread.
    std::unordered_map<store::StringId, int64_t> excl;
    std::vector<uint32_t> stack;
    int64_t cursor = 0;
    auto emit = [&](uint32_t ri, int64_t s, int64_t e) {
      if (e <= s) return;
      auto it = std::upper_bound(other.begin(), other.end(), s, [](int64_t x, const Interval& i) { return x < i.end; });
      int64_t sum = 0;
      for (; it != other.end() && it->start < e; ++it) sum += std::min(e, it->end) - std::max(s, it->start);
      if (sum) excl[t.ranges[ri].name] += sum;
    };
    auto pop_until = [&](int64_t ts) {
      while (!stack.empty() && t.ranges[stack.back()].end <= ts) {
        emit(stack.back(), cursor, t.ranges[stack.back()].end);
        cursor = t.ranges[stack.back()].end;
        stack.pop_back();
      }
    };
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& r = t.ranges[rs[i]];
      if (i > 0 && (t.ranges[rs[i - 1]].pid != r.pid || t.ranges[rs[i - 1]].tid != r.tid)) {
        pop_until(INT64_MAX);
        stack.clear();
      }
      pop_until(r.start);
      if (!stack.empty()) emit(stack.back(), std::max(cursor, t.ranges[stack.back()].start), r.start);
      cursor = r.start;
      stack.push_back(rs[i]);
    }
    pop_until(INT64_MAX);
    for (auto& [n, ns] : excl) {
      auto name = strip_numeric_suffix(t.str(n));
      auto& s = by[name];
      s.name = name;
      s.time_ns += ns;
    }
  }
  std::vector<HostFunctionStat> v;
  for (auto& [n, s] : by) v.push_back(std::move(s));
  std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.time_ns > y.time_ns || (x.time_ns == y.time_ns && x.name < y.name); });
  if (v.size() > top) v.resize(top);
  return v;
}


}  // namespace stepscope::analyzer::detail
