// The statistical acceptance test end to end: synthetic stepscope stores (SQLite files written and read back),
// analyzed by analyze(), compared by diff_runs(). Steps of both sides come from one seeded distribution:
// at least 95 of 100 pairs must not regress; a +10% step-time shift with low variance must be caught.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <memory>
#include <unistd.h>

#include "diff/stats.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

constexpr int64_t US = 1000;

struct StoreSpec {
  int steps = 20;
  double compute_us = 20000;  // GPU work per step
  double data_us = 4000;      // host waits for the next batch before launching
  double cv = 0.04;           // step-to-step variation of both
  int kernels = 12;
};

// Stores go to tmpfs when there is one: 200 SQLite files with fsync on a shared disk cost seconds, and
// the durability of these throwaway files is not what is tested.
class FastDir {
 public:
  explicit FastDir(const std::string& name) {
    std::error_code ec;
    if (std::filesystem::is_directory("/dev/shm", ec)) {
      path_ = std::filesystem::path("/dev/shm") / ("stepscope-" + name + "-" + std::to_string(::getpid()));
      std::filesystem::remove_all(path_, ec);
      if (!std::filesystem::create_directories(path_, ec) || ec) path_.clear();
    }
    if (path_.empty()) {
      fallback_ = std::make_unique<test::ScratchDir>(name);
      path_ = fallback_->path();
    }
  }
  ~FastDir() {
    std::error_code ec;
    if (!fallback_) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
  std::unique_ptr<test::ScratchDir> fallback_;
};

// A recorded-looking store: per step a ProfilerStep range, a data wait (the data_waits table, as the collector
// writes it), then back-to-back kernels each launched by a cudaLaunchKernel call shortly before it starts.
std::string write_store(const FastDir& dir, const std::string& name, const StoreSpec& s, uint64_t seed) {
  analyzer::stats::SplitMix64 rng(seed);
  store::Trace t;
  t.meta["clock_domain"] = "monotonic";
  const int64_t pid = 10, tid = 11;
  t.processes.push_back({pid, t.intern("python train.py"), 0});
  t.threads.push_back({pid, tid, t.intern("MainThread")});
  store::Device dev;
  dev.name = t.intern("synthetic GPU");
  t.devices.push_back(dev);
  const auto step_name = [&](int i) { return t.intern("ProfilerStep#" + std::to_string(i)); };
  const auto launch = t.intern("cudaLaunchKernel");
  const auto dl = t.intern("dataloader");
  int64_t now = 1'000'000 * US, corr = 1;
  for (int i = 0; i < s.steps; ++i) {
    double compute = std::max(100.0, s.compute_us * (1 + s.cv * rng.normal()));
    double data = std::max(10.0, s.data_us * (1 + s.cv * rng.normal()));
    int64_t start = now;
    int64_t t0 = start + int64_t(data * US);
    t.data_waits.push_back({start, t0, pid, tid, dl});
    int64_t gpu = t0 + 20 * US;
    int64_t per = int64_t(compute * US) / s.kernels;
    for (int k = 0; k < s.kernels; ++k) {
      store::ApiCall a;
      a.start = t0 + k * 8 * US, a.end = a.start + 5 * US, a.pid = pid, a.tid = tid, a.name = launch, a.correlation = corr;
      t.api_calls.push_back(a);
      store::Kernel kr;
      kr.start = std::max(gpu, a.end + 2 * US);
      kr.end = kr.start + per;
      kr.correlation = corr++;
      kr.stream = 7;
      kr.grid_x = kr.grid_y = kr.grid_z = 1;
      kr.block_x = 256, kr.block_y = kr.block_z = 1;
      kr.name = t.intern("kernel_" + std::to_string(k));
      kr.pid = pid;
      t.kernels.push_back(kr);
      gpu = kr.end;
    }
    int64_t end = gpu + 50 * US;
    store::Range r;
    r.start = start, r.end = end, r.pid = pid, r.tid = tid, r.name = step_name(i), r.source = store::RangeSource::Annotation;
    t.ranges.push_back(r);
    now = end;
  }
  std::string path = dir.file(name + ".db");
  store::write_store_atomically(t, path);
  return path;
}

analyzer::DiffRun run_from_store(const std::string& path) {
  return analyzer::make_diff_run(path, analyzer::load_trace(path));
}

}  // namespace

// [plain_only]: statistics over 100 seeded pairs of stores; the sanitized suite takes the same code in the other case.
TEST_CASE("synthetic stores from one distribution: no regression in at least 95 of 100 seeded pairs", "[plain_only]") {
  FastDir dir("diff_store_null");
  StoreSpec spec;
  int regressions = 0;
  for (uint64_t pair = 0; pair < 100; ++pair) {
    auto b = run_from_store(write_store(dir, "b" + std::to_string(pair), spec, 7000 + 2 * pair));
    auto n = run_from_store(write_store(dir, "n" + std::to_string(pair), spec, 7001 + 2 * pair));
    if (pair == 0) {
      // The analyzer saw what was built: 20 ProfilerSteps, data wait ≈ 4 ms of ≈ 24 ms.
      REQUIRE(b.analysis.summary.step_source == "profiler-step");
      REQUIRE(b.analysis.steps.size() == 20);
      REQUIRE(b.analysis.summary.data_wait_share > 0.12);
      REQUIRE(b.analysis.summary.data_wait_share < 0.20);
    }
    auto d = analyzer::diff_runs({b}, {n});
    if (d.regression) ++regressions;
  }
  INFO("regressions in 100 pairs: " << regressions);
  CHECK(regressions <= 5);
}

TEST_CASE("synthetic stores: a +10% step-time shift with low variance is caught") {
  FastDir dir("diff_store_shift");
  StoreSpec base, slow;
  base.cv = slow.cv = 0.01;
  slow.compute_us = base.compute_us * 1.1;
  slow.data_us = base.data_us * 1.1;
  int caught = 0;
  for (uint64_t pair = 0; pair < 10; ++pair) {
    auto b = run_from_store(write_store(dir, "b" + std::to_string(pair), base, 100 + 2 * pair));
    auto n = run_from_store(write_store(dir, "n" + std::to_string(pair), slow, 101 + 2 * pair));
    auto d = analyzer::diff_runs({b}, {n});
    for (const auto& m : d.metrics)
      if (m.id == "step_time_median" && m.verdict == analyzer::Verdict::Regression && d.exit_code() == 1) ++caught;
  }
  CHECK(caught == 10);
}

// A Python function is compared whole: its samples at two lines were two rows, each a few samples, each
// within noise, where the function as a whole grew.
TEST_CASE("CPU stores: a Python function's host time is compared across its lines") {
  FastDir dir("diff_python_lines");
  auto write = [&](const std::string& name, int samples_per_step) {
    store::Trace t;
    t.meta["clock_domain"] = "monotonic";
    t.meta["collector.cpu_hz"] = "1000";
    const int64_t pid = 10, tid = 11;
    t.processes.push_back({pid, t.intern("python train.py"), 0});
    t.threads.push_back({pid, tid, t.intern("MainThread")});
    for (int line : {61, 62}) {
      store::Frame f;
      f.id = int64_t(t.frames.size()) + 1;
      f.symbol = t.intern("train_step");
      f.file = t.intern("/w/train.py");
      f.line = line;
      f.kind = store::FrameKind::Python;
      t.frames.push_back(f);
      t.stacks.push_back({f.id, 0, f.id});
    }
    const auto api = t.intern("api");
    int64_t now = 1'000'000 * US;
    for (int i = 0; i < 30; ++i) {
      const int64_t step_us = 40'000;
      t.steps.push_back({i, now, now + step_us * US, api, pid, tid});
      for (int k = 0; k < samples_per_step; ++k)  // a sample a millisecond, at alternating lines
        t.samples.push_back({now + (k + 1) * 1000 * US, pid, tid, 1 + k % 2, true, 1});
      now += step_us * US;
    }
    const std::string path = dir.file(name + ".db");
    store::write_store_atomically(t, path);
    return path;
  };
  const auto d = analyzer::diff_runs({run_from_store(write("base", 10))}, {run_from_store(write("new", 16))});
  INFO(analyzer::diff_to_text(d));
  REQUIRE(d.host_functions.changed.size() == 1);
  CHECK(d.host_functions.changed[0].name == "train_step (train.py)");
  CHECK_THAT(d.host_functions.changed[0].delta_us_per_step(), Catch::Matchers::WithinRel(6000.0, 0.05));
}
