// The critical path (docs/critical-path.md): exact on traces built so that every figure is known, and on real
// traces and recordings against what each is known to be (their READMEs).
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/report.h"
#include "synthetic_builder.h"
#include "test_support.h"

using namespace stepscope;
using analyzer::PathKind;
using test::Builder;
using test::US;

namespace {

// Per step: per kernel 80 µs of host code, a 5 µs launch call, the kernel 1 µs after the call returns (or
// when the GPU is free); with `sync`, the step ends in cudaDeviceSynchronize until the GPU is done, else when
// it is.
Builder steps_of(int steps, int kernels, int64_t kernel_ns, bool sync) {
  Builder b;
  int64_t t = 0, gpu_free = 0;
  for (int s = 0; s < steps; ++s) {
    const int64_t s0 = t;
    for (int k = 0; k < kernels; ++k) {
      t += 80 * US;
      const int64_t ks = std::max(t + 6 * US, gpu_free);
      b.kernel("k", t, t + 5 * US, ks, ks + kernel_ns);
      gpu_free = ks + kernel_ns;
      t += 5 * US;
    }
    if (sync && gpu_free > t) b.api("cudaDeviceSynchronize", t, gpu_free);
    t = std::max(t, gpu_free);
    b.range("ProfilerStep#" + std::to_string(s), s0, t);
  }
  return b;
}

int64_t sum(const analyzer::CriticalPath& p) {
  int64_t n = 0;
  for (int64_t v : p.ns) n += v;
  return n;
}

int64_t of(const analyzer::CriticalPath& p, PathKind k) {
  return p.ns[int(k)];
}

}  // namespace

TEST_CASE("critical path, host-bound: the host's code and launch calls, the kernels off it") {
  const auto a = analyzer::analyze(steps_of(6, 30, 50 * US, false).t);
  REQUIRE(a.steps.size() == 6);
  const auto& cp = a.critical_path;
  REQUIRE(cp.steps.size() == 6);
  for (size_t i = 0; i < cp.steps.size(); ++i) {
    INFO("step " << i);
    const auto& p = cp.steps[i];
    CHECK(p.step == int64_t(i));
    CHECK(sum(p) == a.steps[i].dur_ns);  // 30 x 85 µs + the last kernel's 51 µs
    if (i + 1 < cp.steps.size()) {
      // The walk reaches a step from the next one's first launch, on the host: 30 launch calls, the rest host
      // code (the host waited for nothing: every kernel waited for its launch).
      CHECK(of(p, PathKind::Launch) == 30 * 5 * US);
      CHECK(of(p, PathKind::Host) == a.steps[i].dur_ns - 30 * 5 * US);
      CHECK(of(p, PathKind::GpuCompute) == 0);
    } else {
      // The last step ends with its last kernel, which waited 1 µs for its launch to reach the GPU.
      CHECK(of(p, PathKind::GpuCompute) == 50 * US);
      CHECK(of(p, PathKind::Launch) == 30 * 5 * US + 1 * US);
      CHECK(of(p, PathKind::Host) == 30 * 80 * US);
    }
  }
  // (5 x 2451 + 2400) / 15606 µs host code, (5 x 150 + 151) / 15606 launches; 50 µs of GPU compute is under
  // 0.5%.
  CHECK(analyzer::critical_path_sentence(cp) ==
        "Critical path over the steady GPU-traced steps (15.6 ms of step time): host code 93.9%, launches "
        "5.8%");
}

TEST_CASE("critical path, GPU-bound with a sync at each step's end: the kernels, then the first launch") {
  const auto a = analyzer::analyze(steps_of(5, 30, 200 * US, true).t);
  const auto& cp = a.critical_path;
  REQUIRE(cp.steps.size() == 5);
  for (size_t i = 0; i < cp.steps.size(); ++i) {
    INFO("step " << i);
    const auto& p = cp.steps[i];
    CHECK(sum(p) == a.steps[i].dur_ns);
    // 80 µs of host code and the launch (5 µs call, 1 µs to the GPU) before the first kernel; then 30 kernels
    // back to back on the stream. The sync's wait is not on the path: the kernels it waited for are.
    CHECK(a.steps[i].dur_ns == (86 + 30 * 200) * US);
    CHECK(of(p, PathKind::GpuCompute) == 30 * 200 * US);
    CHECK(of(p, PathKind::Launch) == 6 * US);
    CHECK(of(p, PathKind::Host) == 80 * US);
    CHECK(of(p, PathKind::Sync) == 0);
    REQUIRE(!p.longest.empty());
    CHECK(p.longest.front().kind == PathKind::GpuCompute);
    CHECK(p.longest.front().end - p.longest.front().start == 200 * US);
  }
}

TEST_CASE("critical path on real traces and H100 recordings: what each is known to be bound by") {
  STEPSCOPE_REQUIRE_TRACES();
  struct Case {
    std::string path;
    PathKind kind;    // the kind that must lead
    double at_least;  // its share of the steady steps' time
  };
  std::vector<Case> cases = {
      {test::trace_path("hta/v100_resnet_gpu_bound_ns.json.gz"), PathKind::GpuCompute, 0.95},  // GPU busy 97%
      {test::trace_path("kineto/resnet50_num_workers_0.json.gz"), PathKind::Host, 0.40},  // + DataLoader 40%
  };
  for (const auto& c : cases) {
    INFO(c.path);
    const auto a = analyzer::analyze(analyzer::load_trace(c.path));
    const auto& cp = a.critical_path;
    REQUIRE(cp.total_ns > 0);
    int lead = 0;
    for (int k = 1; k < analyzer::kPathKinds; ++k)
      if (cp.ns[k] > cp.ns[lead]) lead = k;
    CHECK(analyzer::to_string(PathKind(lead)) == std::string(analyzer::to_string(c.kind)));
    CHECK(double(cp.ns[int(c.kind)]) >= c.at_least * double(cp.total_ns));
    size_t traced = 0;
    for (const auto& s : a.steps) traced += s.gpu_traced && s.dur_ns > 0;
    CHECK(cp.steps.size() == traced);
    for (const auto& p : cp.steps) CHECK(sum(p) == a.steps[size_t(p.step)].dur_ns);
  }
  // The DataLoader wait is on the path where the loader is in the loop, and gone with 4 workers.
  const auto w0 =
      analyzer::analyze(analyzer::load_trace(test::trace_path("kineto/resnet50_num_workers_0.json.gz")));
  const auto w4 =
      analyzer::analyze(analyzer::load_trace(test::trace_path("kineto/resnet50_num_workers_4.json.gz")));
  CHECK(double(w0.critical_path.ns[int(PathKind::DataWait)]) >= 0.35 * double(w0.critical_path.total_ns));
  CHECK(double(w4.critical_path.ns[int(PathKind::DataWait)]) <= 0.02 * double(w4.critical_path.total_ns));
}

TEST_CASE("critical path on the H100 recordings: launch-bound, its graph cure GPU-bound, input-bound") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  static test::ScratchDir dir("critical_path_" + std::to_string(::getpid()));
  auto shares = [&](const std::string& name) {
    const std::string path = test::decompressed_recording("h100-2026-11-22/" + name + ".db.xz", dir);
    REQUIRE(!path.empty());
    const auto a = analyzer::analyze(analyzer::load_trace(path));
    std::array<double, analyzer::kPathKinds> s{};
    for (int k = 0; k < analyzer::kPathKinds; ++k)
      s[size_t(k)] = double(a.critical_path.ns[k]) / double(a.critical_path.total_ns);
    return s;
  };
  auto lb = shares("launch_bound");  // 31 tiny kernels a step, the host issuing each
  CHECK(lb[size_t(PathKind::Launch)] + lb[size_t(PathKind::Host)] >= 0.95);
  CHECK(lb[size_t(PathKind::GpuCompute)] <= 0.02);
  auto graph = shares("launch_bound_graph");  // the same work replayed from a CUDA graph
  CHECK(graph[size_t(PathKind::GpuCompute)] >= 0.90);
  auto input = shares("input_bound");  // the loop waits for each batch
  CHECK(input[size_t(PathKind::DataWait)] >= 0.80);
  auto prefetch = shares("input_bound_prefetch");
  CHECK(prefetch[size_t(PathKind::GpuCompute)] >= 0.90);
}
