// small-gemm-loop: a Python loop of matmuls shows as runs of identical GEMM kernels, back to back.
#include <algorithm>
#include <map>
#include <unordered_map>

#include "analysis/names.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

class SmallGemmLoopRule final : public Rule {
 public:
  // A run is at least this many consecutive GEMM kernels (same stream) with the same name and grid.
  static constexpr int64_t kMinRunLength = 8;
  // Severity by estimated saving as a share of step time.
  static constexpr double kHighShare = 0.10;
  static constexpr double kMediumShare = 0.02;

  const char* id() const override { return "small-gemm-loop"; }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    const store::Trace& t = ctx.t();
    if (ctx.traced_step_ns <= 0 || t.kernels.empty()) return;
    struct Run {
      store::StringId name = 0;
      int32_t gx = 0, gy = 0, gz = 0;
      int32_t step = -1;
      int64_t count = 0, first_start = 0, last_end = 0, kernel_ns = 0;
      int64_t api = -1;
    };
    std::unordered_map<store::StringId, bool> gemm;
    std::map<std::pair<int64_t, int64_t>, Run> open;  // (device, stream) -> current run
    std::vector<Run> runs;
    auto close = [&](Run& r) {
      if (r.count >= kMinRunLength && r.step >= 0) runs.push_back(r);
      r = Run{};
    };
    for (const auto& op : ctx.ops) {
      if (op.kind != detail::GpuOpKind::Kernel) continue;
      const auto& k = t.kernels[op.index];
      Run& r = open[{k.device, k.stream}];
      auto it = gemm.find(k.name);
      if (it == gemm.end()) it = gemm.emplace(k.name, detail::is_gemm_kernel(t.str(k.name))).first;
      bool same = r.count > 0 && r.name == k.name && r.gx == k.grid_x && r.gy == k.grid_y && r.gz == k.grid_z && r.step == op.step;
      if (same) {
        r.count++, r.last_end = std::max(r.last_end, op.end), r.kernel_ns += op.end - op.start;
        continue;
      }
      close(r);
      if (it->second) r = Run{k.name, k.grid_x, k.grid_y, k.grid_z, op.step, 1, op.start, op.end, op.end - op.start, op.api};
    }
    for (auto& [key, r] : open) close(r);
    if (runs.empty()) return;

    // One batched GEMM replaces the run: the gaps between its kernels (launch and dispatch) disappear.
    std::map<int32_t, int64_t> saved_per_step;
    struct Group {
      int64_t runs = 0, kernels = 0, kernel_ns = 0, saved_ns = 0;
      int32_t gx, gy, gz;
      int64_t api = -1;
    };
    std::map<store::StringId, Group> groups;
    FindingResult f;
    f.rule = id();
    // The idle inside each run's span (the gaps between its kernels), unless an earlier rule explained it.
    auto idle_in = [&](int64_t a, int64_t b) {
      int64_t fresh = 0;
      auto it = std::upper_bound(ctx.idle.begin(), ctx.idle.end(), a, [](int64_t x, const detail::IdleSegment& s) { return x < s.end; });
      for (; it != ctx.idle.end() && it->start < b; ++it) fresh += ledger.claim(std::max(a, it->start), std::min(b, it->end));
      return fresh;
    };
    for (const auto& r : runs) {
      // Each traced launch made the host slower by the profiler's cost per launch: that part of the gaps is not
      // in the unprofiled program, so no batching saves it.
      int64_t saved = idle_in(r.first_start, r.last_end);
      if (ctx.profiler.applied)
        saved = std::max<int64_t>(0, saved - int64_t(double(r.count) * ctx.profiler.cost_ns_per_launch));
      saved_per_step[r.step] += saved;
      auto& g = groups[r.name];
      g.runs++, g.kernels += r.count, g.kernel_ns += r.kernel_ns, g.saved_ns += saved;
      g.gx = r.gx, g.gy = r.gy, g.gz = r.gz;
      if (g.api < 0) g.api = r.api;
      if (f.ranges.size() < kMaxRangesPerFinding) f.ranges.push_back({r.first_start, r.last_end});
    }
    auto decision = conclude_finding(ctx, saved_per_step, kHighShare, kMediumShare, f);
    if (!decision) return;

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("runs", int64_t(runs.size()));
    write_severity_evidence(w, *decision);
    w.key("kernels").begin_array();
    int64_t longest = 0;
    for (auto& [name, g] : groups) {
      longest = std::max(longest, g.kernels / g.runs);
      w.begin_object()
          .kv("name", t.str(name))
          .kv("grid", std::to_string(g.gx) + "x" + std::to_string(g.gy) + "x" + std::to_string(g.gz))
          .kv("runs", g.runs)
          .kv("mean_run_length", double(g.kernels) / double(g.runs))
          .kv("mean_kernel_us", double(g.kernel_ns) / double(g.kernels) / 1000.0)
          .kv("gap_us_total", double(g.saved_ns) / 1000.0);
      if (g.api >= 0) {
        const auto& a = t.api_calls[g.api];
        auto enc = detail::enclosing_ranges(t, a.pid, a.tid, a.start, a.end);
        w.key("launched_from").begin_array();
        for (auto ri : enc) w.value(detail::strip_numeric_suffix(t.str(t.ranges[ri].name)));
        w.end_array();
      }
      w.end_object();
    }
    w.end_array();
    w.end_object();
    f.evidence_json = std::move(ev);
    const bool native = ctx.framework == "cuda";
    f.summary = std::to_string(runs.size()) + " run(s) of " + std::to_string(longest) +
                "+ identical GEMM kernels back to back (" +
                (native ? "a loop of small GEMM calls" : "a Python loop of matmuls") + "), " +
                format_us(f.est_savings_us_per_step * 1000.0) + " per step between them.";
    if (native)
      f.suggestion =
          "Replace the loop of small GEMM calls by one batched call:\n"
          "  cublasGemmStridedBatchedEx(handle, opA, opB, m, n, k, &alpha, A, typeA, lda, strideA,\n"
          "                             B, typeB, ldb, strideB, &beta, C, typeC, ldc, strideC, batch, ...);\n"
          "  // different shapes per call: cublasGemmGroupedBatchedEx, or a CUTLASS grouped GEMM\n"
          "One launch replaces N, and the batched kernel keeps more of the GPU busy.";
    else if (ctx.framework == "tensorflow")
      f.suggestion =
          "Replace the loop of small matmuls by one batched matmul:\n"
          "  # before: outs = [tf.matmul(x[i], w) for i in range(n)]\n"
          "  out = tf.einsum('ijk,kl->ijl', x, w)       # or tf.linalg.matmul on stacked tensors\n"
          "One launch replaces N, and the batched kernel keeps more of the GPU busy.";
    else if (ctx.framework == "jax")
      f.suggestion =
          "Replace the loop of small matmuls by one batched matmul:\n"
          "  # before: outs = [x[i] @ w for i in range(n)]\n"
          "  out = jnp.einsum('ijk,kl->ijl', x, w)      # or jax.vmap(jnp.matmul, (0, None))(x, w)\n"
          "One launch replaces N, and the batched kernel keeps more of the GPU busy.";
    else
      f.suggestion =
          "Replace the loop of small matmuls by one batched GEMM:\n"
          "  # before: outs = [x[i] @ w for i in range(n)]\n"
          "  out = torch.einsum('ijk,kl->ijl', x, w)     # or torch.bmm / torch.matmul on stacked tensors\n"
          "One launch replaces N, and the batched kernel keeps more of the GPU busy.";
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_small_gemm_loop_rule() { return std::make_unique<SmallGemmLoopRule>(); }

}  // namespace stepscope::analyzer::rules
