// Steps found without markers in a real torch.profiler (Kineto) trace: samples/python/torch_fusion.py on CPU has
// no ProfilerStep, no optimizer and no DataLoader; its repeating unit (one call of the op chain) is the step.
#include <simdjson.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "python_test_support.h"

using namespace stepscope::test;

namespace {

std::string venv_python() { return std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python"; }

}  // namespace

// [framework]: PyTorch writes the trace; the step detector it proves is taken under the sanitizers by the analyzer's
// own tests.
TEST_CASE("torch.profiler trace of torch_fusion.py (no step markers): periodic steps with their confidence", "[framework]") {
  if (run_shell(shell_quote(venv_python()) + " -c 'import torch' 2>/dev/null").status != 0)
    STEPSCOPE_SKIP(("the venv python " + venv_python() + " cannot import torch (run scripts/python-env.sh)").c_str());
  ScratchDir dir("python_profiler_trace_" + std::to_string(::getpid()));
  const std::string trace = dir.file("torch_fusion_cpu.json");
  const std::string script = source_dir() + "/samples/python/torch_fusion.py";
  const std::string py =
      "import runpy, sys\n"
      "from torch.profiler import profile, ProfilerActivity\n"
      "sys.argv = ['torch_fusion.py', '--ops', '10', '--modes', 'eager', '--repeats', '3', '--calls', '20', '--device', 'cpu']\n"
      "with profile(activities=[ProfilerActivity.CPU]) as prof:\n"
      "    try:\n"
      "        runpy.run_path(sys.argv_script, run_name='__main__')\n"
      "    except SystemExit as e:\n"
      "        assert not e.code, e.code\n"
      "prof.export_chrome_trace(sys.argv_trace)\n";
  const std::string wrapper = dir.file("profile_fusion.py");
  {
    FILE* f = std::fopen(wrapper.c_str(), "w");
    REQUIRE(f);
    std::fprintf(f, "import sys\nsys.argv_script = %s\nsys.argv_trace = %s\n%s", ("'" + script + "'").c_str(),
                 ("'" + trace + "'").c_str(), py.c_str());
    std::fclose(f);
  }
  auto gen = run_shell(shell_quote(venv_python()) + " " + shell_quote(wrapper) + " 2>&1");
  INFO(gen.output);
  REQUIRE(gen.status == 0);

  auto r = run_shell(shell_quote(std::string(STEPSCOPE_CLI)) + " analyze --json " + shell_quote(trace) + " 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.output);
  auto s = doc["summary"];
  CHECK(std::string_view(s["step_source"]) == "periodic");
  CHECK(double(s["step_confidence"]) >= 0.9);
  // 3 repeats x 20 timed calls, plus the warm-up calls before them: at least the 60 timed calls are steps.
  CHECK(int64_t(s["steps"]) >= 60);
  CHECK(std::string_view(s["framework"]) == "pytorch");
  CHECK_FALSE(bool(s["has_gpu"]));

  // The text report says where the steps came from.
  auto text = run_shell(shell_quote(std::string(STEPSCOPE_CLI)) + " analyze " + shell_quote(trace) + " 2>&1");
  CHECK(text.output.find("repeating unit of the trace (confidence") != std::string::npos);
}
