// The CPython frame reader (collector/src/python) against real interpreters: each available CPython 3.9–3.14
// runs tests/python/frames_probe.py with a preloaded probe whose SIGPROF handler captures Python frames the
// way the collector does; the resolved samples must name the hot function, its file and line, the whole
// call chain, and mark evaluator entries so that they match the native _PyEval_EvalFrameDefault frames.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <set>

#include "python_frames.h"
#include "python_test_support.h"
#include "test_support.h"

namespace py = stepscope::collector::python;
using namespace stepscope::test;

namespace {

struct PyFrameText {
  std::string function, file;
  int line = 0;
  bool entry = false;
};
struct ProbeSample {
  int native_eval = 0;
  std::vector<PyFrameText> frames;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

std::vector<std::string> interpreters() {
  std::vector<std::string> candidates;
  if (std::string(STEPSCOPE_PYTHON_EXE).size()) candidates.push_back(STEPSCOPE_PYTHON_EXE);
  candidates.push_back("python3");
  candidates.push_back("/usr/bin/python3");  // Debian's: libpython linked statically into the executable
  for (const auto& exe : pyenv_pythons({"3.9.", "3.10.", "3.11.", "3.12.", "3.13.", "3.14."}))
    candidates.push_back(exe);
  // More interpreters, e.g. Debian sid's CPython 3.14 unpacked by scripts/python-sid.sh.
  if (const char* more = std::getenv("STEPSCOPE_TEST_PYTHONS"))
    for (const auto& exe : split(more, ':'))
      if (!exe.empty()) candidates.push_back(exe);
  if (std::filesystem::exists(sid_python())) candidates.push_back(sid_python());
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& c : candidates) {
    const std::string exe = python_executable(c);
    if (!exe.empty() && seen.insert(std::filesystem::weakly_canonical(exe).string()).second) out.push_back(exe);
  }
  return out;
}

}  // namespace

TEST_CASE("python frames: a process without CPython reports none and never crashes") {
  REQUIRE_FALSE(py::init());
  CHECK(py::describe() == "no CPython in this process");
  py::RawPyFrame frames[8];
  py::CaptureScratch scratch;
  CHECK(py::capture_current_thread(frames, 8, scratch) == 0);
  CHECK_FALSE(py::is_eval_frame(reinterpret_cast<uint64_t>(&frames)));
  std::string fn, file;
  int line = -1;
  py::RawPyFrame not_code{};
  not_code.code = reinterpret_cast<uint64_t>(&frames);
  CHECK_FALSE(py::resolve(not_code, fn, file, line));
  not_code.code = 0x10;
  CHECK_FALSE(py::resolve(not_code, fn, file, line));
}

constexpr size_t kProbeMaxFrames = 48;  // tests/python/frames_probe.cpp kMaxFrames

TEST_CASE("python frames: real CPython 3.9-3.14 name the hot function, file, line and call chain") {
  const std::string script = source_dir() + "/tests/python/frames_probe.py";
  const int hot_line = line_of(script, "# HOT LINE");
  const int middle_line = line_of(script, "w.hot_leaf(20000)");
  REQUIRE(hot_line > 0);
  const auto pythons = interpreters();
  if (pythons.empty()) STEPSCOPE_SKIP("no python3 interpreter found");
  ScratchDir dir("python_frames");
  std::set<std::string> versions;
  for (const auto& exe : pythons) {
    INFO("interpreter " << exe);
    const std::string out = dir.file("probe.txt");
    std::filesystem::remove(out);
    const auto run = run_shell("LD_PRELOAD=" + shell_quote(STEPSCOPE_PYFRAMES_PROBE) + " " + shell_quote(exe) + " " +
                               shell_quote(script) + " " + shell_quote(out) + " 0.6 2>&1");
    INFO(run.output);
    REQUIRE(run.status == 0);
    std::vector<ProbeSample> samples;
    std::string version;
    for (const auto& line : split(read_file(out), '\n')) {
      if (line.rfind("version ", 0) == 0) version = line.substr(8);
      if (line.rfind("sample ", 0) != 0) continue;
      const auto cols = split(line, '\t');
      ProbeSample s;
      s.native_eval = std::atoi(cols[0].c_str() + 7);
      for (size_t i = 1; i < cols.size(); ++i) {
        const auto f = split(cols[i], '|');
        REQUIRE(f.size() == 4);
        s.frames.push_back({f[0], f[1], std::atoi(f[2].c_str()), f[3] == "1"});
      }
      samples.push_back(std::move(s));
    }
    INFO("reader: " << version);
    REQUIRE(version.rfind("CPython 3.", 0) == 0);
    versions.insert(version.substr(0, version.find(' ', 8)));
    const int minor = std::atoi(version.c_str() + 10);
    const std::string leaf = minor >= 11 ? "Worker.hot_leaf" : "hot_leaf";  // co_qualname exists from 3.11
    REQUIRE(samples.size() >= 60);

    int hot = 0, hot_on_line = 0, chain_ok = 0, whole = 0, splice_ok = 0;
    for (const auto& s : samples) {
      if (s.frames.empty()) continue;
      // A walk cut at the probe's 48 frames (frames_probe.cpp kMaxFrames: deep imports at start-up) holds fewer
      // entry frames than the native stack has evaluators; only whole Python stacks say whether the two splice.
      if (s.frames.size() < kProbeMaxFrames) {
        ++whole;
        int entries = 0;
        for (const auto& f : s.frames) entries += f.entry;
        splice_ok += entries == s.native_eval;
      }
      if (s.frames[0].function != leaf || s.frames[0].file != script) continue;
      ++hot;
      hot_on_line += s.frames[0].line == hot_line;
      if (s.frames.size() == 4 && s.frames[1].function == "middle" && s.frames[1].line == middle_line &&
          s.frames[2].function == "main" && s.frames[3].function == "<module>" && s.frames[3].entry)
        ++chain_ok;
    }
    CHECK(hot >= 0.6 * static_cast<double>(samples.size()));
    CHECK(hot_on_line >= 0.6 * hot);  // the rest: the `for` line of the same loop
    CHECK(chain_ok >= 0.95 * hot);
    CHECK(splice_ok >= 0.95 * whole);
  }
  std::string all;
  for (const auto& v : versions) all += v + " ";
  std::printf("python frames checked on: %s\n", all.c_str());
}

// The signal handler keeps code addresses; the collector thread names them later. By then a module's code may be
// freed and its address another code object's (tests/python/frames_freed_probe.py: 150 modules of the same shape,
// each run and dropped, every sample resolved after the last). A frame is named as the sample saw it or not at
// all: spin_<i> only ever with /gen/mod_<i>.py.
TEST_CASE("python frames: code objects freed and their addresses reused before the read are never misnamed") {
  const std::string script = source_dir() + "/tests/python/frames_freed_probe.py";
  const auto pythons = interpreters();
  if (pythons.empty()) STEPSCOPE_SKIP("no python3 interpreter found");
  ScratchDir dir("python_frames_freed");
  for (const auto& exe : pythons) {
    INFO("interpreter " << exe);
    const std::string out = dir.file("probe.txt");
    std::filesystem::remove(out);
    const auto run = run_shell("LD_PRELOAD=" + shell_quote(STEPSCOPE_PYFRAMES_PROBE) + " " + shell_quote(exe) + " " +
                               shell_quote(script) + " " + shell_quote(out) + " 150 0.004 2>&1");
    INFO(run.output);
    REQUIRE(run.status == 0);
    int generated = 0, named = 0, unknown = 0, wrong = 0;
    std::string version, first_wrong;
    auto index_in = [](const std::string& s, const std::string& prefix, const std::string& suffix) {
      if (s.rfind(prefix, 0) != 0 || s.size() <= prefix.size() + suffix.size() ||
          s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0)
        return -1;
      const std::string digits = s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
      return digits.find_first_not_of("0123456789") == std::string::npos ? std::atoi(digits.c_str()) : -1;
    };
    for (const auto& line : split(read_file(out), '\n')) {
      if (line.rfind("version ", 0) == 0) version = line.substr(8);
      if (line.rfind("sample ", 0) != 0) continue;
      const auto cols = split(line, '\t');
      for (size_t i = 1; i < cols.size(); ++i) {
        const auto f = split(cols[i], '|');
        REQUIRE(f.size() == 4);
        if (f[0] == "?") {
          ++unknown;
          continue;
        }
        const int by_file = index_in(f[1], "/gen/mod_", ".py"), by_name = index_in(f[0], "spin_", "");
        if (by_file < 0 && by_name < 0) continue;
        ++generated;
        const bool ok = by_file >= 0 && (by_name == by_file || (by_name < 0 && f[0] == "<module>"));
        if (!ok && first_wrong.empty()) first_wrong = cols[i];
        wrong += !ok;
        named += ok && by_name >= 0;
      }
    }
    INFO("reader: " << version << "; first misnamed frame: " << first_wrong);
    REQUIRE(version.rfind("CPython 3.", 0) == 0);
    std::printf("%s: frames of freed modules: %d named as sampled (%d as spin_<i>), %d unknown, %d misnamed\n",
                version.substr(0, version.find(' ', 8)).c_str(), generated, named, unknown, wrong);
    CHECK(wrong == 0);
  }
}
