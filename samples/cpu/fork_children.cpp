// fork_children: forks 50 children that each compute a little and exit with status 0; the parent waits for
// them all. Deterministic stdout (children print nothing; the parent prints after all have exited).
//   fork_children [N] [ITERATIONS]   ITERATIONS per child (default 3000000; more: long-lived workers)
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

uint64_t g_child_iterations = 3000000;

__attribute__((noinline)) uint64_t child_work(uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < g_child_iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

__attribute__((noinline)) uint64_t parent_work(uint64_t seed) {
  const uint64_t saved = g_child_iterations;
  g_child_iterations = 3000000;  // the parent's result does not depend on ITERATIONS
  const uint64_t r = child_work(seed * 31);
  g_child_iterations = saved;
  return r;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 50;
  if (argc > 2) g_child_iterations = std::strtoull(argv[2], nullptr, 10);
  std::fflush(stdout);
  int ok = 0;
  uint64_t parent = parent_work(7);
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      volatile uint64_t r = child_work(i);
      (void)r;
      std::exit(0);  // exit(), not _exit(): atexit handlers (the collector's final flush) run
    }
  }
  for (int i = 0; i < n; ++i) {
    int status = 0;
    if (wait(&status) > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) ++ok;
  }
  std::printf("children: %d ok: %d parent: %llu\n", n, ok, (unsigned long long)parent);
  return ok == n ? 0 : 1;
}
