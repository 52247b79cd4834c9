// signal_cost_bench [--rounds N] [--iterations N]: a fixed integer loop run plain and interrupted by a signal
// with an empty handler, delivered the way stepscope's collector arms it (a per-thread perf_event task-clock
// with F_SETSIG, collector/src/sampling/timers.cpp) at 1 and 4 kHz, by a POSIX thread-CPU-clock timer
// (limited to the kernel's tick) and by a POSIX CLOCK_MONOTONIC timer (an hrtimer, what --wall arms). Rounds
// alternate; medians. The last column is the loop's extra time per signal delivered: the cost no in-process
// sampler can go below here (docs/performance.md).
#include <fcntl.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

std::atomic<long> g_signals{0};
void on_signal(int, siginfo_t*, void*) {
  g_signals.fetch_add(1, std::memory_order_relaxed);
}

double now_s() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

__attribute__((noinline)) uint64_t loop(uint64_t n) {
  uint64_t x = 1;
  for (uint64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

enum class Source { None, PerfEvent, PosixTimer, WallTimer };
struct Mode {
  const char* name;
  Source source;
  int hz;
};

volatile uint64_t g_sink;

// One run in a fresh thread-state: arm, loop, disarm. Returns {seconds, signals}.
std::pair<double, long> run(const Mode& m, uint64_t iterations) {
  const int sig = SIGRTMIN + 3;
  int fd = -1;
  timer_t timer{};
  g_signals = 0;
  if (m.source == Source::PerfEvent) {
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.sample_period = 1000000000ull / m.hz;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    a.wakeup_events = 1;
    fd = int(syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) return {-1, 0};
    f_owner_ex owner{F_OWNER_TID, int(syscall(SYS_gettid))};
    fcntl(fd, F_SETOWN_EX, &owner);
    fcntl(fd, F_SETSIG, sig);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC);
    ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
  } else if (m.source == Source::PosixTimer || m.source == Source::WallTimer) {
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = sig;
    sev._sigev_un._tid = int(syscall(SYS_gettid));
    const clockid_t clock = m.source == Source::WallTimer ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID;
    if (timer_create(clock, &sev, &timer) != 0) return {-1, 0};
    itimerspec its{};
    its.it_interval.tv_nsec = 1000000000L / m.hz;
    its.it_value = its.it_interval;
    timer_settime(timer, 0, &its, nullptr);
  }
  const double t0 = now_s();
  g_sink = loop(iterations);
  const double t1 = now_s();
  if (fd >= 0) close(fd);
  if (m.source == Source::PosixTimer || m.source == Source::WallTimer) timer_delete(timer);
  return {t1 - t0, g_signals.load()};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  uint64_t iterations = 600000000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc)
      iterations = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "signal_cost_bench: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGRTMIN + 3, &sa, nullptr);
  const Mode modes[] = {{"plain", Source::None, 0},
                        {"perf_event task-clock 1 kHz", Source::PerfEvent, 1000},
                        {"perf_event task-clock 4 kHz", Source::PerfEvent, 4000},
                        {"timer_create thread CPU 1 kHz", Source::PosixTimer, 1000},
                        {"timer_create CLOCK_MONOTONIC 1 kHz", Source::WallTimer, 1000}};
  constexpr int kModes = sizeof modes / sizeof modes[0];
  std::vector<double> secs[kModes], rates[kModes];
  for (int r = 0; r < rounds; ++r)
    for (int m = 0; m < kModes; ++m) {
      const auto [s, n] = run(modes[m], iterations);
      if (s < 0) continue;
      secs[m].push_back(s);
      rates[m].push_back(double(n) / s);
    }
  const double plain = median(secs[0]);
  std::printf("%-32s %10s %9s %8s %16s\n", "mode", "signals/s", "loop s", "ovh %", "us per signal");
  for (int m = 0; m < kModes; ++m) {
    if (secs[m].empty()) {
      std::printf("%-32s (not available here)\n", modes[m].name);
      continue;
    }
    const double s = median(secs[m]), rate = median(rates[m]);
    std::printf("%-32s %10.0f %9.3f %+8.1f", modes[m].name, rate, s, 100 * (s / plain - 1));
    if (m == 0 || rate <= 0)
      std::printf(" %16s\n", "-");
    else
      std::printf(" %16.1f\n", (s - plain) / (rate * s) * 1e6);
  }
  return 0;
}
