// hot_loop: one dominant function at the bottom of a ~30-deep call chain; with --threads N, N threads each hot
// in a function of its own (worker_0 .. worker_7). Work is counted in iterations, so stdout is deterministic.
//   hot_loop [--iterations N] [--threads N] [--depth D] [--steps K] [--exit-from-thread] [--self-kill] [--time]
// --time prints the compute time (first to last instruction of main's work, CLOCK_MONOTONIC) and the process's
// CPU time to stderr: what bench/overhead compares, free of process start-up and of any profiler's post-run work.
#include <signal.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "stepscope.h"

namespace {

volatile uint64_t g_sink;

// HOT BEGIN
__attribute__((noinline)) uint64_t hot_function(uint64_t iterations, uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}
// HOT END

__attribute__((noinline)) uint64_t cold_function(uint64_t iterations, uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t i = 0; i < iterations; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

#define WORKER(N)                                                                 \
  __attribute__((noinline)) uint64_t worker_##N(uint64_t iterations, uint64_t s) { \
    uint64_t x = s + N;                                                           \
    for (uint64_t i = 0; i < iterations; ++i) {                                   \
      x ^= x << 13;                                                               \
      x ^= x >> (7 + N % 3);                                                      \
      x ^= x << 17;                                                               \
    }                                                                             \
    return x;                                                                     \
  }
WORKER(0) WORKER(1) WORKER(2) WORKER(3) WORKER(4) WORKER(5) WORKER(6) WORKER(7)
using WorkerFn = uint64_t (*)(uint64_t, uint64_t);
const WorkerFn kWorkers[8] = {worker_0, worker_1, worker_2, worker_3, worker_4, worker_5, worker_6, worker_7};

// The call chain: `depth` frames of descend() above the work. The call goes through a volatile pointer and its
// result is used afterwards, so the compiler can neither inline it nor turn the recursion into a loop.
uint64_t descend(int depth, WorkerFn fn, uint64_t iterations, uint64_t seed);
uint64_t (*volatile g_descend)(int, WorkerFn, uint64_t, uint64_t) = descend;
__attribute__((noinline)) uint64_t descend(int depth, WorkerFn fn, uint64_t iterations, uint64_t seed) {
  if (depth <= 0) return fn(iterations, seed);
  uint64_t r = g_descend(depth - 1, fn, iterations, seed + 1);
  return r * 3 + static_cast<uint64_t>(depth);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = 200000000;
  int threads = 0, depth = 30, steps = 1;
  bool exit_from_thread = false, self_kill = false, print_time = false;
  for (int i = 1; i < argc; ++i) {
    auto next = [&] { return i + 1 < argc ? argv[++i] : (char*)"0"; };
    if (!std::strcmp(argv[i], "--iterations")) iterations = std::strtoull(next(), nullptr, 10);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(next());
    else if (!std::strcmp(argv[i], "--depth")) depth = std::atoi(next());
    else if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(next());
    else if (!std::strcmp(argv[i], "--exit-from-thread")) exit_from_thread = true;
    else if (!std::strcmp(argv[i], "--self-kill")) self_kill = true;
    else if (!std::strcmp(argv[i], "--time")) print_time = true;
    else {
      std::fprintf(stderr, "hot_loop: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  auto clock_s = [](clockid_t c) {
    timespec ts;
    clock_gettime(c, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
  };
  const double wall0 = clock_s(CLOCK_MONOTONIC), cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
  uint64_t total = 0;
  if (threads > 0) {
    std::vector<uint64_t> results(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        results[t] = descend(depth, kWorkers[t % 8], iterations / threads * (threads > 2 ? 2 : 1), t);
        if (exit_from_thread && t == 0) {
          std::printf("exit from thread: %llu\n", (unsigned long long)results[t]);
          std::fflush(stdout);
          std::exit(3);
        }
      });
    for (auto& th : pool) th.join();
    for (int t = 0; t < threads; ++t) {
      std::printf("thread %d: %llu\n", t, (unsigned long long)results[t]);
      total ^= results[t];
    }
  } else {
    for (int s = 0; s < steps; ++s) {
      stepscope_data_wait_begin();
      total ^= descend(depth, cold_function, iterations / steps / 10, s);
      stepscope_data_wait_end();
      total ^= descend(depth, hot_function, iterations / steps, s);
      stepscope_step();
      if (self_kill && s == steps / 2) {
        std::printf("killing myself at step %d\n", s);
        std::fflush(stdout);
        raise(SIGKILL);
      }
    }
  }
  g_sink = total;
  if (print_time)
    std::fprintf(stderr, "hot_loop: compute_wall_s=%.6f compute_cpu_s=%.6f\n", clock_s(CLOCK_MONOTONIC) - wall0,
                 clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0);
  std::printf("hot_loop: %llu\n", (unsigned long long)total);
  return 0;
}
