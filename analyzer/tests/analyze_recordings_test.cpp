// analyze() on stepscope's own recordings on a real H100 (shared/recordings/h100-2026-11-22), held against what
// each sample measured of itself without the profiler (the .log files; the "what is right" column of the
// recordings' README). These stores were written by the 0.1 collector: no launch-cost calibration in meta.
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>

#include "findings.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using test::find_finding;

namespace {

const analyzer::Analysis& recording(const std::string& name) {
  // One directory per process: CTest runs the test cases of this file in parallel processes.
  static test::ScratchDir dir("analyze_recordings_" + std::to_string(::getpid()));
  static std::map<std::string, analyzer::Analysis> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const std::string path = test::decompressed_recording("h100-2026-11-22/" + name, dir);
    REQUIRE(!path.empty());
    store::Trace t = analyzer::load_trace(path);
    it = cache.emplace(name, analyzer::analyze(t)).first;
  }
  return it->second;
}

std::map<analyzer::Bound, size_t> bounds(const analyzer::Analysis& a) {
  std::map<analyzer::Bound, size_t> n;
  for (const auto& s : a.steps) n[s.bound]++;
  return n;
}

}  // namespace

TEST_CASE("launch_bound on an H100: launch-bound once the profiler's own launch cost is taken out") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  const auto& a = recording("launch_bound.db.xz");
  // The sample's own figures: plain step median 137.46 µs, 230.56 µs under the 0.1 collector (31 launches a step);
  // the cures measured plain: --graph 53.46 µs, --fused 25.62 µs.
  const double plain = 137.46, graph = 53.46;
  REQUIRE(a.summary.profiler.applied);
  CHECK(a.summary.profiler.cost_ns_per_launch == Approx(3000.0));
  CHECK(a.summary.profiler.launches == 31 * 3000);
  INFO("corrected median step " << a.summary.profiler.corrected_step_median_us << " µs");
  CHECK(std::abs(a.summary.profiler.corrected_step_median_us - plain) <= 0.15 * plain);
  CHECK(a.summary.profiler.step_median_us > 1.5 * plain);  // what was recorded

  REQUIRE(!a.findings.empty());
  const auto& f = a.findings.front();
  CHECK(f.rule == "launch-overhead");
  CHECK(f.severity == store::Severity::High);
  INFO("saving " << f.est_savings_us_per_step << " µs per step");
  CHECK(std::abs(f.est_savings_us_per_step - (plain - graph)) <= 0.25 * (plain - graph));
  CHECK(f.evidence_json.find("\"applied\":true") != std::string::npos);
  // A CUDA C++ program: the advice is CUDA graphs and fusion in CUDA terms, not torch.compile.
  CHECK(a.summary.framework == "cuda");
  CHECK(f.suggestion.find("cudaGraphLaunch") != std::string::npos);
  CHECK(f.suggestion.find("torch.compile") == std::string::npos);
  auto b = bounds(a);
  CHECK(b[analyzer::Bound::Launch] > a.steps.size() * 9 / 10);
}

TEST_CASE("the cures of launch_bound (fused, graph) have no finding") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  for (const char* name : {"launch_bound_fused.db.xz", "launch_bound_graph.db.xz", "small_gemm_loop_batched.db.xz",
                           "sync_stall_async.db.xz"}) {
    INFO(name);
    const auto& a = recording(name);
    for (const auto& f : a.findings) INFO(f.rule << " " << f.share);
    CHECK(a.findings.empty());
  }
}

TEST_CASE("small_gemm_loop: the batched GEMM leads and the same idle is not counted twice") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  const auto& a = recording("small_gemm_loop.db.xz");
  REQUIRE(!a.findings.empty());
  CHECK(a.findings.front().rule == "small-gemm-loop");
  CHECK(a.findings.front().severity == store::Severity::High);
  double idle_saved = 0;
  for (const auto& f : a.findings) idle_saved += f.share;
  CHECK(idle_saved <= 1.0 - a.summary.gpu_busy_share);
  // Batching saves the gaps of the unprofiled program: never the profiler's own cost per launch. Summed over
  // the steps, the savings fit in the idle that is left once that cost is taken out.
  double steps_us = 0, busy_us = 0, profiler_us = 0;
  for (const auto& s : a.steps) steps_us += s.dur_ns / 1e3, busy_us += s.gpu_busy_ns / 1e3, profiler_us += s.profiler_ns / 1e3;
  REQUIRE(profiler_us > 0.1 * steps_us);  // the 0.1 collector's cost is large here: the check below is not empty
  double saved_us = 0;
  for (const auto& f : a.findings) saved_us += f.share * steps_us;
  CHECK(saved_us <= steps_us - busy_us - profiler_us);
  // The program is CUDA C++: the cure is a batched cuBLAS call, not torch.einsum.
  CHECK(a.summary.framework == "cuda");
  CHECK(a.findings.front().suggestion.find("cublasGemmStridedBatchedEx") != std::string::npos);
  CHECK(a.findings.front().suggestion.find("torch") == std::string::npos);
}

TEST_CASE("sync_stall: the blocking copy and device syncs are a high sync-stall") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  const auto& a = recording("sync_stall.db.xz");
  REQUIRE(!a.findings.empty());
  const auto& f = a.findings.front();
  CHECK(f.rule == "sync-stall");
  CHECK(f.severity == store::Severity::High);
  CHECK(f.evidence_json.find("cudaDeviceSynchronize") != std::string::npos);
}

TEST_CASE("input_bound: input-bound and pageable copies — with 8 prefetch workers the GPU is the bottleneck") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  const auto& a = recording("input_bound.db.xz");
  REQUIRE(!a.findings.empty());
  CHECK(a.findings.front().rule == "input-bound");
  CHECK(a.findings.front().severity == store::Severity::High);
  CHECK(find_finding(a, "pageable-memcpy"));

  // --prefetch 8: the sample's GPU-timeline step (681.6 µs plain) equals its train kernel (676 µs per batch) and
  // kernels follow each other within ~3 µs: the GPU is busy all the time. The training loop still waits for data
  // most of its step, but that wait is hidden behind queued GPU work (the host runs 12 batches ahead), so it is not
  // input-bound — and no summary says both "GPU busy 93%" and "input wait 87%" of the same time as causes.
  const auto& p = recording("input_bound_prefetch.db.xz");
  CHECK_FALSE(find_finding(p, "input-bound"));
  CHECK(p.summary.data_wait_share > 0.8);    // the host's own wait, reported as such
  CHECK(p.summary.input_idle_share < 0.07);  // the GPU's wait for input: the first batch
  auto b = bounds(p);
  CHECK(b[analyzer::Bound::Gpu] >= p.steps.size() - 2);
}

TEST_CASE("torch_dataloader on an H100: input-bound, saving the ~68 ms the GPU waits per step") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // The sample: 70.66 ms step median, data wait 95.2% of the step (second half): 67.3 ms a step.
  const auto& a = recording("torch_dataloader.db.xz");
  const auto* f = find_finding(a, "input-bound");
  REQUIRE(f);
  CHECK(a.findings.front().rule == "input-bound");
  CHECK(f->severity == store::Severity::High);
  INFO("saving " << f->est_savings_us_per_step << " µs per step");
  CHECK(std::abs(f->est_savings_us_per_step - 67'300.0) <= 0.10 * 67'300.0);
  CHECK(a.summary.framework == "pytorch");
  CHECK(f->suggestion.find("num_workers") != std::string::npos);
  // The recording marks the wait by its DataLoader hook only; the sampled Python frames name the iterator.
  CHECK(f->evidence_json.find("\"loader\":\"pytorch-dataloader-num_workers-0\"") != std::string::npos);
  CHECK(f->summary.find("num_workers=0") != std::string::npos);
  // The sentence speaks of the steady steps, as the severity does (the sample: data wait 95% of the step).
  CHECK(f->summary.find("94.7%") != std::string::npos);

  // Kineto (torch.profiler) on the same program and GPU agrees.
  STEPSCOPE_REQUIRE_TRACES();
  store::Trace k = analyzer::load_trace(test::recordings_dir() + "/h100-2026-11-22/torch_dataloader.kineto.json.gz");
  auto ka = analyzer::analyze(k);
  // Its Optimizer.step ranges are on the main thread and copied onto the GPU's timeline (gpu_user_annotation,
  // pid 0): 40 each. The steps are the host thread's, so the DataLoader waits beside them are the loop's own.
  CHECK(ka.summary.step_source == "optimizer");
  CHECK(ka.summary.steps == 40);
  CHECK(ka.summary.other_thread_data_waits == 0);
  CHECK(ka.summary.data_wait_share > 0.7);
  const auto* kf = find_finding(ka, "input-bound");
  REQUIRE(kf);
  CHECK(kf->severity == store::Severity::High);
  CHECK(std::abs(kf->est_savings_us_per_step - f->est_savings_us_per_step) <= 0.15 * f->est_savings_us_per_step);

  // 4 pinned workers: still input-bound on an H100; its 6 pageable copies are noise, not a finding.
  const auto& w = recording("torch_dataloader_workers.db.xz");
  CHECK(find_finding(w, "input-bound"));
  CHECK_FALSE(find_finding(w, "pageable-memcpy"));
}

TEST_CASE("a 0.1 store's syncs (thread 0) are given the thread of their API call when loaded") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  test::ScratchDir dir("analyze_recordings_syncs_" + std::to_string(::getpid()));
  const std::string path = test::decompressed_recording("h100-2026-11-22/torch_dataloader.db.xz", dir);
  REQUIRE(!path.empty());
  const auto raw = store::StoreReader(path).load();
  size_t zero = 0;
  for (const auto& y : raw.syncs) zero += y.tid == 0;
  REQUIRE(zero > 100);  // the defect is in the file: 207 syncs on thread 0
  const store::Trace t = analyzer::load_trace(path);
  std::map<int64_t, int64_t> tid_of;  // correlation → API call's thread
  for (const auto& a : t.api_calls)
    if (a.correlation) tid_of[a.correlation] = a.tid;
  size_t joined = 0;
  for (const auto& y : t.syncs) {
    CHECK(y.tid != 0);
    if (auto it = tid_of.find(y.correlation); it != tid_of.end()) joined += it->second == y.tid;
  }
  CHECK(joined == t.syncs.size());
}

TEST_CASE("a host that runs ahead of the GPU is said so, with the GPU's step time the sample measured") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  // The samples' own step times (the .log files, recorded run): the GPU's pace, not the host's loop.
  struct Case {
    const char* name;
    double measured_us;
    bool ahead;
  };
  for (const Case c : {Case{"sync_stall_async.db.xz", 343.78, true}, Case{"small_gemm_loop_batched.db.xz", 29.88, true},
                       Case{"input_bound_prefetch.db.xz", 681.97, true}, Case{"launch_bound.db.xz", 230.56, false},
                       Case{"sync_stall.db.xz", 469.92, false}}) {
    INFO(c.name);
    const auto& a = recording(c.name);
    const auto& s = a.summary;
    CHECK(s.host_runs_ahead == c.ahead);
    CHECK(std::abs(s.gpu_step_median_us - c.measured_us) <= 0.03 * c.measured_us);
    if (c.ahead) {
      CHECK(s.host_step_median_us < 0.8 * c.measured_us);
      CHECK(analyzer::host_ahead_note(s).find("runs ahead") != std::string::npos);
      // The per-step rows are in the GPU's time too: their median is the sample's step, each adds up.
      REQUIRE(a.gpu_steps.size() + 1 >= a.steps.size() / 2);
      std::vector<int64_t> durs;
      for (const auto& st : a.gpu_steps) {
        durs.push_back(st.dur_ns);
        CHECK(st.gpu_busy_ns + st.data_wait_ns + st.launch_idle_ns + st.sync_idle_ns + st.host_idle_ns +
                  st.other_idle_ns == st.dur_ns);
      }
      std::nth_element(durs.begin(), durs.begin() + ptrdiff_t(durs.size() / 2), durs.end());
      CHECK(std::abs(double(durs[durs.size() / 2]) / 1e3 - c.measured_us) <= 0.03 * c.measured_us);
      // Slow steps are judged on the same rows: a host step that waits for the queued GPU work is not slow.
      const auto& o = a.step_outliers;
      CHECK(o.gpu_time);
      CHECK(o.steps == int64_t(a.gpu_steps.size()));
      CHECK(std::abs(double(o.median_ns) / 1e3 - c.measured_us) <= 0.03 * c.measured_us);
      std::map<int64_t, int64_t> dur_of;
      for (const auto& st : a.gpu_steps) dur_of[st.index] = st.dur_ns;
      for (const auto& slow : o.slow) {
        REQUIRE(dur_of.count(slow.index));
        CHECK(slow.dur_ns == dur_of[slow.index]);
        CHECK(slow.dur_ns - o.median_ns > o.threshold_ns);
      }
    } else {
      CHECK(analyzer::host_ahead_note(s).empty());
      CHECK(a.gpu_steps.empty());
      CHECK_FALSE(a.step_outliers.gpu_time);
      CHECK(a.step_outliers.steps == int64_t(a.steps.size()));
    }
  }
}

TEST_CASE("no recording reports a finding below 1% of the step time, and savings never exceed the idle") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  for (const char* name : {"launch_bound.db.xz", "launch_bound_fused.db.xz", "launch_bound_graph.db.xz",
                           "input_bound.db.xz", "input_bound_prefetch.db.xz", "small_gemm_loop.db.xz",
                           "small_gemm_loop_batched.db.xz", "sync_stall.db.xz", "sync_stall_async.db.xz",
                           "torch_dataloader.db.xz", "torch_dataloader_workers.db.xz"}) {
    INFO(name);
    const auto& a = recording(name);
    double idle_saved = 0;
    for (const auto& f : a.findings) {
      CHECK(f.share >= 0.01);
      if (f.rule != "pageable-memcpy" && f.rule != "no-tensor-cores") idle_saved += f.share;
    }
    CHECK(idle_saved <= 1.0 - a.summary.gpu_busy_share + 1e-9);
    for (const auto& s : a.steps)
      CHECK(s.gpu_busy_ns + s.data_wait_ns + s.launch_idle_ns + s.sync_idle_ns + s.host_idle_ns + s.other_idle_ns +
                s.profiler_ns ==
            s.dur_ns);
  }
}

// [plain_only]: the rules' stability on a shorter run; the sanitized suite analyzes every recording in the case above.
TEST_CASE("the same recording cut to its first 60 steps (a third, when shorter) gets the same rules and severities", "[plain_only]") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  static test::ScratchDir dir("analyze_recordings_cut_" + std::to_string(::getpid()));
  for (const char* name : {"launch_bound.db.xz", "sync_stall.db.xz", "small_gemm_loop.db.xz", "input_bound.db.xz"}) {
    INFO(name);
    const std::string path = test::decompressed_recording("h100-2026-11-22/" + std::string(name), dir);
    REQUIRE(!path.empty());
    store::Trace whole = analyzer::load_trace(path);
    auto all = analyzer::analyze(whole);
    // Cut at the start of step 60 (or of the first third): every row that starts later goes.
    std::vector<int64_t> starts;
    for (const auto& s : whole.steps) starts.push_back(s.start);
    std::sort(starts.begin(), starts.end());
    const size_t kept = std::min<size_t>(60, starts.size() / 3);
    REQUIRE(kept >= 20);
    const int64_t cut = starts[kept];
    store::Trace t = whole;
    auto before = [&](auto& rows) {
      rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const auto& r) { return r.start >= cut; }), rows.end());
    };
    before(t.kernels), before(t.memcpys), before(t.memsets), before(t.api_calls), before(t.ranges), before(t.syncs);
    before(t.data_waits), before(t.steps);
    t.samples.erase(std::remove_if(t.samples.begin(), t.samples.end(), [&](const auto& s) { return s.time >= cut; }),
                    t.samples.end());
    auto part = analyzer::analyze(t);
    REQUIRE(part.summary.steps == int64_t(kept));
    REQUIRE(part.findings.size() == all.findings.size());
    for (size_t i = 0; i < all.findings.size(); ++i) {
      CHECK(part.findings[i].rule == all.findings[i].rule);
      CHECK(part.findings[i].severity == all.findings[i].severity);
    }
  }
}
