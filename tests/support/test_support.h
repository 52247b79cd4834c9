// Paths and skips shared by the tests.
#pragma once

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

// Whether this tree is built with AddressSanitizer / ThreadSanitizer (scripts/test.sh --sanitize): GCC defines
// __SANITIZE_ADDRESS__, clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
#define STEPSCOPE_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STEPSCOPE_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define STEPSCOPE_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STEPSCOPE_TEST_TSAN 1
#endif
#endif

namespace stepscope::test {

inline std::string traces_dir() { return STEPSCOPE_TRACES_DIR; }
inline std::string trace_path(const std::string& rel) { return traces_dir() + "/" + rel; }
inline bool have_traces() { return std::filesystem::is_directory(traces_dir()); }
inline std::string source_dir() { return STEPSCOPE_SOURCE_DIR; }
inline std::string binary_dir() { return STEPSCOPE_BINARY_DIR; }

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

// `s` as one single-quoted shell word.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A fresh scratch directory under the build tree, removed at scope end.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& name)
      : path_(std::filesystem::path(STEPSCOPE_BINARY_DIR) / "test-scratch" / name) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct RunResult {
  int exit_code = -1;  // exit code, or 128 + signal
  std::string out, err;
};

// Runs argv (no shell) with stdout/stderr to files in `dir`; `on_started(pid)` runs in the parent right after
// the fork, while the child runs.
inline RunResult run_argv(const std::vector<std::string>& args, const ScratchDir& dir,
                          const std::function<void(pid_t)>& on_started = {}) {
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) ::_exit(126);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (on_started) on_started(pid);
  int status = 0;
  ::waitpid(pid, &status, 0);
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// A command run by `sh -c` in the background (spawn_shell); killed and reaped if still running at scope end.
struct Spawned {
  pid_t pid = -1;
  int wait() {  // exit code, or 128 + signal
    int status = 0;
    if (pid > 0 && ::waitpid(pid, &status, 0) == pid) pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Spawned() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

inline Spawned spawn_shell(const std::string& command) {
  ::signal(SIGCHLD, SIG_DFL);  // children are waited for here (an inherited SIG_IGN would reap them unseen)
  Spawned s;
  std::string c = command;
  char sh[] = "/bin/sh", dash_c[] = "-c";
  char* argv[] = {sh, dash_c, c.data(), nullptr};
  if (::posix_spawn(&s.pid, "/bin/sh", nullptr, nullptr, argv, environ) != 0) s.pid = -1;
  return s;
}

// The venv's interpreter (scripts/python-env.sh).
inline std::string venv_python3() {
  return std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python3";
}

// Appends to `screen` what the program on a pseudo-terminal prints in the next `ms` milliseconds (`master`:
// the terminal's master side, from forkpty).
inline void read_terminal_for(int master, int ms, std::string& screen) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[4096];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n > 0)
        screen.append(buf, size_t(n));
      else
        std::this_thread::sleep_for(
            std::chrono::milliseconds(20));  // the terminal closed: its program has ended
    }
  }
}

}  // namespace stepscope::test

// Marks the current test as skipped (CTest matches "SKIPPED:") and leaves it.
#define STEPSCOPE_SKIP(why)                      \
  do {                                           \
    std::printf("SKIPPED: %s\n", (why));         \
    std::fflush(stdout);                         \
    return;                                      \
  } while (0)

// stepscope's own recordings on real GPUs (shared/recordings): `xz -dc` of one into `dir`, once per process.
namespace stepscope::test {
inline std::string recordings_dir() { return STEPSCOPE_RECORDINGS_DIR; }
inline bool have_recordings() { return std::filesystem::is_directory(recordings_dir()); }
// Path of recordings/<rel> decompressed (rel names the .xz file), or "" when it cannot be read.
inline std::string decompressed_recording(const std::string& rel, const ScratchDir& dir) {
  const std::string src = recordings_dir() + "/" + rel;
  std::string name = std::filesystem::path(rel).filename().string();
  if (name.size() > 3 && name.compare(name.size() - 3, 3, ".xz") == 0) name.resize(name.size() - 3);
  const std::string out = dir.file(name);
  if (std::filesystem::exists(out)) return out;
  if (run_shell("xz -dc " + shell_quote(src) + " > " + shell_quote(out + ".tmp") + " && mv " + shell_quote(out + ".tmp") +
                " " + shell_quote(out))
          .status != 0)
    return "";
  return out;
}
}  // namespace stepscope::test

#define STEPSCOPE_REQUIRE_RECORDINGS()                                                                \
  do {                                                                                                \
    if (!stepscope::test::have_recordings())                                                          \
      STEPSCOPE_SKIP(("shared recordings not found at " + stepscope::test::recordings_dir()).c_str()); \
  } while (0)

#define STEPSCOPE_REQUIRE_TRACES()                                                            \
  do {                                                                                        \
    if (!stepscope::test::have_traces())                                                      \
      STEPSCOPE_SKIP(("shared traces not found at " + stepscope::test::traces_dir()).c_str()); \
  } while (0)
