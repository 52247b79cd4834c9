// launch-overhead: the GPU idles between many short kernels while the host issues them one by one.
#include <algorithm>
#include <array>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "analysis/names.h"
#include "rules/rule.h"
#include "stepscope/analyzer/graph_replays.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

// The cure in the idiom of the framework seen in the trace. Unfused eager code: compile it (fusion removes
// launches, CUDA graphs remove the host from the rest). Already compiled/fused code: only replaying the launches
// as a graph or more work per launch helps.
std::string suggestion(const std::string& framework, bool already_fused, bool python_heavy, bool small_gemm) {
  std::string s;
  if (small_gemm) s += "First batch the loop of small GEMMs (see small-gemm-loop). Then, for the remaining launches:\n";
  if (framework == "tensorflow") {
    s += already_fused ? "The step is already XLA-compiled; launch fewer, larger steps: raise the batch size or run several\n"
                         "steps per call,\n  model.compile(..., jit_compile=True, steps_per_execution=32)\n"
                       : "Compile the step so XLA fuses its ops and launches them as one program:\n"
                         "  @tf.function(jit_compile=True)\n  def train_step(x, y): ...\n";
    s += "and give the launching thread its own core: TF_GPU_THREAD_MODE=gpu_private.";
  } else if (framework == "jax") {
    s += already_fused ? "The step is already jitted and fused; run several steps per dispatch and raise the batch size:\n"
                         "  state = jax.lax.fori_loop(0, n, lambda i, s: train_step(s, batches[i]), state)"
                       : "jit the whole step so XLA fuses it into a few launches:\n  train_step = jax.jit(train_step)";
  } else if (framework == "cuda") {
    s += already_fused ? "The kernels are few already: capture the step once and replay it as a CUDA graph, or give each\n"
                         "launch more work (a larger batch):\n"
                       : "Fuse consecutive elementwise kernels into one (the fusion candidates in the evidence), and capture the\n"
                         "step once and replay it as a CUDA graph:\n";
    s += "  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); enqueue_step(s); cudaStreamEndCapture(s, &g);\n"
         "  cudaGraphInstantiate(&exec, g, 0);   // then per step: cudaGraphLaunch(exec, s)";
  } else {
    s += already_fused
             ? "The kernels are already compiled and fused (Triton/Inductor); what is left is the launches themselves.\n"
               "Replay them as a CUDA graph and give each launch more work:\n"
               "  model = torch.compile(model, mode=\"reduce-overhead\")   # CUDA graphs over the compiled kernels\n"
               "or capture the step with torch.cuda.CUDAGraph / torch.cuda.make_graphed_callables, and raise the batch size."
             : std::string(python_heavy ? "Most of the wait is Python and framework dispatch between launches. "
                                        : "Most of the wait is the launch calls themselves. ") +
                   "Compile the model so small ops fuse and the\nlaunches are replayed as a CUDA graph:\n"
                   "  model = torch.compile(model, mode=\"reduce-overhead\")   # fusion + CUDA graphs\n"
                   "or capture the step with torch.cuda.CUDAGraph / make_graphed_callables; a larger batch amortizes each "
                   "launch.\nThe fusion candidates in the evidence are the most frequent consecutive kernel sequences.";
  }
  return s;
}

// What is left once the launches are replayed from graphs: the host between the replays. Piecewise graphs (eager
// kernels between the graph segments: vLLM's attention, graph breaks) need more of the step inside one graph.
std::string graphed_suggestion(const std::string& framework, bool piecewise) {
  if (framework == "cuda")
    return piecewise ? "Capture the eager launches between the graph segments into the graph as well (one\n"
                       "cudaStreamBeginCapture ... cudaStreamEndCapture around the whole step), so the step is one\n"
                       "cudaGraphLaunch; what cannot be captured can run as a graph node (cudaGraphAddHostNode)."
                     : "Replay the step as one graph instead of several (capture the whole step once), and keep host\n"
                       "work out of the loop between cudaGraphLaunch calls so the next launch is queued before the\n"
                       "GPU finishes the replay.";
  if (framework == "tensorflow" || framework == "jax")
    return "Most launches are replayed already; what is left is the host between the replays: run several steps\n"
           "per dispatch and keep host work out of the loop between them.";
  return piecewise
             ? "The graphs are piecewise: eager kernels run between the graph segments, and at each boundary the GPU\n"
               "waits for the host. Capture more of the step in one graph:\n"
               "  model = torch.compile(model, mode=\"reduce-overhead\", fullgraph=True)   # graph breaks split the graph\n"
               "vLLM: full CUDA graphs for decode, with attention inside the graph:\n"
               "  --compilation-config '{\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}'\n"
               "and keep Python work (.item(), logging, batch preparation) out from between the replays."
             : "The GPU waits for the host between graph replays. Capture the whole step as one graph\n"
               "(torch.cuda.graph around forward, backward and optimizer step, or torch.compile with fullgraph=True),\n"
               "copy the next inputs into the graph's static tensors before the replay, not between replays, and keep\n"
               "Python work (.item(), logging) out of the loop.";
}

class LaunchOverheadRule final : public Rule {
 public:
  // Host-bound dispatch idle (launch + host idle in gaps up to kDispatchGapMaxNs) must be at least this share of
  // the GPU idle inside steps: the GPU really waits for the host issuing work, not for data, syncs or itself.
  static constexpr double kMinShareOfIdle = 0.50;
  // At least this share of the kernels replayed from CUDA/HIP graphs: the cure is applied, and what the rule
  // reports is what is left — the GPU waiting for the host between replays and before the eager launches between
  // graph segments.
  static constexpr double kMaxGraphKernelShare = 0.50;
  // The GPU idle one graph launch leaves before its replay even when the host is ahead: no capture removes it.
  // Measured on an H100 (launch_bound --graph, 3050 replays of 31 kernels): 2.24 µs median between replays, the
  // launch call waiting for the previous replay all the while.
  static constexpr int64_t kReplayGapNs = 2'240;
  // TensorFlow profiler's kernel-launch thresholds, as a share of step time: >= 15% high, >= 3% medium.
  static constexpr double kHighShare = 0.15;
  static constexpr double kMediumShare = 0.03;
  // Kernels already compiled and fused (Triton/Inductor, XLA), or this few kernels per step: compilation has
  // been done, and what is left is the launch itself — CUDA graphs or more work per launch.
  static constexpr double kFusedKernelShare = 0.50;
  static constexpr double kFewKernelsPerStep = 4.0;
  // Fusion candidates: consecutive kernel sequences of this length, top N by count.
  static constexpr size_t kSequenceLength = 3;
  static constexpr size_t kTopSequences = 5;

  const char* id() const override { return "launch-overhead"; }

  // The cure applied (most kernels replayed from graphs): the GPU idle the host still causes between replays, less
  // kReplayGapNs before each replay, and where it lies — before graph launches, or before the eager launches
  // between graph segments (piecewise graphs).
  void run_graphed(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out,
                   int64_t kernels, int64_t from_graphs) const {
    const store::Trace& t = ctx.t();
    std::unordered_map<store::StringId, bool> graph_call;
    auto before_replay = [&](int64_t api) {
      if (api < 0) return false;
      const store::StringId n = t.api_calls[size_t(api)].name;
      auto it = graph_call.find(n);
      if (it == graph_call.end()) it = graph_call.emplace(n, is_graph_launch(t.str(n))).first;
      return it->second;
    };
    std::unordered_set<int64_t> replay_starts;  // where a replay's first record starts: the gap before it ends there
    for (const auto& p : ctx.graphs.replays) replay_starts.insert(p.start_ns);
    std::map<int32_t, int64_t> saved;
    int64_t at_replays = 0, at_eager = 0, replay_gaps = 0;
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      const int64_t dur = ctx.steps[i].dur_ns - ctx.steps[i].profiler_ns;
      // As before the cure: a step counts when its dispatch idle is kMediumShare of it.
      if (!ctx.steady[i] || !ctx.steps[i].gpu_traced || dur <= 0 ||
          double(ctx.dispatch_idle[i]) < kMediumShare * double(dur))
        continue;
      for_each_idle_in_step(ctx, i, [&](const detail::IdleSegment& seg, int64_t s0, int64_t s1) {
        if ((seg.kind != detail::IdleKind::Launch && seg.kind != detail::IdleKind::Host) || !seg.dispatch) return;
        const bool replay = before_replay(seg.api);
        // The gap right before a replay is the launch's own: up to kReplayGapNs of it stays.
        int64_t end = s1;
        if (replay && s1 == seg.end && replay_starts.count(seg.end)) {
          const int64_t allow = std::min(kReplayGapNs, s1 - s0);
          end -= allow;
          ++replay_gaps;
        }
        const int64_t fresh = end > s0 ? ledger.claim(s0, end) : 0;
        saved[int32_t(i)] += fresh;
        (replay ? at_replays : at_eager) += fresh;
      });
    }
    FindingResult f;
    f.rule = id();
    auto decision = conclude_finding(ctx, saved, kHighShare, kMediumShare, f);
    if (!decision) return;
    int64_t steady_steps = 0;
    for (size_t i = 0; i < ctx.steps.size(); ++i) steady_steps += ctx.steady[i] && ctx.steps[i].gpu_traced;
    const double per_step = double(std::max<int64_t>(1, steady_steps));
    const double traced = double(std::max<int64_t>(1, ctx.traced_steps));
    const GraphTable& g = ctx.graphs;
    int64_t eager_between = 0;
    for (const auto& p : g.replays) eager_between += p.eager_ops_before;
    const double replays_per_step = double(g.replays.size()) / traced;
    const double eager_per_step = double(eager_between) / traced;
    const bool piecewise = eager_between > 0 && at_eager > 0;
    const double graph_share = double(from_graphs) / double(kernels);

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("graphed", true);
    w.kv("graph_kernel_share", graph_share).kv("kernels", kernels).kv("graphs", int64_t(g.graphs.size()));
    w.kv("replays_per_step", replays_per_step).kv("eager_ops_between_replays_per_step", eager_per_step);
    w.kv("piecewise", piecewise);
    w.kv("idle_before_replays_us", double(at_replays) / 1000.0).kv("idle_before_eager_us", double(at_eager) / 1000.0);
    w.kv("replay_gap_allowance_us", double(kReplayGapNs) / 1000.0).kv("replay_gaps", replay_gaps);
    write_severity_evidence(w, *decision);
    w.kv("steady_steps", steady_steps).kv("framework", ctx.framework);
    w.end_object();
    f.evidence_json = std::move(ev);
    for (const auto& seg : ctx.idle)
      if ((seg.kind == detail::IdleKind::Launch || seg.kind == detail::IdleKind::Host) && seg.dispatch &&
          ctx.step_at(seg.start) >= 0 && f.ranges.size() < kMaxRangesPerFinding && seg.end - seg.start >= 10'000)
        f.ranges.push_back({seg.start, seg.end});
    f.summary = fmt::format(
        "CUDA graphs already replay {} of the kernels ({:.1f} replays per step{}); the GPU still waits for the host {} "
        "per step: {} before graph launches, {} before the eager launches between them.",
        format_pct(graph_share), replays_per_step,
        eager_per_step > 0 ? fmt::format(", {:.0f} eager GPU ops between them", eager_per_step) : std::string(),
        format_us(double(at_replays + at_eager) / per_step), format_us(double(at_replays) / per_step),
        format_us(double(at_eager) / per_step));
    f.suggestion = graphed_suggestion(ctx.framework, piecewise);
    out.push_back(std::move(f));
  }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    if (ctx.traced_step_ns <= 0 || ctx.busy.empty()) return;
    const store::Trace& t = ctx.t();
    int64_t dispatch = 0, dispatch_launch = 0, idle = 0, launch_ns = 0, host_ns = 0;
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      if (!ctx.steady[i]) continue;
      const auto& s = ctx.steps[i];
      dispatch += ctx.dispatch_idle[i];
      dispatch_launch += ctx.dispatch_launch_idle[i];
      idle += s.dur_ns - s.gpu_busy_ns - s.profiler_ns;
      launch_ns += s.launch_idle_ns, host_ns += s.host_idle_ns;
    }
    if (idle <= 0 || dispatch <= 0) return;
    const double share_of_idle = double(dispatch) / double(idle);
    if (share_of_idle < kMinShareOfIdle) return;

    // Kernels launched inside steps: graph replays, compiled/fused kernels, launch-call cost.
    int64_t kernels = 0, with_api = 0, shorter = 0, api_ns = 0, kern_ns = 0, from_graphs = 0, fused = 0;
    std::unordered_map<store::StringId, bool> graph_api, fused_name;
    std::vector<const detail::GpuOp*> seq;  // kernels in start order, per step
    for (const auto& op : ctx.ops) {
      if (op.kind != detail::GpuOpKind::Kernel || op.step < 0) continue;
      ++kernels;
      seq.push_back(&op);
      kern_ns += op.end - op.start;
      const auto& k = t.kernels[op.index];
      auto fz = fused_name.find(k.name);
      if (fz == fused_name.end()) fz = fused_name.emplace(k.name, detail::is_compiled_fused_kernel(t.str(k.name))).first;
      fused += fz->second ? 1 : 0;
      if (k.graph_id != 0) {
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
    if (kernels == 0) return;
    // Kernels replayed from CUDA/HIP graphs are already launched in batches: their gaps are not per-kernel launch
    // cost. What is left is the host between the replays.
    if (double(from_graphs) >= kMaxGraphKernelShare * double(kernels)) {
      run_graphed(ctx, ledger, out, kernels, from_graphs);
      return;
    }

    FindingResult f;
    f.rule = id();
    double saved = 0, steady_saved = 0;
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      const auto& s = ctx.steps[i];
      const int64_t dur = s.dur_ns - s.profiler_ns;
      if (!ctx.steady[i] || dur <= 0 || double(ctx.dispatch_idle[i]) < kMediumShare * double(dur)) continue;
      // Fusion and CUDA graphs take the host off the critical path between kernels, leaving a GPU-side gap of
      // about ctx.residual_gap_ns per kernel. Idle an earlier rule explained (a small-GEMM loop) is not counted.
      int64_t fresh = claim_idle_in_step(ctx, ledger, i, detail::IdleKind::Launch, true) +
                      claim_idle_in_step(ctx, ledger, i, detail::IdleKind::Host, true);
      int64_t step_saved = std::max<int64_t>(0, std::min(fresh, ctx.dispatch_idle[i]) - s.kernels * ctx.residual_gap_ns);
      if (step_saved <= 0) continue;
      f.steps.push_back(s.index);
      saved += double(step_saved), steady_saved += double(step_saved);
    }
    if (f.steps.empty()) return;
    auto decision = decide_severity(steady_share(ctx, steady_saved), kHighShare, kMediumShare);
    if (!decision) return;
    f.severity = decision->severity;
    f.est_savings_us_per_step = saved / double(f.steps.size()) / 1000.0;
    f.share = saved / double(ctx.traced_step_ns);
    const double share = steady_share(ctx, double(dispatch));
    int64_t steady_steps = 0;
    for (auto v : ctx.steady) steady_steps += v;
    const double kernels_per_step = double(kernels) / double(std::max<int64_t>(1, ctx.traced_steps));
    const double fused_share = double(fused) / double(kernels);
    const bool already_fused = fused_share >= kFusedKernelShare || kernels_per_step <= kFewKernelsPerStep;
    bool small_gemm = false;
    for (const auto& o : out) small_gemm |= o.rule == "small-gemm-loop";
    const double short_frac = with_api ? double(shorter) / double(with_api) : 0.0;

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
      if ((seg.kind == detail::IdleKind::Launch || seg.kind == detail::IdleKind::Host) && seg.dispatch && ctx.step_at(seg.start) >= 0 && f.ranges.size() < kMaxRangesPerFinding &&
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
    w.kv("host_bound_share", share);
    w.kv("host_bound_share_of_gpu_idle", share_of_idle);
    w.kv("launch_call_idle_us", double(launch_ns) / 1000.0).kv("host_code_idle_us", double(host_ns) / 1000.0);
    write_severity_evidence(w, *decision);
    w.kv("steady_steps", steady_steps);
    w.kv("kernels", kernels);
    w.kv("kernels_per_step", kernels_per_step);
    w.kv("compiled_fused_kernel_share", fused_share);
    w.kv("kernels_shorter_than_launch", shorter);
    w.kv("short_kernel_fraction", short_frac);
    w.kv("mean_launch_call_us", with_api ? double(api_ns) / double(with_api) / 1000.0 : 0.0);
    w.kv("mean_kernel_us", kernels ? double(kern_ns) / double(kernels) / 1000.0 : 0.0);
    w.kv("residual_gap_us_per_kernel", double(ctx.residual_gap_ns) / 1000.0);
    w.kv("framework", ctx.framework);
    w.key("profiler_correction").begin_object();
    w.kv("applied", ctx.profiler.applied).kv("cost_us_per_launch", ctx.profiler.cost_ns_per_launch / 1000.0);
    int64_t removed = 0;
    for (const auto& s : ctx.steps) removed += s.profiler_ns;
    w.kv("removed_us", double(removed) / 1000.0).kv("source", ctx.profiler.source);
    w.end_object();
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

    const bool python_heavy = dispatch - dispatch_launch > dispatch_launch;
    // The two parts are those of the dispatch idle the share counts, so they add up to it.
    const double per_step = double(std::max<int64_t>(1, steady_steps));
    f.summary = "The GPU waits for the host " + format_pct(share) + " of the step (" + format_us(double(dispatch) / per_step) +
                " per step): " + format_us(double(dispatch_launch) / per_step) + " inside launch calls, " +
                format_us(double(dispatch - dispatch_launch) / per_step) + " in host code between launches (" +
                fmt::format("{:.0f}", kernels_per_step) + " kernels per step" +
                (already_fused ? ", already compiled/fused" : "") + ")" +
                (ctx.profiler.applied && removed > 0 ? ", after removing the profiler's own launch cost" : "") + ".";
    f.suggestion = suggestion(ctx.framework, already_fused, python_heavy, small_gemm);
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_launch_overhead_rule() { return std::make_unique<LaunchOverheadRule>(); }

}  // namespace stepscope::analyzer::rules
