// thread_churn: 1000 short-lived threads (10 at a time), each doing ~1.5 ms of work (enough for a sample at
// 1 kHz). Deterministic stdout.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

__attribute__((noinline)) uint64_t short_work(uint64_t seed) {
  uint64_t x = seed | 1;
  for (int i = 0; i < 1500000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

int main(int argc, char** argv) {
  const int total = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int batch = 10;
  std::vector<uint64_t> results(total);
  for (int base = 0; base < total; base += batch) {
    std::vector<std::thread> pool;
    for (int i = base; i < base + batch && i < total; ++i) pool.emplace_back([&results, i] { results[i] = short_work(2 * uint64_t(i) + 1); });
    for (auto& t : pool) t.join();
  }
  uint64_t sum = 0;
  for (auto r : results) sum ^= r;
  std::printf("threads: %d checksum: %llu\n", total, (unsigned long long)sum);
  return 0;
}
