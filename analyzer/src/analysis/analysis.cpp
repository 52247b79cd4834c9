// The analysis before and after the rules (analysis/measure.h; analyze() itself is pipeline/analyze.cpp), and
// to_json(): the stepscope.analysis/1 contract.
#include "stepscope/analyzer/analysis.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unordered_map>

#include "analysis/context.h"
#include "analysis/critical_path.h"
#include "analysis/what_if.h"
#include "analysis/host_activity.h"
#include "analysis/measure.h"
#include "analysis/names.h"
#include "analysis/step_detector.h"
#include "format/units.h"
#include "import/event_counts.h"
#include "stepscope/analyzer/collector_threads.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/step_outliers.h"

namespace stepscope::analyzer {

const char* to_string(Bound b) {
  switch (b) {
    case Bound::Input: return "input";
    case Bound::Launch: return "launch";
    case Bound::Sync: return "sync";
    case Bound::Host: return "host";
    case Bound::Gpu: return "gpu";
    case Bound::Other: return "other";
    case Bound::Untraced: return "untraced";
  }
  return "gpu";
}

namespace {

constexpr size_t kTopKernelStats = 20;
constexpr size_t kTopHostFunctions = 15;
constexpr size_t kUtilizationBuckets = 100;

double us(int64_t ns) { return double(ns) / 1000.0; }

void kernel_stats(const store::Trace& t, Analysis& a) {
  std::unordered_map<store::StringId, KernelStat> by;
  for (const auto& k : t.kernels) {
    auto [it, fresh] = by.try_emplace(k.name);
    auto& s = it->second;
    int64_t d = k.end - k.start;
    if (fresh) s.min_ns = s.max_ns = d;
    s.count++, s.total_ns += d, s.min_ns = std::min(s.min_ns, d), s.max_ns = std::max(s.max_ns, d);
  }
  std::vector<std::pair<store::StringId, KernelStat>> v(by.begin(), by.end());
  std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.second.total_ns > y.second.total_ns || (x.second.total_ns == y.second.total_ns && x.first < y.first); });
  if (v.size() > kTopKernelStats) v.resize(kTopKernelStats);
  for (auto& [n, s] : v) {
    s.name = t.str(n);
    a.top_kernels.push_back(std::move(s));
  }
}

void utilization(const detail::Context& ctx, Analysis& a) {
  if (ctx.busy.empty()) return;
  // Offsets from the first busy ns, unsigned: a file's times near the ends of int64 wrapped the span negative and
  // asked for a vector of 2^64 buckets.
  const int64_t g0 = ctx.busy.front().start;
  const auto off = [g0](int64_t t) { return uint64_t(t) - uint64_t(g0); };
  const uint64_t span = off(ctx.busy.back().end), n = kUtilizationBuckets;
  const uint64_t bucket = std::max<uint64_t>(1, span / n + (span % n != 0));
  a.utilization_bucket_ns = int64_t(bucket);
  std::vector<int64_t> busy(size_t(span / bucket + (span % bucket != 0)), 0);
  for (const auto& iv : ctx.busy)
    for (uint64_t s = off(iv.start), end = off(iv.end); s < end && s < span;) {
      const size_t b = size_t(s / bucket);
      const uint64_t e = std::min(end, uint64_t(b + 1) * bucket);
      busy[b] += int64_t(e - s);
      s = e;
    }
  for (auto v : busy) a.utilization.push_back(double(v) / double(bucket));
}

// Where the training thread was while the GPU waited for it (host and launch idle inside steps: the queue was
// empty; other idle is the GPU's own wait, data and sync idle have their own sections);
// without GPU activity, where it spent the steps.
void fill_host_activity(const detail::Context& ctx, Analysis& a) {
  std::vector<detail::Interval> window;
  if (!ctx.busy.empty()) {
    for (const auto& seg : ctx.idle)
      if ((seg.kind == detail::IdleKind::Host || seg.kind == detail::IdleKind::Launch) && ctx.step_at(seg.start) >= 0)
        window.push_back({seg.start, seg.end});
    a.host_activity = detail::host_activity(ctx, window, kTopHostFunctions, "gpu-waited-for-host");
    return;
  }
  for (const auto& w : ctx.windows) {
    if (!window.empty() && w.start <= window.back().end) window.back().end = std::max(window.back().end, w.end);
    else window.push_back({w.start, w.end});
  }
  a.host_activity = detail::host_activity(ctx, window, kTopHostFunctions, "steps");
}

// Busy time per device inside each step, for traces with several devices.
void per_device_busy(const detail::Context& ctx, std::vector<StepBreakdown>& steps) {
  const store::Trace& t = ctx.t();
  std::map<int64_t, std::vector<detail::Interval>> unions;  // ops are in start order: extend or append
  for (const auto& op : ctx.ops) {
    int64_t dev = op.kind == detail::GpuOpKind::Kernel   ? t.kernels[op.index].device
                  : op.kind == detail::GpuOpKind::Memcpy ? t.memcpys[op.index].device
                                                         : t.memsets[op.index].device;
    auto& u = unions[dev];
    if (op.end <= op.start) continue;
    if (!u.empty() && op.start <= u.back().end) u.back().end = std::max(u.back().end, op.end);
    else u.push_back({op.start, op.end});
  }
  if (unions.size() < 2) return;
  for (size_t i = 0; i < steps.size(); ++i) {
    int64_t a = ctx.windows[i].start, b = ctx.windows[i].end;
    for (const auto& [dev, u] : unions) {
      auto it = std::upper_bound(u.begin(), u.end(), a, [](int64_t x, const detail::Interval& p) { return x < p.end; });
      int64_t sum = 0;
      for (; it != u.end() && it->start < b; ++it) sum += std::min(b, it->end) - std::max(a, it->start);
      steps[i].device_busy_ns.push_back({dev, sum});
    }
  }
}

// The steps in the GPU's time: [first GPU work of step i, first GPU work of step i+1), busy and classified idle
// inside it. The idle classification covers the whole analysed span, so the parts add up to the window.
std::vector<StepBreakdown> gpu_time_steps(const detail::Context& ctx, const std::vector<int64_t>& first) {
  std::vector<StepBreakdown> out;
  for (size_t i = 0; i + 1 < ctx.steps.size(); ++i) {
    if (!ctx.steps[i].gpu_traced || !ctx.steps[i + 1].gpu_traced || first[i] == INT64_MAX || first[i + 1] == INT64_MAX ||
        first[i + 1] <= first[i])
      continue;
    const int64_t a = first[i], b = first[i + 1];
    StepBreakdown st;
    st.index = ctx.steps[i].index;
    st.start_ns = a;
    st.dur_ns = b - a;
    st.kernels = ctx.steps[i].kernels;
    st.host_data_wait_ns = ctx.steps[i].host_data_wait_ns;
    st.warmup = ctx.steps[i].warmup;
    for (auto it = std::upper_bound(ctx.busy.begin(), ctx.busy.end(), a,
                                    [](int64_t x, const detail::Interval& v) { return x < v.end; });
         it != ctx.busy.end() && it->start < b; ++it)
      st.gpu_busy_ns += std::min(b, it->end) - std::max(a, it->start);
    int64_t dispatch = 0;
    for (auto it = std::upper_bound(ctx.idle.begin(), ctx.idle.end(), a,
                                    [](int64_t x, const detail::IdleSegment& v) { return x < v.end; });
         it != ctx.idle.end() && it->start < b; ++it) {
      const int64_t d = std::min(b, it->end) - std::max(a, it->start);
      switch (it->kind) {
        case detail::IdleKind::Data: st.data_wait_ns += d; break;
        case detail::IdleKind::Launch: st.launch_idle_ns += d; break;
        case detail::IdleKind::Host: st.host_idle_ns += d; break;
        case detail::IdleKind::Sync: st.sync_idle_ns += d; break;
        case detail::IdleKind::Other: st.other_idle_ns += d; break;
      }
      if (it->dispatch) dispatch += d;
    }
    const int64_t parts = st.gpu_busy_ns + st.data_wait_ns + st.launch_idle_ns + st.host_idle_ns + st.sync_idle_ns +
                          st.other_idle_ns;
    st.other_idle_ns += std::max<int64_t>(0, st.dur_ns - parts);
    st.bound = detail::bound_of(st, false, dispatch);
    out.push_back(st);
  }
  return out;
}

}  // namespace

void detail::measure(const store::Trace& trace, const AnalyzeOptions& options, Context& ctx, Analysis& a) {
  ctx.trace = &trace;
  auto detected = detail::StepDetector(trace).detect(options.step_regex);
  ctx.step_source = detected.source;
  ctx.step_confidence = detected.confidence;
  ctx.framework = detail::detect_framework(trace);
  ctx.windows = std::move(detected.windows);
  detail::build_breakdown(ctx);
  ctx.graphs = graph_table(trace);
  const auto training = detail::training_thread(ctx, &ctx.training_reason);
  ctx.training_pid = training.pid, ctx.training_tid = training.tid;
  ctx.sample_period_ns = detail::sample_period_ns(trace, &ctx.sample_period_source);

  auto& s = a.summary;
  s.kernels = int64_t(trace.kernels.size());
  s.memcpys = int64_t(trace.memcpys.size());
  s.memsets = int64_t(trace.memsets.size());
  s.has_gpu = trace.gpu_event_count() > 0;
  for (const auto& iv : ctx.busy) s.gpu_busy_us += us(iv.end - iv.start);
  if (!ctx.busy.empty()) s.gpu_span_us = us(ctx.busy.back().end - ctx.busy.front().start);
  s.steps = int64_t(ctx.windows.size());
  s.step_source = ctx.step_source;
  s.step_regex = options.step_regex;
  s.step_confidence = ctx.step_confidence;
  int64_t busy = 0, host_wait = 0, idle_wait = 0;
  for (const auto& st : ctx.steps) {
    busy += st.gpu_busy_ns, host_wait += st.host_data_wait_ns, idle_wait += st.data_wait_ns;
    s.data_wait_idle_us += us(st.data_wait_ns), s.launch_idle_us += us(st.launch_idle_ns);
    s.sync_idle_us += us(st.sync_idle_ns), s.host_idle_us += us(st.host_idle_ns), s.other_idle_us += us(st.other_idle_ns);
    s.profiler_us += us(st.profiler_ns);
  }
  s.step_time_us = us(ctx.total_step_ns);
  s.traced_step_time_us = us(ctx.traced_step_ns);
  // The host's wait is measured in every step; the GPU's side only in the traced ones.
  if (ctx.total_step_ns > 0) s.data_wait_share = double(host_wait) / double(ctx.total_step_ns);
  if (ctx.traced_step_ns > 0) {
    s.input_idle_share = double(idle_wait) / double(ctx.traced_step_ns);
    s.gpu_busy_share = double(busy) / double(ctx.traced_step_ns);
  }
  s.gpu_traced_steps = ctx.traced_steps;
  if (ctx.traced_steps > 0 && 2 * ctx.traced_steps < int64_t(ctx.steps.size())) {
    size_t k = 0;
    while (k < ctx.steps.size() && ctx.steps[k].gpu_traced) ++k;
    s.gpu_traced_start_only = int64_t(k) == ctx.traced_steps;
  }
  {
    std::vector<int64_t> durs, gpu_steps, paired_durs;
    for (const auto& st : ctx.steps) durs.push_back(st.dur_ns);
    std::vector<int64_t> first(ctx.steps.size(), INT64_MAX);
    for (const auto& op : ctx.ops)
      if (op.step >= 0 && size_t(op.step) < first.size()) first[op.step] = std::min(first[op.step], op.start);
    for (size_t i = 0; i + 1 < ctx.steps.size(); ++i)
      if (ctx.steps[i].gpu_traced && ctx.steps[i + 1].gpu_traced && first[i] != INT64_MAX &&
          first[i + 1] != INT64_MAX && first[i + 1] > first[i]) {
        gpu_steps.push_back(first[i + 1] - first[i]);
        paired_durs.push_back(ctx.steps[i].dur_ns);
      }
    // With GPU windows the host's median comes from the same traced steps: the untraced ones run without the
    // profiler's cost, and against them a launch-bound loop's traced steps looked "ahead" (launch_bound under
    // the default window, H100: 201 µs on the GPU against 140.5 µs over all steps, 226 µs over the traced).
    const bool all_traced = ctx.traced_steps == int64_t(ctx.steps.size());
    s.host_step_median_us = us(detail::median(all_traced || paired_durs.empty() ? durs : paired_durs));
    if (gpu_steps.size() >= 2) {
      s.gpu_step_median_us = us(detail::median(gpu_steps));
      s.host_runs_ahead = s.gpu_step_median_us > (1.0 + kHostAheadMargin) * s.host_step_median_us;
    }
    if (s.host_runs_ahead) a.gpu_steps = gpu_time_steps(ctx, first);
  }
  if (!trace.gpu_windows.empty()) {
    auto it = trace.meta.find("gpu.window");
    s.gpu_window = it != trace.meta.end() && it->second != "all" ? it->second : "windows";
  }
  if (auto it = trace.meta.find("cupti.lent"), held = trace.meta.find("cupti.lent_while_tracing");
      it != trace.meta.end() && held != trace.meta.end() && std::atoll(held->second.c_str()) > 0)
    s.cuda_lent = it->second;
  s.profiler = ctx.profiler;
  s.profiler.removed_us = s.profiler_us;  // the launches' cost (when applied) and the Python hooks'
  if (s.profiler.applied) {
    std::vector<int64_t> rec, cor;
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      if (!ctx.steps[i].gpu_traced) continue;
      s.profiler.launches += ctx.launches[i];
      rec.push_back(ctx.steps[i].dur_ns);
      cor.push_back(ctx.steps[i].dur_ns - ctx.steps[i].profiler_ns);
    }
    s.profiler.step_median_us = us(detail::median(rec));
    s.profiler.corrected_step_median_us = us(detail::median(cor));
  }
  s.framework = ctx.framework;
  s.other_thread_data_waits = ctx.other_thread_waits;
  s.other_thread_data_wait_us = us(ctx.other_thread_wait_ns);
  if (auto it = trace.meta.find("python.hooks"); it != trace.meta.end()) s.python_hooks = it->second;
  if (auto it = trace.meta.find("flight.trigger"); it != trace.meta.end()) {
    s.flight_trigger = it->second;
    if (auto d = trace.meta.find("flight.detail"); d != trace.meta.end()) s.flight_detail = d->second;
    if (auto d = trace.meta.find("flight.gpu_steps"); d != trace.meta.end()) s.flight_gpu_steps = d->second;
    if (auto d = trace.meta.find("flight.step"); d != trace.meta.end()) s.flight_step = std::atoll(d->second.c_str());
  }
  if (auto it = trace.meta.find("import.unread_device_events"); it != trace.meta.end())
    s.unread_device_events = it->second;
  if (auto it = trace.meta.find("import.dropped_events"); it != trace.meta.end()) {
    // "(no ph):984,f:12,s:12": the kinds the importer does not keep (flows, instants) are no loss; "(...)" are.
    for (const auto& [name, n] : import::parse_event_counts(it->second))
      if (!name.empty() && name.front() == '(')
        s.malformed_events += (s.malformed_events.empty() ? "" : ",") + name + (n < 0 ? "" : ":" + std::to_string(n));
  }

}

void detail::complete(Context& ctx, const AnalyzeOptions& options, Analysis& a) {
  const store::Trace& trace = ctx.t();
  kernel_stats(trace, a);
  utilization(ctx, a);
  fill_host_activity(ctx, a);
  a.data_waits.reserve(ctx.data_waits.size());
  for (const auto& w : ctx.data_waits) a.data_waits.push_back({w.start, w.end});
  per_device_busy(ctx, ctx.steps);
  {
    // The walk's host timelines serve the replay and go before the breakdowns below (36 bytes a host call).
    detail::HostTimelines timelines;
    a.critical_path = detail::critical_paths(ctx, options.critical_path_segments, &timelines);
    a.what_if = detail::what_if(ctx, a.findings, options.what_if_loader_workers, &timelines);
  }
  // What follows reads the trace and the steps: the per-op and per-call arrays go before the breakdowns' own.
  auto release = [](auto& v) { std::remove_reference_t<decltype(v)>().swap(v); };
  release(ctx.ops), release(ctx.busy), release(ctx.idle), release(ctx.blocking), release(ctx.api_op_count);
  for (auto& f : a.findings)
    for (const auto& c : a.what_if.cures)
      if (c.rule == f.rule) {  // the first cure of a rule: launch-overhead's CUDA graphs
        f.replayed_cure = c.cure, f.replayed_step_us = c.step_us, f.replayed_saving_us = c.saving_us;
        break;
      }
  a.steps = std::move(ctx.steps);
  // The rows the views show: the steps in the GPU's time where the host runs ahead.
  const std::vector<StepBreakdown>& judged = a.gpu_steps.empty() ? a.steps : a.gpu_steps;
  a.step_outliers = explain_slow_steps(trace, judged, ctx.training_pid, ctx.training_tid);
  a.step_outliers.gpu_time = !a.gpu_steps.empty();
  a.step_outliers.steps = int64_t(judged.size());
  a.gpu_breakdowns = gpu_breakdowns(trace);
  a.graphs = std::move(ctx.graphs);
}











}  // namespace stepscope::analyzer
