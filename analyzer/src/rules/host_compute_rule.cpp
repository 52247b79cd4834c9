// host-compute: the GPU runs dry while the host computes something of its own between launches for longer than
// per-op dispatch ever takes — not launching, not waiting for data or for the device.
#include <algorithm>
#include <cstdint>
#include <map>

#include <fmt/format.h>

#include "analysis/host_activity.h"
#include "rules/rule.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::rules {
namespace {

// Fusion and CUDA graphs do nothing for a host computation; what helps is taking it off the GPU's critical path.
std::string suggestion(const std::string& framework) {
  std::string s =
      "Find what the host computes in these gaps (the host activity in the evidence; the timeline shows each gap).\n"
      "Take it off the GPU's critical path: move CPU-side work out of the step (precompute it, do it in the input\n"
      "pipeline or on a background thread), do it on the GPU instead, or queue the next GPU work before it so the\n"
      "two overlap. ";
  if (framework == "tensorflow") {
    s += "In TensorFlow: run the step as one tf.function so Python runs once per trace, move preprocessing\n"
         "into tf.data (dataset.map(f, num_parallel_calls=tf.data.AUTOTUNE)), and keep numpy conversions\n"
         "(.numpy(), tf.py_function) out of the step.";
  } else if (framework == "jax") {
    s += "In JAX: jit the whole step, keep host round trips (jax.device_get, np.asarray, float(x)) out of the\n"
         "loop, and let the next step's dispatch run ahead (JAX dispatches asynchronously until a value is read).";
  } else if (framework == "cuda") {
    s += "In CUDA C++: enqueue the next kernels (cudaLaunchKernel / a captured graph) before the host\n"
         "computation so the GPU works meanwhile, or move the computation to another thread or into a kernel.";
  } else {
    s += "In PyTorch: keep per-step Python bookkeeping (metrics, logging, .cpu()/.numpy() conversions,\n"
         "CPU tensor ops) out of the step or every N steps; move CPU preprocessing into DataLoader workers.\n"
         "When the time sits inside a framework op, its host side is slow: a CPU fallback, or an algorithm search\n"
         "repeated for new input shapes (torch.backends.cudnn.benchmark with varying shapes, MIOpen's find mode:\n"
         "keep shapes fixed or pad them to a few sizes). torch.compile removes dispatch overhead, not this work.";
  }
  return s;
}

class HostComputeRule final : public Rule {
 public:
  // As a share of the steady steps' time: the TensorFlow profiler's thresholds for host-side time (kernel launch),
  // the same as launch-overhead's, so the two host-bound causes are judged alike.
  static constexpr double kHighShare = 0.15;
  static constexpr double kMediumShare = 0.03;
  // A computation in at least this share of the steady steps: the typical step's cause. Rarer pauses (a
  // checkpoint, a collection every N steps) are what the slow-step list names, with their causes.
  static constexpr double kMinStepShare = 0.25;
  // The host activity named in the evidence and the summary.
  static constexpr size_t kTopActivities = 8;

  const char* id() const override { return "host-compute"; }

  void run(const detail::Context& ctx, detail::SavingsLedger& ledger, std::vector<FindingResult>& out) const override {
    if (ctx.traced_step_ns <= 0 || ctx.busy.empty()) return;
    // Host-bound idle in gaps longer than dispatch (kDispatchGapMaxNs), per step, and what of it no earlier rule
    // explained: taking the computation off the critical path recovers that much of the GPU's wait.
    const auto long_host_bound = [](const detail::IdleSegment& seg) {
      return (seg.kind == detail::IdleKind::Launch || seg.kind == detail::IdleKind::Host) && !seg.dispatch;
    };
    std::map<int32_t, int64_t> saved_per_step;
    std::vector<int64_t> gap_lengths;
    int64_t steady_long = 0, steady_steps = 0;
    for (size_t i = 0; i < ctx.steps.size(); ++i) {
      if (!ctx.steady[i]) continue;
      ++steady_steps;
      int64_t long_idle = 0, unclaimed = 0, gap = -1;
      for_each_idle_in_step(ctx, i, [&](const detail::IdleSegment& seg, int64_t s0, int64_t s1) {
        if (!long_host_bound(seg)) return;
        long_idle += s1 - s0;
        unclaimed += ledger.unclaimed(s0, s1);
        // A gap's host-bound length, the one that decided it is no dispatch: its host and launch pieces, with
        // whatever data waits or syncs lie between them left out.
        if (seg.gap == gap)
          gap_lengths.back() += s1 - s0;
        else
          gap_lengths.push_back(s1 - s0);
        gap = seg.gap;
      });
      steady_long += long_idle;
      const auto& s = ctx.steps[i];
      const int64_t dur = s.dur_ns - s.profiler_ns;
      if (dur > 0 && double(long_idle) >= kMediumShare * double(dur)) saved_per_step[int32_t(i)] = unclaimed;
    }

    FindingResult f;
    f.rule = id();
    auto decision = conclude_finding(ctx, saved_per_step, kHighShare, kMediumShare, f);
    if (!decision || double(f.steps.size()) < kMinStepShare * double(steady_steps)) return;
    std::vector<detail::Interval> claimed;  // sorted: steps and idle segments are in time order
    for (const auto& [i, ns] : saved_per_step) {
      if (ns <= 0) continue;
      for_each_idle_in_step(ctx, size_t(i), [&](const detail::IdleSegment& seg, int64_t s0, int64_t s1) {
        if (long_host_bound(seg) && ledger.claim(s0, s1) > 0) claimed.push_back({s0, s1});
      });
    }
    for (const auto& c : claimed) {
      if (f.ranges.size() >= kMaxRangesPerFinding) break;
      f.ranges.push_back({c.start, c.end});
    }
    const auto activity = detail::host_activity(ctx, claimed, kTopActivities, "host-compute").functions;

    std::sort(gap_lengths.begin(), gap_lengths.end());
    const int64_t longest = gap_lengths.empty() ? 0 : gap_lengths.back();
    const int64_t median = gap_lengths.empty() ? 0 : gap_lengths[gap_lengths.size() / 2];
    const double per_step = double(std::max<int64_t>(1, steady_steps));
    const double share = steady_share(ctx, double(steady_long));

    std::string ev;
    JsonWriter w(ev);
    w.begin_object();
    w.kv("host_compute_share", share);
    w.kv("long_gap_min_us", double(detail::kDispatchGapMaxNs) / 1000.0);
    write_severity_evidence(w, *decision);
    w.kv("steady_steps", steady_steps);
    w.kv("gaps_per_step", double(gap_lengths.size()) / per_step);
    w.kv("median_gap_us", double(median) / 1000.0).kv("longest_gap_us", double(longest) / 1000.0);
    w.kv("framework", ctx.framework);
    w.kv("activity_source", ctx.t().samples.empty() ? "ranges" : "samples");
    w.key("host_activity").begin_array();
    for (const auto& h : activity) {
      w.begin_object().kv("name", h.name).kv("time_us", double(h.time_ns) / 1000.0);
      if (h.samples) w.kv("samples", h.samples);
      w.end_object();
    }
    w.end_array();
    w.end_object();
    f.evidence_json = std::move(ev);

    std::string where;
    for (size_t k = 0; k < activity.size() && k < 2; ++k)
      where += (k ? ", " : "; mostly in ") + short_symbol(activity[k].name) + " (" +
               format_us(double(activity[k].time_ns) / per_step) + " per step)";
    f.summary = "The GPU waits " + format_pct(share) + " of the step (" + format_us(double(steady_long) / per_step) +
                " per step) while the host computes between launches for longer than dispatch takes (" +
                fmt::format("{:.1f}", double(gap_lengths.size()) / per_step) + " gaps over " +
                format_us(double(detail::kDispatchGapMaxNs)) + " per step, the longest " + format_us(double(longest)) +
                ")" + where + ".";
    f.suggestion = suggestion(ctx.framework);
    out.push_back(std::move(f));
  }
};

}  // namespace

std::unique_ptr<Rule> make_host_compute_rule() { return std::make_unique<HostComputeRule>(); }

}  // namespace stepscope::analyzer::rules
