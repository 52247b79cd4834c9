// A program that ends the moment an attached recording window closes: two threads spin, a third watches its
// own threads and calls exit() as soon as the collector's thread ("stepscope"), once seen, is gone. The
// control thread is then still finishing the window (closing the part, answering `stop`): the exit races it
// on purpose.
#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

std::atomic<unsigned long> g_sink{0};

void spin() {
  unsigned long x = 1;
  for (;;) {
    for (int i = 0; i < 100000; ++i) x = x * 6364136223846793005UL + 1442695040888963407UL;
    g_sink.fetch_add(x & 1, std::memory_order_relaxed);
  }
}

bool collector_thread_present() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return false;
  bool found = false;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string comm;
    if (std::getline(f, comm) && comm == "stepscope") found = true;
  }
  closedir(d);
  return found;
}

}  // namespace

int main(int argc, char** argv) {
  const double limit_s = argc > 1 ? std::atof(argv[1]) : 60.0;  // never runs forever when nobody attaches
  for (int i = 0; i < 2; ++i) std::thread(spin).detach();
  std::printf("ready\n");
  std::fflush(stdout);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  bool seen = false;
  while (std::chrono::steady_clock::now() < deadline) {
    const bool present = collector_thread_present();
    if (seen && !present) {
      std::printf("ended with the window\n");
      std::fflush(stdout);
      std::exit(0);
    }
    seen = seen || present;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  std::printf("no window ended\n");
  return 1;
}
