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

namespace stepscope::test {

struct CommandResult {
  int status = -1;  // exit code, or 128 + signal
  std::string output;
};

// Runs `sh -c command`, capturing stdout (add 2>&1 to also get stderr).
inline CommandResult run_shell(const std::string& command) {
  CommandResult r;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  return r;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

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
