// The automatic Python hooks (python/stepscope/_autohook.py), installed by the collector itself
// (collector/src/python/python_hooks.cpp), on real scripts under the built `stepscope record` / `attach`.
// Their text log (STEPSCOPE_PYTHON_LOG) gives every mark; the data-wait share they record must match the
// script's own measurement. A program's own PYTHONPATH and sitecustomize stay in force, and where the hooks
// cannot go in, record/attach and analyze say so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "python_test_support.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope::test;

namespace {

struct Marks {
  int64_t wait_ns = 0;
  int waits = 0, steps = 0;
  int64_t first = 0, last = 0;
  std::string sources;
};

Marks read_marks(const std::string& path) {
  Marks m;
  std::istringstream in(read_file(path));
  std::string kind;
  while (in >> kind) {
    int64_t pid, tid, a, b = 0;
    std::string source;
    if (kind == "wait") {
      in >> pid >> tid >> a >> b >> source;
      m.wait_ns += b - a, ++m.waits;
    } else {
      in >> pid >> tid >> a >> source;
      ++m.steps;
    }
    if (m.sources.find(source) == std::string::npos) m.sources += source + " ";
  }
  return m;
}

double value_after(const std::string& out, const std::string& key) {
  auto p = out.find(key + " ");
  return p == std::string::npos ? -1 : std::atof(out.c_str() + p + key.size() + 1);
}

std::string venv_python() { return std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python"; }

const std::string kCli = STEPSCOPE_CLI;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string meta_of(const std::string& db, const std::string& key) {
  return stepscope::store::StoreReader(db).meta()[key];
}

}  // namespace

// [plain_only]: a share the plain collector's hooks measure; the sanitized suite records with --data-wait-func in
// the case below on every CPython.
TEST_CASE("python hooks: --data-wait-func share matches the input-bound script's own measurement", "[plain_only]") {
  const std::string py = venv_python();
  if (run_shell(shell_quote(py) + " -c 'import numpy' 2>/dev/null").status != 0)
    STEPSCOPE_SKIP(("no numpy in " + py + " (run scripts/python-env.sh)").c_str());
  ScratchDir dir("python_hooks");
  for (const char* mode : {"", "--prefetch"}) {
    INFO("mode " << mode);
    const std::string log = dir.file(std::string("marks") + mode + ".txt");
    const auto run =
        run_shell("STEPSCOPE_PYTHON_LOG=" + shell_quote(log) + " " + shell_quote(kCli) +
                  " record --no-gpu -o " + shell_quote(dir.file(std::string("r") + mode + ".db")) +
                  " --data-wait-func 'Loader\\.__next__$' --step-func '^__main__\\.train_step$' -- " +
                  shell_quote(py) + " " + shell_quote(source_dir() + "/samples/cpu/python_input_bound.py") +
                  " --steps 40 " + mode + " 2>&1");
    INFO(run.output);
    REQUIRE(run.status == 0);
    const double own = value_after(run.output, "wait_share");
    REQUIRE(own >= 0);
    const Marks m = read_marks(log);
    CHECK(m.steps == 40);
    CHECK(m.waits == 41);  // 40 batches and the final StopIteration
    CHECK(m.sources == "data-wait-func step-func ");
    // Both shares over the script's own loop time.
    const double loop_ns = value_after(run.output, "loop_s") * 1e9;
    REQUIRE(loop_ns > 0);
    const double hooked = double(m.wait_ns) / loop_ns;
    std::printf("mode '%s': script wait share %.4f, hooked %.4f\n", mode, own, hooked);
    CHECK(std::abs(hooked - own) < 0.05);
    if (std::string(mode).empty()) {
      CHECK(own > 0.2);
    } else {
      CHECK(own < 0.05);
    }
  }
}

TEST_CASE(
    "python hooks: a launch script's PYTHONPATH and the user's sitecustomize stay in force, and the hooks "
    "are in") {
  ScratchDir dir("python_hooks_pythonpath");
  const std::string lib = dir.file("mylib"), log = dir.file("marks.txt"), db = dir.file("r.db");
  std::filesystem::create_directories(lib);
  write_text(lib + "/sitecustomize.py", "import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n");
  write_text(lib + "/mymodel.py", "def train_step(i):\n    return sum(range(i * 1000))\n");
  write_text(dir.file("train.py"),
             "import os, sys\n"
             "import mymodel, stepscope\n"  // the user's module from PYTHONPATH; stepscope from the collector
             "print('sitecustomize', os.environ.get('USER_SITECUSTOMIZE'))\n"
             "print('pythonpath', os.environ.get('PYTHONPATH'))\n"
             "print('stepscope enabled', stepscope.enabled())\n"
             "for i in range(25):\n"
             "    mymodel.train_step(i)\n");
  write_text(dir.file("launch.sh"), "export PYTHONPATH=" + shell_quote(lib) + "\nexec python3 " +
                                        shell_quote(dir.file("train.py")) + "\n");
  const auto r =
      run_shell("STEPSCOPE_PYTHON_LOG=" + shell_quote(log) + " " + shell_quote(kCli) +
                " record --no-gpu -o " + shell_quote(db) + " --step-func '^mymodel\\.train_step$' -- sh " +
                shell_quote(dir.file("launch.sh")) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("sitecustomize ran") != std::string::npos);
  CHECK(r.output.find("pythonpath " + lib + "\n") !=
        std::string::npos);  // exactly the script's, nothing added
  CHECK(r.output.find("stepscope enabled True") != std::string::npos);
  CHECK(r.output.find("warning") == std::string::npos);
  const Marks m = read_marks(log);
  CHECK(m.steps == 25);
  CHECK(m.sources == "step-func ");
  CHECK(meta_of(db, "python.hooks") == "installed in 1 of 1 Python process");
  const auto a = run_shell(shell_quote(kCli) + " analyze " + shell_quote(db) + " 2>&1");
  INFO(a.output);
  CHECK(a.output.find("24 step(s) (source: step-func)") != std::string::npos);
}

TEST_CASE(
    "python hooks: a plain loop the hooks do not know gets no steps, and analyze says why and what to do") {
  ScratchDir dir("python_hooks_plain");
  const std::string db = dir.file("r.db");
  write_text(dir.file("loop.py"),
             "def step(i):\n    return sum(range(i * 2000))\nfor i in range(40):\n    step(i)\n");
  const auto r = run_shell(shell_quote(kCli) + " record --no-gpu -o " + shell_quote(db) + " -- python3 " +
                           shell_quote(dir.file("loop.py")) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("warning") == std::string::npos);  // the hooks went in: nothing to warn about at record
  const auto a = run_shell(shell_quote(kCli) + " analyze " + shell_quote(db) + " 2>&1");
  INFO(a.output);
  CHECK(a.output.find("1 step(s) (source: none)") != std::string::npos);
  CHECK(
      a.output.find(
          "No step markers: the Python hooks were in place (installed in 1 of 1 Python process) but saw "
          "no DataLoader, tf.data or optimizer step call; mark them: `stepscope record --step-func REGEX`") !=
      std::string::npos);
}

// torch.profiler (Kineto) and stepscope share CUPTI: before a profile with CUDA activity is prepared the
// hooks lend CUDA tracing to it, after it stops they take it back (docs/collector.md, "A good neighbour to
// torch.profiler"). No GPU here: what is checked is the hand-over around the user's profile, its trace whole,
// and what the store says; the CUPTI side is the GPU proof's `neighbour` claim.
TEST_CASE(
    "python hooks: torch.profiler with CUDA activity is lent CUDA tracing and gives it back, its trace "
    "whole") {
  const std::string py = venv_python();
  if (run_shell(shell_quote(py) + " -c 'import torch' 2>/dev/null").status != 0)
    STEPSCOPE_SKIP(("no torch in " + py + " (run scripts/python-env.sh)").c_str());
  ScratchDir dir("python_hooks_torch_profiler");
  const std::string script = source_dir() + "/tests/python/torch_profiler_neighbour.py";
  for (const char* gpu : {"", "--no-gpu"}) {
    INFO("record " << gpu);
    const std::string log = dir.file(std::string("marks") + gpu + ".txt"),
                      db = dir.file(std::string("r") + gpu + ".db");
    const auto r = run_shell("STEPSCOPE_PYTHON_LOG=" + shell_quote(log) + " " + shell_quote(kCli) +
                             " record " + gpu + " -o " + shell_quote(db) + " -- " + shell_quote(py) + " " +
                             shell_quote(script) + " " + shell_quote(dir.file("user.json")) + " 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(value_after(r.output, "user_trace_mm") == 20);  // the user's profile saw every matmul of its span
    // One lend per profile with CUDA activity, none for the CPU-only one, each given back inside its own
    // span.
    std::vector<int64_t> lends, backs;
    std::istringstream in(read_file(log));
    for (std::string line; std::getline(in, line);) {
      std::istringstream l(line);
      std::string kind;
      int64_t pid, tid, t;
      l >> kind >> pid >> tid >> t;
      if (kind == "cuda-lend") {
        lends.push_back(t);
        std::string who;
        l >> who;
        CHECK(who == "torch.profiler");
      }
      if (kind == "cuda-take-back") backs.push_back(t);
    }
    REQUIRE(lends.size() == 2);
    REQUIRE(backs.size() == 2);
    const auto at = [&](const char* key) { return int64_t(value_after(r.output, key)); };
    CHECK(at("cpu_after") < lends[0]);
    CHECK(at("cuda_before") < lends[0]);
    CHECK(lends[0] < backs[0]);
    CHECK(backs[0] < at("cuda_after"));
    CHECK(at("again_before") < lends[1]);
    CHECK(lends[1] < backs[1]);
    CHECK(backs[1] < at("again_after"));
    // The collector: no GPU here, so its tracing had not started (nothing was held); with --no-gpu nothing at
    // all.
    const auto meta = stepscope::store::StoreReader(db).meta();
    if (std::string(gpu).empty()) {
      CHECK(meta.at("cupti.lent").rfind("torch.profiler: 2 times, ", 0) == 0);
      CHECK(meta.at("cupti.lent").find("not given back") == std::string::npos);
      CHECK(meta.at("cupti.lent_while_tracing") == "0");
      CHECK(r.output.find("GPU tracing pauses") == std::string::npos);  // nothing held: nothing to say
      CHECK(r.output.find("CUDA tracing lent") == std::string::npos);
    } else {
      CHECK(meta.count("cupti.lent") == 0);
    }
  }
}

TEST_CASE(
    "python frames: the store says in how many Python processes they were read, and where not, one warning") {
  ScratchDir dir("python_frames_status");
  const std::string script = "import time\nt = time.time()\nwhile time.time() - t < 0.3: pass\n";
  write_text(dir.file("spin.py"), script);
  {
    const std::string db = dir.file("read.db");
    const auto r = run_shell(shell_quote(kCli) + " record --no-gpu -o " + shell_quote(db) + " -- python3 " +
                             shell_quote(dir.file("spin.py")) + " 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    CHECK(r.output.find("Python frames are not read") == std::string::npos);
    const std::string frames = meta_of(db, "python.frames");
    CHECK(frames.rfind("read in 1 of 1 Python process (first: CPython 3.", 0) == 0);
    CHECK(frames.find("not supported") == std::string::npos);
  }
  // CPython 3.8: hooks, but no frame layout for it (the reader covers 3.9-3.14).
  const auto pythons38 = pyenv_pythons({"3.8."});
  const std::string py38 = pythons38.empty() ? "" : pythons38.back();
  if (py38.empty() || !std::filesystem::exists(py38))
    STEPSCOPE_SKIP("no pyenv CPython 3.8 for the unsupported case");
  const std::string db = dir.file("unread.db");
  const auto r = run_shell(shell_quote(kCli) + " record --no-gpu -o " + shell_quote(db) + " -- " +
                           shell_quote(py38) + " " + shell_quote(dir.file("spin.py")) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find(
            "stepscope: warning: Python frames are not read in 1 of 1 Python process (CPython 3.8 is not "
            "supported (3.9–3.14 are)): their samples show the interpreter's native frames only "
            "(docs/python.md)\n") != std::string::npos);
  CHECK(meta_of(db, "python.frames") ==
        "read in 0 of 1 Python process; first without them: CPython 3.8 is not supported (3.9–3.14 are)");
}

TEST_CASE(
    "python hooks: where they cannot go in (attach while the main thread sleeps), attach and analyze say "
    "so") {
  ScratchDir dir("python_hooks_pending");
  const std::string db = dir.file("r.db"), ready = dir.file("ready");
  // The main thread sleeps in C the whole time: a pending call never runs, so the hooks stay out.
  CommandResult r;
  const RunResult child = run_argv(
      {"/bin/sh", "-c", "exec python3 -c \"import time; open('" + ready + "', 'w').close(); time.sleep(5)\""},
      dir, [&](pid_t pid) {
        for (int i = 0; i < 500 && !std::filesystem::exists(ready); ++i) usleep(20000);
        r = run_shell(shell_quote(kCli) + " attach " + std::to_string(pid) + " --duration 1 -o " +
                      shell_quote(db) + " 2>&1");
      });
  CHECK(child.exit_code == 0);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find(
            "stepscope: warning: the Python hooks are missing in 1 of 1 Python process (pending: the main "
            "thread has run no Python since the collector arrived)") != std::string::npos);
  CHECK(meta_of(db, "python.hooks") ==
        "installed in 0 of 1 Python process; first without them: pending: the main thread has run no Python "
        "since the "
        "collector arrived");
  const auto a = run_shell(shell_quote(kCli) + " analyze " + shell_quote(db) + " 2>&1");
  INFO(a.output);
  CHECK(a.output.find("No step markers: the Python hooks could not be installed (installed in 0 of 1") !=
        std::string::npos);
}

TEST_CASE(
    "python hooks: attach while the main thread waits in another thread's import: the hooks wait for "
    "importlib's own code to finish and the program's import completes") {
  // The main thread blocks in importlib's _ModuleLock.acquire on a module another thread is importing; the
  // attach's pending call then runs inside acquire when it wakes. Before the collector looked at the frame it
  // interrupted, the bootstrap's own import deleted acquire's `_blocking_on[tid]` entry there and the
  // program's `import slowmod` raised KeyError on CPython 3.9-3.11 (1 attach in 150 during `import torch`).
  std::vector<std::string> pythons = {"/usr/bin/python3"};
  for (const auto& p : pyenv_pythons({"3.9.", "3.12."})) pythons.push_back(p);  // and 3.11: the bug's, and after
  ScratchDir dir("python_hooks_in_import");
  write_text(dir.file("slowmod.py"), "import time\ntime.sleep(1.5)\nVALUE = 42\n");
  write_text(dir.file("main.py"),
             "import os, sys, threading, time\n"
             "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
             "t = threading.Thread(target=lambda: __import__('slowmod'))\n"
             "t.start()\n"
             "while 'slowmod' not in sys.modules:\n    time.sleep(0.001)\n"
             "open(sys.argv[1], 'w').close()\n"
             "import slowmod\n"
             "print('imported', slowmod.VALUE)\n"
             "t.join()\n"
             "t0 = time.time()\n"
             "while time.time() - t0 < 1.5:\n    pass\n"
             "print('done')\n");
  for (const auto& python : pythons) {
    const std::string tag = std::filesystem::path(python).parent_path().parent_path().filename().string();
    const std::string db = dir.file("r-" + tag + ".db"), ready = dir.file("ready-" + tag);
    CommandResult r;
    const std::vector<std::string> argv{"/usr/bin/env", "STEPSCOPE_PYTHON_DEBUG=1", python, dir.file("main.py"), ready};
    const RunResult child = run_argv(argv, dir, [&](pid_t pid) {
      for (int i = 0; i < 500 && !std::filesystem::exists(ready); ++i) usleep(10000);
      r = run_shell(shell_quote(kCli) + " attach " + std::to_string(pid) + " --no-gpu --duration 2.5 -o " +
                    shell_quote(db) + " 2>&1");
    });
    INFO(python);
    INFO(child.err);
    INFO(r.output);
    CHECK(child.exit_code == 0);
    CHECK(child.out == "imported 42\ndone\n");
    CHECK(child.err.find("KeyError") == std::string::npos);
    // The window opened while the main thread waited in acquire: the installation found importlib running.
    CHECK(child.err.find("stepscope: python hooks: importlib's own code is running; again in 10 ms") !=
          std::string::npos);
    REQUIRE(r.status == 0);
    CHECK(meta_of(db, "python.hooks") == "installed in 1 of 1 Python process");
  }
}

TEST_CASE(
    "python hooks: record --paused, then start given the launcher's pid: the hooks go into a busy "
    "single-threaded loop") {
  // CPython 3.9-3.11 do not wake the main thread for a pending call made on another thread (the control
  // thread that runs `start`): without the collector's wake-up the hooks stayed pending through the window.
  ScratchDir dir("python_hooks_paused");
  const std::string db = dir.file("r.db"), ready = dir.file("ready");
  write_text(dir.file("busy.py"), "import time\nopen(" + std::string("'") + ready +
                                      "', 'w').close()\nt = time.time()\n"
                                      "while time.time() - t < 7:\n    pass\n");
  CommandResult start, stop, start2, stop2;
  const RunResult rec = run_argv(
      {kCli, "record", "--paused", "--no-gpu", "-o", db, "--", "/bin/sh", "-c",
       "exec python3 " + shell_quote(dir.file("busy.py"))},
      dir, [&](pid_t launcher) {
        for (int i = 0; i < 500 && !std::filesystem::exists(ready); ++i) usleep(20000);
        usleep(300000);
        start = run_shell(shell_quote(kCli) + " start " + std::to_string(launcher) + " 2>&1");
        usleep(800000);
        stop = run_shell(shell_quote(kCli) + " stop " + std::to_string(launcher) + " 2>&1");
        // A second window: its own part of the same process (counted as a second Python process, the hooks
        // "missing in 1 of 2" where its part closed before the pending call ran).
        usleep(300000);
        start2 = run_shell(shell_quote(kCli) + " start " + std::to_string(launcher) + " 2>&1");
        usleep(800000);
        stop2 = run_shell(shell_quote(kCli) + " stop " + std::to_string(launcher) + " 2>&1");
      });
  INFO(rec.err);
  INFO(start.output);
  INFO(stop.output);
  REQUIRE(rec.exit_code == 0);
  // The launcher says which pid start/stop want, and start/stop given the launcher's pid act on it.
  const auto at = rec.err.find(" runs paused as process ");
  REQUIRE(at != std::string::npos);
  const std::string child = std::to_string(std::atoi(rec.err.c_str() + at + 24));
  CHECK(rec.err.find("`stepscope start " + child + "` / `stepscope stop " + child + "`") != std::string::npos);
  REQUIRE(start.status == 0);
  CHECK(start.output.find(": recording (in process " + child + ", the command stepscope record ") !=
        std::string::npos);
  REQUIRE(stop.status == 0);
  CHECK(stop.output.find(": stopped samples=") != std::string::npos);
  CHECK(start2.status == 0);
  CHECK(stop2.status == 0);
  CHECK(meta_of(db, "python.hooks") == "installed in 1 of 1 Python process");
  CHECK(meta_of(db, "python.processes") == "1");
  CHECK(rec.err.find("warning: the Python hooks are missing") == std::string::npos);
}

TEST_CASE(
    "python: a libpython loaded with dlopen after the collector started gets its frames read and its hooks "
    "installed") {
  // The venv's interpreter, embedded from its shared library by a C program that loads it 0.3 s in (after the
  // collector thread looked for CPython and found none).
  const auto where = run_shell(shell_quote(venv_python()) +
                               " -c 'import os, sys, sysconfig; print(sys.base_prefix); "
                               "print(os.path.join(sysconfig.get_config_var(\"LIBDIR\"), "
                               "sysconfig.get_config_var(\"INSTSONAME\")))'");
  REQUIRE(where.status == 0);
  std::istringstream lines(where.output);
  std::string home, lib;
  std::getline(lines, home);
  std::getline(lines, lib);
  if (!std::filesystem::exists(lib)) STEPSCOPE_SKIP(("no shared libpython at " + lib).c_str());
  ScratchDir dir("python_late_libpython");
  const std::string db = dir.file("r.db");
  const std::string code =
      "import time\n"
      "def late_burn():\n"
      "    n = 0\n"
      "    t = time.time()\n"
      "    while time.time() - t < 1.2:\n"
      "        n += 1\n"
      "    return n\n"
      "late_burn()\n";
  const auto r =
      run_shell("PYTHONHOME=" + shell_quote(home) + " " + shell_quote(kCli) + " record --no-gpu -o " +
                shell_quote(db) + " -- " + shell_quote(STEPSCOPE_EMBED_LATE) + " " + shell_quote(lib) + " " +
                shell_quote(code) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(meta_of(db, "python.hooks") == "installed in 1 of 1 Python process");
  CHECK(meta_of(db, "python.frames").rfind("read in 1 of 1 Python process (first: CPython 3.", 0) == 0);
  CHECK(r.output.find("warning: the Python hooks are missing") == std::string::npos);
  CHECK(r.output.find("Python frames are not read") == std::string::npos);
  // The samples in late_burn carry its Python frame.
  const auto t = stepscope::store::StoreReader(db).load();
  std::map<int64_t, const stepscope::store::Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::map<int64_t, const stepscope::store::Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;
  int in_burn = 0;
  for (const auto& s : t.samples)
    for (int64_t id = s.stack; id;) {
      const auto* st = stacks.at(id);
      const auto* f = frames.at(st->frame);
      if (f->kind == stepscope::store::FrameKind::Python) {
        in_burn += t.str(f->symbol) == "late_burn";
        break;
      }
      id = st->parent;
    }
  std::printf("late libpython: %zu samples, %d with late_burn as the innermost Python frame\n",
              t.samples.size(), in_burn);
  CHECK(in_burn >= 200);  // ~1.2 s of CPU at the default 1 kHz, less the second before the collector looks
}

TEST_CASE(
    "python hooks: --step-func/--data-wait-func under record on every CPython here: every call marked, the "
    "hooks' cost recorded and taken out, and their frames never the program's") {
  // Before issue 47, 3.9-3.11 ran a Python profile function at every call: the loop below ran 17x slower and
  // `analyze` listed `_install_profile.<locals>.profile (_autohook.py)` as the program's top function.
  std::vector<std::string> pythons = {"/usr/bin/python3"};
  for (const auto& p : pyenv_pythons({"3.9.", "3.10.", "3.12.", "3.13."})) pythons.push_back(p);
  if (std::filesystem::exists(sid_python())) pythons.push_back(sid_python());
  ScratchDir dir("python_hooks_func");
  for (const auto& python : pythons) {
    INFO(python);
    const std::string db = dir.file("r.db"), folded = dir.file("f.txt");
    std::filesystem::remove(db);
    const auto r = run_shell(shell_quote(kCli) + " record --no-gpu -o " + shell_quote(db) +
                             " --step-func '^__main__\\.step_fn$' --data-wait-func '^__main__\\.next_batch$' -- " +
                             shell_quote(python) + " " +
                             shell_quote(source_dir() + "/samples/cpu/python_call_loop.py") +
                             " --seconds 1 --calls 500 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
    const int64_t steps = int64_t(value_after(r.output, "steps"));
    REQUIRE(steps > 100);
    const auto meta = stepscope::store::StoreReader(db).meta();
    const bool monitoring = meta.at("python.func_hooks").rfind("sys.monitoring", 0) == 0;
    const bool trampolines = meta.at("python.func_hooks").rfind("trampolines", 0) == 0;
    CHECK((monitoring || trampolines));
    for (const char* key : {"python.hook_ns_per_step_call", "python.hook_ns_per_wait_call"}) {
      INFO(key);
      const double ns = std::atof(meta.at(key).c_str());
      CHECK(ns > 0);
      CHECK(ns < 20000);
    }
    const auto json = run_shell(shell_quote(kCli) + " analyze --json " + shell_quote(db));
    REQUIRE(json.status == 0);
    // Every call of step_fn starts a step (the first call has no step before it) and every next_batch is a wait.
    CHECK(json.output.find("\"steps\":" + std::to_string(steps - 1) + ",") != std::string::npos);
    CHECK(json.output.find("\"python_hook_step_calls\":" + std::to_string(steps - 1) + ",") != std::string::npos);
    CHECK(json.output.find("\"python_hook_wait_calls\":" + std::to_string(steps - 1) + "}") != std::string::npos);
    const auto text = run_shell(shell_quote(kCli) + " analyze " + shell_quote(db) + " 2>&1");
    CHECK(text.output.find("<stepscope") == std::string::npos);
    CHECK(text.output.find("_autohook") == std::string::npos);
    REQUIRE(run_shell(shell_quote(kCli) + " export " + shell_quote(db) + " --format folded -o " + shell_quote(folded))
                .status == 0);
    const std::string stacks = read_file(folded);
    CHECK(stacks.find("<stepscope-collector>/hook") == std::string::npos);
    CHECK(stacks.find("step_fn (python_call_loop.py") != std::string::npos);
  }
}

TEST_CASE("python hooks: looking for --data-wait-func's functions says nothing to the program") {
  // torch.distributed.reduce_op warns from its __getattribute__: the scan's isinstance(value, type) read the
  // object's __class__ and printed "FutureWarning: torch.distributed.reduce_op is deprecated" into the user's
  // stderr. The object here counts how often it is looked at, and warns each time, as torch's does.
  ScratchDir dir("python_hooks_quiet_scan");
  const std::string db = dir.file("q.db");
  write_text(dir.file("quiet.py"),
             "import sys, time, warnings\n"
             "class _Deprecated:\n"
             "    looked = 0\n"
             "    def __getattribute__(self, name):\n"
             "        _Deprecated.looked += 1\n"
             "        warnings.warn('reduce_op is deprecated', FutureWarning)\n"
             "        return object.__getattribute__(self, name)\n"
             "reduce_op = _Deprecated()\n"
             "def next_batch():\n"
             "    time.sleep(0.002)\n"
             "for _ in range(100):\n"
             "    next_batch()\n"
             "import json\n"  // a new module after the start: the hooks scan what an import adds
             "for _ in range(100):\n"
             "    next_batch()\n"
             "print('looked', _Deprecated.looked)\n");
  const auto r = run_shell(shell_quote(kCli) + " record --no-gpu -o " + shell_quote(db) +
                           " --data-wait-func '^__main__\\.next_batch$' -- /usr/bin/python3 " +
                           shell_quote(dir.file("quiet.py")) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("looked 0\n") != std::string::npos);
  CHECK(r.output.find("FutureWarning") == std::string::npos);
  CHECK(r.output.find("200 data waits") != std::string::npos);  // the hooks did find next_batch
}

TEST_CASE(
    "stepscope.step() on several threads: each thread's marks make its own steps, never cutting another's") {
  // Three threads each marking their own loop made one sequence: a step ran to the next mark of any thread.
  ScratchDir dir("python_steps_threads");
  const std::string db = dir.file("t.db");
  write_text(dir.file("threads.py"),
             "import threading, time, stepscope\n"
             "def loop(n, ms):\n"
             "    for _ in range(n):\n"
             "        stepscope.step()\n"
             "        time.sleep(ms / 1000)\n"
             "    stepscope.step()\n"  // under record the recording goes on: the last mark ends the last step
             "ts = [threading.Thread(target=loop, args=a) for a in ((8, 9), (10, 7), (15, 5))]\n"
             "[t.start() for t in ts]\n"
             "[t.join() for t in ts]\n");
  const auto r = run_shell(shell_quote(kCli) + " record --no-gpu -o " + shell_quote(db) + " -- " +
                           shell_quote(venv_python()) + " " + shell_quote(dir.file("threads.py")) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto t = stepscope::store::StoreReader(db).load();
  std::map<int64_t, std::vector<const stepscope::store::Step*>> by_tid;
  for (const auto& s : t.steps)
    if (t.str(s.source) == "api") by_tid[s.tid].push_back(&s);
  REQUIRE(by_tid.size() == 3);
  std::multiset<size_t> counts;
  for (auto& [tid, steps] : by_tid) {
    counts.insert(steps.size());
    std::sort(steps.begin(), steps.end(), [](auto* a, auto* b) { return a->start < b->start; });
    for (size_t i = 0; i < steps.size(); ++i) {
      INFO("thread " << tid << " step " << i);
      CHECK(steps[i]->index == int64_t(i));
      CHECK(steps[i]->end - steps[i]->start >= 4'000'000);  // a whole iteration: its sleep of 5 ms or more
      if (i) CHECK(steps[i]->start == steps[i - 1]->end);   // back to back on its own thread
    }
  }
  CHECK(counts == std::multiset<size_t>{8, 10, 15});
  const auto a = run_shell(shell_quote(kCli) + " analyze " + shell_quote(db) + " 2>&1");
  INFO(a.output);
  CHECK(a.output.find("15 step(s) (source: api)") != std::string::npos);  // the busiest thread's
}
