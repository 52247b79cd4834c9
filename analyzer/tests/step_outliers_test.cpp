// Slow steps explained against the median step: a synthetic run whose two slow steps have known causes, and
// the real ResNet-50 Kineto traces.
#include <catch2/catch.hpp>

#include <algorithm>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"
#include "slow_steps_trace.h"
#include "test_support.h"

using namespace stepscope;

namespace {

constexpr int64_t US = 1000, MS = 1000 * US;
using test::slow_steps_trace;

}  // namespace

TEST_CASE("two slow steps, each explained by the category and the contributor that grew") {
  const auto a = analyzer::analyze(slow_steps_trace());
  REQUIRE(a.steps.size() == 12);
  const auto& o = a.step_outliers;
  // Median of 9.1–9.14 ms steps; the jitter (0/20/40 µs) is the run's noise, far below 5% of the median.
  CHECK(o.median_ns >= 9100 * US);
  CHECK(o.median_ns <= 9140 * US);
  CHECK(o.threshold_ns == int64_t(0.05 * double(o.median_ns) + 0.5));
  REQUIRE(o.slow_count == 2);
  REQUIRE(o.slow.size() == 2);

  const auto& kernel = o.slow[0];  // 1 + 5 + 12 ms: the slowest
  CHECK(kernel.index == 8);
  CHECK(kernel.category == "gpu_busy");
  CHECK(kernel.category_ns - kernel.category_median_ns == 9 * MS + 20 * US);  // and its gemm's jitter, 40 vs 20 µs
  INFO(kernel.explanation);
  CHECK(kernel.contributor_kind == "kernel");
  CHECK(kernel.contributor == "void at::native::vectorized_elementwise_kernel<4, at::native::relu>(int)");
  CHECK(kernel.contributor_ns - kernel.contributor_median_ns == 9 * MS);
  CHECK(kernel.explanation.find("GPU busy") != std::string::npos);
  CHECK(kernel.explanation.find("kernel at::native::vectorized_elementwise_kernel<…>(…) 12 ms vs 3 ms (+9 ms)") !=
        std::string::npos);

  const auto& wait = o.slow[1];
  CHECK(wait.index == 4);
  CHECK(wait.category == "data_wait");
  CHECK(wait.category_ns - wait.category_median_ns == 8 * MS);
  CHECK(wait.contributor_kind == "wait");
  CHECK(wait.contributor == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
  CHECK(wait.contributor_ns - wait.contributor_median_ns == 8 * MS);
  CHECK(wait.explanation.rfind("step 4 took ", 0) == 0);

  // Every report format has the section.
  const std::string text = analyzer::render_text_report(a);
  CHECK(text.find("Slow steps: 2 of 12 steps exceed the median step") != std::string::npos);
  CHECK(text.find("  " + kernel.explanation + "\n") != std::string::npos);
  const std::string md = analyzer::render_markdown_report(a);
  CHECK(md.find("### Slow steps") != std::string::npos);
  // The contributor as a raw code span: GFM shows backslashes and entities literally inside one.
  CHECK(md.find("| 4 | 17.1 ms | +8 ms | data wait +8 ms | wait "
                "`enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` +8 ms |") !=
        std::string::npos);  // 9 + 5.02 + 3 + 0.1 ms, the median 9.12 ms
  const std::string html = analyzer::render_html_report(a);
  CHECK(html.find("<section id=\"slow-steps\">") != std::string::npos);
  CHECK(html.find("<a href=\"#step-8\">8</a>") != std::string::npos);
  CHECK(html.find("<tr id=\"step-8\">") != std::string::npos);

  const std::string json = analyzer::to_json(a);
  CHECK(json.find("\"step_outliers\":{\"median_us\":") != std::string::npos);
  CHECK(json.find("\"contributor\":{\"kind\":\"wait\",\"name\":\"enumerate(DataLoader)") != std::string::npos);
}

TEST_CASE("a warm-up step is start-up: said so, and told apart from the steps a change can speed up") {
  // Step 0 of the run above, with CUDA loading its modules for 30 ms before the first launch.
  store::Trace t = slow_steps_trace();
  const int64_t cut = 1 * MS, load = 30 * MS;
  auto shift = [&](auto& rows) {
    for (auto& r : rows) {
      if (r.start >= cut) r.start += load;
      if (r.end > cut) r.end += load;
    }
  };
  shift(t.ranges), shift(t.api_calls), shift(t.kernels);
  store::ApiCall call;
  call.start = cut, call.end = cut + load, call.pid = 100, call.tid = 101, call.name = t.intern("cuLibraryLoadData");
  t.api_calls.insert(t.api_calls.begin(), call);

  const auto a = analyzer::analyze(t);
  REQUIRE(a.steps.size() == 12);
  CHECK(a.steps[0].warmup);
  CHECK(std::none_of(a.steps.begin() + 1, a.steps.end(), [](const auto& s) { return s.warmup; }));
  const auto& o = a.step_outliers;
  REQUIRE(o.slow.size() == 3);
  CHECK(o.slow[0].index == 0);
  CHECK(o.slow[0].startup);
  INFO(o.slow[0].explanation);
  CHECK(o.slow[0].explanation.find(": start-up (a one-time cost, not the loop's): ") != std::string::npos);
  CHECK(o.slow[0].explanation.find("biggest contributor: call cuLibraryLoadData (CUDA loading its modules, once) 30 ms vs 0 µs (+30 ms)") !=
        std::string::npos);
  CHECK(o.slow[1].index == 8);
  CHECK_FALSE(o.slow[1].startup);
  CHECK(o.slow[2].index == 4);
  CHECK_FALSE(o.slow[2].startup);
  const std::string json = analyzer::to_json(a);
  size_t warmups = 0;
  for (size_t p = 0; (p = json.find("\"warmup\":true", p)) != std::string::npos; ++p) ++warmups;
  CHECK(warmups == 1);
  CHECK(json.find("\"startup\":true,\"explanation\":\"step 0 took") != std::string::npos);

  // Without the load the first step is like the others: no warm-up, nothing said of start-up.
  const auto plain = analyzer::analyze(slow_steps_trace());
  CHECK_FALSE(plain.steps[0].warmup);
  for (const auto& s : plain.step_outliers.slow) CHECK_FALSE(s.startup);
}

TEST_CASE("the profiler's own work is never what made a step slow") {
  store::Trace t = slow_steps_trace();
  const auto before = analyzer::analyze(t);
  REQUIRE(before.step_outliers.slow.size() == 2);
  const auto& step4 = before.steps[4];
  // 12 ms of samples inside slow step 4 on two threads of the collector's: one its v2 store marks, one only its
  // leaf frame in the collector library tells (v1 stores). Either would outgrow the 8 ms data wait.
  int64_t frame_id = 0, stack_id = 0;
  for (const auto& f : t.frames) frame_id = std::max(frame_id, f.id);
  for (const auto& st : t.stacks) stack_id = std::max(stack_id, st.id);
  store::Frame own{++frame_id, t.intern("/opt/stepscope/lib/libstepscope_collector.so"),
                   t.intern("stepscope::store::StringTable::intern(std::string_view)"), 0, 0, store::FrameKind::Native, 0};
  store::Frame other{++frame_id, t.intern("/usr/lib/libsqlite3.so.0"), t.intern("sqlite3_step"), 0, 0,
                     store::FrameKind::Native, 0};
  t.add(own), t.add(other);
  const int64_t own_stack = ++stack_id, other_stack = ++stack_id;
  t.add(store::Stack{own_stack, 0, own.id});
  t.add(store::Stack{other_stack, 0, other.id});
  const int64_t pid = t.samples.empty() ? 1 : t.samples.front().pid;
  t.add(store::Thread{pid, 990001, t.intern("stepscope-drain"), true});
  for (int64_t ts = step4.start_ns; ts < step4.start_ns + 12 * MS && ts < step4.start_ns + step4.dur_ns; ts += 100 * US) {
    t.add(store::Sample{ts, pid, 990001, other_stack, true});
    t.add(store::Sample{ts, pid, 990002, own_stack, true});
  }
  analyzer::sort_by_time(t);
  const auto after = analyzer::analyze(t);
  REQUIRE(after.step_outliers.slow.size() == 2);
  CHECK(after.step_outliers.slow[1].index == 4);
  CHECK(after.step_outliers.slow[1].contributor_kind == "wait");
  CHECK(after.step_outliers.slow[1].contributor == before.step_outliers.slow[1].contributor);
}

TEST_CASE("a regular run has no slow steps") {
  store::Trace t = slow_steps_trace();
  // Drop the two slow steps' causes: every step the same.
  auto a = analyzer::analyze(t);
  std::vector<analyzer::StepBreakdown> regular;
  for (const auto& s : a.steps)
    if (s.index != 4 && s.index != 8) regular.push_back(s);
  const auto o = analyzer::explain_slow_steps(t, regular);
  CHECK(o.slow_count == 0);
  CHECK(o.slow.empty());
  CHECK(analyzer::explain_slow_steps(t, {regular.begin(), regular.begin() + 4}).median_ns == 0);  // too few steps
}

TEST_CASE(
    "a window that starts mid-run keeps the recorder's step numbers: its slow step is named as it was "
    "saved") {
  // What a flight save of `--step-func` steps holds: the steps from 3 on (0-2 fell out of the window), 4 ms
  // each, step 7 taking 504 ms. The save says "step 7 took 504 ms"; the report must too, not "step 4".
  store::Trace t;
  constexpr int64_t kPid = 11;
  for (int64_t n = 3; n < 15; ++n) {
    store::Step st;
    st.index = n;
    st.start = (n == 3 ? 0 : t.steps.back().end);
    st.end = st.start + (n == 7 ? 504 * MS : 4 * MS);
    st.source = t.intern("step-func"), st.pid = kPid, st.tid = kPid;
    t.steps.push_back(st);
  }
  const auto a = analyzer::analyze(t);
  REQUIRE(a.steps.size() == 12);
  CHECK(a.steps.front().index == 3);
  CHECK(a.steps.back().index == 14);
  REQUIRE(a.step_outliers.slow.size() == 1);
  CHECK(a.step_outliers.slow[0].index == 7);
  CHECK(a.step_outliers.slow[0].explanation.rfind("step 7 took 504 ms", 0) == 0);
  const std::string text = analyzer::render_text_report(a);
  INFO(text);
  CHECK(text.find("\n     7     504 ms ") != std::string::npos);    // the step table's row
  CHECK(text.find("\n  step 7 took 504 ms") != std::string::npos);  // and the slow steps' line

  SECTION("numbers that do not go up one after the other (an importer that left them 0) are positions") {
    for (auto& st : t.steps) st.index = 0;
    const auto b = analyzer::analyze(t);
    REQUIRE(b.step_outliers.slow.size() == 1);
    CHECK(b.steps.front().index == 0);
    CHECK(b.step_outliers.slow[0].index == 4);
  }
}

TEST_CASE("ResNet-50 Kineto traces: slow steps explained with a category and a contributor") {
  if (!test::have_traces()) {
    WARN("SKIPPED: no shared traces");
    return;
  }
  for (const char* name : {"kineto/resnet50_num_workers_0.json.gz", "kineto/resnet50_num_workers_4.json.gz"}) {
    INFO(name);
    const auto a = analyzer::analyze(analyzer::load_trace(test::trace_path(name)));
    const auto& o = a.step_outliers;
    if (std::string(name).find("workers_4") != std::string::npos) {
      // The first step warms up (cuDNN autotuning, allocator growth): it is the slowest, and flagged.
      REQUIRE(!o.slow.empty());
      CHECK(o.slow[0].index == a.steps.front().index);
    }
    REQUIRE(a.steps.size() >= analyzer::kSlowStepMinSteps);
    CHECK(o.median_ns > 0);
    for (const auto& s : o.slow) {
      INFO(s.explanation);
      WARN(name << ": " << s.explanation);
      CHECK(s.dur_ns - o.median_ns > o.threshold_ns);
      REQUIRE(analyzer::find_step_category(s.category) != nullptr);
      CHECK(s.category_ns > s.category_median_ns);
      CHECK(!s.contributor.empty());
      CHECK(s.contributor_ns > s.contributor_median_ns);
      CHECK(s.contributor_ns - s.contributor_median_ns <= s.dur_ns);
    }
  }
}

TEST_CASE(
    "a sampled function is the contributor even when its sampled time passes the step's excess by a period") {
  // The flight test's shape: 2.5 ms steps with no samples in them, then one of 501.5 ms asleep in
  // save_checkpoint, sampled at 100 Hz of wall time (`record --flight`). The step is 499 ms over the median;
  // its 50 samples read 500 ms, past the excess by less than a period: the sleep must still be named (it was
  // not: train_step's 2 ms was, in 2 of 8 flight runs on a loaded machine).
  store::Trace t;
  constexpr int64_t kPid = 21;
  t.meta["collector.cpu_hz"] = "100";
  t.meta["collector.mode"] = "wall";
  t.meta["collector.timer"] = "timer_create CLOCK_MONOTONIC (wall)";
  t.add(store::Process{kPid, t.intern("python3"), 1});
  t.add(store::Thread{kPid, kPid, t.intern("python3"), false});
  auto python_frame = [&](int64_t id, const char* function, int32_t line) {
    const store::StringId file = t.intern("python_slow_steps.py");
    return store::Frame{id, file, t.intern(function), file, line, store::FrameKind::Python, 0};
  };
  const store::Frame sleep = python_frame(1, "save_checkpoint", 21), step = python_frame(2, "train_step", 52);
  t.add(sleep), t.add(step);
  t.add(store::Stack{1, 0, step.id});
  t.add(store::Stack{2, 1, sleep.id});
  for (int64_t n = 0; n < 40; ++n) {
    store::Step st;
    st.index = n;
    st.start = n == 0 ? 0 : t.steps.back().end;
    st.end = st.start + (n == 30 ? 501500 * US : 2500 * US);
    st.source = t.intern("step-func"), st.pid = kPid, st.tid = kPid;
    t.steps.push_back(st);
    if (n == 30) {
      // One sample in the step's first period (train_step, on CPU), then 50 asleep: the last at its end.
      t.add(store::Sample{st.start + 1 * MS, kPid, kPid, 1, true});
      for (int64_t k = 1; k <= 50; ++k)
        t.add(store::Sample{st.start + 1500 * US + k * 10 * MS, kPid, kPid, 2, false});
    }
  }
  analyzer::sort_by_time(t);
  const auto a = analyzer::analyze(t);
  REQUIRE(a.step_outliers.slow.size() == 1);
  const auto& s = a.step_outliers.slow[0];
  INFO(s.explanation);
  CHECK(s.index == 30);
  CHECK(s.excess_ns == 499 * MS);
  CHECK(s.contributor_kind == "function");
  CHECK(s.contributor.find("save_checkpoint") != std::string::npos);
  CHECK(s.contributor_ns == 500 * MS);  // 50 samples of 10 ms, all inside the step
}

TEST_CASE("a sample's period counts in every step it covers, and a GPU-bound step's thread is off CPU by design") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  test::ScratchDir dir("step_outliers_recordings");
  // Slow step `index` of a recording's analysis (the analysis kept alive beside it).
  analyzer::Analysis a;
  auto slow_step = [&](const std::string& recording, int64_t index) -> const analyzer::SlowStep& {
    const std::string db = test::decompressed_recording("h100-2026-11-22/" + recording + ".db.xz", dir);
    REQUIRE(!db.empty());
    a = analyzer::analyze(analyzer::load_trace(db));
    const auto& slow = a.step_outliers.slow;
    auto it = std::find_if(slow.begin(), slow.end(), [&](const analyzer::SlowStep& s) { return s.index == index; });
    REQUIRE(it != slow.end());
    return *it;
  };
  {
    // launch_bound on an H100, 225 µs steps sampled at 1 kHz: step 1102 (11.9 ms) ran 0.8 ms on CPU, sampled only
    // after its end. Credited only to the step the sample fell in, the step read as off CPU the whole 11.9 ms.
    const analyzer::SlowStep* it = &slow_step("launch_bound", 1102);
    INFO(it->explanation);
    CHECK(it->dur_ns > 11800 * US);
    CHECK(it->not_running);
    CHECK(it->off_cpu_ns > 11000 * US);
    CHECK(it->off_cpu_ns < 11200 * US);  // the step less the on-CPU periods that reach into it
    CHECK(it->off_cpu_median_ns == 0);   // a 1 ms period covers a whole 225 µs step
  }
  {
    // input_bound_prefetch: step 7 (in the GPU's time) grew in GPU work; the training thread waits for the GPU
    // off CPU, which is no sign of preemption, and a copy is not "on CPU".
    const analyzer::SlowStep* it = &slow_step("input_bound_prefetch", 7);
    INFO(it->explanation);
    CHECK(it->category == "gpu_busy");
    CHECK_FALSE(it->not_running);
    CHECK(it->explanation.find("not running") == std::string::npos);
    CHECK(it->explanation.find("on CPU") == std::string::npos);
    CHECK(it->contributor_kind == "kernel");
  }
}
