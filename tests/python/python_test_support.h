// Helpers of the Python-aware tests: run a shell command, find interpreters.
#pragma once

#include <stdlib.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace stepscope::test {

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 1-based number of the first line of `path` containing `marker`, 0 when none.
inline int line_of(const std::string& path, const std::string& marker) {
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos) return n;
  return 0;
}

// The real executable behind a python command (resolves pyenv shims), "" when it does not run.
inline std::string python_executable(const std::string& cmd) {
  auto r = run_shell(shell_quote(cmd) + " -c 'import sys; print(sys.executable)' 2>/dev/null");
  if (r.status != 0) return "";
  while (!r.output.empty() && (r.output.back() == '\n' || r.output.back() == '\r')) r.output.pop_back();
  return r.output;
}

// pyenv's interpreters whose version folder starts with one of `minors` ("3.8.") and is a plain version
// number.
inline std::vector<std::string> pyenv_pythons(const std::vector<std::string>& minors) {
  std::string root = std::getenv("PYENV_ROOT") ? std::getenv("PYENV_ROOT") : "";
  if (root.empty() && std::getenv("HOME")) root = std::string(std::getenv("HOME")) + "/.pyenv";
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& dir : std::filesystem::directory_iterator(root + "/versions", ec)) {
    const std::string name = dir.path().filename().string();
    for (const auto& minor : minors)
      if (name.rfind(minor, 0) == 0 && name.find_first_not_of("0123456789.") == std::string::npos)
        out.push_back((dir.path() / "bin" / "python3").string());
  }
  return out;
}

// Debian sid's CPython 3.14 where scripts/python-env.sh unpacks it (scripts/python-sid.sh): beside the venv.
inline std::string sid_python() {
  return (std::filesystem::path(STEPSCOPE_PYTHON_VENV).parent_path() / "cpython-sid/usr/bin/python3.14")
      .string();
}

// A fresh folder under /tmp, outside the source and build trees (ScratchDir lies inside the build tree), removed
// with everything in it at the end of the scope.
class OutsideDir {
 public:
  explicit OutsideDir(const std::string& name) {
    std::string tmpl = "/tmp/stepscope-" + name + "-XXXXXX";
    if (::mkdtemp(tmpl.data())) path_ = tmpl;
  }
  ~OutsideDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  OutsideDir(const OutsideDir&) = delete;
  OutsideDir& operator=(const OutsideDir&) = delete;
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// "" when `unshare -m` works here (root or user namespaces), else why the trees cannot be hidden.
inline std::string cannot_hide_trees() {
  if (run_shell("unshare -m true 2>&1").status == 0) return "";
  return "unshare -m is not permitted here (needs root or user namespaces): cannot hide the trees";
}

// Runs `body` (sh) from `cwd` in a private mount namespace where the source and build trees are empty folders,
// so nothing of them can be read: what an installed copy does on a machine without them.
inline CommandResult run_with_trees_hidden(const std::string& cwd, const std::string& body) {
  const std::string hide = "mount -t tmpfs none " + shell_quote(STEPSCOPE_BINARY_DIR) + " && mount -t tmpfs none " +
                           shell_quote(source_dir()) + " && test ! -e " +
                           shell_quote(source_dir() + "/python/stepscope/__init__.py");
  return run_shell("cd " + shell_quote(cwd) + " && unshare -m sh -c " + shell_quote(hide + " && " + body) + " 2>&1");
}

}  // namespace stepscope::test
