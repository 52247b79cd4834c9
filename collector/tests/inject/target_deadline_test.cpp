// target_deadline against real children: one that sleeps (not runnable: its deadline passes on time) and one
// kept off its CPU (SCHED_IDLE beside a spinning child pinned to the same CPU: runnable but not running, so
// its deadline waits, up to the cap). What a busy machine did to `stepscope attach` in CI.
#include "attach/target_deadline.h"

#include <sched.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "attach/attach_support.h"
#include "child_process.h"

using namespace stepscope::collector::attach;
using stepscope::test::ChildProcess;

namespace {

constexpr int64_t kMs = 1000000;

// The first CPU this process may run on.
int first_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return 0;
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

[[noreturn]] void spin_forever() {
  for (;;) asm volatile("");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool have_schedstat() {
  ThreadTimes t;
  return read_thread_times(getpid(), getpid(), t);
}

TEST_CASE("read_thread_times: this thread runs, a thread that is not there is not read") {
  if (!have_schedstat()) STEPSCOPE_SKIP("this kernel has no /proc/PID/task/TID/schedstat");
  ThreadTimes t;
  REQUIRE(read_thread_times(getpid(), getpid(), t));
  CHECK(t.runnable);  // it is running: reading its own stat
  CHECK(t.on_cpu_ns > 0);
  CHECK_FALSE(read_thread_times(getpid(), 0x7ffffff0, t));
}

TEST_CASE("a deadline on a sleeping target passes after its budget") {
  ChildProcess child([] {
    for (;;) pause();
  });
  const auto t0 = std::chrono::steady_clock::now();
  TargetDeadline deadline(child.pid(), 0, 200 * kMs, 2000 * kMs);
  CHECK_FALSE(deadline.expired());
  while (!deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double waited = seconds_since(t0);
  CHECK(waited >= 0.2);
  CHECK(waited < 1.0);  // a sleeping process waits for no CPU: nothing is added to its budget
  CHECK(deadline.starved_ns() < 100 * kMs);
  CHECK(deadline.starved_words().empty());
}

TEST_CASE("a deadline on a target kept off its CPU waits, up to its cap") {
  if (!have_schedstat()) STEPSCOPE_SKIP("this kernel has no /proc/PID/task/TID/schedstat");
  const int cpu = first_cpu();
  ChildProcess hog([cpu] {
    pin_to(cpu);
    spin_forever();
  });
  ChildProcess starved([cpu] {
    pin_to(cpu);
    sched_param none{};
    sched_setscheduler(0, SCHED_IDLE, &none);  // runs only when the CPU has nothing else to run
    spin_forever();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both pinned and spinning
  const auto t0 = std::chrono::steady_clock::now();
  TargetDeadline deadline(starved.pid(), 0, 200 * kMs, 2500 * kMs);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // Five budgets of wall time have passed, nearly all of it on the run queue.
  CHECK_FALSE(deadline.expired());
  CHECK(deadline.starved_ns() > 700 * kMs);
  CHECK(deadline.starved_ns() <= 1100 * kMs);
  CHECK(deadline.starved_words().find("waiting for a CPU") != std::string::npos);
  while (!deadline.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double waited = seconds_since(t0);
  CHECK(waited >= 2.5);  // the cap, not the budget, ended it
  CHECK(waited < 4.0);
}
