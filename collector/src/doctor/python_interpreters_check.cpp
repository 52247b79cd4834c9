#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "stepscope/collector/launcher.h"
#include "stepscope/store/store.h"

namespace fs = std::filesystem;

namespace stepscope::collector::checkup {
namespace {

constexpr const char* kPythonSpinFunction = "stepscope_doctor_spin";
// Busy for half a second in a named function: enough samples at 1 kHz to see Python frames in them.
constexpr const char* kPythonSpin =
    "import time\n"
    "def stepscope_doctor_spin(seconds):\n"
    "    end = time.time() + seconds\n"
    "    n = 0\n"
    "    while time.time() < end:\n"
    "        n += 1\n"
    "    return n\n"
    "stepscope_doctor_spin(0.5)\n";
// Version, sys.executable and where `import stepscope` comes from without the collector (Python 2 parses it
// too).
constexpr const char* kPythonQuery =
    "import sys\n"
    "print(sys.version.split()[0])\n"
    "print(sys.executable or '')\n"
    "try:\n"
    "    import stepscope\n"
    "    print(getattr(stepscope, '__file__', None) or '(namespace package)')\n"
    "except Exception:\n"
    "    print('')\n";

struct Interpreter {
  std::vector<std::string> names;  // how it was found: "python3", a --python path
  std::string path;                // what was run to ask it
  bool asked = false;              // --python: a failure to run counts
  std::string executable, real, version, import_file;
  std::string error;  // does not run: why
};

int python_minor(const std::string& version, int* major) {
  int ma = 0, mi = 0;
  std::sscanf(version.c_str(), "%d.%d", &ma, &mi);
  *major = ma;
  return mi;
}

// Interpreters to check: --python first, then python3, python, python3.8 … python3.14 on PATH, one per real
// executable (pyenv shims and venv links lead to the same interpreter).
std::vector<Interpreter> find_interpreters(const DoctorOptions& o, std::vector<Interpreter>& not_running) {
  std::vector<Interpreter> found;
  std::vector<std::pair<std::string, bool>> candidates;
  for (const auto& p : o.pythons) candidates.push_back({p, true});
  std::vector<std::string> names = {"python3", "python"};
  for (int minor = 8; minor <= 14; ++minor) names.push_back(strf("python3.%d", minor));
  for (const auto& n : names) candidates.push_back({n, false});
  for (const auto& [name, asked] : candidates) {
    stop_if_asked();
    Interpreter in;
    in.asked = asked;
    in.names = {name};
    in.path = asked ? fs::absolute(name).string() : on_path(name);
    if (in.path.empty()) continue;
    const Captured c = capture({in.path, "-c", kPythonQuery}, {}, 20000);
    std::istringstream out(c.out);
    std::getline(out, in.version);
    std::getline(out, in.executable);
    std::getline(out, in.import_file);
    if (c.status != 0 || in.executable.empty()) {
      in.error = c.status < 0 ? "cannot be started" : first_line(c.out);
      if (in.error.empty()) in.error = strf("exit status %d", c.status);
      not_running.push_back(in);
      continue;
    }
    std::error_code ec;
    in.real = fs::canonical(in.executable, ec).string();
    if (ec) in.real = in.executable;
    auto same =
        std::find_if(found.begin(), found.end(), [&](const Interpreter& f) { return f.real == in.real; });
    if (same != found.end()) {
      same->names.push_back(name);
      continue;
    }
    found.push_back(in);
  }
  return found;
}
void check_python(Printer& p, const DoctorOptions& o, const std::string& dir, bool collector_ok) {
  std::vector<Interpreter> not_running;
  const auto interpreters = find_interpreters(o, not_running);
  for (const auto& in : not_running) {
    if (!in.asked) continue;
    p.line(Verdict::Fail, in.names[0], "does not run: " + in.error, "check the path given to --python",
           "Python hooks (" + in.names[0] + " does not run)");
  }
  std::vector<std::string> idle;
  std::string idle_why;
  for (const auto& in : not_running)
    if (!in.asked) {
      idle.push_back(in.names[0]);
      if (idle_why.empty()) idle_why = in.error;
    }
  if (interpreters.empty() && o.pythons.empty())
    p.line(Verdict::Skip, "Python", "no python3, python or python3.8 \u2026 python3.14 runs from PATH",
           "stepscope doctor --python /path/to/python checks one");
  int index = 0;
  for (const auto& in : interpreters) {
    stop_if_asked();
    std::vector<std::string> also(in.names.begin() + 1, in.names.end());
    const std::string label = in.names[0] + " " + in.version + " (" + in.executable +
                              (also.empty() ? "" : "; also " + join(also, ", ")) + ")";
    const std::string imported = in.import_file.empty() ? "not importable without stepscope"
                                                        : "imports " + in.import_file + " without stepscope";
    if (!collector_ok) {
      p.line(Verdict::Skip, label, "not recorded", "needs the collector library (above)");
      continue;
    }
    RecordOptions ro;
    ro.output = (fs::path(dir) / strf("python-%d.db", index++)).string();
    ro.command = {in.executable, "-c", kPythonSpin};
    ro.no_gpu = true;  // the hooks and Python frames are the question here
    ro.print_summary = false;
    int major = 0;
    const int minor = python_minor(in.version, &major);
    const bool supported = major > 3 || (major == 3 && minor >= 8);
    const std::string part = "Python hooks (" + in.names[0] + " " + in.version + ")";
    try {
      const RecordSummary s = record(ro);
      stop_if_asked(s.launcher_signal);
      store::StoreReader reader(ro.output);
      const store::Trace t = reader.load();
      auto meta = [&](const char* k) {
        auto it = t.meta.find(k);
        return it == t.meta.end() ? std::string() : it->second;
      };
      const auto py =
          stacks_with(t, [](const store::Frame& f) { return f.kind == store::FrameKind::Python; });
      const auto spin = stacks_with(t, [&](const store::Frame& f) {
        return f.kind == store::FrameKind::Python && t.str(f.symbol) == kPythonSpinFunction;
      });
      int64_t with_py = 0, with_spin = 0;
      for (const auto& sm : t.samples) {
        with_py += has(py, sm.stack);
        with_spin += has(spin, sm.stack);
      }
      const std::string hooks = meta("python.hooks").empty() ? "no python.hooks line" : meta("python.hooks");
      const int64_t installed = std::atoll(meta("python.hooks_installed").c_str());
      const int64_t processes = std::atoll(meta("python.processes").c_str());
      const std::string frames =
          strf("%lld samples, %lld with Python frames, %lld in %s", (long long)t.samples.size(),
               (long long)with_py, (long long)with_spin, kPythonSpinFunction);
      const std::string detail = "hooks " + hooks + "; " + frames + "; " + imported;
      if (s.exit_code != 0) {
        p.line(supported ? Verdict::Fail : Verdict::Warn, label,
               strf("exited with status %d under the collector; ", s.exit_code) + frames,
               supported ? "run it under `stepscope record` by hand to see why" : "use CPython 3.8 or newer",
               part);
      } else if (processes > 0 && installed == processes && with_spin > 0) {
        p.line(Verdict::Ok, label, detail);
      } else if (!supported) {
        // CPython before 3.8 has no audit hooks (docs/python.md): reported, not counted against recording.
        p.line(Verdict::Warn, label, detail, "stepscope's hooks and Python frames need CPython 3.8 or newer");
      } else if (processes > 0 && installed == processes) {
        p.line(Verdict::Fail, label, detail,
               "the hooks are in, but no sample shows the spinning Python function: stepscope reads the "
               "frames of CPython 3.9 to 3.13 (docs/python.md); train with one of those for Python stacks",
               "Python frames (" + in.names[0] + " " + in.version + ")");
      } else {
        p.line(Verdict::Fail, label, detail,
               "see docs/python.md, \"How the hooks get in\"; STEPSCOPE_PYTHON_DEBUG=1 stepscope record -- " +
                   in.executable + " -c 'pass' says why",
               part);
      }
    } catch (const std::exception& e) {
      p.line(Verdict::Fail, label, std::string("recording failed: ") + e.what(), "see the error", part);
    }
  }
  if (!idle.empty())
    p.line(Verdict::Skip, join(idle, ", "), "on PATH but do not run here (" + idle_why + ")");
}

}  // namespace

const DoctorCheck kPythonInterpretersCheck = {"Python interpreters", [](Printer& p, DoctorContext& ctx) {
                                                check_python(p, ctx.options, ctx.dir, ctx.collector_ok);
                                              }};

}  // namespace stepscope::collector::checkup
