// A real child process for the injector's unit tests: forked from the test (so it has the test's libraries
// and globals at the same addresses), killed and reaped at the end; counters it shares with the test; and
// whether this machine lets the test ptrace its own child at all.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "test_support.h"  // STEPSCOPE_SKIP

namespace stepscope::test {

// Counters in memory shared with the child (MAP_SHARED before the fork).
struct SharedCounters {
  explicit SharedCounters(int n) : n(n) {
    void* p = mmap(nullptr, sizeof(std::atomic<uint64_t>) * n, PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    at = static_cast<std::atomic<uint64_t>*>(p);
    for (int i = 0; i < n; ++i) new (&at[i]) std::atomic<uint64_t>(0);
  }
  ~SharedCounters() { munmap(at, sizeof(std::atomic<uint64_t>) * n); }
  uint64_t operator[](int i) const { return at[i].load(); }
  std::atomic<uint64_t>* at = nullptr;
  int n;
};

class ChildProcess {
 public:
  // Runs `body` in a forked child, which exits when it returns.
  explicit ChildProcess(const std::function<void()>& body) {
    pid_ = fork();
    if (pid_ == 0) {
      body();
      _exit(0);
    }
  }
  ~ChildProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int st = 0;
      waitpid(pid_, &st, __WALL);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Still running (neither exited nor killed); reaps it otherwise.
  bool running() {
    int st = 0;
    const pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_ && (WIFEXITED(st) || WIFSIGNALED(st))) pid_ = -1;
    return pid_ > 0 && r == 0;
  }

 private:
  pid_t pid_ = -1;
};

// Waits up to `timeout_ms` for `done`; its last answer.
inline bool eventually(const std::function<bool()>& done, int timeout_ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

// Loops forever, counting in `counter` and sleeping 200 µs a round (mostly inside clock_nanosleep).
inline void count_forever(std::atomic<uint64_t>* counter) {
  for (;;) {
    counter->fetch_add(1);
    usleep(200);
  }
}

// "" when this process may ptrace a child of its own (PTRACE_SEIZE of a forked, sleeping child), else why not
// (a seccomp filter or a security module forbidding ptrace: the tests skip with this reason).
inline std::string ptrace_refusal() {
  static const std::string why = [] {
    ChildProcess child([] {
      for (;;) pause();
    });
    if (ptrace(PTRACE_SEIZE, child.pid(), nullptr, nullptr) != 0)
      return std::string("ptrace of a child process is not permitted here: ") + std::strerror(errno);
    ptrace(PTRACE_DETACH, child.pid(), nullptr, nullptr);
    return std::string();
  }();
  return why;
}

}  // namespace stepscope::test
