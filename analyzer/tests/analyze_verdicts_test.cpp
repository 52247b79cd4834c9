// Verdicts on synthetic traces built like real ones: host-bound programs whose kernels outlast their launch calls,
// already-fused code, recordings inflated by the profiler's own launch cost, the same program at 60 and 600 steps.
#include <catch2/catch.hpp>

#include <functional>
#include <set>

#include "findings.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/records.h"
#include "synthetic_builder.h"

using namespace stepscope;
using test::find_finding;
using analyzer::Bound;
using test::Builder;
using test::US;

namespace {

struct HostBoundShape {
  int steps = 20;
  int kernels = 30;              // per step
  int64_t python_ns = 80 * US;   // host code before each launch (an aten:: op's dispatch)
  int64_t launch_ns = 5 * US;    // the launch call
  int64_t kernel_ns = 50 * US;
  int64_t latency_ns = 1 * US;   // launch return to kernel start on an idle GPU
  int64_t warmup_ns = 0;         // extra host time at the start of step 0 (module loading, autotuning)
  std::vector<int64_t> step_launch_ns;  // per step, where given: the launch call (a profiler's cost in some)
  std::string kernel_name = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>";
};

// Each step: per kernel, Python/dispatch inside an aten:: op, then cudaLaunchKernel, the kernel starting once both
// the launch returned and the previous kernel ended. ProfilerStep#N ranges bound the steps.
Builder host_bound(const HostBoundShape& p) {
  Builder b;
  int64_t t = 0, gpu_free = 0;
  for (int s = 0; s < p.steps; ++s) {
    const int64_t s0 = t;
    if (s == 0) t += p.warmup_ns;
    for (int k = 0; k < p.kernels; ++k) {
      const int64_t op0 = t;
      t += p.python_ns;
      const int64_t launch_ns =
          size_t(s) < p.step_launch_ns.size() ? p.step_launch_ns[size_t(s)] : p.launch_ns;
      const int64_t l0 = t, l1 = t + launch_ns;
      const int64_t ks = std::max(l1 + p.latency_ns, gpu_free), ke = ks + p.kernel_ns;
      b.kernel(p.kernel_name, l0, l1, ks, ke);
      b.range("aten::add", op0, l1, store::RangeSource::Op, 1);
      gpu_free = ke;
      t = l1;
    }
    t = std::max(t, gpu_free);
    b.range("ProfilerStep#" + std::to_string(s), s0, t);
  }
  return b;
}

// What the collector leaves with GPU windows: CUDA rows only in the steps `in_window` names, a gpu_windows
// row for each run of such steps (from its first step's start to the next step's), and every step's marker.
// Returns the steps' [start, end).
std::vector<std::pair<int64_t, int64_t>> keep_windows(Builder& b, const std::function<bool(int)>& in_window,
                                                      const std::string& window) {
  std::vector<std::pair<int64_t, int64_t>> step_span;
  for (const auto& r : b.t.ranges)
    if (b.t.str(r.name).rfind("ProfilerStep#", 0) == 0) step_span.emplace_back(r.start, r.end);
  const int steps = int(step_span.size());
  auto traced = [&](int64_t ts) {
    for (int s = 0; s < steps; ++s)
      if (ts >= step_span[size_t(s)].first && ts < step_span[size_t(s)].second) return in_window(s);
    return false;
  };
  std::set<int64_t> kept;
  std::vector<store::ApiCall> apis;
  for (const auto& a : b.t.api_calls)
    if (traced(a.start)) apis.push_back(a), kept.insert(a.correlation);
  std::vector<store::Kernel> kernels;
  for (const auto& k : b.t.kernels)
    if (kept.count(k.correlation)) kernels.push_back(k);
  b.t.api_calls = apis;
  b.t.kernels = kernels;
  for (int s = 0; s < steps; ++s)
    if (in_window(s) && (s == 0 || !in_window(s - 1))) {
      int e = s;
      while (e < steps && in_window(e)) ++e;
      b.t.gpu_windows.push_back({step_span[size_t(s)].first,
                                 e < steps ? step_span[size_t(e)].first : step_span.back().second, b.pid});
    }
  b.t.meta["gpu.window"] = window;
  return step_span;
}

}  // namespace

TEST_CASE("host-bound with kernels longer than their launch calls: launch-overhead, Python dispatch named") {
  // The shape of the traces the HTA-style rule missed: kernels (50 µs) outlast their launch calls (5 µs), so no
  // kernel is "short", but 80 µs of Python dispatch before each launch leaves the GPU idle 35 µs per kernel.
  auto b = host_bound({});
  auto a = analyzer::analyze(b.t);
  REQUIRE(a.steps.size() == 20);
  const auto* f = find_finding(a, "launch-overhead");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::High);
  CHECK(a.findings.front().rule == "launch-overhead");
  CHECK(f->evidence_json.find("\"short_kernel_fraction\":0,") != std::string::npos);
  for (const auto& s : a.steps) {
    INFO("step " << s.index);
    CHECK(s.bound == Bound::Launch);
    CHECK(s.host_idle_ns > s.launch_idle_ns);  // the wait is dispatch before the launch, not the call itself
  }
  // Per kernel the GPU waits 85 µs (host) - 50 µs (kernel) = 35 µs; before a step's first kernel it waits the
  // whole 86 µs the host takes to issue it (Python, the launch call, the launch latency).
  CHECK(f->est_savings_us_per_step == Approx(86.0 + 29 * 35.0));
  CHECK(f->suggestion.find("Python and framework dispatch") != std::string::npos);
  CHECK(f->suggestion.find("torch.compile") != std::string::npos);
  CHECK(a.summary.framework == "pytorch");
  CHECK_FALSE(find_finding(a, "host-compute"));  // 85 µs between launches is dispatch, not a host computation
}

TEST_CASE("already compiled and fused kernels: CUDA graphs and bigger launches, not compilation") {
  HostBoundShape p;
  p.kernels = 2;
  p.kernel_ns = 20 * US;
  p.python_ns = 150 * US;  // what is left of the host per call after torch.compile: guards, Python, the launch
  p.kernel_name = "triton_poi_fused_add_cos_mul_sin_0";
  auto a = analyzer::analyze(host_bound(p).t);
  const auto* f = find_finding(a, "launch-overhead");
  REQUIRE(f);
  CHECK(f->suggestion.find("already compiled and fused") != std::string::npos);
  CHECK(f->suggestion.find("reduce-overhead") != std::string::npos);
  CHECK(f->suggestion.find("Compile the model so small ops fuse") == std::string::npos);
  CHECK(f->evidence_json.find("\"compiled_fused_kernel_share\":1") != std::string::npos);
}

TEST_CASE("the profiler's own launch cost: corrected away when the recording says what it costs") {
  // A GPU-bound program whose 4 µs kernels are issued by 2 µs launch calls — but traced, each call takes 5 µs and
  // the host falls behind the GPU. The recording carries the calibrated cost (3 µs per launch).
  HostBoundShape p;
  p.kernels = 30, p.kernel_ns = 4 * US, p.python_ns = US / 2, p.launch_ns = 5 * US;
  auto b = host_bound(p);
  b.t.meta["recorder"] = "stepscope record";
  b.t.meta["cupti.launch_cost_ns"] = "3000";
  auto a = analyzer::analyze(b.t);
  CHECK(a.summary.profiler.applied);
  CHECK(a.summary.profiler.cost_ns_per_launch == 3000.0);
  CHECK(a.summary.profiler.launches == 30 * 20);
  for (const auto& s : a.steps) {
    INFO("step " << s.index);
    CHECK(s.profiler_ns > 0);
    CHECK(s.profiler_ns <= 30 * 3 * US);
  }
  CHECK_FALSE(find_finding(a, "launch-overhead"));  // unprofiled, the host (2.5 µs per kernel) keeps ahead of the GPU
  CHECK(a.summary.profiler.corrected_step_median_us < a.summary.profiler.step_median_us);

  // The same timeline from a profiler whose cost is unknown (no recorder meta): not corrected, and it reads as
  // launch-bound — the verdict the correction exists to prevent on our own recordings.
  b.t.meta.clear();
  auto u = analyzer::analyze(b.t);
  CHECK_FALSE(u.summary.profiler.applied);
  CHECK(find_finding(u, "launch-overhead"));

  // A really launch-bound program (1 µs kernels) stays launch-bound after the correction.
  p.kernel_ns = 1 * US;
  auto c = host_bound(p);
  c.t.meta["recorder"] = "stepscope record";
  c.t.meta["cupti.launch_cost_ns"] = "3000";
  auto ca = analyzer::analyze(c.t);
  REQUIRE(find_finding(ca, "launch-overhead"));
  for (const auto& s : ca.steps) CHECK(s.profiler_ns == 30 * 3 * US);
}

TEST_CASE("stable verdicts: the same program at 60 and 600 steps gets the same rules and severities") {
  for (int64_t python_us : {80, 44}) {  // host-bound by far; by less
    INFO("python " << python_us << " µs per op");
    HostBoundShape p;
    p.kernels = 10, p.python_ns = python_us * US, p.launch_ns = 6 * US, p.kernel_ns = 85 * US - 44 * US;
    p.warmup_ns = 40'000 * US;  // a 40 ms first step (CUDA context, autotuning)
    p.steps = 60;
    auto a60 = analyzer::analyze(host_bound(p).t);
    p.steps = 600;
    auto a600 = analyzer::analyze(host_bound(p).t);
    REQUIRE(a60.findings.size() == a600.findings.size());
    for (size_t i = 0; i < a60.findings.size(); ++i) {
      CHECK(a60.findings[i].rule == a600.findings[i].rule);
      CHECK(a60.findings[i].severity == a600.findings[i].severity);
    }
    const auto* f = find_finding(a60, "launch-overhead");
    REQUIRE(f);
    CHECK(f->evidence_json.find("\"high_at\":0.15") != std::string::npos);  // how far from the thresholds
    // The warm-up step is shown but does not sway the severity.
    CHECK(a60.steps.front().dur_ns > 10 * a60.steps.back().dur_ns);
    CHECK(f->steps.front() == 1);
  }
}

TEST_CASE("a share near a severity threshold is medium, with the margin in its evidence") {
  // Host per kernel 100 µs, kernel 93 µs, 10 kernels a step: the GPU waits 100 µs before the first kernel and 7 µs
  // before each other one, 163 µs of a 1093 µs step (14.9%) — on the 15% high threshold.
  HostBoundShape p;
  p.kernels = 10, p.python_ns = 94 * US, p.launch_ns = 6 * US, p.kernel_ns = 93 * US, p.latency_ns = 0;
  auto a = analyzer::analyze(host_bound(p).t);
  const auto* f = find_finding(a, "launch-overhead");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::Medium);
  CHECK(f->evidence_json.find("\"near_threshold\":true") != std::string::npos);
  // Just below and just above the threshold give the same verdict.
  for (int64_t python_us : {93, 95}) {
    p.python_ns = python_us * US;
    const auto near = analyzer::analyze(host_bound(p).t);  // kept alive: find_finding() points into it
    const auto* g = find_finding(near, "launch-overhead");
    REQUIRE(g);
    CHECK(g->severity == store::Severity::Medium);
  }
}

TEST_CASE("no markers and no repeating unit: one window, said plainly") {
  Builder b;
  // Kernel names that never repeat in order.
  int64_t t = 0;
  for (int i = 0; i < 40; ++i, t += 20 * US) b.kernel("k" + std::to_string((i * 7919) % 97), t, t + 2 * US, t + 3 * US, t + 10 * US);
  auto a = analyzer::analyze(b.t);
  CHECK(a.summary.step_source == "none");
  CHECK(a.summary.steps == 1);
  CHECK(a.summary.step_confidence == 0.0);
}

TEST_CASE("host idle while wall-clock samples show the launching thread off the CPU is other idle") {
  // The thread sleeps (a lock, I/O) before each launch instead of running Python: `record --wall` samples say so.
  HostBoundShape p;
  p.steps = 4;
  auto b = host_bound(p);
  auto busy_cpu = analyzer::analyze(b.t);
  int64_t host_before = 0;
  for (const auto& s : busy_cpu.steps) host_before += s.host_idle_ns;
  REQUIRE(host_before > 0);
  // Off-CPU samples every 10 µs over every host gap.
  for (const auto& a : b.t.api_calls)
    for (int64_t ts = a.start - p.python_ns + 5 * US; ts < a.start; ts += 10 * US) {
      store::Sample smp;
      smp.time = ts, smp.pid = b.pid, smp.tid = b.tid, smp.on_cpu = false;
      b.t.samples.push_back(smp);
    }
  auto blocked = analyzer::analyze(b.t);
  int64_t host_after = 0, other_after = 0;
  for (const auto& s : blocked.steps) host_after += s.host_idle_ns, other_after += s.other_idle_ns;
  CHECK(host_after == 0);
  CHECK(other_after >= host_before);
  for (const auto& s : blocked.steps) CHECK(s.bound == Bound::Other);
  CHECK_FALSE(find_finding(blocked, "launch-overhead"));
}

TEST_CASE("GPU traced in windows (record --gpu-window 10/20): GPU figures and findings from the traced steps only") {
  HostBoundShape p;
  p.steps = 40;
  const auto whole = analyzer::analyze(host_bound(p).t);
  // What the collector leaves with --gpu-window 10/20: CUDA rows only for steps 0-9 and 20-29.
  auto b = host_bound(p);
  const auto step_span = keep_windows(
      b, [](int s) { return (s / 10) % 2 == 0; }, "10/20");
  REQUIRE(step_span.size() == 40);
  REQUIRE(b.t.gpu_windows.size() == 2);
  CHECK(b.t.gpu_windows[1].start == step_span[20].first);
  CHECK(b.t.gpu_windows[1].end == step_span[30].first);

  const auto a = analyzer::analyze(b.t);
  REQUIRE(a.steps.size() == 40);
  CHECK(a.summary.steps == 40);
  CHECK(a.summary.gpu_traced_steps == 20);
  CHECK(a.summary.gpu_window == "10/20");
  CHECK(analyzer::gpu_window_note(a.summary).find("GPU traced in 20 of 40 steps (gpu window 10/20)") == 0);
  CHECK(analyzer::gpu_window_note(a.summary).find("lent") == std::string::npos);
  CHECK(a.summary.cuda_lent.empty());
  {
    // A lend to torch.profiler that found the recording tracing: said in the note; one that found it not
    // tracing (no CUDA yet) is not.
    auto lent = b;
    lent.t.meta["cupti.lent"] =
        "torch.profiler: 1 time, 0.412 s in all (the last from 812.500 s CLOCK_MONOTONIC)";
    lent.t.meta["cupti.lent_while_tracing"] = "1";
    const auto l = analyzer::analyze(lent.t);
    CHECK(l.summary.cuda_lent == lent.t.meta["cupti.lent"]);
    CHECK(analyzer::gpu_window_note(l.summary).find(
              " CUDA tracing was lent to torch.profiler: 1 time, 0.412 s in all (the last from 812.500 s "
              "CLOCK_MONOTONIC): the steps under that profiler have no GPU activity here") !=
          std::string::npos);
    lent.t.meta["cupti.lent_while_tracing"] = "0";
    CHECK(analyzer::analyze(lent.t).summary.cuda_lent.empty());
  }
  CHECK(analyzer::gpu_window_note(whole.summary).empty());
  CHECK_FALSE(a.summary.gpu_traced_start_only);  // steps 20-29 were traced too
  CHECK(analyzer::gpu_window_note(a.summary).find("start-up") == std::string::npos);
  for (const auto& s : a.steps) {
    INFO("step " << s.index);
    const bool in_window = (s.index / 10) % 2 == 0;
    CHECK(s.gpu_traced == in_window);
    CHECK(s.dur_ns == whole.steps[size_t(s.index)].dur_ns);  // step times from every step
    if (in_window) {
      CHECK(s.bound == Bound::Launch);
      CHECK(s.gpu_busy_ns == whole.steps[size_t(s.index)].gpu_busy_ns);
      CHECK(s.gpu_busy_ns + s.data_wait_ns + s.launch_idle_ns + s.host_idle_ns + s.sync_idle_ns + s.other_idle_ns +
                s.profiler_ns ==
            s.dur_ns);
    } else {
      CHECK(s.bound == Bound::Untraced);
      CHECK(s.gpu_busy_ns + s.data_wait_ns + s.launch_idle_ns + s.host_idle_ns + s.sync_idle_ns + s.other_idle_ns == 0);
      CHECK(s.kernels == 0);
    }
  }
  // The traced steps are the whole run's in miniature: same busy share, same finding, same saving per step.
  CHECK(a.summary.gpu_busy_share == Approx(whole.summary.gpu_busy_share));
  const auto* f = find_finding(a, "launch-overhead");
  const auto* fw = find_finding(whole, "launch-overhead");
  REQUIRE(f);
  REQUIRE(fw);
  CHECK(f->severity == fw->severity);
  CHECK(f->steps.size() == 20);
  CHECK(f->est_savings_us_per_step == Approx(fw->est_savings_us_per_step));
  CHECK(f->share == Approx(fw->share));
  CHECK(a.findings.size() == whole.findings.size());
  // Kernels per step are per traced step (the untraced ones have none recorded), as in the whole run; the
  // breakdown totals cover the traced steps only.
  auto kernels_per_step = [](const analyzer::FindingResult& x) {
    const auto at = x.evidence_json.find("\"kernels_per_step\":");
    REQUIRE(at != std::string::npos);
    return std::stod(x.evidence_json.substr(at + 19));
  };
  CHECK(kernels_per_step(*f) == Approx(double(p.kernels)));
  CHECK(kernels_per_step(*fw) == Approx(double(p.kernels)));
  double traced_us = 0;
  for (const auto& s : a.steps)
    if (s.gpu_traced) traced_us += double(s.dur_ns) / 1e3;
  CHECK(a.summary.traced_step_time_us == Approx(traced_us));
  CHECK(a.summary.traced_step_time_us == Approx(a.summary.step_time_us / 2).epsilon(0.01));
  CHECK(analyzer::render_text_report(a).find(" summed time of the 20 GPU-traced steps: GPU busy ") != std::string::npos);

  // Read as if the whole run had been traced, the untraced steps look like an idle GPU: half the busy share.
  b.t.gpu_windows.clear();
  const auto naive = analyzer::analyze(b.t);
  CHECK(naive.summary.gpu_busy_share == Approx(whole.summary.gpu_busy_share / 2).epsilon(0.02));
}

TEST_CASE(
    "GPU windows: traced steps, slower by the profiler's launch cost, are not read as a host running ahead") {
  // launch_bound under the default window on an H100 (2026-11-27): 31 launches a step, each ~3 µs slower
  // while CUPTI traced. Its traced steps took ~200 µs on the GPU and on the host alike, but the host's median
  // came from every step (140 µs, mostly untraced): "the host runs ahead", rows in the GPU's time, no
  // finding.
  HostBoundShape p;
  p.steps = 60;
  p.kernels = 31;
  p.python_ns = 1 * US;
  p.kernel_ns = 2 * US;
  auto in_window = [](int s) { return (s / 10) % 3 == 0; };  // steps 0-9 and 30-39: a third of the run
  for (int s = 0; s < p.steps; ++s) p.step_launch_ns.push_back(in_window(s) ? 6 * US : 3 * US);
  auto b = host_bound(p);
  const auto step_span = keep_windows(b, in_window, "10/30");
  REQUIRE(step_span.size() == 60);

  const auto a = analyzer::analyze(b.t);
  REQUIRE(a.summary.gpu_traced_steps == 20);
  const int64_t traced_step_ns = step_span[1].first - step_span[0].first;
  const int64_t untraced_step_ns = step_span[11].first - step_span[10].first;
  // 1 µs of Python and the launch per kernel, then the last kernel's latency and run (3 µs)
  REQUIRE(traced_step_ns == 31 * 7 * US + 3 * US);
  REQUIRE(untraced_step_ns == 31 * 4 * US + 3 * US);
  // The GPU's step and the host's, both over the traced steps: the same 220 µs.
  CHECK(a.summary.gpu_step_median_us == Approx(220.0));
  CHECK(a.summary.host_step_median_us == Approx(220.0));
  CHECK_FALSE(a.summary.host_runs_ahead);
  CHECK(a.gpu_steps.empty());
  CHECK(analyzer::host_ahead_note(a.summary).empty());
  const auto* f = find_finding(a, "launch-overhead");
  REQUIRE(f);
  CHECK(f->steps.size() == 19);  // the traced steps but the first (warm-up)
  CHECK(f->steps.front() == 1);

  // Traced whole, the host's median is every step's, as before.
  auto whole = host_bound(p);
  const auto w = analyzer::analyze(whole.t);
  CHECK(w.summary.host_step_median_us == Approx(double(untraced_step_ns) / 1e3));
  CHECK_FALSE(w.summary.host_runs_ahead);
}

TEST_CASE("GPU windows that saw only the run's first steps: the note says so and what to do") {
  // input_bound --steps 60 under the default 20/200 on the H100: steps 0-19 traced, the off phase outlasted
  // the run, and the estimates came from its start-up (input-bound saving 2.12 ms against 1.47 ms measured).
  HostBoundShape p;
  p.steps = 60;
  auto b = host_bound(p);
  keep_windows(
      b, [](int s) { return s < 20; }, "20/200");
  const auto a = analyzer::analyze(b.t);
  REQUIRE(a.summary.gpu_traced_steps == 20);
  CHECK(a.summary.gpu_traced_start_only);
  CHECK(analyzer::gpu_window_note(a.summary) ==
        "GPU traced in 20 of 60 steps (gpu window 20/200): GPU shares, step breakdowns and findings come "
        "from those "
        "steps; step times and the training loop's data wait from all of them. Only the run's first 20 steps "
        "were "
        "traced: they show its start-up, not its steady pace (the off phase after a window lasts at least a "
        "second); record a run this short with `--gpu-window all`.");
  // Half of the run traced from its start: not "start-up only".
  auto half = host_bound(p);
  keep_windows(
      half, [](int s) { return s < 30; }, "30/200");
  CHECK_FALSE(analyzer::analyze(half.t).summary.gpu_traced_start_only);
}
