// stall_probe: the target of bench_attach. N threads compute in ~30 us chunks and read CLOCK_MONOTONIC
// between chunks; every gap longer than 1 ms (the thread was stopped or not scheduled) is kept. Runs R rounds
// of fixed work; prints one line per round ("round I WALL_S CPU_S", the main thread's CPU time) and, at the
// end, every gap ("gap THREAD START_NS LENGTH_NS").
//   stall_probe [--threads N] [--rounds R] [--round-chunks C]
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kGapNs = 1000000;
volatile uint64_t g_sink;
std::atomic<bool> g_done{false};
std::mutex g_mu;
struct Gap {
  int thread;
  int64_t start, length;
};
std::vector<Gap> g_gaps;

int64_t now(clockid_t c = CLOCK_MONOTONIC) {
  timespec ts;
  clock_gettime(c, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

__attribute__((noinline)) uint64_t chunk(uint64_t x) {
  for (int i = 0; i < 20000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

// One thread's loop: `chunks` chunks (0: until g_done), gaps recorded.
uint64_t probe(int thread, int64_t chunks) {
  uint64_t x = 88172645463325252ull + thread;
  int64_t last = now();
  std::vector<Gap> gaps;
  for (int64_t i = 0; chunks == 0 ? !g_done.load(std::memory_order_relaxed) : i < chunks; ++i) {
    x = chunk(x);
    const int64_t t = now();
    if (t - last > kGapNs) gaps.push_back({thread, last, t - last});
    last = t;
  }
  std::lock_guard<std::mutex> lk(g_mu);
  g_gaps.insert(g_gaps.end(), gaps.begin(), gaps.end());
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, rounds = 10;
  int64_t round_chunks = 20000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--round-chunks")) round_chunks = std::atoll(argv[i + 1]);
  }
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back([t] { g_sink = probe(t, 0); });
  for (int r = 0; r < rounds; ++r) {
    const int64_t w0 = now(), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    g_sink = probe(0, round_chunks);
    std::printf("round %d %.6f %.6f %lld\n", r, (now() - w0) / 1e9, (now(CLOCK_THREAD_CPUTIME_ID) - c0) / 1e9,
                (long long)w0);
    std::fflush(stdout);
  }
  g_done.store(true);
  for (auto& t : pool) t.join();
  for (const auto& g : g_gaps) std::printf("gap %d %lld %lld\n", g.thread, (long long)g.start, (long long)g.length);
  return 0;
}
