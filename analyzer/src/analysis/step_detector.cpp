#include "analysis/step_detector.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <unordered_map>

#include "analysis/names.h"

namespace stepscope::analyzer::detail {
namespace {

// Keeps the ranges of the (pid, tid) holding the most of them (several ranks merged into one trace would
// otherwise interleave their steps), drops ranges nested in or overlapping an earlier kept one.
std::vector<StepWindow> top_level_on_busiest_thread(std::vector<StepWindow> w) {
  if (w.empty()) return w;
  std::map<std::pair<int64_t, int64_t>, int64_t> per_thread;
  for (auto& s : w) per_thread[{s.pid, s.tid}]++;
  auto best = std::max_element(per_thread.begin(), per_thread.end(),
                               [](auto& a, auto& b) { return a.second < b.second; })->first;
  std::vector<StepWindow> out;
  std::sort(w.begin(), w.end(), [](auto& a, auto& b) { return a.start < b.start || (a.start == b.start && a.end > b.end); });
  for (auto& s : w) {
    if (s.pid != best.first || s.tid != best.second) continue;
    if (s.end <= s.start) continue;
    if (!out.empty() && s.start < out.back().end) continue;
    out.push_back(s);
  }
  return out;
}

}  // namespace

DetectedSteps StepDetector::detect(const std::string& step_regex) const {
  DetectedSteps out;
  if (!step_regex.empty() && from_regex(step_regex, out)) return out;
  // Steps the collector recorded (store `steps` table, by source) come before the same kind found in ranges.
  // Explicit markers first: `record --step-func` (chosen for this run) before stepscope.step() in the code.
  if (from_store_steps("step-func", out)) return out;
  if (from_store_steps("api", out)) return out;
  if (from_ranges(&is_profiler_step_range, "profiler-step", out)) return out;
  if (from_store_steps("nvtx", out)) return out;
  if (from_store_steps("optimizer", out) || from_optimizer(out)) return out;
  if (from_store_steps("dataloader", out) || from_dataloader(out)) return out;
  if (from_pattern(out)) return out;
  whole_run(out);
  return out;
}

bool StepDetector::from_regex(const std::string& re, DetectedSteps& out) const {
  std::regex rx;
  try {
    rx = std::regex(re, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument("--step-regex '" + re + "': " + e.what());
  }
  // Match each distinct name once: ranges repeat names a lot.
  std::unordered_map<store::StringId, bool> matched;
  std::vector<StepWindow> w;
  for (const auto& r : t_.ranges) {
    auto it = matched.find(r.name);
    if (it == matched.end()) it = matched.emplace(r.name, std::regex_search(t_.str(r.name), rx)).first;
    if (it->second) w.push_back({r.start, r.end, r.pid, r.tid});
  }
  out.windows = top_level_on_busiest_thread(std::move(w));
  out.source = "regex";
  return !out.windows.empty();
}

bool StepDetector::from_store_steps(const char* source, DetectedSteps& out) const {
  std::vector<StepWindow> w;
  for (const auto& s : t_.steps)
    if (t_.str(s.source) == source) w.push_back({s.start, s.end, s.pid, s.tid});
  out.windows = top_level_on_busiest_thread(std::move(w));
  out.source = source;
  return !out.windows.empty();
}

bool StepDetector::from_ranges(bool (*match)(std::string_view), const char* source, DetectedSteps& out) const {
  std::unordered_map<store::StringId, bool> matched;
  std::vector<StepWindow> host, gpu;
  for (const auto& r : t_.ranges) {
    auto it = matched.find(r.name);
    if (it == matched.end()) it = matched.emplace(r.name, match(t_.str(r.name))).first;
    if (!it->second) continue;
    (r.source == store::RangeSource::GpuAnnotation ? gpu : host).push_back({r.start, r.end, r.pid, r.tid});
  }
  // Host-side markers bound the work the host issued; GPU-side copies of them are a fallback.
  out.windows = top_level_on_busiest_thread(host.empty() ? std::move(gpu) : std::move(host));
  out.source = source;
  return !out.windows.empty();
}

int64_t StepDetector::thread_last_end(int64_t pid, int64_t tid) const {
  int64_t last = 0;
  for (const auto& r : t_.ranges)
    if (r.pid == pid && r.tid == tid) last = std::max(last, r.end);
  for (const auto& a : t_.api_calls)
    if (a.pid == pid && a.tid == tid) last = std::max(last, a.end);
  return last;
}

int64_t StepDetector::thread_first_start(int64_t pid, int64_t tid) const {
  int64_t first = INT64_MAX;
  for (const auto& r : t_.ranges)
    if (r.pid == pid && r.tid == tid) first = std::min(first, r.start);
  for (const auto& a : t_.api_calls)
    if (a.pid == pid && a.tid == tid) first = std::min(first, a.start);
  return first == INT64_MAX ? 0 : first;
}

// One Optimizer.step per training step: a step ends where its optimizer step ends. With zero_grad only,
// a step starts where its zero_grad starts.
bool StepDetector::from_optimizer(DetectedSteps& out) const {
  std::vector<StepWindow> steps_m, zero_m;
  for (const auto& r : t_.ranges) {
    const auto& n = t_.str(r.name);
    if (is_optimizer_step_range(n)) steps_m.push_back({r.start, r.end, r.pid, r.tid});
    else if (is_optimizer_zero_grad_range(n)) zero_m.push_back({r.start, r.end, r.pid, r.tid});
  }
  out.source = "optimizer";
  if (!steps_m.empty()) {
    auto m = top_level_on_busiest_thread(std::move(steps_m));
    int64_t prev = thread_first_start(m.front().pid, m.front().tid);
    for (auto& s : m) {
      if (s.end > prev) out.windows.push_back({prev, s.end, s.pid, s.tid});
      prev = s.end;
    }
  } else if (!zero_m.empty()) {
    auto m = top_level_on_busiest_thread(std::move(zero_m));
    for (size_t i = 0; i < m.size(); ++i) {
      int64_t end = i + 1 < m.size() ? m[i + 1].start : thread_last_end(m[i].pid, m[i].tid);
      if (end > m[i].start) out.windows.push_back({m[i].start, end, m[i].pid, m[i].tid});
    }
  }
  return !out.windows.empty();
}

// Each DataLoader __next__ starts a step; the last one runs to the thread's last activity.
bool StepDetector::from_dataloader(DetectedSteps& out) const {
  std::vector<StepWindow> w;
  for (const auto& r : t_.ranges)
    if (is_dataloader_next_range(t_.str(r.name))) w.push_back({r.start, r.end, r.pid, r.tid});
  auto m = top_level_on_busiest_thread(std::move(w));
  out.source = "dataloader";
  for (size_t i = 0; i < m.size(); ++i) {
    int64_t end = i + 1 < m.size() ? m[i + 1].start : thread_last_end(m[i].pid, m[i].tid);
    if (end > m[i].start) out.windows.push_back({m[i].start, end, m[i].pid, m[i].tid});
  }
  return !out.windows.empty();
}

// The trainer issues the same kernel sequence every step. Find a kernel name that occurs S >= 2 times,
// splitting the start-ordered kernel sequence into S segments of (nearly) equal length whose name
// histograms agree; the largest such S wins. Boundaries are the anchor kernels' launch calls.
bool StepDetector::from_pattern(DetectedSteps& out) const {
  const auto& ks = t_.kernels;
  if (ks.size() < size_t(kMinPatternSteps * kMinPatternKernels)) return false;
  std::vector<uint32_t> order(ks.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return ks[a].start < ks[b].start; });
  std::unordered_map<store::StringId, std::vector<uint32_t>> positions;  // name -> positions in order
  for (uint32_t p = 0; p < order.size(); ++p) positions[ks[order[p]].name].push_back(p);

  // Candidates: names occurring 2..n/kMinPatternKernels times, tried by decreasing count.
  std::vector<std::pair<size_t, store::StringId>> cands;
  for (auto& [name, pos] : positions)
    if (pos.size() >= size_t(kMinPatternSteps) && pos.size() <= order.size() / kMinPatternKernels)
      cands.push_back({pos.size(), name});
  std::sort(cands.begin(), cands.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });

  size_t tried = 0;
  for (auto& [count, name] : cands) {
    if (++tried > 64) break;  // bounded work on pathological traces
    const auto& pos = positions[name];
    // Segments between consecutive occurrences, plus the tail after the last one.
    std::vector<size_t> lens;
    for (size_t i = 0; i + 1 < pos.size(); ++i) lens.push_back(pos[i + 1] - pos[i]);
    size_t tail = order.size() - pos.back();
    if (lens.empty()) continue;
    auto [mn, mx] = std::minmax_element(lens.begin(), lens.end());
    if (*mn < size_t(kMinPatternKernels)) continue;
    if (double(*mx - *mn) > kPatternLengthTolerance * double(*mx)) continue;
    // The first segment's name histogram must match the second's (same kernels each step).
    if (lens.size() >= 2) {
      std::unordered_map<store::StringId, int> h;
      for (size_t p = pos[0]; p < pos[1]; ++p) h[ks[order[p]].name]++;
      for (size_t p = pos[1]; p < pos[2]; ++p) h[ks[order[p]].name]--;
      size_t diff = 0;
      for (auto& [n, c] : h) diff += size_t(std::abs(c));
      if (double(diff) > kPatternLengthTolerance * double(lens[0] + lens[1])) continue;
    }
    // Host time of each anchor: its launch call when correlated, else the kernel start.
    std::unordered_map<int64_t, uint32_t> api_by_corr;
    api_by_corr.reserve(pos.size() * 2);
    std::unordered_map<int64_t, bool> wanted;
    for (size_t p : pos) wanted[ks[order[p]].correlation] = true;
    for (uint32_t i = 0; i < t_.api_calls.size(); ++i)
      if (t_.api_calls[i].correlation && wanted.count(t_.api_calls[i].correlation))
        api_by_corr[t_.api_calls[i].correlation] = i;
    std::vector<StepWindow> w;
    int64_t pid = 0, tid = 0;
    auto host_time = [&](size_t p) {
      const auto& k = ks[order[p]];
      auto it = k.correlation ? api_by_corr.find(k.correlation) : api_by_corr.end();
      if (it != api_by_corr.end()) {
        pid = t_.api_calls[it->second].pid;
        tid = t_.api_calls[it->second].tid;
        return t_.api_calls[it->second].start;
      }
      return k.start;
    };
    // The repeats must explain the whole run: kernels before the first repeat or after the last one may
    // only be kernels that also occur inside the repeats (a partial step). This rejects the layers of a
    // single forward pass, which repeat between a one-off prologue (embedding) and epilogue (head).
    {
      bool tail_is_step = double(tail) >= (1.0 - kPatternLengthTolerance) * double(*mn);
      size_t inner_end = tail_is_step ? order.size() : pos.back();
      std::unordered_map<store::StringId, bool> inside;
      for (size_t p = pos.front(); p < inner_end; ++p) inside[ks[order[p]].name] = true;
      size_t foreign = 0;
      for (size_t p = 0; p < pos.front(); ++p) foreign += inside.count(ks[order[p]].name) ? 0 : 1;
      for (size_t p = inner_end; p < order.size(); ++p) foreign += inside.count(ks[order[p]].name) ? 0 : 1;
      if (double(foreign) > kPatternForeignShare * double(*mn)) continue;
    }
    std::vector<int64_t> bounds;
    for (size_t p : pos) bounds.push_back(host_time(p));
    // The tail after the last anchor is a full step only if it is as long as the others.
    int64_t last_end = 0;
    for (size_t p = pos.back(); p < order.size(); ++p) last_end = std::max(last_end, ks[order[p]].end);
    for (size_t i = 0; i + 1 < bounds.size(); ++i) w.push_back({bounds[i], bounds[i + 1], pid, tid});
    if (double(tail) >= (1.0 - kPatternLengthTolerance) * double(*mn)) w.push_back({bounds.back(), last_end, pid, tid});
    if (w.size() < size_t(kMinPatternSteps)) continue;
    bool sorted = true;
    for (size_t i = 0; i < w.size(); ++i) sorted = sorted && w[i].end > w[i].start && (i == 0 || w[i].start >= w[i - 1].end);
    if (!sorted) continue;
    out.windows = std::move(w);
    out.source = "pattern";
    return true;
  }
  return false;
}

// One window: from the first launch or GPU activity to the last GPU activity; the whole trace without GPU.
void StepDetector::whole_run(DetectedSteps& out) const {
  out.source = "none";
  out.windows.clear();
  int64_t g0 = INT64_MAX, g1 = INT64_MIN;
  auto take = [&](int64_t s, int64_t e) { g0 = std::min(g0, s); g1 = std::max(g1, e); };
  for (auto& k : t_.kernels) take(k.start, k.end);
  for (auto& m : t_.memcpys) take(m.start, m.end);
  for (auto& m : t_.memsets) take(m.start, m.end);
  if (g0 < g1) {
    // Start at the first launch call that produced GPU work, so the first kernel's launch wait is inside.
    std::unordered_map<int64_t, bool> corr;
    int64_t first_launch = g0;
    for (auto& k : t_.kernels) if (k.correlation) corr[k.correlation] = true;
    for (auto& a : t_.api_calls)
      if (a.correlation && a.start < first_launch && corr.count(a.correlation)) first_launch = a.start;
    out.windows.push_back({first_launch, g1, 0, 0});
    return;
  }
  auto [s, e] = t_.time_span();
  if (e > s) out.windows.push_back({s, e, 0, 0});
}

}  // namespace stepscope::analyzer::detail
