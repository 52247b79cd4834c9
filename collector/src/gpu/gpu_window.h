// GPU windows (`stepscope record --gpu-window N/M`): CUDA activity is traced for N steps, then left off for at
// least M−N steps, switched at step boundaries. Before the first boundary the run is traced, so a run without
// step markers or with fewer than N steps is traced whole.
//
// "Off" means CUPTI detached (cuptiFinalize): merely disabling the activity kinds leaves CUPTI's per-launch cost
// in place (on an H200, launch_bound paid +54% with every kind on and +55% with them off 90% of the steps). A
// detach and the next attach cost time on the program's threads, and traced steps are slower than untraced
// ones, so the off phase also lasts long enough in time: the traced share of the wall time stays near N/M, and
// the switching itself near 1 / kSwitchCostFactor of it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace stepscope::collector::cupti {

enum class WindowSwitch { None, Off, On };

// The off phase lasts at least this many times the last detach + attach cost (≤ 1% of the time switching).
inline constexpr int64_t kSwitchCostFactor = 100;
// The detach waits this long, or two traced steps if longer, after tracing went off: the GPU may still run the
// last traced step's kernels, whose records come after they end.
inline constexpr int64_t kMinDetachGraceNs = 100000000;

class WindowSchedule {
 public:
  WindowSchedule(int n, int m) : n_(n), m_(m) {}
  bool all() const { return n_ <= 0 || m_ <= n_; }

  // The flight recorder fired: the next `steps` steps are traced (from the next boundary when off now, the
  // current window lengthened when on), whatever the off phase's minimum.
  void arm(int steps) { armed_ = std::max(armed_, steps); }

  // The boundary that completes a step, at time `now` (ns): switch tracing off, on, or leave it.
  WindowSwitch at_step(int64_t now) {
    if (all()) return WindowSwitch::None;
    ++steps_;
    if (armed_ > 0) {
      if (tracing_) {
        length_ = std::max<int64_t>(n_, steps_ + armed_);
        armed_ = 0;
        return WindowSwitch::None;
      }
      tracing_ = true;
      steps_ = 0;
      on_at_ = now;
      length_ = std::max(n_, armed_);
      armed_ = 0;
      return WindowSwitch::On;
    }
    if (tracing_) {
      // Traced steps are timed from the boundary that switched tracing on; the first window from its first
      // boundary (what came before is start-up, not a step).
      if (first_window_ && steps_ == 1) on_at_ = now;
      if (steps_ < std::max<int64_t>(n_, length_)) return WindowSwitch::None;
      length_ = 0;
      const int64_t intervals = first_window_ ? steps_ - 1 : steps_;
      const int64_t per_step = intervals > 0 ? (now - on_at_) / intervals : 0;
      grace_ = std::max(kMinDetachGraceNs, 2 * per_step);
      // Detach when the off phase is long enough to stay detached a while. Short steps (< 50 ms) get a longer
      // off phase for it — windows of N steps a few times a second; long steps with few off steps keep M−N
      // steps and only switch the kinds off, so the traced share stays N/M.
      const int64_t by_steps = per_step * (m_ - n_);
      detach_ = 2 * per_step < kMinDetachGraceNs || by_steps >= grace_ + kMinDetachGraceNs;
      min_off_ = detach_ ? std::max({by_steps, kSwitchCostFactor * switch_cost_, grace_ + kMinDetachGraceNs})
                         : by_steps;
      tracing_ = false;
      first_window_ = false;
      steps_ = 0;
      off_at_ = now;
      return WindowSwitch::Off;
    }
    if (steps_ < m_ - n_ || now - off_at_ < min_off_) return WindowSwitch::None;
    tracing_ = true;
    steps_ = 0;
    on_at_ = now;
    return WindowSwitch::On;
  }

  // The last detach + attach took `ns` (measured by the recorder); later off phases last ≥ kSwitchCostFactor×.
  void set_switch_cost(int64_t ns) { switch_cost_ = std::max<int64_t>(0, ns); }
  int64_t min_off_ns() const { return min_off_; }
  int64_t detach_grace_ns() const { return grace_; }
  bool detach_this_phase() const { return detach_; }
  bool tracing() const { return tracing_; }

 private:
  int n_, m_;
  bool tracing_ = true, first_window_ = true, detach_ = false;
  int64_t steps_ = 0;  // boundaries in the current phase
  int armed_ = 0;       // steps the flight recorder asked to trace
  int64_t length_ = 0;  // this window's steps when armed (0: n_)
  int64_t on_at_ = 0, off_at_ = 0, min_off_ = 0, switch_cost_ = 0, grace_ = kMinDetachGraceNs;
};

// Detaching CUPTI (cuptiFinalize) happens inside a CUDA API call's exit callback on a program thread, as NVIDIA
// documents for a safe detach; the recorder asks for it, a callback performs it, a new window attaches again.
enum class Link : int { Attached = 0, DetachRequested = 1, Detaching = 2, Detached = 3 };

}  // namespace stepscope::collector::cupti
