// When the flight recorder saves its window (docs/flight.md): a step slower than k × the running median of
// the steps before it, or a data wait longer than a limit — at most a number of times per hour. Pure logic
// over the step and data-wait rows the collector thread drains; no clocks, no I/O.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace stepscope::collector::flight {

// The running median is over this many steps before the one judged: long enough to ride out a noisy step,
// short enough to follow a trainer that changes pace (a new epoch, a learning-rate phase).
inline constexpr size_t kMedianSteps = 64;
inline constexpr size_t kMaxExcluded = 64;

struct TriggerSettings {
  double slow_step_factor = 3.0;  // 0: no slow-step trigger
  // ... and at least this much over the median: a 4 ms step preempted to 12 ms on a busy host is not the
  // stall worth one of the hour's saves.
  int64_t min_excess_ns = 50LL * 1000000;
  int warmup_steps = 20;     // steps of each source not judged (compilation, caches, the first batches)
  int64_t data_wait_ns = 0;  // 0: no data-wait trigger
  int max_per_hour = 10;     // automatic saves in any 3600 s; on-demand and exit saves are not counted
};

struct Trigger {
  std::string kind;    // "slow-step", "data-wait"
  int64_t step = -1;   // the step's index (its source's numbering); -1 for a data wait outside any step
  std::string source;  // the step's source ("optimizer", "dataloader", "api", ...) or the wait's
  int64_t start_ns = 0, end_ns = 0;
  int64_t median_ns = 0;       // slow-step: the median the step was judged against
  int steps_judged = 0;        // slow-step: how many steps that median covers
  std::string detail() const;  // one line: "step 400 took 512.3 ms, 49.6× the median 10.3 ms of 64 steps"
};

class TriggerEvaluator {
 public:
  explicit TriggerEvaluator(TriggerSettings s) : s_(s) {}
  // A completed step of `source`, or a data wait; a trigger when it fires (and the hourly limit allows).
  // Steps of several sources (optimizer and DataLoader hooks mark the same loop) judge one slow interval
  // once: a step overlapping the last trigger's interval does not fire again.
  // Each thread's steps are judged against that thread's own (steps are sequences per source and thread).
  std::optional<Trigger> on_step(const std::string& source, int64_t index, int64_t start_ns, int64_t end_ns,
                                 int64_t tid = 0);
  std::optional<Trigger> on_data_wait(const std::string& source, int64_t start_ns, int64_t end_ns);
  // The profiler itself worked on the program's threads in [start, end] (a GPU window's CUPTI detach or
  // re-attach: ~12 ms against steps of 100 µs): a step overlapping it is neither judged nor part of the
  // median. Adjacent or overlapping intervals are kept as one.
  void exclude(int64_t start_ns, int64_t end_ns);
  // The profiler worked beside the program's threads in [start, end] (this process writing its part of a save
  // on its own thread): on a host with no idle core a step may have waited for it as long as they overlap, so
  // that overlap is taken off the step's duration before it is judged. A 600 ms stall during a 300 ms write
  // still fires; steps stretched by the write itself do not fire the next save.
  void discount(int64_t start_ns, int64_t end_ns);
  // A trigger that will not be saved after all (another process's save holds it): it gives back its place in
  // the hour's saves.
  void withdraw(const Trigger& t);
  int64_t excluded_steps() const { return excluded_steps_; }
  // Triggers that fired but the hourly limit held back (counted for the store's meta).
  int64_t suppressed() const { return suppressed_; }
  const TriggerSettings& settings() const { return s_; }

 private:
  std::optional<Trigger> admit(Trigger t);
  struct Source {
    std::deque<int64_t> recent;  // durations of the last kMedianSteps steps
    int64_t seen = 0;
  };
  TriggerSettings s_;
  std::map<std::pair<std::string, int64_t>, Source> sources_;  // by (source, tid)
  std::deque<int64_t> fired_at_;  // end times of the automatic triggers in the last hour
  int64_t last_start_ = -1, last_end_ = -1;
  int64_t suppressed_ = 0, excluded_steps_ = 0;
  std::deque<std::pair<int64_t, int64_t>> excluded_;    // the last kMaxExcluded profiler intervals
  std::deque<std::pair<int64_t, int64_t>> discounted_;  // likewise
  std::vector<int64_t> scratch_;
};

}  // namespace stepscope::collector::flight
