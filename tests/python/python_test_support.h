// Helpers of the Python-aware tests: run a shell command, find interpreters.
#pragma once

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

}  // namespace stepscope::test
