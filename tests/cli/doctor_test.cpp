// `stepscope doctor` as a user runs it: the real binary, its real checks and its real self-test recording.
// Written for this machine (no GPU, no CUDA driver) and for one with a driver: the no-driver expectations
// apply only where libcuda.so.1 does not load.
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>

#include "stepscope/store/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
using stepscope::test::RunResult;
using stepscope::test::ScratchDir;

namespace {

// The first line of `out` that holds `needle`, or "".
std::string line_with(const std::string& out, const std::string& needle) {
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);)
    if (l.find(needle) != std::string::npos) return l;
  return {};
}

std::string last_line(const std::string& out) {
  std::string s = out;
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s.substr(s.rfind('\n') + 1);
}

std::string file_value(const std::string& path, bool& exists) {
  std::ifstream f(path);
  exists = bool(f);
  std::string v;
  f >> v;
  return v;
}

int64_t number_after(const std::string& line, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(pattern))) return -1;
  return std::atoll(m[1].str().c_str());
}

#if defined(STEPSCOPE_TEST_ASAN) || defined(STEPSCOPE_TEST_TSAN)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

bool have_cuda_driver() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h) dlclose(h);
  return h != nullptr;
}

std::string python_to_check() {
  const std::string venv = std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python";
  if (fs::exists(venv)) return venv;
  if (fs::exists("/usr/bin/python3")) return "/usr/bin/python3";
  return {};
}

}  // namespace

TEST_CASE("doctor checks this machine, records itself and says what works") {
  ScratchDir dir("doctor_here");
  const std::string keep = dir.file("kept");
  const std::string python = python_to_check();
  std::vector<std::string> args = {STEPSCOPE_CLI, "doctor", "--keep", keep};
  if (!python.empty()) args.insert(args.end(), {"--python", python});
  const RunResult r = stepscope::test::run_argv(args, dir);
  INFO(r.out << r.err);

  // The self-test: samples on both burning threads, and the printed counts are the store's. A sanitized
  // stepscope (scripts/test.sh --sanitize builds this test the same way) cannot be recorded: it says so.
  if (kSanitized) {
    CHECK(!line_with(r.out, "  skip  self-test: not run: this stepscope is built with a sanitizer").empty());
  } else {
    const std::string cpu = line_with(r.out, "CPU sampling:");
    REQUIRE(!cpu.empty());
    CHECK(cpu.find("FAIL") == std::string::npos);
    const int64_t cpu0 = number_after(cpu, "ss-doctor-cpu0 (\\d+) samples");
    const int64_t cpu1 = number_after(cpu, "ss-doctor-cpu1 (\\d+) samples");
    CHECK(cpu0 > 0);
    CHECK(cpu1 > 0);
    std::map<std::string, int64_t> tid_of;
    std::ifstream report(keep + "/self-test-workload.txt");
    for (std::string key, rest; report >> key && std::getline(report, rest);) {
      if (key != "thread") continue;
      std::istringstream in(rest);
      int64_t tid = 0;
      double cpu_s = 0;
      std::string name;
      in >> tid >> cpu_s >> name;
      tid_of[name] = tid;
    }
    REQUIRE(tid_of.count("ss-doctor-cpu0"));
    REQUIRE(tid_of.count("ss-doctor-cpu1"));
    const auto trace = stepscope::store::StoreReader(keep + "/self-test.db").load();
    std::map<int64_t, int64_t> samples_of;
    for (const auto& s : trace.samples) ++samples_of[s.tid];
    CHECK(samples_of[tid_of["ss-doctor-cpu0"]] == cpu0);
    CHECK(samples_of[tid_of["ss-doctor-cpu1"]] == cpu1);
    std::map<int64_t, std::string> name_of;
    for (const auto& t : trace.threads) name_of[t.tid] = trace.str(t.name);
    CHECK(name_of[tid_of["ss-doctor-cpu0"]] == "ss-doctor-cpu0");
    CHECK(name_of[tid_of["ss-doctor-cpu1"]] == "ss-doctor-cpu1");
  }

  // perf_event_paranoid and ptrace_scope: the values in /proc.
  bool exists = false;
  const std::string paranoid = file_value("/proc/sys/kernel/perf_event_paranoid", exists);
  REQUIRE(exists);
  CHECK(!line_with(r.out, "perf_event_paranoid: " + paranoid + ": ").empty());
  const std::string scope = file_value("/proc/sys/kernel/yama/ptrace_scope", exists);
  CHECK(!line_with(r.out, exists ? "ptrace_scope: " + scope + ": " : "ptrace_scope: absent (no Yama module)")
             .empty());

  // The collector library is found and loads.
  CHECK(line_with(r.out, "collector library:").rfind("  ok    collector library: ", 0) == 0);

  // The interpreter given: the hooks load and samples show its Python frames.
  if (!python.empty()) {
    const std::string py = line_with(r.out, "  " + python + " ");
    REQUIRE(!py.empty());
    CHECK(py.rfind("  ok    ", 0) == 0);
    CHECK(py.find("hooks installed in 1 of 1 Python process") != std::string::npos);
    CHECK(number_after(py, "(\\d+) with Python frames") > 0);
    CHECK(number_after(py, "(\\d+) in stepscope_doctor_spin") > 0);
  }

  if (!have_cuda_driver()) {
    CHECK(r.exit_code == 1);
    CHECK(
        !line_with(r.out,
                   "  FAIL  CUDA driver: no CUDA driver (libcuda.so.1 not found): stepscope records CPU data "
                   "only \u2014 install the NVIDIA driver / run on a GPU machine")
             .empty());
    // The self-test's GPU line (a sanitized stepscope runs no self-test: said above).
    if (!kSanitized) CHECK(!line_with(r.out, "  skip  GPU: skipped \u2014 no CUDA driver").empty());
    // CUPTI's failure to subscribe without a driver is explained, not a second failure.
    CHECK(line_with(r.out, "CUPTI subscription:").find("FAIL") == std::string::npos);
    CHECK(last_line(r.out) == "doctor: recording works partly: CUDA activity (no driver)");
  } else {
    CHECK(!line_with(r.out, "CUDA driver:").empty());
    CHECK((r.exit_code == 0 || r.exit_code == 1));
  }
  CHECK(last_line(r.out).rfind("doctor: recording works", 0) == 0);
}

TEST_CASE("doctor without its collector library says which path and what to do") {
  ScratchDir tmp("doctor_no_collector");
  auto r = stepscope::test::run_shell("TMPDIR=" + tmp.path().string() +
                                      " STEPSCOPE_COLLECTOR_LIB=/nonexistent/lib.so " +
                                      std::string(STEPSCOPE_CLI) + " doctor --no-python 2>&1");
  INFO(r.output);
  CHECK(fs::is_empty(tmp.path()));  // its private temp folder is removed
  CHECK(r.status == 1);
  CHECK(!line_with(r.output,
                   "  FAIL  collector library: /nonexistent/lib.so not found (from STEPSCOPE_COLLECTOR_LIB) "
                   "\u2014 point STEPSCOPE_COLLECTOR_LIB at libstepscope_collector.so, or unset it")
             .empty());
  CHECK(
      !line_with(r.output, "  skip  self-test: not run \u2014 needs the collector library (above)").empty());
  CHECK(last_line(r.output).rfind("doctor: recording does not work: collector library (not found)", 0) == 0);
}

TEST_CASE("doctor's bad usage exits 2") {
  for (const char* args : {"doctor --bogus", "doctor --python /nonexistent/python", "doctor --duration 0",
                           "doctor --no-python --python /usr/bin/env"}) {
    auto r = stepscope::test::run_shell(std::string(STEPSCOPE_CLI) + " " + args + " 2>&1");
    INFO(args << ": " << r.output);
    CHECK(r.status == 2);
  }
}

TEST_CASE("doctor --keep under a missing folder is refused in one line and creates nothing") {
  stepscope::test::ScratchDir dir("doctor_keep_missing");
  const std::string keep = dir.file("no/such/kept");
  auto r = stepscope::test::run_shell(std::string(STEPSCOPE_CLI) + " doctor --no-python --keep " +
                                      stepscope::test::shell_quote(keep) + " 2>&1");
  CHECK(r.status == 2);
  CHECK(r.output ==
        "stepscope: " + keep + ": no such folder " + dir.file("no/such") + " (create it first)\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("no")));  // the parents it made were 0755 and hid the typo
}

TEST_CASE("doctor's help lists its options and hides the self-test's workload") {
  auto r = stepscope::test::run_shell(std::string(STEPSCOPE_CLI) + " doctor --help 2>&1");
  CHECK(r.status == 0);
  for (const char* o : {"--duration", "--python", "--no-python", "--keep"})
    CHECK(r.output.find(o) != std::string::npos);
  CHECK(r.output.find("--self-test") == std::string::npos);
  CHECK(stepscope::test::run_shell(std::string(STEPSCOPE_CLI) + " --help").output.find("doctor") !=
        std::string::npos);
}
