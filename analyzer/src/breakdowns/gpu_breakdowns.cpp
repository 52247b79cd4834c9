// HTA's breakdowns (stepscope/analyzer/gpu_breakdowns.h), computed from the store's rows with HTA 0.5's
// definitions so that bench/hta_compare can hold them against HTA itself.
#include "stepscope/analyzer/gpu_breakdowns.h"

#include "stepscope/analyzer/json_writer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

namespace stepscope::analyzer {
namespace {

constexpr size_t kMaxOutliers = 5;

double us(int64_t ns) { return double(ns) / 1000.0; }

// Calls that launch GPU work, as HTA names them: launch statistics use the first four (with memory events, its
// default); queue lengths also count cuLaunchKernel and the HIP calls.
const std::unordered_set<std::string>& launch_stat_calls() {
  static const std::unordered_set<std::string> s = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync",
                                                    "cudaMemsetAsync"};
  return s;
}
const std::unordered_set<std::string>& queue_calls() {
  static const std::unordered_set<std::string> s = {
      "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
      "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream"};
  return s;
}

// One piece of GPU work: a kernel, a copy or a memset.
struct GpuOp {
  int64_t start = 0, end = 0, device = 0, stream = 0, correlation = 0, pid = 0;
  std::string name;  // kernel name, "Memcpy" or "Memset"
  const char* type = "OTHER";
};

std::vector<GpuOp> gpu_ops(const store::Trace& t) {
  std::vector<GpuOp> ops;
  ops.reserve(t.kernels.size() + t.memcpys.size() + t.memsets.size());
  for (const auto& k : t.kernels) {
    GpuOp o{k.start, k.end, k.device, k.stream, k.correlation, k.pid, t.str(k.name)};
    o.type = hta_kernel_type(o.name);
    ops.push_back(std::move(o));
  }
  for (const auto& m : t.memcpys) ops.push_back({m.start, m.end, m.device, m.stream, m.correlation, m.pid, "Memcpy", "MEMORY"});
  for (const auto& m : t.memsets) ops.push_back({m.start, m.end, m.device, m.stream, m.correlation, m.pid, "Memset", "MEMORY"});
  return ops;
}

std::vector<KernelTypeTime> kernel_types(const std::vector<GpuOp>& ops) {
  // HTA's order gives each type a bit: an overlap is named in this order ("COMPUTATION overlapping MEMORY").
  static const char* kTypes[] = {"COMPUTATION", "COMMUNICATION", "MEMORY"};
  std::vector<std::pair<int64_t, int>> edges;  // (time, +bit at a merged interval's start, −bit at its end)
  for (int bit = 0; bit < 3; ++bit) {
    std::vector<std::pair<int64_t, int64_t>> iv;
    for (const auto& o : ops)
      if (std::string(o.type) == kTypes[bit] && o.end >= o.start) iv.push_back({o.start, o.end});
    std::sort(iv.begin(), iv.end());
    for (size_t i = 0; i < iv.size();) {
      int64_t s = iv[i].first, e = iv[i].second;
      for (++i; i < iv.size() && iv[i].first <= e; ++i) e = std::max(e, iv[i].second);
      edges.push_back({s, 1 << bit});
      edges.push_back({e, -(1 << bit)});
    }
  }
  std::sort(edges.begin(), edges.end());
  std::map<int, int64_t> by_mask;
  int running = 0;
  for (size_t i = 0; i < edges.size(); ++i) {
    running += edges[i].second;
    if (running > 0 && i + 1 < edges.size()) by_mask[running] += edges[i + 1].first - edges[i].first;
  }
  std::vector<KernelTypeTime> out;
  int64_t total = 0;
  for (auto& [mask, ns] : by_mask) {
    if (ns <= 0) continue;
    std::string name;
    for (int bit = 0; bit < 3; ++bit)
      if (mask & (1 << bit)) name += (name.empty() ? "" : " overlapping ") + std::string(kTypes[bit]);
    out.push_back({name, ns, 0});
    total += ns;
  }
  for (auto& k : out) k.percent = total > 0 ? 100.0 * double(k.ns) / double(total) : 0;
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ns > b.ns || (a.ns == b.ns && a.type < b.type); });
  return out;
}

Distribution distribution(std::vector<double> v) {
  Distribution d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto rank = [&v](double q) {  // nearest rank: the smallest value with at least q of them at or below it
    const size_t i = size_t(std::ceil(q * double(v.size())));
    return v[std::min(v.size() - 1, i > 0 ? i - 1 : 0)];
  };
  d.mean_us = sum / double(v.size());
  d.p50_us = rank(0.50), d.p90_us = rank(0.90), d.p99_us = rank(0.99), d.max_us = v.back();
  return d;
}

// The launch call of each GPU op, by correlation id (and process, where both are known).
struct CallIndex {
  std::unordered_map<int64_t, std::vector<const store::ApiCall*>> by_correlation;
  const store::ApiCall* find(const GpuOp& o) const {
    if (o.correlation <= 0) return nullptr;
    auto it = by_correlation.find(o.correlation);
    if (it == by_correlation.end()) return nullptr;
    for (const auto* c : it->second)
      if (o.pid == 0 || c->pid == 0 || c->pid == o.pid) return c;
    return nullptr;
  }
};

CallIndex index_calls(const store::Trace& t, const std::unordered_set<std::string>& names) {
  CallIndex idx;
  std::unordered_map<store::StringId, bool> wanted;
  for (const auto& c : t.api_calls) {
    auto [it, fresh] = wanted.emplace(c.name, false);
    if (fresh) it->second = names.count(t.str(c.name)) > 0;
    if (it->second && c.correlation > 0) idx.by_correlation[c.correlation].push_back(&c);
  }
  return idx;
}

LaunchStats launch_stats(const store::Trace& t, const std::vector<GpuOp>& ops) {
  LaunchStats s;
  const CallIndex idx = index_calls(t, launch_stat_calls());
  std::vector<double> cpu, gpu, delay;
  std::vector<LaunchStats::Outlier> delays;
  for (const auto& o : ops) {
    const store::ApiCall* c = idx.find(o);
    if (!c) continue;
    const double c_us = us(c->end - c->start), g_us = us(o.end - o.start);
    const double d_us = std::max(0.0, us(o.start - c->end));
    cpu.push_back(c_us), gpu.push_back(g_us), delay.push_back(d_us);
    s.gpu_shorter_than_cpu += g_us < c_us;
    s.cpu_over_cutoff += c_us > LaunchStats::kRuntimeCutoffUs;
    s.delay_over_cutoff += d_us > LaunchStats::kLaunchDelayCutoffUs;
    delays.push_back({t.str(c->name), o.name, o.correlation, c->start, d_us});
  }
  s.count = int64_t(cpu.size());
  s.cpu_duration = distribution(std::move(cpu));
  s.gpu_duration = distribution(std::move(gpu));
  s.launch_delay = distribution(std::move(delay));
  const size_t n = std::min(kMaxOutliers, delays.size());
  std::partial_sort(delays.begin(), delays.begin() + std::ptrdiff_t(n), delays.end(),
                    [](const auto& a, const auto& b) { return a.delay_us > b.delay_us; });
  delays.resize(n);
  s.longest_delays = std::move(delays);
  return s;
}

// pandas' quantile: linear interpolation between the closest ranks.
double quantile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(sorted.size() - 1, lo + 1);
  return double(sorted[lo]) + (pos - double(lo)) * double(sorted[hi] - sorted[lo]);
}

std::vector<StreamQueue> queues(const store::Trace& t, const std::vector<GpuOp>& ops) {
  const CallIndex idx = index_calls(t, queue_calls());
  // Per stream: (time, +1 | −1), the enqueues before the starts at equal times (HTA concatenates them so).
  std::map<std::pair<int64_t, int64_t>, std::vector<std::tuple<int64_t, int, int>>> events;
  for (const auto& o : ops) {
    const store::ApiCall* c = idx.find(o);
    if (!c) continue;
    auto& e = events[{o.device, o.stream}];
    e.emplace_back(c->start, 0, +1);
    e.emplace_back(o.start, 1, -1);
  }
  std::vector<StreamQueue> out;
  for (auto& [key, e] : events) {
    std::stable_sort(e.begin(), e.end(), [](const auto& a, const auto& b) {
      return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) < std::get<0>(b) : std::get<1>(a) < std::get<1>(b);
    });
    StreamQueue q;
    q.device = key.first, q.stream = key.second;
    std::vector<int64_t> values;
    values.reserve(e.size());
    int64_t len = 0;
    for (const auto& ev : e) values.push_back(len += std::get<2>(ev));
    q.events = int64_t(values.size());
    double sum = 0;
    for (int64_t v : values) sum += double(v);
    q.mean = sum / double(values.size());
    double ss = 0;
    for (int64_t v : values) ss += (double(v) - q.mean) * (double(v) - q.mean);
    q.std = values.size() > 1 ? std::sqrt(ss / double(values.size() - 1)) : 0;
    const int64_t max = *std::max_element(values.begin(), values.end());
    for (size_t i = 0; i + 1 < values.size(); ++i)
      if (values[i] >= max) q.ns_at_max += std::get<0>(e[i + 1]) - std::get<0>(e[i]);
    std::vector<int64_t> sorted = values;
    std::sort(sorted.begin(), sorted.end());
    q.min = double(sorted.front()), q.max = double(max);
    q.p25 = quantile(sorted, 0.25), q.p50 = quantile(sorted, 0.50), q.p75 = quantile(sorted, 0.75);
    out.push_back(q);
  }
  return out;
}

std::vector<AnnotationTime> annotations(const store::Trace& t) {
  std::unordered_map<store::StringId, std::vector<double>> by_name;
  for (const auto& r : t.ranges)
    if (r.source == store::RangeSource::GpuAnnotation) by_name[r.name].push_back(us(r.end - r.start));
  std::vector<AnnotationTime> out;
  for (auto& [name, durs] : by_name) {
    AnnotationTime a;
    a.name = t.str(name);
    a.count = int64_t(durs.size());
    a.min_us = *std::min_element(durs.begin(), durs.end());
    a.max_us = *std::max_element(durs.begin(), durs.end());
    for (double d : durs) a.sum_us += d;
    a.mean_us = a.sum_us / double(durs.size());
    double ss = 0;
    for (double d : durs) ss += (d - a.mean_us) * (d - a.mean_us);
    a.std_us = durs.size() > 1 ? std::sqrt(ss / double(durs.size() - 1)) : 0;
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.sum_us > b.sum_us || (a.sum_us == b.sum_us && a.name < b.name); });
  return out;
}

}  // namespace

const char* hta_kernel_type(const std::string& name) {
  // HTA 0.5, hta/utils/utils.py: NCCL_KERNEL_RE, MEMORY_KERNEL_RE, NCCL_COMPUTE_KERNEL_RE (all re.match).
  auto starts = [&name](const char* p) { return name.rfind(p, 0) == 0; };
  const bool nccl = starts("nccl") && name.find("Kernel", 4) != std::string::npos;
  if (nccl) return "COMMUNICATION";
  if (starts("Memcpy") || starts("Memset") || starts("dma")) return "MEMORY";
  if (name.find("Memcpy") != std::string::npos || starts("Memset") || name.find("Sync") != std::string::npos)
    return "OTHER";
  return "COMPUTATION";
}

GpuBreakdowns gpu_breakdowns(const store::Trace& t) {
  GpuBreakdowns b;
  const std::vector<GpuOp> ops = gpu_ops(t);
  b.kernel_types = kernel_types(ops);
  b.launch = launch_stats(t, ops);
  b.queues = queues(t, ops);
  b.annotations = annotations(t);
  return b;
}

std::string gpu_breakdowns_to_json(const GpuBreakdowns& b) {
  std::string out;
  JsonWriter w(out);
  auto dist = [&w](const char* key, const Distribution& d) {
    w.key(key).begin_object().kv("mean_us", d.mean_us).kv("p50_us", d.p50_us).kv("p90_us", d.p90_us);
    w.kv("p99_us", d.p99_us).kv("max_us", d.max_us).end_object();
  };
  w.begin_object();
  w.key("kernel_types").begin_array();
  for (const auto& k : b.kernel_types)
    w.begin_object().kv("type", k.type).kv("us", us(k.ns)).kv("percent", k.percent).end_object();
  w.end_array();
  const LaunchStats& l = b.launch;
  w.key("launch_stats").begin_object().kv("count", l.count);
  dist("cpu_duration", l.cpu_duration);
  dist("gpu_duration", l.gpu_duration);
  dist("launch_delay", l.launch_delay);
  w.kv("gpu_shorter_than_cpu", l.gpu_shorter_than_cpu);
  w.kv("runtime_cutoff_us", LaunchStats::kRuntimeCutoffUs).kv("cpu_over_cutoff", l.cpu_over_cutoff);
  w.kv("launch_delay_cutoff_us", LaunchStats::kLaunchDelayCutoffUs).kv("delay_over_cutoff", l.delay_over_cutoff);
  w.key("longest_delays").begin_array();
  for (const auto& o : l.longest_delays)
    w.begin_object()
        .kv("api", o.api)
        .kv("name", o.name)
        .kv("correlation", o.correlation)
        .kv("call_start_us", us(o.call_start_ns))
        .kv("delay_us", o.delay_us)
        .end_object();
  w.end_array().end_object();
  w.key("queues").begin_array();
  for (const auto& q : b.queues)
    w.begin_object()
        .kv("device", q.device)
        .kv("stream", q.stream)
        .kv("events", q.events)
        .kv("mean", q.mean)
        .kv("std", q.std)
        .kv("min", q.min)
        .kv("p25", q.p25)
        .kv("p50", q.p50)
        .kv("p75", q.p75)
        .kv("max", q.max)
        .kv("us_at_max", us(q.ns_at_max))
        .end_object();
  w.end_array();
  w.key("annotations").begin_array();
  for (const auto& a : b.annotations)
    w.begin_object()
        .kv("name", a.name)
        .kv("count", a.count)
        .kv("sum_us", a.sum_us)
        .kv("mean_us", a.mean_us)
        .kv("min_us", a.min_us)
        .kv("max_us", a.max_us)
        .kv("std_us", a.std_us)
        .end_object();
  w.end_array();
  w.end_object();
  return out;
}

}  // namespace stepscope::analyzer
