// `stepscope mcp`: the Model Context Protocol server over stdio (python/stepscope/mcp_server.py, on the
// official MCP Python SDK; docs/integrations.md). This command only finds a Python that has the package and
// execs it, with STEPSCOPE_CLI naming this binary: every figure the server gives comes from this build's
// analyze/diff.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "command.h"

namespace stepscope::cli {
namespace {

namespace fs = std::filesystem;

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// $STEPSCOPE_PYTHON; the Python beside this binary (a wheel's environment: bin/stepscope beside bin/python3);
// else python3 from PATH.
std::string pick_python(const fs::path& bin_dir) {
  if (const char* p = std::getenv("STEPSCOPE_PYTHON"); p && *p) return p;
  for (const char* name : {"python3", "python"}) {
    const fs::path c = bin_dir / name;
    if (::access(c.c_str(), X_OK) == 0) return c.string();
  }
  return "python3";
}

CommandRegistration mcp_command(90, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("mcp",
                                 "Serve stores and traces to an assistant: a Model Context Protocol server "
                                 "over stdio (needs pip install 'stepscope[mcp]')");
  cmd->callback([&exit_code]() {
    const std::string exe = self_exe();
    const fs::path bin_dir = fs::path(exe).parent_path();
    const std::string python = pick_python(bin_dir);
    // Where the package is when it is not installed into that Python: an install prefix's
    // share/stepscope/python, or the source tree of a build (after whatever PYTHONPATH already holds, so an
    // installed copy wins).
    std::string path = std::getenv("PYTHONPATH") ? std::getenv("PYTHONPATH") : "";
    for (const fs::path& d :
         {bin_dir / ".." / "share" / "stepscope" / "python", bin_dir / ".." / ".." / "python"}) {
      std::error_code ec;
      if (fs::exists(d / "stepscope" / "mcp_server.py", ec))
        path += (path.empty() ? "" : ":") + fs::weakly_canonical(d, ec).string();
    }
    if (!path.empty()) ::setenv("PYTHONPATH", path.c_str(), 1);
    // The tools run the binary that started the server, whatever an older STEPSCOPE_CLI in the environment says.
    if (!exe.empty()) ::setenv("STEPSCOPE_CLI", exe.c_str(), 1);
    std::vector<char*> argv{const_cast<char*>(python.c_str()), const_cast<char*>("-m"),
                            const_cast<char*>("stepscope.mcp_server"), nullptr};
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "stepscope: mcp: cannot run %s: %s (set STEPSCOPE_PYTHON)\n", python.c_str(),
                 std::strerror(errno));
    exit_code = 2;
  });
});

}  // namespace
}  // namespace stepscope::cli
