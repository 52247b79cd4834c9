// `pip install .` (pyproject.toml: scikit-build-core over the CMake build) into a clean virtual environment, then,
// with the source and build trees out of sight (a mount namespace with empty folders over them), the venv's own
// `stepscope` records a DataLoader trainer and finds its steps, waits and input-bound finding; the venv's python
// imports the marker API without the collector.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>

#include "python_test_support.h"
#include "test_support.h"

using namespace stepscope::test;

TEST_CASE("pip install . into a clean venv: stepscope on its PATH records a DataLoader trainer with the trees hidden") {
  const std::string torch_python = std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python";
  if (run_shell(shell_quote(torch_python) + " -c 'import torch' >/dev/null 2>&1").status != 0)
    STEPSCOPE_SKIP("the venv python cannot import torch (run scripts/python-env.sh)");
  if (auto why = cannot_hide_trees(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  OutsideDir outside("wheel");
  REQUIRE(outside.ok());
  const std::string top = outside.path(), venv = top + "/venv";
  REQUIRE(run_shell("python3 -m venv " + shell_quote(venv) + " 2>&1").status == 0);
  // pip takes the build backend (scikit-build-core) from PyPI or its cache, into an isolated build
  // environment. The wheel's code is built at -O0 here, not at its Release -O3: what this test proves is the
  // package (its layout, the collector and the Python helper found from it, the trees out of sight), while
  // the optimized code is the plain tree's. That halves the suite's largest CPU cost (docs/reliability.md,
  // the CI's time).
  const std::string unoptimized =
      " --config-settings=cmake.define.CMAKE_CXX_FLAGS_RELEASE='-O0 -DNDEBUG'"
      " --config-settings=cmake.define.CMAKE_C_FLAGS_RELEASE='-O0 -DNDEBUG'";
  // Through the compiler cache scripts/test.sh sets up (it exports CCACHE_DIR): the wheel's build folder is a new
  // temporary one each time, so paths are made relative (CCACHE_BASEDIR=/) and the folder left out of the key
  // (CCACHE_NOHASHDIR): a CI run of a change compiles what the change touched, not the whole product again.
  std::string cache_env, cache_settings;
  if (std::getenv("CCACHE_DIR") && run_shell("command -v ccache >/dev/null").status == 0) {
    cache_env = "CCACHE_BASEDIR=/ CCACHE_NOHASHDIR=1 ";
    cache_settings =
        " --config-settings=cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache"
        " --config-settings=cmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache";
  }
  const auto pip = run_shell(cache_env + "CMAKE_BUILD_PARALLEL_LEVEL=2 " + shell_quote(venv + "/bin/pip") +
                             " install --disable-pip-version-check" + unoptimized + cache_settings + " " +
                             shell_quote(source_dir()) + " 2>&1");
  if (pip.status != 0 && (pip.output.find("No matching distribution found for scikit-build-core") != std::string::npos ||
                          pip.output.find("Failed to establish a new connection") != std::string::npos))
    STEPSCOPE_SKIP("pip could not fetch the build backend scikit-build-core (no PyPI and not in pip's cache)");
  INFO(pip.output.substr(pip.output.size() > 4000 ? pip.output.size() - 4000 : 0));
  REQUIRE(pip.status == 0);
  CHECK(std::filesystem::exists(venv + "/bin/stepscope"));
  CHECK(std::filesystem::exists(venv + "/lib/libstepscope_collector.so"));
  CHECK(!std::filesystem::exists(venv + "/bin/stepscope-gui"));  // the GUI is a CMake install, optional here
  std::filesystem::copy_file(source_dir() + "/samples/cpu/python_torch_train.py", top + "/train.py");
  const std::string db = top + "/r.db";
  const std::string body =
      "export PATH=" + shell_quote(venv + "/bin") + ":$PATH && " +
      "python -c 'import stepscope, sys; print(\"marker api\", stepscope.__file__.startswith(sys.prefix), "
      "stepscope.enabled())' && stepscope record --no-gpu -o " + shell_quote(db) + " -- " + shell_quote(torch_python) +
      " train.py --workers 0 --decode-ms 4 --steps 20 && stepscope analyze " + shell_quote(db);
  const auto r = run_with_trees_hidden(top, body);
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("marker api True False") != std::string::npos);  // from site-packages; no collector there
  CHECK(r.output.find("warning") == std::string::npos);
  CHECK(r.output.find("19 step(s) (source: optimizer)") != std::string::npos);
  CHECK(r.output.find("input-bound") != std::string::npos);
}
