// Issue 52: stepscope where ML engineers already are. Real trainers (a tiny BERT under transformers.Trainer,
// a LightningModule under Lightning's Trainer; CPU, models built from configs) run as child processes with
// the callbacks of python/stepscope/integrations.py, recording in-process or as windows of `stepscope record
// --paused`; a plain script records itself with stepscope.profile()/start()/stop(). Every store is read back
// with the built `stepscope analyze --json` and held against what the trainer itself printed (its step count,
// when it began each step). Scripts: tests/python/integrations/.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "analyzed_json.h"
#include "python_test_support.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using namespace stepscope::test;

namespace {

const std::string kCli = STEPSCOPE_CLI;

std::string venv_python() {
  return std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python";
}
std::string script(const std::string& name) {
  return source_dir() + "/tests/python/integrations/" + name;
}

// "" when the venv's python imports every module, else why not.
std::string missing(const std::string& modules) {
  if (run_shell(shell_quote(venv_python()) + " -c 'import " + modules + "' >/dev/null 2>&1").status != 0)
    return "the venv python " + venv_python() + " cannot import " + modules + " (run scripts/python-env.sh)";
  return "";
}

// Runs a script of tests/python/integrations with the venv's python from `cwd`, the package from the source
// tree (PYTHONPATH) and the built CLI; `prefix` goes before it (`stepscope record --paused -o X --`).
CommandResult run_script(const std::string& cwd, const std::string& name, const std::string& args,
                         const std::string& prefix = "") {
  return run_shell("cd " + shell_quote(cwd) + " && STEPSCOPE_CLI=" + shell_quote(kCli) +
                   " PYTHONPATH=" + shell_quote(source_dir() + "/python") + " " + prefix + " " +
                   shell_quote(venv_python()) + " " + shell_quote(script(name)) + " " + args + " 2>&1");
}

// The trainer's own record of its steps: when it began step G and when it ended the step that made its global
// step G, each read by a callback before stepscope's and by one after it ("step_begin_before G NS",
// "step_end_after G NS", ...), and "optimizer_steps N".
struct TrainerClock {
  std::map<int64_t, int64_t> begin_before, begin_after, end_before, end_after;
};

TrainerClock trainer_clock(const std::string& out) {
  TrainerClock c;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    char what[32] = {};
    long long step = 0, ns = 0;
    if (std::sscanf(line.c_str(), "step_%31s %lld %lld", what, &step, &ns) != 3) continue;
    const std::string w = what;
    auto& m = w == "begin_before"  ? c.begin_before
              : w == "begin_after" ? c.begin_after
              : w == "end_before"  ? c.end_before
                                   : c.end_after;
    m[step] = ns;
  }
  return c;
}

int64_t optimizer_steps(const std::string& out) {
  const auto p = out.find("optimizer_steps ");
  return p == std::string::npos ? -1 : std::atoll(out.c_str() + p + 16);
}

// The recorded steps of a window starting at trainer step `first` are the trainer's: each starts where the
// trainer began that step (between the callbacks before and after stepscope's), and the last ends where the
// trainer began the next one or, when training ended first, where it ended its last optimizer step. Returns
// the median bracket of the boundaries inside the window, in ms (the two callbacks read the clock
// microseconds apart there, unless the thread lost its core between them; around the first and the last
// boundary a window opens or closes between them).
double check_steps_against_trainer(Analyzed& a, const TrainerClock& c, int64_t first) {
  std::vector<double> bounds;  // each step's start, then the last one's end (ns)
  for (auto st : a.doc["steps"].get_array()) {
    const double start_ns = double(st["start_us"]) * 1e3;
    if (bounds.empty())
      bounds.push_back(start_ns);
    else
      CHECK(std::abs(start_ns - bounds.back()) < 1e3);  // each step begins where the one before it ended
    bounds.push_back(start_ns + double(st["dur_us"]) * 1e3);
  }
  std::vector<double> inside;
  for (size_t k = 0; k < bounds.size(); ++k) {
    const int64_t g = first + int64_t(k);
    const bool at_end = k + 1 == bounds.size();
    const bool begun = c.begin_before.count(g) && c.begin_after.count(g);
    const auto& lo = begun || !at_end ? c.begin_before : c.end_before;
    const auto& hi = begun || !at_end ? c.begin_after : c.end_after;
    INFO("boundary " << k << " of the window from step " << first << (begun ? "" : " (training's end)"));
    REQUIRE(lo.count(g));
    REQUIRE(hi.count(g));
    const double slack = 0.2e6;  // the store's µs rounding and the clock reads' own cost
    CHECK(bounds[k] >= double(lo.at(g)) - slack);
    CHECK(bounds[k] <= double(hi.at(g)) + slack);
    if (k > 0 && !at_end) inside.push_back(double(hi.at(g) - lo.at(g)) / 1e6);
  }
  REQUIRE(!inside.empty());
  std::sort(inside.begin(), inside.end());
  return inside[inside.size() / 2];
}

// One line of the trainer's log per window: "stepscope: steps A-B: N steps (api), median … -> STORE".
std::string log_line(const std::string& out, const std::string& steps) {
  const auto p = out.find("stepscope: steps " + steps + ":");
  if (p == std::string::npos) return "";
  return out.substr(p, out.find('\n', p) - p);
}

// How often `what` occurs in `out`.
int count_of(const std::string& out, const std::string& what) {
  int n = 0;
  for (size_t p = out.find(what); p != std::string::npos; p = out.find(what, p + what.size())) ++n;
  return n;
}

// A trainer run with two windows (every=10, length=5 over 25 optimizer steps of 2 accumulated batches each:
// the first closes when step 15 begins, the second when training ends), the batches of steps 5-15 slow: the
// fetches inside the first window (those of steps 11-15) wait, those inside the second do not.
void two_windows(const std::string& name, const std::string& script_name) {
  ScratchDir dir("python_integrations_" + name);
  const auto r = run_script(dir.file(""), script_name,
                            "--output " + shell_quote(dir.file(name + ".db")) +
                                " --every 10 --length 5 --max-steps 25 --accum 2 --slow-from 5 --slow-to 16");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(optimizer_steps(r.output) == 25);
  const TrainerClock clock = trainer_clock(r.output);
  CHECK(clock.begin_after.size() == 25);
  const std::string slow_db = dir.file(name + "-steps10-14.db"), fast_db = dir.file(name + "-steps20-24.db");
  REQUIRE(std::filesystem::exists(slow_db));
  REQUIRE(std::filesystem::exists(fast_db));
  CHECK_FALSE(std::filesystem::exists(dir.file(name + ".db")));
  CHECK_FALSE(std::filesystem::exists(slow_db + ".parts"));  // the attach process merged and removed them

  Analyzed slow, fast;
  analyze(slow_db, slow);
  analyze(fast_db, fast);
  const double slow_err = check_steps_against_trainer(slow, clock, 10);
  const double fast_err = check_steps_against_trainer(fast, clock, 20);
  std::printf(
      "%s: 25 optimizer steps; window 10-14: %lld steps (%s), data_wait_share %.3f, input-bound '%s', "
      "boundaries bracketed within %.3f ms (median); window 20-24: %lld steps, data_wait_share %.3f, "
      "input-bound "
      "'%s', within %.3f ms\n",
      name.c_str(), (long long)slow.steps(), slow.step_source().c_str(), slow.wait_share(),
      slow.severity("input-bound").c_str(), slow_err, (long long)fast.steps(), fast.wait_share(),
      fast.severity("input-bound").c_str(), fast_err);
  for (Analyzed* a : {&slow, &fast}) {
    CHECK(a->step_source() == "api");  // the callback's marks, not the optimizer or DataLoader hooks'
    CHECK(a->steps() == 5);            // the trainer's optimizer steps, not its 10 batches
  }
  // The brackets are narrow against a step (the check above means something); on a loaded 2-core machine the
  // thread loses its core between the two callbacks often enough to widen them to a few ms (median 0.1-4.8 ms seen
  // at load 7, against steps of 70-200 ms).
  CHECK(slow_err < 0.1 * slow.median_step_ms());
  CHECK(fast_err < 0.1 * fast.median_step_ms());
  CHECK(slow.severity("input-bound") == "high");
  CHECK(slow.wait_share() > 0.3);
  // The second window's fetches take under a millisecond; on a loaded 2-core machine one of its 10 fetches
  // can lose the core for 15-30 ms (seen: Lightning, load 6-10, no GC meanwhile), a medium finding over 5
  // steps, never high.
  CHECK(fast.severity("input-bound") != "high");
  CHECK(fast.wait_share() < 0.15);
  CHECK(slow.wait_share() > 3 * fast.wait_share());
  const std::string slow_line = log_line(r.output, "10-14"), fast_line = log_line(r.output, "20-24");
  CHECK(slow_line.find("5 steps (api)") != std::string::npos);
  CHECK(slow_line.find("input-bound (high") != std::string::npos);
  CHECK(slow_line.find(slow_db) != std::string::npos);
  CHECK(fast_line.find("5 steps (api)") != std::string::npos);
  CHECK(fast_line.find("input-bound (high") == std::string::npos);
}

}  // namespace

TEST_CASE(
    "transformers Trainer: StepscopeCallback records windows of optimizer steps in-process", "[framework]") {
  if (auto why = missing("torch, transformers"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  two_windows("hf", "hf_trainer.py");
}

TEST_CASE(
    "Lightning Trainer: StepscopeLightningCallback records windows of optimizer steps in-process", "[framework]") {
  if (auto why = missing("torch, lightning"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  two_windows("lightning", "lightning_trainer.py");
}

TEST_CASE(
    "under stepscope record --paused the callback's window goes into the launcher's store", "[framework]") {
  if (auto why = missing("torch, transformers"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_integrations_paused");
  const std::string db = dir.file("paused.db");
  const auto r =
      run_script(dir.file(""), "hf_trainer.py",
                 "--output " + shell_quote(dir.file("own.db")) + " --steps 4: --max-steps 12 --accum 1",
                 shell_quote(kCli) + " record --paused -o " + shell_quote(db) + " --");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(optimizer_steps(r.output) == 12);
  REQUIRE(std::filesystem::exists(db));
  CHECK_FALSE(std::filesystem::exists(dir.file("own.db")));  // the launcher's store, not one of its own
  Analyzed a;
  analyze(db, a);
  const double err = check_steps_against_trainer(a, trainer_clock(r.output), 4);
  std::printf("record --paused: %lld steps (%s), boundaries bracketed within %.3f ms (median)\n",
              (long long)a.steps(), a.step_source().c_str(), err);
  CHECK(a.step_source() == "api");
  CHECK(a.steps() == 8);  // steps 4-11: the window runs to the end of training
  CHECK(err < 0.1 * a.median_step_ms());
  CHECK(log_line(r.output, "from 4")
            .find(": recorded; `stepscope record` writes " + db + " when the program ends") !=
        std::string::npos);
}

TEST_CASE(
    "transformers Trainer: a crash inside the window keeps its completed steps in the store written at exit",
    "[framework]") {
  if (auto why = missing("torch, transformers"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_integrations_crash");
  const std::string db = dir.file("crash.db");
  // The dataset raises as the trainer fetches step 14's batch, a batch ahead: after step 12 ended, before
  // step 13 began. The exception passes the trainer's end hook; the window is closed, its store written, at
  // the program's exit.
  const auto r =
      run_script(dir.file(""), "hf_trainer.py",
                 "--output " + shell_quote(db) + " --steps 10:15 --max-steps 20 --accum 1 --fail-at 14");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("RuntimeError: slow_batches: the first item of optimizer step 14 (--fail-at)") !=
        std::string::npos);
  CHECK(optimizer_steps(r.output) == -1);  // train() never returned
  const TrainerClock clock = trainer_clock(r.output);
  CHECK(clock.end_after.count(13) == 1);    // step 12 ended (the trainer's global step 13)...
  CHECK(clock.begin_after.count(13) == 0);  // ...and step 13 never began
  REQUIRE(std::filesystem::exists(db));
  // The store written at exit is said (only the traceback was printed).
  CHECK(r.output.find("stepscope: " + db + ": written at exit (the window was still open); `stepscope analyze " + db +
                      "` reads it\n") != std::string::npos);
  Analyzed a;
  analyze(db, a);
  CHECK(a.step_source() == "api");
  CHECK(a.steps() == 3);  // steps 10, 11 and 12: the last ends where the trainer ended it
  check_steps_against_trainer(a, clock, 10);
}

TEST_CASE(
    "transformers Trainer: a second callback stands aside, a second train() keeps both analyses, a window "
    "never reached is said",
    "[framework]") {
  if (auto why = missing("torch, transformers"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_integrations_misuse");
  {
    // Two callbacks marked every step twice: "10 steps (api), median 67.0 ms" for five of ~135 ms.
    const std::string db = dir.file("twice.db");
    const auto r =
        run_script(dir.file(""), "hf_trainer.py",
                   "--output " + shell_quote(db) + " --steps 2:6 --max-steps 8 --accum 1 --second-callback");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(count_of(r.output,
                   "stepscope: a second stepscope callback in this trainer records nothing: the first "
                   "one records the steps (one callback is enough)\n") == 1);
    CHECK_FALSE(std::filesystem::exists(db + ".second.db"));
    Analyzed a;
    analyze(db, a);
    CHECK(a.step_source() == "api");
    CHECK(a.steps() == 4);
    check_steps_against_trainer(a, trainer_clock(r.output), 2);
    CHECK(log_line(r.output, "2-5").find(": 4 steps (api), median ") != std::string::npos);
  }
  {
    const std::string db = dir.file("again.db");
    const auto r =
        run_script(dir.file(""), "hf_trainer.py",
                   "--output " + shell_quote(db) + " --steps 1:3 --max-steps 4 --accum 1 --train-twice");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(count_of(r.output, "analysis " + db + " 2 api\n") == 2);  // the first train()'s analysis kept
    // The second train()'s window replaced the first's store, and its line says so.
    CHECK(count_of(r.output, "stepscope: steps 1-2: 2 steps (api)") == 2);
    CHECK(count_of(r.output, " -> " + db + " (replaced the store that was there)\n") == 1);
  }
  {
    const std::string db = dir.file("unreached.db");
    const auto r = run_script(dir.file(""), "hf_trainer.py",
                              "--output " + shell_quote(db) + " --steps 50:60 --max-steps 4 --accum 1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find(
              "stepscope: steps 50-59 not reached (training ended after step 3): nothing recorded\n") !=
          std::string::npos);
    CHECK_FALSE(std::filesystem::exists(db));
  }
}

TEST_CASE("under stepscope record, profile() and start() say that their window goes into that recording") {
  ScratchDir dir("python_integrations_joined");
  const std::string rec = dir.file("rec.db"), own_profile = dir.file("own_profile.db"),
                    own_start = dir.file("own_start.db");
  const auto r =
      run_script(dir.file(""), "joined.py", shell_quote(own_profile) + " " + shell_quote(own_start),
                 shell_quote(kCli) + " record --no-gpu -o " + shell_quote(rec) + " --");
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const std::string& own : {own_profile, own_start}) {
    CHECK(r.output.find("stepscope: " + own +
                        " is not written: this process is being recorded, and its steps go "
                        "into that recording (`stepscope record` writes " +
                        rec + " when the program ends)\n") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(own));
  }
  CHECK(r.output.find("profile_analysis None\n") != std::string::npos);
  CHECK(r.output.find("stop None\n") != std::string::npos);
  REQUIRE(std::filesystem::exists(rec));
  Analyzed a;
  analyze(rec, a);
  CHECK(a.step_source() == "api");
  CHECK(a.steps() >= 3);  // the marks went into record's store
}

TEST_CASE("stepscope.profile() and start()/stop() record a script in-process and return its analysis") {
  ScratchDir dir("python_integrations_profile");
  const std::string slow_db = dir.file("slow.db"), fast_db = dir.file("fast.db");
  const auto r =
      run_script(dir.file(""), "profile_api.py", shell_quote(slow_db) + " " + shell_quote(fast_db));
  INFO(r.output);
  REQUIRE(r.status == 0);
  // 20 marks, each where a step starts: 20 steps (the block's end ends the last), each waiting 12 ms of its
  // ~16 in a data_wait block.
  CHECK(r.output.find("profile 20 api [[\"input-bound\", \"high\"]") != std::string::npos);
  CHECK(r.output.find("html True True") != std::string::npos);
  CHECK(r.output.find("\"stepscope/steps\": 20") != std::string::npos);
  CHECK(r.output.find("line 20 steps (api), median ") != std::string::npos);
  CHECK(r.output.find("start_stop 10 api []") != std::string::npos);
  // A window inside the open one is refused, saying where the open one writes; the inner writes nothing.
  for (const std::string caller : {"profile", "start"})
    CHECK(r.output.find("nested_" + caller + " RecordingError: stepscope." + caller +
                        "(): a window is already open in this process, writing " + slow_db +
                        " (close it first: windows do not nest)\n") != std::string::npos);
  CHECK(r.output.find("inner False\n") != std::string::npos);
  // A child forked inside the window that exits normally leaves the parent's window alone: exit 0, silent.
  CHECK(r.output.find("fork_profile 0 ''\n") != std::string::npos);
  CHECK(r.output.find("fork_start 0 ''\n") != std::string::npos);
  CHECK(r.output.find("one_line_partial 2 steps (api), median 44.4 ms: input-bound (high, ~52.0 ms/step on 1 step) "
                      "-> w.db\n") != std::string::npos);
  CHECK(r.output.find("one_line_warm 2 steps (api), median 44.4 ms: no findings (step 0 left out as warm-up: "
                      "`stepscope analyze w.db` shows it) -> w.db\n") != std::string::npos);
  CHECK(r.output.find("steps_error stepscope: steps='a:b': expected 'FIRST:END' (END excluded), whole numbers\n") !=
        std::string::npos);
  CHECK(
      r.output.find("bad_int stepscope: steps=100: expected 'FIRST:END' (END excluded) or (FIRST, END)\n") !=
      std::string::npos);
  CHECK(r.output.find(
            "bad_short stepscope: steps=(5,): expected 'FIRST:END' (END excluded) or (FIRST, END)\n") !=
        std::string::npos);
  CHECK(r.output.find("bad_every stepscope: every=10, length=20 (the default): need 0 < length <= every\n") !=
        std::string::npos);
  CHECK(r.output.find(
            "bad_hz stepscope: cpu_hz='fast': expected a whole number of samples a second, e.g. 1000\n") !=
        std::string::npos);
  // length= without every= would be ignored (the window is steps= or the whole run): refused instead.
  for (const std::string name : {"length", "length_alone"})
    CHECK(r.output.find("bad_" + name +
                        " stepscope: length=4 needs every= (windows of `length` steps every `every` steps); "
                        "steps='A:B' gives one window\n") != std::string::npos);
  // A window where nothing marked a step is not "no findings", which reads as clean.
  CHECK(r.output.find("one_line_empty 0 steps (none), median 0.0 ms: no steps in the window, so no per-step "
                      "findings (mark steps with stepscope.step()) -> w.db\n") != std::string::npos);
  CHECK(r.output.find("cannot_record cli=/nonexistent/stepscope: no such executable (the stepscope command; or leave "
                      "cli out and let it be found)\n") != std::string::npos);
  CHECK(r.output.find("cannot_record_name None\n") != std::string::npos);  // a name on PATH is found there
  // A window that cannot open (here a bad option, ValueError) is said once and training goes on.
  CHECK(r.output.find("recorder_said [\"stepscope: steps from 1: not recorded, training goes on: ValueError: invalid "
                      "literal for int() with base 10: 'x'\"]\n") != std::string::npos);
  // What the recorder warns of (here: no CUDA driver) reaches stderr as `stepscope record` prints it, once for
  // the two windows (the attach's output was kept from the user).
  const auto record = run_shell(shell_quote(kCli) + " record -o " + shell_quote(dir.file("w.db")) + " -- true 2>&1");
  const std::string driver = "stepscope: warning: no CUDA driver";
  size_t warned = 0;
  for (size_t p = r.output.find(driver); p != std::string::npos; p = r.output.find(driver, p + 1)) ++warned;
  CHECK(warned == (record.output.find(driver) != std::string::npos ? 1u : 0u));
  Analyzed a;
  analyze(slow_db, a);  // the store stays, whole, for the CLI and the GUI
  CHECK(a.steps() == 20);
  CHECK(a.wait_share() > 0.5);
  REQUIRE(std::filesystem::exists(fast_db));
}

TEST_CASE(
    "a notebook run headless by nbclient records a cell with stepscope.profile() and shows the report") {
  if (auto why = missing("nbclient, nbformat, ipykernel"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_integrations_notebook");
  const std::string db = dir.file("nb.db");
  const auto r = run_script(dir.file(""), "notebook.py", shell_quote(db));
  INFO(r.output);
  REQUIRE(r.status == 0);
  // The cell `prof` displays text/html holding the report in an iframe, beside the one-line text form.
  CHECK(r.output.find("html True True True") != std::string::npos);
  CHECK(r.output.find("last ([('input-bound', 'high')], 20)") != std::string::npos);
  Analyzed a;
  analyze(db, a);
  CHECK(a.steps() == 20);
  CHECK(a.step_source() == "api");
}

TEST_CASE(
    "report --format metrics goes into MLflow's file store and TensorBoard scalars as it is", "[framework]") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  if (auto why = missing("mlflow, tensorboard, torch"); !why.empty())
    STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_integrations_trackers");
  const std::string db = decompressed_recording("h100-2026-11-22/input_bound.db.xz", dir);
  REQUIRE(!db.empty());
  const auto m = run_shell(shell_quote(kCli) + " report --format metrics " + shell_quote(db));
  REQUIRE(m.status == 0);
  simdjson::dom::parser p;
  const size_t n = simdjson::dom::object(p.parse(m.output)).size();
  REQUIRE(n == 6 + 7 + 1 + 3 * 4);  // H100 input_bound: input-bound, pageable-memcpy, sync-stall
  const auto r = run_script(dir.file(""), "trackers.py", shell_quote(db) + " " + shell_quote(dir.file("")));
  INFO(r.output);
  REQUIRE(r.status == 0);
  // Every metric read back from each tool's own reader, equal to what report printed.
  CHECK(r.output.find("metrics " + std::to_string(n) + " ") != std::string::npos);
  CHECK(r.output.find("mlflow " + std::to_string(n) + " True") != std::string::npos);
  CHECK(r.output.find("tensorboard " + std::to_string(n) + " True") != std::string::npos);
}

TEST_CASE("stepscope mcp answers the MCP SDK's stdio client: every tool on real stores, a write refused") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  if (auto why = missing("mcp"); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ScratchDir dir("python_integrations_mcp");
  const std::string db = decompressed_recording("h100-2026-11-22/input_bound.db.xz", dir);
  const std::string other = decompressed_recording("h100-2026-11-22/input_bound_prefetch.db.xz", dir);
  REQUIRE((!db.empty() && !other.empty()));
  const store::Trace rows = store::StoreReader(db).load();
  const int64_t step_rows = int64_t(rows.steps.size());
  int64_t kernel_ns = 0;
  for (const auto& k : rows.kernels) kernel_ns += k.end - k.start;
  // The same recording as `record` writes it now (schema 5, packed): its kernels queried by plain SQL.
  const std::string packed = dir.file("packed.db");
  store::write_store_atomically(rows, packed);
  REQUIRE(store::StoreReader(packed).schema_version() == store::kSchemaVersion);
  Analyzed a;
  analyze(db, a);
  const size_t kernels = std::min<size_t>(3, a.doc["top_kernels"].get_array().size());
  // The server is `stepscope mcp` of this build, running the venv's python (STEPSCOPE_PYTHON).
  const auto r = run_script(dir.file(""), "mcp_client.py",
                            shell_quote(db) + " " + shell_quote(other) + " " + shell_quote(packed),
                            "STEPSCOPE_PYTHON=" + shell_quote(venv_python()));
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("initialize stepscope\n") != std::string::npos);
  CHECK(r.output.find("tools diff_runs explain_rule list_findings open_trace query steps top\n") !=
        std::string::npos);
  CHECK(r.output.find("open_trace False 60 api [\"input-bound\", \"pageable-memcpy\", \"sync-stall\"]\n") !=
        std::string::npos);
  CHECK(r.output.find("list_findings False 3 input-bound True\n") != std::string::npos);
  CHECK(r.output.find("steps False 60 5 True\n") != std::string::npos);
  CHECK(r.output.find("top False " + std::to_string(kernels) + "\n") != std::string::npos);
  CHECK(r.output.find("diff_runs False stepscope.diff/1\n") != std::string::npos);
  CHECK(r.output.find("query False ['n'] [[" + std::to_string(step_rows) + "]]\n") != std::string::npos);
  CHECK(r.output.find("query_packed False ['n', 'ns'] [[" + std::to_string(rows.kernels.size()) + ", " +
                      std::to_string(kernel_ns) + "]]\n") != std::string::npos);
  CHECK(r.output.find(
            "query_write True Error executing tool query: refused: only read-only queries (SELECT) may run "
            "on a store") != std::string::npos);
  CHECK(r.output.find("query_attach True Error executing tool query: refused") != std::string::npos);
  CHECK(r.output.find("explain_rule False ## `input-bound` (InputBoundRule)\n") != std::string::npos);
  // Without a stepscope executable to run, the tool's error says so (RecordingError passed as the SDK's
  // ToolError).
  CHECK(r.output.find("no_cli True Error executing tool open_trace: the stepscope executable was not found "
                      "(`pip install .` at the root of stepscope's repository puts it in this environment") !=
        std::string::npos);
}
