// HTA's breakdowns (stepscope/analyzer/gpu_breakdowns.h), computed from the store's rows with HTA 0.5's
// definitions so that bench/hta_compare can hold them against HTA itself.
#include "stepscope/analyzer/gpu_breakdowns.h"

#include "stepscope/analyzer/correlation_index.h"
#include "stepscope/analyzer/json_writer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
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
      auto it = by_name.find(k.name);  // not emplace: it allocates a node before it looks (one a kernel)
      if (it == by_name.end()) it = by_name.emplace(k.name, kernel_type(t.str(k.name))).first;
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

// v: reordered (selection).
Distribution distribution(std::vector<double>& v) {
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

// Each GPU op's launch call, joined once through the analysis' own join (CorrelationIndex: by correlation id,
// and by process where both are known) over the calls the queues count: its api_calls row, 4 bytes an op,
// kNone where it has none (a million launches are common). The launch statistics take the calls of
// launch_stat_calls() among them.
struct OpCalls {
  static constexpr uint32_t kNone = UINT32_MAX;
  enum Kind : uint8_t { kOther, kQueue, kLaunchStat };
  std::vector<uint32_t> row;
  std::unordered_map<store::StringId, Kind> kind_of;  // by call name

  OpCalls(const store::Trace& t, const GpuOps& ops) : row(ops.size(), kNone) {
    if (t.api_calls.size() >= size_t(kNone))
      throw std::length_error("more than 2^32 API calls: too many for the launch statistics");
    const CorrelationIndex launches(t.api_calls,
                                    [&](uint32_t r) { return kind(t, t.api_calls[r].name) != kOther; });
    ops.each([&](const GpuOp& o, size_t i) {
      if (o.correlation <= 0) return;
      if (const int64_t r = launches.find(o.correlation, o.pid); r >= 0) row[i] = uint32_t(r);
    });
  }
  Kind kind(const store::Trace& t, store::StringId name) {
    auto it = kind_of.find(name);
    if (it == kind_of.end()) {
      const std::string& n = t.str(name);
      it = kind_of
               .emplace(name, launch_stat_calls().count(n) ? kLaunchStat
                              : queue_calls().count(n)     ? kQueue
                                                           : kOther)
               .first;
    }
    return it->second;
  }
  // The op's call where the launch statistics join it, else nullptr.
  const store::ApiCall* launch_stat_call(const store::Trace& t, size_t i) const {
    if (row[i] == kNone) return nullptr;
    const store::ApiCall& c = t.api_calls[row[i]];
    return kind_of.at(c.name) == kLaunchStat ? &c : nullptr;
  }
};

LaunchStats launch_stats(const store::Trace& t, const GpuOps& ops, const OpCalls& call) {
  LaunchStats s;
  auto joined_call = [&](size_t i) { return call.launch_stat_call(t, i); };
  const auto cpu_us = [](const GpuOp&, const store::ApiCall& c) { return us(c.end - c.start); };
  const auto gpu_us = [](const GpuOp& o, const store::ApiCall&) { return us(o.end - o.start); };
  const auto delay_us = [](const GpuOp& o, const store::ApiCall& c) {
    return std::max(0.0, us(o.start - c.end));
  };
  size_t joined = 0;
  for (size_t i = 0; i < call.row.size(); ++i) joined += joined_call(i) != nullptr;
  // One distribution at a time in one array (8 bytes a joined op, not 24): the CPU's from this pass.
  std::vector<double> v;
  v.reserve(joined);
  std::vector<std::pair<double, std::pair<GpuOp, const store::ApiCall*>>> worst;  // a min-heap of kMaxOutliers
  auto later = [](const auto& a, const auto& b) { return a.first > b.first; };
  ops.each([&](const GpuOp& o, size_t i) {
    const store::ApiCall* c = joined_call(i);
    if (!c) return;
    const double c_us = cpu_us(o, *c), g_us = gpu_us(o, *c), d_us = delay_us(o, *c);
    v.push_back(c_us);
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
  s.count = int64_t(joined);
  s.cpu_duration = distribution(v);
  auto each_joined = [&](auto value) {
    v.clear();
    ops.each([&](const GpuOp& o, size_t i) {
      if (const store::ApiCall* c = joined_call(i)) v.push_back(value(o, *c));
    });
    return distribution(v);
  };
  s.gpu_duration = each_joined(gpu_us);
  s.launch_delay = each_joined(delay_us);
  std::sort_heap(worst.begin(), worst.end(), later);
  for (const auto& [d_us, oc] : worst)
    s.longest_delays.push_back({t.str(oc.second->name), std::string(oc.first.name), oc.first.correlation,
                                oc.second->start, d_us});
  return s;
}

// pandas' quantile: linear interpolation between the closest ranks (rank(k): the k-th smallest value).
template <class Rank>
double quantile(size_t n, Rank rank, double q) {
  if (n == 0) return 0;
  const double pos = q * double(n - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(n - 1, lo + 1);
  const int64_t at_lo = rank(lo), at_hi = rank(hi);
  return double(at_lo) + (pos - double(lo)) * double(at_hi - at_lo);
}

// One stream's queue: its launch calls' starts (+1) and its ops' starts (−1), each sorted, walked as one
// sequence with the enqueue first at equal times (HTA concatenates them so; equal (time, kind) pairs change
// the length by the same amount, so their order does not matter). 16 bytes an op; the lengths are never
// stored: they move by one, so a count per length between the smallest and the largest gives the quantiles.
StreamQueue stream_queue(int64_t device, int64_t stream, std::vector<int64_t>& enq,
                         std::vector<int64_t>& starts) {
  if (!std::is_sorted(enq.begin(), enq.end())) std::sort(enq.begin(), enq.end());
  if (!std::is_sorted(starts.begin(), starts.end())) std::sort(starts.begin(), starts.end());
  auto walk = [&](auto f) {  // f(time, length after the event)
    int64_t len = 0;
    size_t i = 0, j = 0;
    while (i < enq.size() || j < starts.size())
      if (j == starts.size() || (i < enq.size() && enq[i] <= starts[j]))
        f(enq[i++], ++len);
      else
        f(starts[j++], --len);
  };
  StreamQueue q;
  q.device = device, q.stream = stream;
  const size_t n = enq.size() + starts.size();
  q.events = int64_t(n);
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  double sum = 0;
  walk([&](int64_t, int64_t v) { lo = std::min(lo, v), hi = std::max(hi, v), sum += double(v); });
  const double mean = sum / double(n);
  std::vector<int64_t> count(size_t(hi - lo) + 1, 0);
  double ss = 0;
  int64_t prev_t = 0, prev_v = INT64_MIN;
  walk([&](int64_t t, int64_t v) {
    ss += (double(v) - mean) * (double(v) - mean);
    ++count[size_t(v - lo)];
    if (prev_v >= hi) q.ns_at_max += t - prev_t;
    prev_t = t, prev_v = v;
  });
  q.mean = mean;
  q.std = n > 1 ? std::sqrt(ss / double(n - 1)) : 0.0;  // sample deviation (n − 1, as pandas)
  auto rank = [&](size_t k) {
    size_t seen = 0;
    for (size_t b = 0; b < count.size(); ++b)
      if ((seen += size_t(count[b])) > k) return lo + int64_t(b);
    return hi;
  };
  q.min = double(lo), q.max = double(hi);
  q.p25 = quantile(n, rank, 0.25), q.p50 = quantile(n, rank, 0.50), q.p75 = quantile(n, rank, 0.75);
  return q;
}

std::vector<StreamQueue> queues(const store::Trace& t, const GpuOps& ops, const OpCalls& call) {
  struct Times {
    std::vector<int64_t> enq, starts;
  };
  std::map<std::pair<int64_t, int64_t>, Times> by_stream;
  ops.each([&](const GpuOp& o, size_t i) {
    if (call.row[i] == OpCalls::kNone) return;
    Times& s = by_stream[{o.device, o.stream}];
    s.enq.push_back(t.api_calls[call.row[i]].start);
    s.starts.push_back(o.start);
  });
  std::vector<StreamQueue> out;
  for (auto& [key, times] : by_stream) {
    out.push_back(stream_queue(key.first, key.second, times.enq, times.starts));
    times = Times{};  // freed as it is done
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
  const OpCalls call(t, ops);
  b.launch = launch_stats(t, ops, call);
  b.queues = queues(t, ops, call);
  b.annotations = annotations(t);
  return b;
}


}  // namespace stepscope::analyzer
