// blocking_threads: the main thread computes in spin_function() while one thread is blocked in read() on a pipe
// (blocked_reader) and another sleeps in a loop (sleeping_waiter). Under `stepscope record --wall` the two
// waiting threads are sampled off-CPU; under CPU-time sampling they get no samples. Deterministic stdout.
//   blocking_threads [--iterations N]
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

std::atomic<bool> g_done{false};

// Each function keeps its own frame: GCC's noipa, clang's noinline (clang has no noipa; the sanitized tree is
// built by clang).
#if defined(__clang__)
#define SAMPLE_NOIPA __attribute__((noinline))
#else
#define SAMPLE_NOIPA __attribute__((noipa))
#endif

// The call must not be moved before the threads start: the compiler would find it pure and free to move,
// which the empty asm with a memory clobber forbids in clang too.
SAMPLE_NOIPA uint64_t spin_function(uint64_t iterations) {
  asm volatile("" ::: "memory");
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

// read() on a pipe is restarted after a signal (SA_RESTART), so the wall-clock sampling signal is invisible
// to this thread: it returns only when main writes the byte.
SAMPLE_NOIPA int blocked_reader(int fd) {
  char c = 0;
  ssize_t n;
  do {
    n = read(fd, &c, 1);
  } while (n < 0);
  return c;
}

SAMPLE_NOIPA int sleeping_waiter() {
  int naps = 0;
  while (!g_done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // retries nanosleep after EINTR
    ++naps;
  }
  return naps > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = 400000000;
  for (int i = 1; i + 1 < argc; ++i)
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::strtoull(argv[++i], nullptr, 10);
  int fds[2];
  if (pipe(fds) != 0) return 1;
  int got = 0, slept = 0;
  std::thread reader([&] { got = blocked_reader(fds[0]); });
  std::thread sleeper([&] { slept = sleeping_waiter(); });
  const uint64_t x = spin_function(iterations);
  g_done.store(true);
  const char c = 'k';
  if (write(fds[1], &c, 1) != 1) return 1;
  reader.join();
  sleeper.join();
  std::printf("spin: %llu reader: %c sleeper: %d\n", (unsigned long long)x, got, slept);
  return 0;
}
