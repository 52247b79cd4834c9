// How long attach waits on a target, not counting the time the target waited for a CPU. On a machine whose
// cores are all taken (a trainer's data-loader workers, a CI job at the lowest priority) a target can be
// runnable for seconds without running: a wall-clock timeout would fail the attach of a process that is
// merely slow, and a stuck one (blocked on a lock, not runnable) must still time out. The deadline looks at
// the watched threads every 50 ms: an interval in which a thread was runnable (state R) but ran less than
// the interval, or that the kernel counts as a finished run-queue wait (/proc/PID/task/TID/schedstat, whose
// wait grows only when the wait ends), is added to the budget, the largest such share among the threads;
// a hard cap of wall time ends the wait in any case. See docs/collector.md.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace stepscope::collector::attach {

// What the kernel says of one thread's time: on a CPU, waiting for one (finished waits only), and whether it
// is runnable now. False when the thread is gone or the kernel does not say (no schedstat).
struct ThreadTimes {
  int64_t on_cpu_ns = 0, run_queue_ns = 0;
  bool runnable = false;
};
bool read_thread_times(pid_t pid, pid_t tid, ThreadTimes& out);

class TargetDeadline {
 public:
  // Expires after `budget_ns` of wall time in which the watched threads did not wait for a CPU, and after
  // `cap_ns` of wall time in any case. `tid` 0 watches every thread of `pid` (the largest wait counts).
  TargetDeadline(pid_t pid, pid_t tid, int64_t budget_ns, int64_t cap_ns);

  bool expired();
  // The time added to the budget so far: the watched threads' waits for a CPU.
  int64_t starved_ns() const { return starved_ns_; }
  // " (plus N.N s waiting for a CPU)" when that was more than a tenth of a second, else "".
  std::string starved_words() const;

 private:
  void look(int64_t now);

  pid_t pid_, tid_;
  int64_t budget_ns_, cap_ns_, t0_, last_look_;
  int64_t starved_ns_ = 0;
  std::unordered_map<pid_t, ThreadTimes> last_;  // each thread at the last look
};

// The default cap: eight times the budget, so a starved target has room and a stuck one still ends.
constexpr int64_t kStarvedCapFactor = 8;

}  // namespace stepscope::collector::attach
