// launch-overhead: the GPU idles between many short kernels while the host issues them one by one.
#include <algorithm>
#include <array>
#include <unordered_map>

#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

class LaunchOverheadRule final : public Rule {
 public:
  // Launch idle must be at least this share of the GPU idle inside steps (the idle is really there).
  static constexpr double kMinShareOfIdle = 0.50;
  // At least this fraction of kernels must run shorter than their launch call (HTA "short kernels").
  static constexpr double kMinShortKernelFraction = 0.50;
  // No finding when at least this share of the kernels was replayed from CUDA/HIP graphs.
  static constexpr double kMaxGraphKernelShare = 0.50;
  // TensorFlow profiler's kernel-launch thresholds, as a share of step time: >= 15% high, >= 3% medium.
  static constexpr double kHighShare = 0.15;
  static constexpr double kMediumShare = 0.03;
  // Inter-kernel gap that remains per kernel once launches are fused or captured in a CUDA graph.
  static constexpr int64_t kResidualGapNs = 2'000;
  // Fusion candidates: consecutive kernel sequences of this length, top N by count.
  static constexpr size_t kSequenceLength = 3;
  static constexpr size_t kTopSequences = 5;

  const char* id() const override { return "launch-overhead"; }

  void run(const detail::Context& ctx, std::vector<FindingResult>& out) const override {
    if (ctx.total_step_ns <= 0 || ctx.busy.empty()) return;
    const store::Trace& t = ctx.t();
    int64_t launch = 0;
    for (const auto& s : ctx.steps) launch += s.launch_idle_ns;
    if (ctx.total_gpu_idle_ns <= 0) return;
    double share_of_idle = double(launch) / double(ctx.total_gpu_idle_ns);
    double share = double(launch) / double(ctx.total_step_ns);
    if (share_of_idle < kMinShareOfIdle || share < kMediumShare) return;

    // Short kernels and launch-call cost, over kernels launched inside steps.
    int64_t kernels = 0, with_api = 0, shorter = 0, api_ns = 0, kern_ns = 0, from_graphs = 0;
    std::unordered_map<store::StringId, bool> graph_api;
    std::vector<const detail::GpuOp*> seq;  // kernels in start order, per step
    for (const auto& op : ctx.ops) {
      if (op.kind != detail::GpuOpKind::Kernel || op.step < 0) continue;
      ++kernels;
      seq.push_back(&op);
      kern_ns += op.end - op.start;
      if (t.kernels[op.index].graph_id != 0) {
        ++from_graphs;
        continue;
      }
      if (op.api < 0) continue;
      const auto& a = t.api_calls[op.api];
      auto g = graph_api.find(a.name);
      if (g == graph_api.end()) g = graph_api.emplace(a.name, t.str(a.name).find("GraphLaunch") != std::string::npos).first;
      if (g->second) {
        ++from_graphs;
        continue;
      }
      ++with_api;
      api_ns += a.end - a.start;
      if (op.end - op.start < a.end - a.start) ++shorter;
    }
    // Kernels replayed from CUDA/HIP graphs are already launched in batches: fusion/graphs is no advice there.
    if (double(from_graphs) >= kMaxGraphKernelShare * double(kernels)) return;
    double short_frac = with_api ? double(shorter) / double(with_api) : 0.0;
    if (with_api == 0 || short_frac < kMinShortKernelFraction) return;

    FindingResult f;
    f.rule = id();
    f.severity = share >= kHighShare ? store::Severity::High : store::Severity::Medium;
    double saved = 0;
    for (const auto& s : ctx.steps) {
      if (s.dur_ns <= 0 || double(s.launch_idle_ns) < kMediumShare * double(s.dur_ns)) continue;
      f.steps.push_back(s.index);
      saved += double(std::max<int64_t>(0, s.launch_idle_ns - s.kernels * kResidualGapNs));
    }
    if (f.steps.empty()) return;
    f.est_savings_us_per_step = saved / double(f.steps.size()) / 1000.0;
    f.share = saved / double(ctx.total_step_ns);

    // Gap histogram inside steps and the launch-idle ranges.
    std::array<int64_t, 4> gap_n{}, gap_ns{};
    const int64_t edges[] = {10'000, 200'000, 1'000'000};
    for (size_t i = 1; i < ctx.busy.size(); ++i) {
      int64_t a = ctx.busy[i - 1].end, b = ctx.busy[i].start;
      if (ctx.step_at(a) < 0) continue;
      size_t k = 0;
      while (k < 3 && b - a >= edges[k]) ++k;
      gap_n[k]++, gap_ns[k] += b - a;
    }
    for (const auto& seg : ctx.idle)
      if (seg.kind == detail::IdleKind::Launch && ctx.step_at(seg.start) >= 0 && f.ranges.size() < kMaxRangesPerFinding &&
          seg.end - seg.start >= 10'000)
        f.ranges.push_back({seg.start, seg.end});

    // Frequent consecutive kernel sequences (fusion candidates).
    struct Key {
      std::array<store::StringId, kSequenceLength> n;
      bool operator==(const Key& o) const { return n == o.n; }
    };
    struct KeyHash {
      size_t operator()(const Key& k) const {
        size_t h = 1469598103934665603ull;
        for (auto v : k.n) h = (h ^ size_t(v)) * 1099511628211ull;
        return h;
      }
    };
    std::unordered_map<Key, int64_t, KeyHash> counts;
    for (size_t i = 0; i + kSequenceLength <= seq.size(); ++i) {
      if (seq[i]->step != seq[i + kSequenceLength - 1]->step) continue;
      Key k;
      for (size_t j = 0; j < kSequenceLength; ++j) k.n[j] = t.kernels[seq[i + j]->index].name;
      counts[k]++;
    }
    std::vector<std::pair<int64_t, Key>> top;
    for (auto& [k, c] : counts)
      if (c >= 2) top.push_back({c, k});
    std::sort(top.begin(), top.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second.n < b.second.n); });
    if (top.size() > kTopSequences) top.resize(kTopSequences);

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("launch_idle_share_of_gpu_idle", share_of_idle);
    w.kv("launch_idle_share", share);
    w.kv("kernels", kernels);
    w.kv("kernels_shorter_than_launch", shorter);
    w.kv("short_kernel_fraction", short_frac);
    w.kv("mean_launch_call_us", double(api_ns) / double(with_api) / 1000.0);
    w.kv("mean_kernel_us", kernels ? double(kern_ns) / double(kernels) / 1000.0 : 0.0);
    w.key("gpu_gaps").begin_array();
    const char* labels[] = {"<10us", "10-200us", "200us-1ms", ">=1ms"};
    for (size_t k = 0; k < 4; ++k)
      w.begin_object().kv("bucket", labels[k]).kv("count", gap_n[k]).kv("total_us", double(gap_ns[k]) / 1000.0).end_object();
    w.end_array();
    w.key("fusion_candidates").begin_array();
    for (auto& [c, k] : top) {
      w.begin_object().kv("count", c).key("kernels").begin_array();
      for (auto n : k.n) w.value(t.str(n));
      w.end_array().end_object();
    }
    w.end_array();
    w.end_object();
    f.evidence_json = std::move(ev);

    f.summary = "The GPU idles " + format_pct(share) + " of the step between short kernels while the host issues launches (" +
                format_pct(short_frac) + " of kernels run shorter than their launch call).";
    f.suggestion =
        "Cut the number of launches: compile the model so small ops fuse and launches are replayed as a CUDA graph,\n"
        "  model = torch.compile(model, mode=\"reduce-overhead\")   # fusion + CUDA graphs\n"
        "or capture the step with torch.cuda.graphs (torch.cuda.CUDAGraph / make_graphed_callables); in TensorFlow\n"
        "  @tf.function(jit_compile=True)   # XLA fuses the step\n"
        "A larger batch also amortizes each launch over more work. The fusion candidates in the evidence are the\n"
        "most frequent consecutive kernel sequences.";
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_launch_overhead_rule() { return std::make_unique<LaunchOverheadRule>(); }

}  // namespace stepscope::analyzer::rules
