// The automatic Python hooks (python/sitecustomize.py + stepscope/_autohook.py) on real scripts, through
// their text log (STEPSCOPE_PYTHON_LOG) so that they are checked without the collector: the data-wait share
// they record must match the script's own measurement.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "python_test_support.h"
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

}  // namespace

TEST_CASE("python hooks: --data-wait-func share matches the input-bound script's own measurement") {
  const std::string py = venv_python();
  if (run_shell(shell_quote(py) + " -c 'import numpy' 2>/dev/null").status != 0)
    STEPSCOPE_SKIP(("no numpy in " + py + " (run scripts/python-env.sh)").c_str());
  ScratchDir dir("python_hooks");
  for (const char* mode : {"", "--prefetch"}) {
    INFO("mode " << mode);
    const std::string log = dir.file(std::string("marks") + mode + ".txt");
    const auto run = run_shell("PYTHONPATH=" + shell_quote(source_dir() + "/python") + " STEPSCOPE_PYTHON_LOG=" +
                               shell_quote(log) +
                               " STEPSCOPE_DATA_WAIT_FUNC='Loader\\.__next__$' STEPSCOPE_STEP_FUNC='^__main__\\.train_step$' " +
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
