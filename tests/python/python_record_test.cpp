// Issue 9's acceptance, end to end: real Python trainers run under the built `stepscope record` (collector
// preloaded, Python hooks from python/), then `stepscope analyze --json` reads the store. Every figure is
// compared with what the script measured itself, or with an independent profiler (torch.profiler / Kineto).
#include <signal.h>

#include <simdjson.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include "analyzed_json.h"
#include "python_test_support.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using namespace stepscope::test;

namespace {

// A cure removes the bottleneck: no input-bound finding, or a "low" one — a wait under the rule's medium threshold
// (5% of the step, the TensorFlow profiler's "moderately input-bound"), which on a loaded 2-core machine the
// workers' own scheduling can leave in a few steps.
bool not_input_bound(const std::string& severity) { return severity.empty() || severity == "low"; }

const std::string kCli = STEPSCOPE_CLI;

std::string venv_python() { return std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python"; }
std::string sample(const std::string& name) { return source_dir() + "/samples/cpu/" + name; }

// "" when the venv's python imports `module`, else why not.
std::string missing(const std::string& module) {
  const std::string py = venv_python();
  if (run_shell(shell_quote(py) + " -c 'import " + module + "' >/dev/null 2>&1").status != 0)
    return "the venv python " + py + " cannot import " + module + " (run scripts/python-env.sh)";
  return "";
}

double value_after(const std::string& out, const std::string& key) {
  auto p = out.find(key + " ");
  return p == std::string::npos ? -1 : std::atof(out.c_str() + p + key.size() + 1);
}

// `stepscope record [flags] -o db -- venv-python script args`: returns stdout + stderr, requires exit 0.
std::string record(const std::string& db, const std::string& flags, const std::string& script, const std::string& args) {
  const auto r = run_shell(shell_quote(kCli) + " record " + flags + " -o " + shell_quote(db) + " -- " +
                           shell_quote(venv_python()) + " " + shell_quote(script) + " " + args + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE(std::filesystem::exists(db));
  return r.output;
}

// Data waits in a store by source, with their threads.
struct Waits {
  std::map<std::string, int> count;
  std::set<std::pair<int64_t, int64_t>> threads;
};
Waits waits_of(const std::string& db) {
  store::StoreReader r(db);
  Waits w;
  for (const auto& d : r.data_waits(INT64_MIN, INT64_MAX)) {
    w.count[r.strings().get(d.source)]++;
    w.threads.insert({d.pid, d.tid});
  }
  return w;
}

// The script's own account (its --step-log: "wait_start wait_end step_end" per step, CLOCK_MONOTONIC ns) of
// the steps an analysis framed: its wait share over their span, and how many framed steps end within 20 ms of
// one of its step ends.
struct OwnSteps {
  double wait_share = -1;
  int steps = 0, matched_ends = 0;
};
OwnSteps own_steps(Analyzed& a, const std::string& step_log) {
  std::vector<std::array<int64_t, 3>> own;
  std::istringstream in(slurp(step_log));
  for (std::array<int64_t, 3> s; in >> s[0] >> s[1] >> s[2];) own.push_back(s);
  OwnSteps o;
  auto steps = a.doc["steps"].get_array();
  if (own.empty() || steps.size() == 0) return o;
  double first = 1e300, last = -1e300;
  for (auto st : steps) {
    const double s0 = double(st["start_us"]) * 1e3, s1 = s0 + double(st["dur_us"]) * 1e3;
    first = std::min(first, s0);
    last = std::max(last, s1);
    ++o.steps;
    for (const auto& e : own)
      if (std::abs(double(e[2]) - s1) <= 20e6) {
        ++o.matched_ends;
        break;
      }
  }
  double waited = 0;
  for (const auto& e : own)
    waited += std::max(0.0, std::min(double(e[1]), last) - std::max(double(e[0]), first));
  o.wait_share = waited / (last - first);
  return o;
}

}  // namespace

TEST_CASE("input-bound Python trainer: recorded share matches the script's own, --prefetch cures it") {
  if (auto why = missing("numpy"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_record_input_bound");
  for (const std::string mode : {"", "--prefetch"}) {
    INFO("mode '" << mode << "'");
    const std::string db = dir.file("run" + mode + ".db");
    const std::string out = record(db, "--data-wait-func 'Loader\\.__next__$' --step-func '^__main__\\.train_step$'",
                                   sample("python_input_bound.py"), mode);
    INFO(out);
    const double own = value_after(out, "wait_share");
    REQUIRE(own >= 0);
    Analyzed a;
    analyze(db, a);
    std::printf(
        "python_input_bound %s: script wait_share %.4f, stepscope data_wait_share %.4f (%lld steps, %s)\n",
        mode.c_str(), own, a.wait_share(), (long long)a.steps(), a.step_source().c_str());
    CHECK(a.step_source() == "step-func");
    CHECK(a.steps() == 59);  // 60 train_step calls: 59 closed steps
    // The summary line counts them beside the ranges ("0 ranges" alone read as nothing marked).
    CHECK(out.find(" 0 ranges, 59 steps, 61 data waits; dropped: ") != std::string::npos);
    CHECK(std::abs(a.wait_share() - own) < 0.05);
    auto w = waits_of(db);
    CHECK(w.count["data-wait-func"] == 61);  // 60 batches and the final StopIteration
    CHECK(w.threads.size() == 1);            // the training loop's thread only
    if (mode.empty()) {
      CHECK(own > 0.25);
      CHECK(a.severity("input-bound") == "high");
    } else {
      CHECK(a.wait_share() < 0.05);
      CHECK(not_input_bound(a.severity("input-bound")));
    }
  }
}

TEST_CASE("a CPU-burning Python function is the top Python frame of its thread, with name and line") {
  ScratchDir dir("python_record_burner");
  const std::string db = dir.file("burn.db");
  const std::string out = record(db, "--cpu-hz 1000", sample("python_cpu_burner.py"), "1.0");
  CHECK(out.find("burned") != std::string::npos);
  const int burn_line = line_of(sample("python_cpu_burner.py"), "# BURN LINE");
  REQUIRE(burn_line > 0);
  store::StoreReader r(db);
  const auto t = r.load();
  std::map<int64_t, const store::Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::map<int64_t, const store::Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;
  int main_samples = 0, top_burn = 0, top_burn_line = 0;
  for (const auto& s : t.samples) {
    if (s.tid != s.pid) continue;  // the main thread runs burn_cpu
    ++main_samples;
    // Innermost Python frame: walk from the leaf towards the root.
    for (int64_t id = s.stack; id;) {
      const store::Stack* st = stacks.at(id);
      const store::Frame* f = frames.at(st->frame);
      if (f->kind == store::FrameKind::Python) {
        if (t.str(f->symbol) == "burn_cpu" && t.str(f->file).find("python_cpu_burner.py") != std::string::npos) {
          ++top_burn;
          top_burn_line += f->line == burn_line;
        }
        break;
      }
      id = st->parent;
    }
  }
  std::printf("cpu burner: %d main-thread samples, burn_cpu on top in %d (%.1f%%), at line %d in %d\n", main_samples,
              top_burn, 100.0 * top_burn / std::max(1, main_samples), burn_line, top_burn_line);
  REQUIRE(main_samples > 500);  // ~1 s of CPU at 1 kHz plus start-up
  CHECK(double(top_burn) >= 0.60 * main_samples);
  CHECK(double(top_burn_line) >= 0.5 * top_burn);  // the hot line is the loop body
}

TEST_CASE(
    "a Python program that segfaults ends as it would without stepscope, faulthandler's traceback included") {
  // The collector's fault guard (unwind/safe_copy.h) sees every SIGSEGV first, or second when faulthandler
  // installed its handler after it: the program's own crash must still end it with SIGSEGV, and faulthandler
  // must still print. Half a second of Python work first, sampled at 2 kHz, so the guard is in use.
  ScratchDir dir("python_record_segv");
  const std::string crash =
      " -c 'import ctypes; [sum(range(20000)) for _ in range(2000)]; ctypes.string_at(0)'";
  for (const std::string fh : {"", " -X faulthandler"}) {
    INFO("python" << fh);
    const auto plain = run_shell(shell_quote(venv_python()) + fh + crash + " 2>&1");
    const auto rec =
        run_shell(shell_quote(kCli) + " record --cpu-hz 2000 -o " + shell_quote(dir.file("segv.db")) +
                  " -- " + shell_quote(venv_python()) + fh + crash + " 2>&1");
    INFO(rec.output);
    CHECK(plain.status == 128 + SIGSEGV);
    CHECK(rec.status == 128 + SIGSEGV);
    const bool traceback = !fh.empty();
    CHECK((plain.output.find("Fatal Python error: Segmentation fault") != std::string::npos) == traceback);
    CHECK((rec.output.find("Fatal Python error: Segmentation fault") != std::string::npos) == traceback);
  }
}

TEST_CASE("8 Python threads under 1 kHz sampling run to completion with byte-identical output") {
  ScratchDir dir("python_record_threads");
  const std::string script = sample("python_threads.py");
  const auto plain = run_shell(shell_quote(venv_python()) + " " + shell_quote(script) + " 400000 2>/dev/null");
  REQUIRE(plain.status == 0);
  const std::string db = dir.file("threads.db");
  const auto rec = run_shell(shell_quote(kCli) + " record --cpu-hz 1000 -o " + shell_quote(db) + " -- " +
                             shell_quote(venv_python()) + " " + shell_quote(script) + " 400000 2>/dev/null");
  REQUIRE(rec.status == 0);
  CHECK(rec.output == plain.output);
  CHECK(plain.output.find("thread 7 ") != std::string::npos);
  // Every worker thread was sampled in its own Python function.
  store::StoreReader r(db);
  const auto t = r.load();
  std::set<std::string> seen;
  std::map<int64_t, const store::Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::map<int64_t, const store::Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;
  std::set<int64_t> tids;
  for (const auto& s : t.samples) {
    tids.insert(s.tid);
    for (int64_t id = s.stack; id; id = stacks.at(id)->parent) {
      const auto& name = t.str(frames.at(stacks.at(id)->frame)->symbol);
      if (name.rfind("worker_", 0) == 0) seen.insert(name);
    }
  }
  CHECK(tids.size() >= 9);
  CHECK(seen.size() == 8);
}

namespace {

// The step time at quantile q of a run's steps (0.5: the median).
double step_quantile_us(Analyzed& a, double q) {
  std::vector<double> d;
  for (auto st : a.doc["steps"].get_array()) d.push_back(double(st["dur_us"]));
  std::sort(d.begin(), d.end());
  return d.empty() ? 0 : d[size_t(q * double(d.size() - 1) + 0.5)];
}

// The median of a run's steps' data wait (the training thread waiting for its next batch).
double median_data_wait_us(Analyzed& a) {
  std::vector<double> d;
  for (auto st : a.doc["steps"].get_array()) d.push_back(double(st["data_wait_us"]));
  std::sort(d.begin(), d.end());
  return d.empty() ? 0 : d[d.size() / 2];
}

// Issue 23: on a run without GPU activity the host activity is the training thread's own time over the steps,
// measured from its samples (each the period of thread time that ended at it), and adds up within the steps.
void check_host_activity_adds_up(Analyzed& a, int64_t training_tid) {
  auto h = a.doc["host_activity"];
  CHECK(std::string_view(h["window"]) == "steps");
  CHECK(std::string_view(h["source"]) == "samples");
  CHECK(std::string_view(h["thread_reason"]) == "runs the steps");
  CHECK(int64_t(h["tid"]) == training_tid);
  double steps_us = 0;
  for (auto st : a.doc["steps"].get_array()) steps_us += double(st["dur_us"]);
  CHECK(double(h["window_us"]) == Approx(steps_us).epsilon(1e-6));
  const double period = double(h["sample_period_us"]), on = double(h["on_cpu_us"]), off = double(h["off_cpu_us"]);
  REQUIRE(period > 0);
  CHECK(on > 0);
  CHECK(on <= double(h["window_us"]) * 1.02);
  if (!bool(h["wall"])) CHECK(on + off == Approx(double(h["window_us"])).epsilon(1e-6));
  double listed = 0, listed_periods_us = 0;
  for (auto f : a.doc["idle_host_top"].get_array()) {
    // Each sample stands for at most its periods (more than one where its timer merged expiries while the
    // thread waited for a core), and only its part inside the steps counts.
    CHECK(int64_t(f["periods"]) >= int64_t(f["samples"]));
    CHECK(double(f["time_us"]) <= double(int64_t(f["periods"])) * period + 1e-6);
    listed += double(f["time_us"]);
    listed_periods_us += double(int64_t(f["periods"])) * period;
  }
  // Most of it inside the steps, over all functions: one function can lose most of its few periods where a
  // sample of merged expiries straddles the first step's start (2.2 of 7 ms seen with six busy processes on
  // two cores).
  CHECK(listed >= 0.5 * listed_periods_us);
  CHECK(listed <= on + off + 1e-6);
}

}  // namespace

// In a flame graph the Python frames are callers of the native frames they called (issue 48): a stack whose native
// unwind stopped in code without unwind tables (MKL's kernels, JIT code) before the evaluator reads root first
// `<module>;…;_engine_run_backward;[truncated];mkl_…`, never `mkl_…;<module>;…` (~30% of this trainer's samples
// read that way before).
void check_python_frames_call_native_ones(const std::string& db) {
  const std::string folded = db + ".folded";
  REQUIRE(run_shell(shell_quote(STEPSCOPE_CLI) + " export " + shell_quote(db) + " --format folded -o " +
                    shell_quote(folded))
              .status == 0);
  std::istringstream in(read_file(folded));
  int64_t python = 0, cut = 0, wrong = 0;
  std::string first_wrong;
  for (std::string line; std::getline(in, line);) {
    const auto space = line.rfind(' ');
    const int64_t n = std::atoll(line.c_str() + space + 1);
    std::vector<std::string> frames;
    std::istringstream parts(line.substr(0, space));
    for (std::string f; std::getline(parts, f, ';');) frames.push_back(f);
    // `function (file[:line])`: a .py file, frozen importlib or exec'd code (`<string>`); `[python…]` where the
    // code object was freed before it was read.
    auto is_python = [](const std::string& f) {
      if (f.rfind("[python", 0) == 0) return true;
      const auto open = f.rfind(" (");
      return open != std::string::npos && f.back() == ')' &&
             (f.find(".py", open) != std::string::npos || f.find(" (<", open) != std::string::npos);
    };
    if (frames.size() < 3 || std::none_of(frames.begin() + 2, frames.end(), is_python)) continue;
    python += n;
    cut += line.find(";[truncated];") != std::string::npos ? n : 0;
    const std::string& root = frames[2];  // after the process and thread
    const bool ok = is_python(root) || root.rfind("_start", 0) == 0 || root.rfind("__libc_start", 0) == 0 ||
                    root.rfind("clone", 0) == 0 || root.rfind("start_thread", 0) == 0 ||
                    root.rfind("[stack deeper", 0) == 0;
    if (!ok) {
      wrong += n;
      if (first_wrong.empty()) first_wrong = line.substr(0, 400);
    }
  }
  const auto meta = stepscope::store::StoreReader(db).meta();
  std::printf("torch trainer: %lld samples with Python frames, %lld with a [truncated] native part (meta: %s of %s)\n",
              (long long)python, (long long)cut, meta.at("collector.python_native_cut_samples").c_str(),
              meta.at("collector.python_samples").c_str());
  if (wrong) std::printf("first stack whose root is neither Python nor a thread's entry: %s\n", first_wrong.c_str());
  CHECK(wrong == 0);
  CHECK(python > 100);
  // The native unwind reaches the evaluator through oneDNN's JIT kernels (code without unwind tables) by
  // scanning the stack copy (docs/collector.md, "Code without unwind tables"): 99.8% of the samples
  // here, 71.7% without the scan. What stays cut is mostly MKL's page-aligned sgemm kernels.
  CHECK(cut * 50 <= python);
}

TEST_CASE("PyTorch DataLoader: num_workers=0 is input-bound on the training thread and agrees with Kineto, "
          "num_workers=2 is not",
          "[framework]") {
  if (auto why = missing("torch"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_record_torch");
  double saving_estimated_us = 0, step_w0_us = 0, wait_w0_us = 0;
  {
    const std::string db = dir.file("w0.db"), kineto = dir.file("w0.json");
    // 4 ms a sample's decode: with the default 2 ms the wait share sits at the 20% line of a high severity
    // (0.19-0.23 measured by the script itself from run to run on the 2-core machine), and the test flipped.
    const std::string out =
        record(db, "", sample("python_torch_train.py"), "--workers 0 --decode-ms 4 --kineto " + shell_quote(kineto));
    INFO(out);
    const double own = value_after(out, "wait_share");
    REQUIRE(own >= 0);
    Analyzed a, k;
    analyze(db, a);
    analyze(kineto, k);
    std::printf(
        "torch num_workers=0: script %.4f, stepscope %.4f (%s, %lld steps), Kineto %.4f (%s, %lld steps)\n",
        own, a.wait_share(), a.step_source().c_str(), (long long)a.steps(), k.wait_share(),
        k.step_source().c_str(), (long long)k.steps());
    auto w = waits_of(db);
    CHECK(w.count["dataloader"] == 41);  // 40 batches and the final StopIteration
    REQUIRE(w.threads.size() == 1);
    CHECK(w.threads.begin()->first == w.threads.begin()->second);  // the main (training) thread
    CHECK(a.step_source() == "optimizer");
    CHECK(a.steps() == 39);
    CHECK(a.severity("input-bound") == "high");
    CHECK(std::abs(a.wait_share() - own) < 0.05);
    CHECK(k.severity("input-bound") == "high");
    CHECK(std::abs(a.wait_share() - k.wait_share()) < 0.05);
    check_host_activity_adds_up(a, w.threads.begin()->second);
    check_python_frames_call_native_ones(db);
    for (auto f : a.doc["findings"].get_array())
      if (std::string_view(f["rule"]) == "input-bound") {
        saving_estimated_us = double(f["est_savings_us_per_step"]);
        // A CPU-only PyTorch program gets PyTorch advice without CUDA in it.
        const std::string_view suggestion = f["suggestion"];
        CHECK(suggestion.find("num_workers=") != std::string_view::npos);
        CHECK(suggestion.find("cuda") == std::string_view::npos);
        CHECK(suggestion.find("pin_memory") == std::string_view::npos);
      }
    step_w0_us = step_quantile_us(a, 0.1);
    wait_w0_us = median_data_wait_us(a);
    // No device activity: the words speak of the step and the training thread, never of a GPU.
    const auto text = run_shell(shell_quote(kCli) + " analyze " + shell_quote(db) + " 2>&1");
    CHECK(text.output.find("GPU idle") == std::string::npos);
    CHECK(text.output.find("waited for the host") == std::string::npos);
    CHECK(text.output.find("the training loop waited for input") != std::string::npos);
    CHECK(text.output.find("Where the training thread spent the steps") != std::string::npos);
    const auto html = run_shell(shell_quote(kCli) + " report -f html " + shell_quote(db) + " 2>&1");
    CHECK(html.output.find("GPU busy share of step time") == std::string::npos);
    CHECK(html.output.find("GPU activity (host time only)") != std::string::npos);
    for (auto st : a.doc["steps"].get_array()) {
      CHECK(double(st["data_wait_us"]) + double(st["host_idle_us"]) == Approx(double(st["dur_us"])));
      CHECK(double(st["other_idle_us"]) == 0);
    }
    // `info` counts the findings `analyze` reports.
    const auto info = run_shell(shell_quote(kCli) + " info --json " + shell_quote(db) + " 2>&1");
    CHECK(info.output.find("\"findings\":" + std::to_string(a.doc["findings"].get_array().size()) + ",") !=
          std::string::npos);
  }
  {
    const std::string db = dir.file("w2.db");
    const std::string out = record(db, "", sample("python_torch_train.py"), "--workers 2 --decode-ms 4");
    INFO(out);
    Analyzed a;
    analyze(db, a);
    std::printf("torch num_workers=2: script %.4f (with the workers' start-up), stepscope %.4f\n",
                value_after(out, "wait_share"), a.wait_share());
    CHECK(a.step_source() == "optimizer");
    // A tenth of num_workers=0's ~53%: a CI run with the sanitized build and the stress beside it read 5.17%
    // (the script itself 7.85% with the workers' start-up), past the 5% this once asked.
    CHECK(a.wait_share() < 0.10);
    // Near the 5% medium threshold; within its 10% margin (a loaded machine's 4.7%) the rule says medium, near
    // the threshold, by design: the same program is never flipped between nothing and a verdict by noise.
    bool near = false;
    for (auto f : a.doc["findings"].get_array())
      if (std::string_view(f["rule"]) == "input-bound") near = bool(f["evidence"]["near_threshold"]);
    CHECK((not_input_bound(a.severity("input-bound")) || (a.severity("input-bound") == "medium" && near)));
    // The forked workers survived the collector and are in the store, children of the trainer.
    store::StoreReader r(db);
    const auto procs = r.processes();
    int64_t main_pid = 0;
    for (const auto& [pid, tid] : waits_of(db).threads) main_pid = pid;
    int children = 0;
    for (const auto& p : procs) children += p.parent_pid == main_pid && p.pid != main_pid;
    CHECK(children >= 2);
    // The cure measured against the saving estimated from the num_workers=0 run: the step becomes max(rest of
    // the step, wait / 8 loaders). Two runs on this VM, whose host slows for seconds at a time: one
    // num_workers=2 run took 200-240 ms a step for 24 steps and 112-120 ms for the rest, the training
    // thread's own CPU time (its task-clock samples) doubling with them for the same work, and medians of
    // such pairs of runs gave a saving of 14.6 to 93.3 ms against a steady 68-70 ms estimate. The host's
    // noise only slows steps, so the runs are compared at their fastest tenth (three pairs: 57.7, 63.3
    // and 71.5 ms saved, 67.6-68.9 estimated).
    const double step_w2_us = step_quantile_us(a, 0.1), saved_us = step_w0_us - step_w2_us;
    std::printf(
        "torch num_workers 0 -> 2: step (fastest tenth) %.1f -> %.1f ms, saved %.1f ms, estimated %.1f ms; "
        "median %.1f ms\n",
        step_w0_us / 1e3, step_w2_us / 1e3, saved_us / 1e3, saving_estimated_us / 1e3,
        step_quantile_us(a, 0.5) / 1e3);
    // What the estimate claims is the wait that goes away; the step gives back less of it where the two workers
    // take the trainer's cores (2 here): fastest-tenth savings of 32, 47 and 68 ms against a steady 70 ms
    // estimate in three runs of one fresh clone (2026-11-29); in a fourth the median wait fell 74.0 -> 5.5 ms while
    // the step saved 61 ms (75 estimated). So the step's saving bounds the estimate from below, the wait's from
    // above.
    const double wait_saved_us = wait_w0_us - median_data_wait_us(a);
    std::printf("torch num_workers 0 -> 2: median data wait per step %.1f -> %.1f ms\n", wait_w0_us / 1e3,
                (wait_w0_us - wait_saved_us) / 1e3);
    CHECK(saving_estimated_us >= 0.5 * saved_us);
    CHECK(saving_estimated_us <= 1.5 * std::max(saved_us, wait_saved_us));
    // The workers are other processes: kept apart from the training thread, and named so if they explain a slow step.
    bool worker_listed = false;
    for (auto o : a.doc["host_activity"]["other_threads"].get_array()) worker_listed |= bool(o["other_process"]);
    CHECK(worker_listed);
    for (auto slow : a.doc["step_outliers"]["slow"].get_array()) {
      auto c = slow["contributor"];
      if (c.error()) continue;
      const double grew = double(c["us"]) - double(c["median_us"]);
      // A sampled function may pass the step's excess and its category's growth by one sampling period (1 ms
      // at record's 1 kHz), its resolution (analyzer/src/analysis/step_outliers.cpp): a CI run named a
      // function that grew 7.0 ms in a step 6.45 ms over the median.
      const double resolution_us = std::string_view(c["kind"]) == "function" ? 1000.0 : 0.0;
      CHECK(grew <= std::max(double(slow["excess_us"]),
                             double(slow["category_us"]) - double(slow["category_median_us"])) +
                        resolution_us + 1e-6);
    }
  }
}

TEST_CASE("record --wall: the training thread's off-CPU time is measured and names the loader, not backward",
          "[framework]") {
  if (auto why = missing("torch"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_record_wall");
  const std::string db = dir.file("wall.db");
  record(db, "--wall", sample("python_torch_train.py"), "--workers 0 --decode-ms 4 --steps 20");
  Analyzed a;
  analyze(db, a);
  auto w = waits_of(db);
  REQUIRE(w.threads.size() == 1);
  check_host_activity_adds_up(a, w.threads.begin()->second);
  auto h = a.doc["host_activity"];
  CHECK(bool(h["wall"]));
  // Wall samples at one period each: on + off CPU is the steps' time, within the timer's jitter.
  CHECK(double(h["on_cpu_us"]) + double(h["off_cpu_us"]) == Approx(double(h["window_us"])).epsilon(0.15));
  std::string top_off;
  for (auto f : a.doc["idle_host_top"].get_array())
    if (!bool(f["on_cpu"]) && top_off.empty()) top_off = std::string(std::string_view(f["name"]));
  INFO(a.json);
  // The training thread sleeps in the dataset's decode (time.sleep in __getitem__), on the training thread.
  CHECK(top_off.find("SlowImages.__getitem__") != std::string::npos);
}

TEST_CASE("tf.data: a slow map without prefetch is input-bound (source tf.data), AUTOTUNE + prefetch cures most of it",
          "[framework]") {
  if (auto why = missing("tensorflow"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_record_tfdata");
  double uncured = -1;
  for (const std::string mode : {"", "--autotune"}) {
    INFO("mode '" << mode << "'");
    const std::string db = dir.file("tf" + mode + ".db");
    const std::string out = record(db, "", sample("python_tfdata_train.py"), mode);
    INFO(out);
    const double own = value_after(out, "wait_share");
    REQUIRE(own >= 0);
    Analyzed a;
    analyze(db, a);
    std::printf("tf.data %s: script %.4f, stepscope %.4f (%s, %lld steps)\n", mode.c_str(), own,
                a.wait_share(), a.step_source().c_str(), (long long)a.steps());
    auto w = waits_of(db);
    CHECK(w.count["tf.data"] == 41);  // 40 batches and the end of the dataset
    CHECK(a.step_source() == "dataloader");
    CHECK(std::abs(a.wait_share() - own) < 0.05);
    if (mode.empty()) {
      CHECK(a.severity("input-bound") == "high");
      uncured = a.wait_share();
    } else {
      // What is left is the iterator's own fetch, 1.5–3.5 ms a step on 2 cores (the script measures it too):
      // 3.5–7.4% of a 25 ms step across runs, so a fixed 5% line made this test flaky. The cure's effect is not.
      CHECK(a.wait_share() < uncured / 4);
      CHECK(a.severity("input-bound") != "high");
    }
  }
}

TEST_CASE("TensorFlow's JIT matmul kernels survive 1 kHz sampling (alternate signal stack)",
          "[framework]") {
  if (auto why = missing("tensorflow"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_record_tf_matmul");
  const auto plain = run_shell(shell_quote(venv_python()) + " " + shell_quote(sample("python_tf_matmul.py")) + " 2>/dev/null");
  REQUIRE(plain.status == 0);
  const double expected = value_after(plain.output, "sum");
  REQUIRE(expected > 0);
  // Without the alternate stack this crashed in about two of three runs: three runs make a regression show.
  for (int run = 0; run < 3; ++run) {
    const std::string db = dir.file("tf" + std::to_string(run) + ".db");
    const std::string out = record(db, "--cpu-hz 1000", sample("python_tf_matmul.py"), "");
    CHECK(value_after(out, "sum") == expected);  // same result as without the collector
    store::StoreReader r(db);
    CHECK(r.samples(INT64_MIN, INT64_MAX).size() > 100);
  }
}

TEST_CASE(
    "attach to a running DataLoader trainer: the hooks go in and give record's steps, waits and input-bound "
    "share",
    "[framework]") {
  if (auto why = missing("torch"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_record_attach");
  const std::string recorded = dir.file("record.db"), attached = dir.file("attach.db");
  const std::string recorded_log = dir.file("record-steps.txt"), attached_log = dir.file("attach-steps.txt");
  const std::string ready = dir.file("ready");
  // 25 ms a sample's decode, 8 a batch: a wait share near 0.75 on an idle machine, 0.55-0.69 under CI's load.
  record(recorded, "--no-gpu", sample("python_torch_train.py"),
         "--workers 0 --batch 8 --decode-ms 25 --steps 20 --step-log " + shell_quote(recorded_log));
  Analyzed r;
  analyze(recorded, r);
  // The same trainer, started plainly (no collector, no PYTHONPATH), attached to once it has taken 2 steps
  // (torch's import took 2 s idle, 13 s beside three CPU burners), for 5 s.
  CommandResult att;
  bool cued = false;
  const RunResult run =
      run_argv({venv_python(), sample("python_torch_train.py"), "--workers", "0", "--batch", "8",
                "--decode-ms", "25", "--steps", "50", "--step-log", attached_log, "--ready-file", ready},
               dir, [&](pid_t pid) {
                 for (int i = 0; i < 1200 && !(cued = std::filesystem::exists(ready)); ++i) usleep(100000);
                 att = run_shell(shell_quote(kCli) + " attach " + std::to_string(pid) +
                                 " --no-gpu --duration 5 -o " + shell_quote(attached) + " 2>&1");
               });
  INFO(att.output);
  INFO(run.err);
  REQUIRE(cued);
  REQUIRE(att.status == 0);
  CHECK(run.exit_code == 0);
  CHECK(att.output.find("warning") == std::string::npos);
  Analyzed a;
  analyze(attached, a);
  // Each run against the script's own clock over the very steps stepscope framed: the attached window is 5 s
  // of a 15-25 s loop, and the machine's load moves the share between windows and runs (CI: a 7-step window
  // at 0.568 in a loop whose whole was 0.668, and the script's own figure over those steps was the 0.568).
  const OwnSteps ra = own_steps(r, recorded_log), aa = own_steps(a, attached_log);
  std::printf(
      "attach: %lld steps (%s), share %.4f (script over them: %.4f, %d of %d ends within 20 ms), %s; record: "
      "%lld steps, share %.4f (script: %.4f, %d of %d), %s\n",
      (long long)a.steps(), a.step_source().c_str(), a.wait_share(), aa.wait_share, aa.matched_ends, aa.steps,
      a.severity("input-bound").c_str(), (long long)r.steps(), r.wait_share(), ra.wait_share, ra.matched_ends,
      ra.steps, r.severity("input-bound").c_str());
  CHECK(std::string(std::string_view(a.doc["summary"]["python_hooks"])) ==
        "installed in 1 of 1 Python process");
  CHECK(a.step_source() == "optimizer");
  CHECK(r.step_source() == "optimizer");
  CHECK(a.steps() >= 8);   // 5 s of 270-400 ms steps
  CHECK(r.steps() == 19);  // 20 optimizer steps frame 19 steps
  // The same steps: every framed step ends where one of the script's ends (the hook at opt.step's return).
  CHECK(aa.matched_ends == a.steps());
  CHECK(ra.matched_ends == r.steps());
  CHECK(std::abs(a.wait_share() - aa.wait_share) < 0.01);
  CHECK(std::abs(r.wait_share() - ra.wait_share) < 0.01);
  CHECK(a.severity("input-bound") == "high");
  CHECK(r.severity("input-bound") == "high");
  auto w = waits_of(attached);
  CHECK(w.count["dataloader"] >= a.steps());
}

TEST_CASE(
    "an installed copy with the source and build trees out of sight records a DataLoader trainer's steps and "
    "waits",
    "[framework]") {
  if (auto why = missing("torch"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  if (std::getenv(
          "STEPSCOPE_COLLECTOR_LIB"))  // the sanitized suite: its installed collector cannot go into python
    STEPSCOPE_SKIP(
        "STEPSCOPE_COLLECTOR_LIB is set (sanitized suite): an installed copy is tested by the plain suite");
  if (auto why = cannot_hide_trees(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  OutsideDir top("installed");
  REQUIRE(top.ok());
  const std::string& prefix = top.path();
  const auto inst = run_shell("cmake --install " + shell_quote(STEPSCOPE_BINARY_DIR) + " --prefix " +
                              shell_quote(prefix) + " 2>&1");
  INFO(inst.output);
  REQUIRE(inst.status == 0);
  CHECK(std::filesystem::exists(prefix + "/bin/stepscope"));
  CHECK(std::filesystem::exists(prefix + "/lib/libstepscope_collector.so"));
  CHECK(std::filesystem::exists(prefix + "/share/stepscope/python/stepscope/__init__.py"));
  CHECK(std::filesystem::exists(prefix + "/share/doc/stepscope/python.md"));
  std::filesystem::copy_file(sample("python_torch_train.py"), prefix + "/train.py");
  const std::string cli = prefix + "/bin/stepscope", db = prefix + "/r.db";
  const auto r = run_with_trees_hidden(prefix, shell_quote(cli) + " record --no-gpu -o " + shell_quote(db) +
                                                   " -- " + shell_quote(venv_python()) +
                                                   " train.py --workers 0 --decode-ms 4 --steps 20 && " +
                                                   shell_quote(cli) + " analyze " + shell_quote(db));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("warning") == std::string::npos);
  CHECK(r.output.find("19 step(s) (source: optimizer)") != std::string::npos);
  CHECK(r.output.find("input-bound") != std::string::npos);
  CHECK(waits_of(db).count["dataloader"] == 21);
}
