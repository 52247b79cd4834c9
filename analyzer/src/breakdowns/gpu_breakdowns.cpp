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

// One piece of GPU work: a kernel, a copy or a memset (names are views into the trace's strings).
enum class OpType : uint8_t { Computation, Communication, Memory, Other };

struct GpuOp {
  int64_t start = 0, end = 0, device = 0, stream = 0, correlation = 0, pid = 0;
  std::string_view name;  // kernel name, "Memcpy" or "Memset"
  OpType type = OpType::Other;
};

// HTA's words for them; an overlap is named in this order ("COMPUTATION overlapping MEMORY").
const char* type_name(OpType t) {
  static const char* kNames[] = {"COMPUTATION", "COMMUNICATION", "MEMORY", "OTHER"};
  return kNames[int(t)];
}

// HTA 0.5, hta/utils/utils.py: NCCL_KERNEL_RE, MEMORY_KERNEL_RE, NCCL_COMPUTE_KERNEL_RE (all re.match).
OpType kernel_type(std::string_view name) {
  auto starts = [name](std::string_view p) { return name.substr(0, p.size()) == p; };
  if (starts("nccl") && name.find("Kernel", 4) != std::string_view::npos) return OpType::Communication;
  if (starts("Memcpy") || starts("Memset") || starts("dma")) return OpType::Memory;
  if (name.find("Memcpy") != std::string_view::npos || starts("Memset") || name.find("Sync") != std::string_view::npos)
    return OpType::Other;
  return OpType::Computation;
}

// Mean and sample standard deviation (n − 1, as pandas), for the queue lengths and the annotation durations.
template <class V>
std::pair<double, double> mean_std(const V& values) {
  double sum = 0;
  for (auto v : values) sum += double(v);
  const double mean = sum / double(values.size());
  double ss = 0;
  for (auto v : values) ss += (double(v) - mean) * (double(v) - mean);
  return {mean, values.size() > 1 ? std::sqrt(ss / double(values.size() - 1)) : 0.0};
}

// Every kernel, copy and memset as a GpuOp, made on the fly (a million kernels need no second copy).
class GpuOps {
 public:
  explicit GpuOps(const store::Trace& t) : t_(t) {
    std::unordered_map<store::StringId, OpType> by_name;  // one classification per kernel name
    kernel_type_.reserve(t.kernels.size());
    for (const auto& k : t.kernels) {
      auto [it, fresh] = by_name.emplace(k.name, OpType::Other);
      if (fresh) it->second = kernel_type(t.str(k.name));
      kernel_type_.push_back(it->second);
    }
  }
  size_t size() const { return t_.kernels.size() + t_.memcpys.size() + t_.memsets.size(); }
  // f(op, i): i numbers the ops 0..size()-1 in this order, every time.
  template <class F>
  void each(F f) const {
    size_t i = 0;
    for (size_t k = 0; k < t_.kernels.size(); ++k, ++i) {
      const auto& r = t_.kernels[k];
      f(GpuOp{r.start, r.end, r.device, r.stream, r.correlation, r.pid, t_.str(r.name), kernel_type_[k]}, i);
    }
    for (const auto& m : t_.memcpys)
      f(GpuOp{m.start, m.end, m.device, m.stream, m.correlation, m.pid, "Memcpy", OpType::Memory}, i++);
    for (const auto& m : t_.memsets)
      f(GpuOp{m.start, m.end, m.device, m.stream, m.correlation, m.pid, "Memset", OpType::Memory}, i++);
  }

 private:
  const store::Trace& t_;
  std::vector<OpType> kernel_type_;
};

std::vector<KernelTypeTime> kernel_types(const GpuOps& ops) {
  // Each type a bit, in HTA's order.
  std::vector<std::pair<int64_t, int>> edges;  // (time, +bit at a merged interval's start, −bit at its end)
  std::vector<std::pair<int64_t, int64_t>> by_type[3];
  ops.each([&](const GpuOp& o, size_t) {
    if (o.type != OpType::Other && o.end >= o.start) by_type[int(o.type)].push_back({o.start, o.end});
  });
  for (int bit = 0; bit < 3; ++bit) {
    auto& iv = by_type[bit];
    if (!std::is_sorted(iv.begin(), iv.end())) std::sort(iv.begin(), iv.end());
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
      if (mask & (1 << bit)) name += (name.empty() ? "" : " overlapping ") + std::string(type_name(OpType(bit)));
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
  double sum = 0;
  for (double x : v) sum += x;
  d.mean_us = sum / double(v.size());
  // Nearest rank: the smallest value with at least q of them at or below it (selection, not a sort).
  auto rank = [&v](double q) {
    const size_t i = std::min(v.size() - 1, size_t(std::max(1.0, std::ceil(q * double(v.size())))) - 1);
    std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(i), v.end());
    return v[i];
  };
  d.p50_us = rank(0.50), d.p90_us = rank(0.90), d.p99_us = rank(0.99);
  d.max_us = *std::max_element(v.begin(), v.end());
  return d;
}

// The launch call of each GPU op, by correlation id (and process, where both are known): one sorted array, no
// per-id allocation (a million launches are common), shared by the launch statistics and the queues.
struct CallIndex {
  struct Entry {
    int64_t correlation;
    const store::ApiCall* call;
    bool launch_stat;  // one of the calls the launch statistics join (the queues take them all)
  };
  std::vector<Entry> by_correlation;
  const Entry* find(const GpuOp& o) const {
    if (o.correlation <= 0) return nullptr;
    auto it = std::lower_bound(by_correlation.begin(), by_correlation.end(), o.correlation,
                               [](const Entry& e, int64_t c) { return e.correlation < c; });
    for (; it != by_correlation.end() && it->correlation == o.correlation; ++it)
      if (o.pid == 0 || it->call->pid == 0 || it->call->pid == o.pid) return &*it;
    return nullptr;
  }
};

CallIndex index_calls(const store::Trace& t) {
  CallIndex idx;
  std::unordered_map<store::StringId, int> kind;  // 0 no, 1 queue only, 2 queue and launch statistics
  for (const auto& c : t.api_calls) {
    auto [it, fresh] = kind.emplace(c.name, 0);
    if (fresh) {
      const std::string& n = t.str(c.name);
      it->second = launch_stat_calls().count(n) ? 2 : queue_calls().count(n) ? 1 : 0;
    }
    if (it->second && c.correlation > 0) idx.by_correlation.push_back({c.correlation, &c, it->second == 2});
  }
  auto before = [](const CallIndex::Entry& a, const CallIndex::Entry& b) {
    return a.correlation != b.correlation ? a.correlation < b.correlation : a.call < b.call;  // trace order within an id
  };
  if (!std::is_sorted(idx.by_correlation.begin(), idx.by_correlation.end(), before))
    std::sort(idx.by_correlation.begin(), idx.by_correlation.end(), before);
  return idx;
}

LaunchStats launch_stats(const store::Trace& t, const GpuOps& ops, const std::vector<const CallIndex::Entry*>& call) {
  LaunchStats s;
  size_t joined = 0;
  for (const auto* c : call) joined += c && c->launch_stat;
  std::vector<double> cpu, gpu, delay;
  cpu.reserve(joined), gpu.reserve(joined), delay.reserve(joined);
  std::vector<std::pair<double, std::pair<GpuOp, const store::ApiCall*>>> worst;  // a min-heap of kMaxOutliers
  auto later = [](const auto& a, const auto& b) { return a.first > b.first; };
  ops.each([&](const GpuOp& o, size_t i) {
    if (!call[i] || !call[i]->launch_stat) return;
    const store::ApiCall* c = call[i]->call;
    const double c_us = us(c->end - c->start), g_us = us(o.end - o.start);
    const double d_us = std::max(0.0, us(o.start - c->end));
    cpu.push_back(c_us), gpu.push_back(g_us), delay.push_back(d_us);
    s.gpu_shorter_than_cpu += g_us < c_us;
    s.cpu_over_cutoff += c_us > LaunchStats::kRuntimeCutoffUs;
    s.delay_over_cutoff += d_us > LaunchStats::kLaunchDelayCutoffUs;
    if (worst.size() < kMaxOutliers || d_us > worst.front().first) {
      worst.push_back({d_us, {o, c}});
      std::push_heap(worst.begin(), worst.end(), later);
      if (worst.size() > kMaxOutliers) {
        std::pop_heap(worst.begin(), worst.end(), later);
        worst.pop_back();
      }
    }
  });
  s.count = int64_t(cpu.size());
  s.cpu_duration = distribution(std::move(cpu));
  s.gpu_duration = distribution(std::move(gpu));
  s.launch_delay = distribution(std::move(delay));
  std::sort_heap(worst.begin(), worst.end(), later);
  for (const auto& [d_us, oc] : worst)
    s.longest_delays.push_back({t.str(oc.second->name), std::string(oc.first.name), oc.first.correlation,
                                oc.second->start, d_us});
  return s;
}

// pandas' quantile: linear interpolation between the closest ranks.
double quantile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(sorted.size() - 1, lo + 1);
  return double(sorted[lo]) + (pos - double(lo)) * double(sorted[hi] - sorted[lo]);
}

std::vector<StreamQueue> queues(const GpuOps& ops, const std::vector<const CallIndex::Entry*>& call) {
  // Per stream: (time, +1 | −1), the enqueues before the starts at equal times (HTA concatenates them so).
  std::map<std::pair<int64_t, int64_t>, std::vector<std::tuple<int64_t, int, int>>> events;
  ops.each([&](const GpuOp& o, size_t i) {
    if (!call[i]) return;
    const store::ApiCall* c = call[i]->call;
    auto& e = events[{o.device, o.stream}];
    e.emplace_back(c->start, 0, +1);
    e.emplace_back(o.start, 1, -1);
  });
  std::vector<StreamQueue> out;
  for (auto& [key, e] : events) {
    // Equal times: the enqueue before the start (HTA concatenates them so); equal (time, kind) pairs change by
    // the same amount, so their order does not matter.
    auto earlier = [](const auto& a, const auto& b) {
      return std::get<0>(a) != std::get<0>(b) ? std::get<0>(a) < std::get<0>(b) : std::get<1>(a) < std::get<1>(b);
    };
    std::sort(e.begin(), e.end(), earlier);
    StreamQueue q;
    q.device = key.first, q.stream = key.second;
    std::vector<int64_t> values;
    values.reserve(e.size());
    int64_t len = 0;
    for (const auto& ev : e) values.push_back(len += std::get<2>(ev));
    q.events = int64_t(values.size());
    std::tie(q.mean, q.std) = mean_std(values);
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
    std::tie(a.mean_us, a.std_us) = mean_std(durs);
    out.push_back(std::move(a));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.sum_us > b.sum_us || (a.sum_us == b.sum_us && a.name < b.name); });
  return out;
}

}  // namespace

const char* hta_kernel_type(const std::string& name) { return type_name(kernel_type(name)); }

GpuBreakdowns gpu_breakdowns(const store::Trace& t) {
  GpuBreakdowns b;
  const GpuOps ops(t);
  b.kernel_types = kernel_types(ops);
  const CallIndex idx = index_calls(t);
  std::vector<const CallIndex::Entry*> call(ops.size(), nullptr);  // each op's launch call, joined once
  ops.each([&](const GpuOp& o, size_t i) { call[i] = idx.find(o); });
  b.launch = launch_stats(t, ops, call);
  b.queues = queues(ops, call);
  b.annotations = annotations(t);
  return b;
}


}  // namespace stepscope::analyzer
