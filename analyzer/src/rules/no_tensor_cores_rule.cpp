// no-tensor-cores: GEMM/convolution time is spent in fp32 SIMT kernels instead of tensor-core kernels.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "analysis/names.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

class NoTensorCoresRule final : public Rule {
 public:
  // GEMM+conv kernels must be at least this share of GPU busy time inside steps to matter...
  static constexpr double kMinMathShareOfBusy = 0.10;
  // ...and SIMT fp32 kernels at least this share of that GEMM+conv time.
  static constexpr double kMinSimtShareOfMath = 0.50;
  // High when SIMT GEMM/conv time is at least this share of step time.
  static constexpr double kHighShare = 0.20;
  // Conservative end-to-end speedup of GEMM/conv kernels under AMP/bf16 (peak tensor-core gain is 8-16x).
  static constexpr double kTensorCoreSpeedup = 2.0;
  static constexpr size_t kTopKernels = 5;
  // Compute capability from which the GPU runs bf16 and TF32 on tensor cores (Ampere); Volta and Turing (7.x) have
  // fp16 tensor cores only, and earlier GPUs none.
  static constexpr int kBf16MinCcMajor = 8;
  static constexpr int kTensorCoreMinCcMajor = 7;

  const char* id() const override { return "no-tensor-cores"; }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    (void)ledger;  // it saves GPU busy time (math kernels run faster), which no other rule's saving counts
    const store::Trace& t = ctx.t();
    if (ctx.traced_step_ns <= 0 || t.kernels.empty()) return;
    // Decided on the steady steps, as every severity is: a warm-up step runs cuDNN's algorithm search
    // (`cudnn.benchmark` tries SIMT and tensor-core kernels alike) and lazy initialisation, neither of which
    // the run repeats. Every step's SIMT time still counts in its saving.
    std::unordered_map<store::StringId, int> cls;  // 0 other, 1 tensor-core math, 2 simt math, 3 unknown math
    std::map<store::StringId, std::pair<int64_t, int64_t>> simt;  // steady steps: name -> (count, ns)
    std::map<int32_t, int64_t> simt_per_step;                     // every step
    int64_t math = 0, simt_ns = 0, busy = 0, tc_ns = 0;           // steady steps
    std::set<int64_t> simt_devices;
    for (size_t i = 0; i < ctx.steps.size(); ++i)
      if (ctx.steady[i]) busy += ctx.steps[i].gpu_busy_ns;
    for (const auto& op : ctx.ops) {
      if (op.kind != detail::GpuOpKind::Kernel || op.step < 0) continue;
      const auto& k = t.kernels[op.index];
      auto it = cls.find(k.name);
      if (it == cls.end()) {
        const auto& n = t.str(k.name);
        int c = 0;
        if (detail::is_gemm_kernel(n) || detail::is_conv_kernel(n))
          c = detail::is_tensor_core_kernel(n) ? 1 : detail::is_simt_fp32_kernel(n) ? 2 : 3;
        it = cls.emplace(k.name, c).first;
      }
      if (!it->second) continue;
      const int64_t d = op.end - op.start;
      if (it->second == 2) {
        simt_per_step[op.step] += d;
        simt_devices.insert(k.device);
      }
      if (!ctx.steady[size_t(op.step)]) continue;
      math += d;
      if (it->second == 1) tc_ns += d;
      if (it->second == 2) {
        simt_ns += d;
        auto& e = simt[k.name];
        e.first++, e.second += d;
      }
    }
    if (busy <= 0 || simt_ns <= 0 || math < kMinMathShareOfBusy * double(busy) ||
        simt_ns < kMinSimtShareOfMath * double(math))
      return;

    // The oldest GPU that ran SIMT math decides the cure (0: not known, as in traces without device properties).
    // Compute capabilities are NVIDIA's: an AMD GPU's "9.4" (gfx942) says nothing about its matrix cores.
    int cc_major = 0, cc_minor = 0;
    for (const auto& d : t.devices)
      if (d.cc_major > 0 && simt_devices.count(d.id) && (d.vendor == 0 || t.str(d.vendor) == "nvidia") &&
          (cc_major == 0 || d.cc_major < cc_major))
        cc_major = d.cc_major, cc_minor = d.cc_minor;
    if (cc_major > 0 && cc_major < kTensorCoreMinCcMajor) return;  // no tensor cores to move the math to

    FindingResult f;
    f.rule = id();
    double saved = 0;
    for (auto& [s, ns] : simt_per_step) f.steps.push_back(ctx.steps[s].index), saved += double(ns) * (1.0 - 1.0 / kTensorCoreSpeedup);
    f.est_savings_us_per_step = saved / double(f.steps.size()) / 1000.0;
    f.share = saved / double(ctx.traced_step_ns);
    const double simt_share = steady_share(ctx, double(simt_ns));
    // The gates above decide whether it is reported at all; the share decides high, with the margin every rule
    // keeps around a threshold (a 20.2% share is medium, as 19.8% is).
    const auto decision = decide_severity(simt_share, kHighShare, 0.0);
    if (!decision) return;
    f.severity = decision->severity;
    int64_t steady_steps = 0;
    bool warmup = false;  // steps outside GPU windows are not steady either: only a warm-up is said
    for (size_t i = 0; i < ctx.steps.size(); ++i)
      steady_steps += ctx.steady[i], warmup |= ctx.steps[i].warmup;

    std::vector<std::pair<int64_t, store::StringId>> top;
    for (auto& [n, e] : simt) top.push_back({e.second, n});
    std::sort(top.rbegin(), top.rend());
    if (top.size() > kTopKernels) top.resize(kTopKernels);
    std::string ev;
    JsonWriter w(ev);
    w.begin_object()
        .kv("gemm_conv_us", double(math) / 1000.0)
        .kv("simt_fp32_us", double(simt_ns) / 1000.0)
        .kv("tensor_core_us", double(tc_ns) / 1000.0)
        .kv("simt_share_of_gemm_conv", double(simt_ns) / double(math))
        .kv("steady_steps", steady_steps);
    write_severity_evidence(w, *decision);
    if (cc_major > 0) w.kv("compute_capability", fmt::format("{}.{}", cc_major, cc_minor));
    w.key("simt_kernels").begin_array();
    for (auto& [ns, n] : top) w.begin_object().kv("name", t.str(n)).kv("count", simt[n].first).kv("total_us", double(ns) / 1000.0).end_object();
    w.end_array().end_object();
    f.evidence_json = std::move(ev);
    f.summary = format_pct(double(simt_ns) / double(math)) +
                " of GEMM/convolution time runs in fp32 SIMT kernels, not on tensor cores (" +
                format_pct(simt_share) + " of step time" + (warmup ? ", warm-up step left out" : "") + ").";
    if (cc_major > 0 && cc_major < kBf16MinCcMajor)
      f.suggestion = fmt::format(
          "Run matmuls and convolutions in float16 on tensor cores, with dimensions divisible by 8 (this GPU, compute\n"
          "capability {}.{}, has fp16 tensor cores only: no bf16, no TF32):\n"
          "  scaler = torch.cuda.amp.GradScaler()\n"
          "  with torch.autocast('cuda', dtype=torch.float16):\n"
          "      loss = model(x)\n"
          "  scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()\n"
          "  # TensorFlow: tf.keras.mixed_precision.set_global_policy('mixed_float16')",
          cc_major, cc_minor);
    else
      f.suggestion =
          "Run matmuls and convolutions in reduced precision on tensor cores, with dimensions divisible by 8:\n"
          "  with torch.autocast('cuda', dtype=torch.bfloat16):   # or float16 with torch.cuda.amp.GradScaler\n"
          "      loss = model(x)\n"
          "  torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True  # Ampere+\n"
          "  # TensorFlow: tf.keras.mixed_precision.set_global_policy('mixed_bfloat16')";
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_no_tensor_cores_rule() { return std::make_unique<NoTensorCoresRule>(); }

}  // namespace stepscope::analyzer::rules
