#include "analysis/step_detector.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <unordered_map>

#include "analysis/names.h"

namespace stepscope::analyzer::detail {
namespace {

// Two steps that touch can overlap by a nanosecond or so once a trace's fractional microseconds are rounded
// (each event's start and length rounded on its own): such an overlap is adjacency, and the later step starts
// where the earlier ended (it was dropped: 6 adjacent ProfilerSteps analysed as 4).
constexpr int64_t kRoundingOverlapNs = 1000;

// Keeps the ranges of the (pid, tid) holding the most of them (several ranks merged into one trace would
// otherwise interleave their steps), drops ranges nested in or overlapping an earlier kept one.
std::vector<StepWindow> top_level_on_busiest_thread(std::vector<StepWindow> w) {
  // An empty or reversed marker is no step: it neither counts for its thread nor becomes a window.
  w.erase(std::remove_if(w.begin(), w.end(), [](const StepWindow& s) { return s.end <= s.start; }), w.end());
  if (w.empty()) return w;
  std::map<std::pair<int64_t, int64_t>, int64_t> per_thread;
  for (auto& s : w) per_thread[{s.pid, s.tid}]++;
  auto best = std::max_element(per_thread.begin(), per_thread.end(),
                               [](auto& a, auto& b) { return a.second < b.second; })->first;
  std::vector<StepWindow> out;
  std::sort(w.begin(), w.end(), [](auto& a, auto& b) { return a.start < b.start || (a.start == b.start && a.end > b.end); });
  for (auto& s : w) {
    if (s.pid != best.first || s.tid != best.second) continue;
    if (!out.empty() && s.start < out.back().end) {
      if (s.end <= out.back().end || out.back().end - s.start > kRoundingOverlapNs) continue;
      s.start = out.back().end;
    }
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
  if (from_pattern(out) || from_autocorrelation(out)) return out;
  whole_run(out);
  out.confidence = 0.0;  // looked for a repeating unit and found none
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
    if (t_.str(s.source) == source) w.push_back({s.start, s.end, s.pid, s.tid, s.index});
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
// Kineto copies each annotation onto the GPU's timeline (gpu_user_annotation, its own pid and tid): on a tie
// of counts the copy's thread won, and the steps were no host thread's (their data waits then matched no
// thread's). Host-side markers first, the GPU copies a fallback, as from_ranges.
bool StepDetector::from_optimizer(DetectedSteps& out) const {
  std::vector<StepWindow> steps_m, zero_m, gpu_steps_m, gpu_zero_m;
  for (const auto& r : t_.ranges) {
    const auto& n = t_.str(r.name);
    const bool gpu = r.source == store::RangeSource::GpuAnnotation;
    if (is_optimizer_step_range(n))
      (gpu ? gpu_steps_m : steps_m).push_back({r.start, r.end, r.pid, r.tid});
    else if (is_optimizer_zero_grad_range(n))
      (gpu ? gpu_zero_m : zero_m).push_back({r.start, r.end, r.pid, r.tid});
  }
  if (steps_m.empty() && zero_m.empty()) {
    steps_m = std::move(gpu_steps_m);
    zero_m = std::move(gpu_zero_m);
  }
  out.source = "optimizer";
  // Optimizer.step ranges that are all empty (a trace's zero durations) leave zero_grad to mark the steps.
  if (auto m = top_level_on_busiest_thread(std::move(steps_m)); !m.empty()) {
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

int64_t StepDetector::launch_of(const store::Kernel& k) const {
  if (!k.correlation) return -1;
  if (!launches_) launches_.emplace(t_.api_calls);
  return launches_->find(k.correlation, k.pid);
}

// Each DataLoader __next__ starts a step; the last one runs to the thread's last activity.
bool StepDetector::from_dataloader(DetectedSteps& out) const {
  std::vector<StepWindow> w, gpu;
  for (const auto& r : t_.ranges)
    if (is_dataloader_next_range(t_.str(r.name)))
      (r.source == store::RangeSource::GpuAnnotation ? gpu : w).push_back({r.start, r.end, r.pid, r.tid});
  auto m = top_level_on_busiest_thread(w.empty() ? std::move(gpu) : std::move(w));
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
    std::vector<StepWindow> w;
    int64_t pid = 0, tid = 0;
    auto host_time = [&](size_t p) {
      const auto& k = ks[order[p]];
      const int64_t api = launch_of(k);
      if (api >= 0) {
        pid = t_.api_calls[size_t(api)].pid;
        tid = t_.api_calls[size_t(api)].tid;
        return t_.api_calls[size_t(api)].start;
      }
      return k.start;
    };
    // The tail after the last anchor is a full step only if it is as long as the others: a tail far longer
    // is the rest of the run (what the repeats did not explain), not one more step.
    const bool tail_is_step = double(tail) >= (1.0 - kPatternLengthTolerance) * double(*mn) &&
                              double(tail) <= (1.0 + kPatternLengthTolerance) * double(*mx);
    std::vector<int64_t> bounds;
    for (size_t p : pos) bounds.push_back(host_time(p));
    int64_t last_end = 0;
    for (size_t p = pos.back(); p < order.size(); ++p) last_end = std::max(last_end, ks[order[p]].end);
    for (size_t i = 0; i + 1 < bounds.size(); ++i) w.push_back({bounds[i], bounds[i + 1], pid, tid});
    if (tail_is_step) w.push_back({bounds.back(), last_end, pid, tid});
    if (w.size() < size_t(kMinPatternSteps)) continue;
    // The repeats must explain the whole run: kernels before the first repeat or after the last one may
    // only be kernels that also occur inside the repeats (a partial step). This rejects the layers of a
    // single forward pass, which repeat between a one-off prologue (embedding) and epilogue (head).
    {
      size_t inner_end = tail_is_step ? order.size() : pos.back();
      std::unordered_map<store::StringId, bool> inside;
      for (size_t p = pos.front(); p < inner_end; ++p) inside[ks[order[p]].name] = true;
      size_t foreign = 0;
      for (size_t p = 0; p < pos.front(); ++p) foreign += inside.count(ks[order[p]].name) ? 0 : 1;
      for (size_t p = inner_end; p < order.size(); ++p) foreign += inside.count(ks[order[p]].name) ? 0 : 1;
      if (double(foreign) > kPatternForeignShare * double(*mn) && !windows_meet_host(w)) continue;
    }
    bool sorted = true;
    for (size_t i = 0; i < w.size(); ++i) sorted = sorted && w[i].end > w[i].start && (i == 0 || w[i].start >= w[i - 1].end);
    if (!sorted) continue;
    out.windows = std::move(w);
    out.source = "periodic";
    out.periodic_basis = "kernels";
    // Confidence: how alike consecutive repeats are — 1 minus the share of kernels by which their name histograms
    // differ, averaged over the repeats (kernels on several streams may interleave differently, so not by position).
    double sim = 0;
    size_t pairs = 0;
    for (size_t i = 0; i + 2 < pos.size() && pairs < 256; ++i, ++pairs) {
      std::unordered_map<store::StringId, int> h;
      for (size_t q = pos[i]; q < pos[i + 1]; ++q) h[ks[order[q]].name]++;
      for (size_t q = pos[i + 1]; q < pos[i + 2]; ++q) h[ks[order[q]].name]--;
      size_t diff = 0;
      for (auto& [n, c] : h) diff += size_t(std::abs(c));
      sim += 1.0 - double(diff) / double(pos[i + 2] - pos[i]);
    }
    out.confidence = pairs ? sim / double(pairs) : 1.0;
    return true;
  }
  return false;
}

namespace {

struct Period {
  size_t period = 0;
  double match = 0;
};

// The period p of `seq` (ids) with the best match share seq[i] == seq[i + p], the smallest among near-ties (a
// multiple of the true period matches as well). Only periods with at least `min_repeats` repeats.
Period best_period(const std::vector<int64_t>& seq, size_t max_period, size_t window, int min_repeats, double min_match) {
  Period best;
  const size_t n = std::min(seq.size(), window);
  if (n < size_t(min_repeats) * 2) return best;
  const size_t pmax = std::min(max_period, n / size_t(min_repeats));
  std::vector<double> match(pmax + 1, 0.0);
  double top = 0;
  for (size_t p = 1; p <= pmax; ++p) {
    size_t m = 0;
    for (size_t i = 0; i + p < n; ++i) m += seq[i] == seq[i + p];
    match[p] = double(m) / double(n - p);
    top = std::max(top, match[p]);
  }
  if (top < min_match) return best;
  for (size_t p = 1; p <= pmax; ++p)
    if (match[p] >= top - 0.01) return {p, match[p]};
  return best;
}

}  // namespace

// The trainer repeats the same unit of work: the sequence of kernel names (or of top-level host ranges) has a
// period. Boundaries go before the element of the period that follows the longest gap on average (steps start
// after the host's per-step work: data loading, optimizer, logging).
bool StepDetector::from_autocorrelation(DetectedSteps& out) const {
  // 40 bytes an element, reserved once (10M kernels: 400 MB, where growing 48-byte ones peaked at 1.4 GB).
  struct Elem {
    int64_t start, end, host_start;
    int64_t id;
    int64_t api;  // its launch's api_calls row (its thread), -1: none (the thread is `thread` below)
  };
  std::vector<Elem> elems;
  std::string basis;
  std::pair<int64_t, int64_t> thread{0, 0};
  if (!t_.kernels.empty()) {
    elems.reserve(t_.kernels.size());
    for (const auto& k : t_.kernels) {
      Elem e{k.start, k.end, k.start, k.name, -1};
      if (const int64_t api = launch_of(k); api >= 0) {
        e.host_start = t_.api_calls[size_t(api)].start;
        e.api = api;
      }
      elems.push_back(e);
    }
    basis = "kernels";
  } else {
    // Top-level host ranges of the thread with the most of them (ops, annotations, Python functions).
    std::map<std::pair<int64_t, int64_t>, int64_t> per_thread;
    for (const auto& r : t_.ranges)
      if (r.source != store::RangeSource::GpuAnnotation && r.depth == 0) per_thread[{r.pid, r.tid}]++;
    if (per_thread.empty()) return false;
    auto th = std::max_element(per_thread.begin(), per_thread.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
    thread = th;
    std::unordered_map<std::string, int64_t> ids;
    for (const auto& r : t_.ranges) {
      if (r.source == store::RangeSource::GpuAnnotation || r.depth != 0 || r.pid != th.first || r.tid != th.second) continue;
      auto key = strip_numeric_suffix(t_.str(r.name));
      auto it = ids.emplace(key, int64_t(ids.size())).first;
      elems.push_back({r.start, r.end, r.start, it->second, -1});
    }
    basis = "host ranges";
  }
  std::sort(elems.begin(), elems.end(), [](const Elem& a, const Elem& b) { return a.start < b.start; });
  std::vector<int64_t> seq;
  seq.reserve(elems.size());
  for (const auto& e : elems) seq.push_back(e.id);
  Period per = best_period(seq, kMaxPeriod, kMaxPeriodicWindow, kMinPeriodicRepeats, kPeriodicMinMatch);
  if (!per.period) return false;
  const size_t p = per.period;
  // Phase: the position in the period preceded by the longest mean gap.
  std::vector<double> gap(p, 0.0);
  std::vector<int64_t> cnt(p, 0);
  for (size_t i = 1; i < elems.size(); ++i) {
    gap[i % p] += double(std::max<int64_t>(0, elems[i].host_start - elems[i - 1].host_start));
    cnt[i % p]++;
  }
  size_t phase = 0;
  for (size_t j = 0; j < p; ++j)
    if (cnt[j] && gap[j] / double(cnt[j]) > (cnt[phase] ? gap[phase] / double(cnt[phase]) : -1.0)) phase = j;
  std::vector<StepWindow> w;
  for (size_t b = phase; b + p < elems.size() + 1; b += p) {
    size_t next = b + p;
    int64_t s0 = elems[b].host_start;
    int64_t e0 = next < elems.size() ? elems[next].host_start : 0;
    if (next >= elems.size()) {
      for (size_t j = b; j < elems.size(); ++j) e0 = std::max(e0, elems[j].end);
    }
    if (e0 > s0) {
      const int64_t api = elems[b].api;
      w.push_back({s0, e0, api >= 0 ? t_.api_calls[size_t(api)].pid : thread.first,
                   api >= 0 ? t_.api_calls[size_t(api)].tid : thread.second});
    }
  }
  if (w.size() < size_t(kMinPeriodicRepeats)) return false;
  for (size_t i = 1; i < w.size(); ++i)
    if (w[i].start < w[i - 1].end) return false;
  // As for the anchor method: the repeats must explain the whole run. Elements before the first repeat or after
  // the last complete one may only be names that occur inside the repeats (a partial step), else the period is
  // the layers of one forward pass between a one-off prologue and epilogue, not steps.
  {
    const size_t repeats = (elems.size() - phase) / p;
    const size_t inner_end = phase + repeats * p;
    std::unordered_map<int64_t, bool> inside;
    for (size_t j = phase; j < inner_end; ++j) inside[elems[j].id] = true;
    size_t foreign = 0;
    for (size_t j = 0; j < phase; ++j) foreign += inside.count(elems[j].id) ? 0 : 1;
    for (size_t j = inner_end; j < elems.size(); ++j) foreign += inside.count(elems[j].id) ? 0 : 1;
    if (double(foreign) > kPatternForeignShare * double(p) && !windows_meet_host(w)) return false;
  }
  out.windows = std::move(w);
  out.source = "periodic";
  out.confidence = per.match;
  out.periodic_basis = basis;
  return true;
}

const std::vector<int64_t>& StepDetector::host_meets() const {
  if (meets_) return *meets_;
  std::vector<int64_t>& meets = meets_.emplace();
  for (const auto& m : t_.memcpys)
    if (m.kind == store::CopyKind::DtoH) meets.push_back(m.start);
  for (const auto& s : t_.syncs) meets.push_back(s.start);
  // Traces without sync records still name the blocking calls.
  std::unordered_map<store::StringId, bool> blocking;
  for (const auto& a : t_.api_calls) {
    auto it = blocking.find(a.name);
    if (it == blocking.end()) {
      const auto& n = t_.str(a.name);
      it = blocking.emplace(a.name, is_sync_api(n) || is_sync_memcpy_api(n)).first;
    }
    if (it->second) meets.push_back(a.start);
  }
  std::sort(meets.begin(), meets.end());
  return meets;
}

bool StepDetector::windows_meet_host(const std::vector<StepWindow>& w) const {
  if (w.empty()) return false;
  const std::vector<int64_t>& meets = host_meets();
  size_t with = 0;
  for (const auto& x : w) {
    auto it = std::lower_bound(meets.begin(), meets.end(), x.start);
    with += it != meets.end() && *it < x.end;
  }
  return double(with) >= kIterationMeetShare * double(w.size());
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
    // Start at the first launch call that produced GPU work — a kernel, a copy or a memset — so the first
    // one's launch wait is inside (a hipMemcpyAsync before the first kernel was left out: 3% of the window).
    std::unordered_map<int64_t, bool> corr;
    int64_t first_launch = g0;
    for (auto& k : t_.kernels) if (k.correlation) corr[k.correlation] = true;
    for (auto& m : t_.memcpys)
      if (m.correlation) corr[m.correlation] = true;
    for (auto& m : t_.memsets)
      if (m.correlation) corr[m.correlation] = true;
    for (auto& a : t_.api_calls)
      if (a.correlation && a.start < first_launch && corr.count(a.correlation)) first_launch = a.start;
    out.windows.push_back({first_launch, g1, 0, 0});
    return;
  }
  auto [s, e] = t_.time_span();
  if (e > s) out.windows.push_back({s, e, 0, 0});
}

}  // namespace stepscope::analyzer::detail
