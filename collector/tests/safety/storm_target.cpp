// storm_target [SECONDS] [LIBRARY]: the allocation/exception/dlopen storm of issue 21, for SECONDS (default
// 1): 4 threads malloc and free blocks of random sizes (up to 256 KiB, so some are mmapped), one throws and
// catches C++ exceptions a few frames deep, two dlopen and dlclose libstepscope_storm_lib.so (thread-local
// data) and call into it. Prints "storm done threads=7" and exits 0. Under a sampler whose handler is not
// async-signal-safe it deadlocks (malloc, the loader's locks) or crashes.
// STORM_UNTIL=FILE: stop 0.3 s after FILE exists instead, SECONDS being the most it runs
// (scripts/stress-record.sh creates FILE when its attach has detached: the storm goes on past the detach, and
// no longer).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {
std::atomic<bool> g_stop{false};
std::atomic<unsigned long> g_work{0};

void allocator(unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<void*> held(64, nullptr);
  while (!g_stop.load(std::memory_order_relaxed)) {
    const size_t i = rng() % held.size();
    std::free(held[i]);
    const size_t size = (rng() % 8 == 0) ? 128 * 1024 + rng() % (128 * 1024) : 16 + rng() % 4096;
    held[i] = std::malloc(size);
    if (held[i]) std::memset(held[i], int(i), std::min<size_t>(size, 256));
    g_work.fetch_add(1, std::memory_order_relaxed);
  }
  for (void* p : held) std::free(p);
}

__attribute__((noinline)) void thrower(int depth) {
  if (depth == 0) throw std::runtime_error("storm");
  thrower(depth - 1);
  asm volatile("" ::: "memory");
}

void exceptions() {
  while (!g_stop.load(std::memory_order_relaxed)) {
    try {
      thrower(8);
    } catch (const std::exception&) {
      g_work.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

void loader(const std::string& lib) {
  unsigned seed = 1;
  while (!g_stop.load(std::memory_order_relaxed)) {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      std::fprintf(stderr, "storm_target: %s\n", dlerror());
      std::exit(3);
    }
    auto touch = reinterpret_cast<int (*)(int)>(dlsym(h, "storm_touch"));
    if (touch) touch(int(seed++));
    dlclose(h);
    g_work.fetch_add(1, std::memory_order_relaxed);
  }
}

std::string library_beside_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "libstepscope_storm_lib.so";
  std::string exe(buf, size_t(n));
  return exe.substr(0, exe.rfind('/') + 1) + "libstepscope_storm_lib.so";
}
}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
  const std::string lib = argc > 2 ? argv[2] : library_beside_executable();
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < 4; ++i) threads.emplace_back(allocator, 17 + i);
  threads.emplace_back(exceptions);
  for (int i = 0; i < 2; ++i) threads.emplace_back(loader, lib);
  const char* until = std::getenv("STORM_UNTIL");
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (until && *until) {
    while (access(until, F_OK) != 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::this_thread::sleep_until(
        std::min<Clock::time_point>(deadline, Clock::now() + std::chrono::milliseconds(300)));
  } else {
    std::this_thread::sleep_until(deadline);
  }
  g_stop.store(true);
  for (auto& t : threads) t.join();
  std::printf("storm done threads=%zu\n", threads.size());
  return g_work.load() > 0 ? 0 : 1;
}
