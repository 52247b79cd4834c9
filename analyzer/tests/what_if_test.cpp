// The what-if replay (docs/critical-path.md, "What-if replay"): exact on a trace built by hand, and held
// against the cures the H100 samples measured of themselves (shared/recordings/h100-2026-11-22: each
// bottleneck's recording beside its cure's log).
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/report.h"
#include "synthetic_builder.h"
#include "test_support.h"

using namespace stepscope;
using test::Builder;
using test::US;

namespace {

const analyzer::WhatIfCure* cure(const analyzer::WhatIf& w, const std::string& name) {
  for (const auto& c : w.cures)
    if (c.cure == name) return &c;
  return nullptr;
}

const analyzer::Analysis& recording(const std::string& name, int workers = 4) {
  static test::ScratchDir dir("what_if_" + std::to_string(::getpid()));
  static std::map<std::pair<std::string, int>, analyzer::Analysis> cache;
  auto it = cache.find({name, workers});
  if (it == cache.end()) {
    const std::string path = test::decompressed_recording("h100-2026-11-22/" + name, dir);
    REQUIRE(!path.empty());
    store::Trace t = analyzer::load_trace(path);
    analyzer::AnalyzeOptions o;
    o.what_if_loader_workers = workers;
    it = cache.emplace(std::make_pair(name, workers), analyzer::analyze(t, o)).first;
  }
  return it->second;
}

double off(double predicted, double measured) {
  return predicted / measured - 1.0;
}

// Ten steps of 200 µs: a 10 µs launch of a 100 µs kernel (it starts 15 µs after the call began), a
// cudaDeviceSynchronize that returns 5 µs after the kernel ends, 70 µs of host code.
Builder sync_each_step() {
  Builder b;
  for (int s = 0; s < 10; ++s) {
    const int64_t t0 = s * 200 * US;
    b.range("ProfilerStep#" + std::to_string(s), t0, t0 + 200 * US);
    b.kernel("train", t0 + 10 * US, t0 + 20 * US, t0 + 25 * US, t0 + 125 * US);
    b.api("cudaDeviceSynchronize", t0 + 30 * US, t0 + 130 * US);
  }
  return b;
}

// A GPU-bound loop as Kineto records it: the host runs a step ahead of the GPU, each launch call blocked on a
// full launch queue (it returns when the kernel `queue` launches earlier has ended), and ProfilerStep# ranges
// `gap` apart (the Python of prof.step() between them: 31-70 µs on the shared Kineto traces). 20 kernels a
// step on one stream, 10 of 200 µs then 10 of 800 µs: the GPU's step is 10 ms.
Builder pipelined_loop(int64_t gap, int queue = 10) {
  Builder b;
  const int64_t durs[2] = {200 * US, 800 * US};
  std::vector<int64_t> ends;
  int64_t h = 1000 * US;
  for (int s = 0; s < 10; ++s) {
    const int64_t s0 = h;
    for (int j = 0; j < 20; ++j) {
      const size_t g = ends.size();
      const int64_t le =
          g >= size_t(queue) ? std::max(h + 10 * US, ends[g - size_t(queue)] + 2 * US) : h + 10 * US;
      const int64_t ks = std::max(h + 15 * US, ends.empty() ? 0 : ends.back());
      ends.push_back(ks + durs[j / 10]);
      b.kernel("k" + std::to_string(j), h, le, ks, ends.back());
      h = le + 20 * US;
    }
    b.range("ProfilerStep#" + std::to_string(s), s0, h);
    h += gap;
  }
  return b;
}

// Ten steps of 10 ms; in each, the step thread's cudaMemcpyAsync blocks 8 ms (its own copy done early,
// nothing ending when it returns: not a wait the replay models) while another thread launches 40 kernels
// inside it (each 15 µs after its call, on an idle stream); then the step thread launches 10 kernels of 100
// µs back to back, 9 of them queued.
Builder launches_inside_a_blocked_call() {
  Builder b;
  for (int s = 0; s < 10; ++s) {
    const int64_t t0 = s * 10'000 * US;
    b.range("ProfilerStep#" + std::to_string(s), t0, t0 + 10'000 * US);
    b.memcpy(store::CopyKind::HtoD, store::MemoryKind::Pinned, store::MemoryKind::Device, t0 + 200 * US,
             t0 + 8'200 * US, t0 + 250 * US, t0 + 260 * US, 1024);
    b.tid = 202;
    for (int j = 0; j < 40; ++j) {
      const int64_t c = t0 + (300 + 195 * j) * US;
      b.kernel("other", c, c + 10 * US, c + 25 * US, c + 175 * US, 1, 8);
    }
    b.tid = 101;
    for (int j = 0; j < 10; ++j) {
      const int64_t c = t0 + (8'300 + 5 * j) * US;
      b.kernel("tail", c, c + 5 * US, t0 + (8'315 + 100 * j) * US, t0 + (8'415 + 100 * j) * US);
    }
  }
  return b;
}

}  // namespace

TEST_CASE("what-if: a blocking sync each step, replayed unchanged and made asynchronous") {
  const Builder b = sync_each_step();
  const auto a = analyzer::analyze(b.t);
  const analyzer::WhatIf& w = a.what_if;
  REQUIRE(w.steps == 8);  // one window of 8 steps; the 2 left over make no window of their own
  CHECK(w.recorded_step_us == Approx(200.0));
  CHECK(w.identity_step_us == Approx(200.0));  // the model reproduces the recording exactly
  const double c = a.summary.profiler.applied ? a.summary.profiler.cost_ns_per_launch / 1e3 : 0.0;
  // The baseline: each launch c µs shorter; the host still waits for the kernel, which starts 15 µs into the
  // call: the step loses nothing (the kernel is issued at the call's start either way).
  CHECK(w.replayed_step_us == Approx(200.0));
  const auto* async = cure(w, "async");
  REQUIRE(async);
  CHECK(async->rule == "sync-stall");
  // Without the wait the sync costs what a launch does (10 − c µs): the host's step is 10 + (10 − c) + 10 +
  // (10 − c) + 70 µs; the last of the 8 kernels is issued at 7 host steps + 10 µs, starts 15 µs later and
  // runs 100 µs: the window ends when it does.
  const double host_step = 110.0 - 2 * c;
  const double expect = std::max(8 * host_step, 7 * host_step + 125.0) / 8;
  CHECK(async->step_us == Approx(expect));
  CHECK(async->saving_us == Approx(200.0 - expect));
  const auto f = std::find_if(a.findings.begin(), a.findings.end(),
                              [](const auto& x) { return x.rule == "sync-stall"; });
  REQUIRE(f != a.findings.end());
  CHECK(f->replayed_cure == "async");
  CHECK(f->replayed_step_us == Approx(expect));
  CHECK(analyzer::what_if_sentence(w).find("without the blocking syncs") != std::string::npos);
}

TEST_CASE("what-if: a trace's launch dimensions are whatever it says, and replay the same") {
  // Grids and blocks of 2^31 − 1 in each dimension (an imported file can say so): their products overflow 64
  // bits (undefined, and a sanitized build stops there); the replay's numbers are the sane trace's.
  auto steps = [](bool hostile) {
    Builder b = sync_each_step();
    if (hostile)
      for (auto& k : b.t.kernels) {
        k.grid_x = k.grid_y = k.grid_z = INT32_MAX;
        k.block_x = k.block_y = k.block_z = INT32_MAX;
        k.registers = INT32_MAX;
      }
    return analyzer::analyze(b.t).what_if;
  };
  const analyzer::WhatIf sane = steps(false), hostile = steps(true);
  REQUIRE(hostile.steps == 8);
  CHECK(hostile.identity_step_us == Approx(sane.identity_step_us));
  CHECK(hostile.replayed_step_us == Approx(sane.replayed_step_us));
  REQUIRE(hostile.cures.size() == sane.cures.size());
  for (size_t i = 0; i < sane.cures.size(); ++i)
    CHECK(hostile.cures[i].step_us == Approx(sane.cures[i].step_us));
}

TEST_CASE("what-if: nothing to replay without GPU work, and said so") {
  Builder b;
  for (int s = 0; s < 4; ++s) b.range("ProfilerStep#" + std::to_string(s), s * 100 * US, (s + 1) * 100 * US);
  const auto a = analyzer::analyze(b.t);
  CHECK(a.what_if.empty());
  CHECK(a.what_if.note == "no GPU activity in the steps: nothing to replay");
  CHECK(analyzer::what_if_sentence(a.what_if).empty());
}

TEST_CASE(
    "what-if: a pipelined GPU-bound loop replays at the GPU's step, whatever the time between its steps") {
  for (const int64_t gap : {int64_t(0), 40 * US, 500 * US}) {
    CAPTURE(gap);
    const analyzer::WhatIf w = analyzer::analyze(pipelined_loop(gap).t).what_if;
    REQUIRE(w.steps == 8);  // steps 0-7 one window, not 8 windows of one step
    // The window ends when the GPU has run the 160 kernels its steps launched, back to back from 15 µs after
    // the first launch: the GPU's period (in windows of one step, 40 µs apart, it was 15,965 µs: +60%).
    CHECK(w.identity_step_us == Approx((15.0 + 80'000.0) / 8));
  }
}

TEST_CASE(
    "what-if: launches of another thread inside a blocked call set no launch latency for the queued ops") {
  const analyzer::WhatIf w = analyzer::analyze(launches_inside_a_blocked_call().t).what_if;
  REQUIRE(w.steps == 8);
  CHECK(w.recorded_step_us == Approx(10'000.0));
  CHECK(w.identity_step_us == Approx(10'000.0));  // latencies from the memcpy's start: 10,379 µs
}

TEST_CASE("what-if on the H100 recordings: each cure's predicted step against the step the cure measured") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // The cures' own step times, plain (their .log files): launch_bound --graph 53.46 µs, --fused 25.62 µs;
  // input_bound --prefetch 8 (8 decode workers) 681.58 µs; sync_stall --async 342.82 µs.
  {
    const auto& w = recording("launch_bound.db.xz").what_if;
    REQUIRE(cure(w, "cuda-graph"));
    REQUIRE(cure(w, "fused"));
    INFO("cuda-graph " << cure(w, "cuda-graph")->step_us << " µs, fused " << cure(w, "fused")->step_us
                       << " µs");
    CHECK(std::abs(off(cure(w, "cuda-graph")->step_us, 53.46)) <= 0.15);
    CHECK(std::abs(off(cure(w, "fused")->step_us, 25.62)) <= 0.15);
    // Replayed unchanged with the profiler's 3 µs per launch removed, against the plain run's 137.46 µs.
    CHECK(std::abs(off(w.replayed_step_us, 137.46)) <= 0.10);
    CHECK(std::abs(off(w.identity_step_us, w.recorded_step_us)) <= 0.02);
  }
  {
    const auto& w = recording("input_bound.db.xz", 8).what_if;
    REQUIRE(cure(w, "prefetch"));
    INFO("prefetch " << cure(w, "prefetch")->step_us << " µs");
    CHECK(std::abs(off(cure(w, "prefetch")->step_us, 681.58)) <= 0.15);
    CHECK(std::abs(off(w.identity_step_us, w.recorded_step_us)) <= 0.05);
  }
  {
    const auto& w = recording("sync_stall.db.xz").what_if;
    REQUIRE(cure(w, "async"));
    INFO("async " << cure(w, "async")->step_us << " µs");
    CHECK(std::abs(off(cure(w, "async")->step_us, 342.82)) <= 0.15);
    CHECK(std::abs(off(w.replayed_step_us, 459.50)) <= 0.10);
  }
}

TEST_CASE("what-if on the H100 recordings: the CUDA-graph cure against the graph run's own recording") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // The graph run (launch_bound --graph), as its recording's graph table reads it: a replay keeps the GPU busy
  // 52.40 µs and the GPU idles 2.29 µs (mean) before the next: a 54.69 µs period, the step the sample measured of
  // itself under the collector (54.66 µs). The eager run's 31 kernels keep the GPU busy 54.68 µs a step: inside
  // the graph they run 4% faster, and the launch leaves its 2.2 µs gap.
  const auto& graphed = recording("launch_bound_graph.db.xz");
  REQUIRE(graphed.graphs.graphs.size() == 1);
  const auto& g = graphed.graphs.graphs[0];
  const double period = g.gpu_us + g.idle_before_us;
  CHECK(std::abs(off(period, 54.66)) <= 0.01);
  const auto& eager = recording("launch_bound.db.xz");
  std::vector<int64_t> busy;
  for (const auto& st : eager.steps) busy.push_back(st.gpu_busy_ns);
  std::nth_element(busy.begin(), busy.begin() + int64_t(busy.size() / 2), busy.end());
  const double eager_busy_us = double(busy[busy.size() / 2]) / 1e3;
  INFO("graph replay " << g.gpu_us << " µs + " << g.idle_before_us << " µs before; eager kernels " << eager_busy_us
                       << " µs a step");
  CHECK(g.gpu_us < eager_busy_us);
  CHECK(std::abs(off(period, eager_busy_us)) <= 0.01);
  // The cure's prediction from the eager recording, against that period.
  REQUIRE(cure(eager.what_if, "cuda-graph"));
  const double predicted = cure(eager.what_if, "cuda-graph")->step_us;
  INFO("cuda-graph predicted " << predicted << " µs, the graph run's period " << period << " µs");
  CHECK(off(predicted, period) >= 0);
  CHECK(off(predicted, period) <= 0.10);
}

TEST_CASE("what-if on the H100 recordings: the DataLoader's workers, against the cure's steady mean step") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // torch_dataloader (workers 0) cured by 4 pinned workers. The cure's log says "step median 7.08 ms", but
  // its steps cycle 45, 11, 7, 3 ms (4 workers each delivering a batch per ~66 ms): the run pays the cycle's
  // mean, which its own recording shows window by window.
  const auto& cured = recording("torch_dataloader_workers.db.xz").what_if;
  REQUIRE(!cured.empty());
  INFO("the cure's recorded windows: " << cured.recorded_step_us << " µs per step");
  CHECK(cured.recorded_step_us > 2 * 7080.0);
  const auto& w = recording("torch_dataloader.db.xz", 4).what_if;
  REQUIRE(cure(w, "prefetch"));
  INFO("prefetch with 4 workers " << cure(w, "prefetch")->step_us << " µs");
  CHECK(std::abs(off(cure(w, "prefetch")->step_us, cured.recorded_step_us)) <= 0.15);
}

TEST_CASE("what-if on the H100 recordings: the batched GEMM's known miss stays known") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // small_gemm_loop (256 GEMMs of 128³ a step, 16 blocks each) against small_gemm_loop --batched's 29.42 µs.
  // The replay packs the loop's 4096 blocks at the occupancy its registers and shared memory allow (12 per SM
  // on an H100: 3 waves of the 5.2 µs kernel) as if co-resident blocks ran as fast as a lone one; they share
  // the SM's FP32 pipes, and cuBLAS's batched call picks another kernel (128×128 tiles, 28 µs). docs/rules.md
  // says so.
  const auto& w = recording("small_gemm_loop.db.xz").what_if;
  REQUIRE(cure(w, "batched"));
  const double predicted = cure(w, "batched")->step_us;
  INFO("batched " << predicted << " µs");
  CHECK(off(predicted, 29.42) < -0.15);
  CHECK(off(predicted, 29.42) > -0.50);
  CHECK(cure(w, "batched")->saving_us > 0.95 * (w.replayed_step_us - 29.42));  // the saving itself is close
}

TEST_CASE("what-if: the cures' own recordings, replayed unchanged, give the steps they measured plain") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // GPU-bound runs whose host ran ahead: the host's steps are not the steps; the replay's are the GPU's.
  const std::pair<const char*, double> runs[] = {{"launch_bound_graph.db.xz", 53.46},
                                                 {"launch_bound_fused.db.xz", 25.62},
                                                 {"sync_stall_async.db.xz", 342.82},
                                                 {"small_gemm_loop_batched.db.xz", 29.42}};
  for (const auto& [name, plain] : runs) {
    const auto& w = recording(name).what_if;
    INFO(name << ": recorded " << w.recorded_step_us << " µs, replayed unchanged " << w.identity_step_us
              << " µs");
    CHECK(std::abs(off(w.identity_step_us, plain)) <= 0.06);
  }
}
