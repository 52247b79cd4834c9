// GPU windows (`stepscope record --gpu-window N/M`): CUDA activity is traced for N steps, then left off for
// at least M−N steps, switched at step boundaries. Before the first boundary the run is traced, so a run
// without step markers or with fewer than N steps is traced whole.
//
// "Off" means CUPTI detached (cuptiFinalize): merely disabling the activity kinds leaves CUPTI's per-launch
// cost in place (on an H200, launch_bound paid +54% with every kind on and +55% with them off 90% of the
// steps). A detach and the next attach cost time on the program's threads, and traced steps are slower than
// untraced ones, so the off phase also lasts long enough in time: the traced share of the wall time stays
// near N/M, and the switching itself near 1 / kSwitchCostFactor of it.
//
// The cost budget: what tracing costs is measured on the program's own steps, and the off phase lasts long
// enough that it stays within kGpuCostBudget of the wall time. A window's cost is its traced steps' excess
// over a detached step, the grace steps' excess (CUPTI still attached, its per-launch cost kept), and the
// detach + attach. A launch-bound loop whose traced steps run 60% slower (launch_bound on an H100) then gets
// ~30x more off steps than M−N; a GPU-bound trainer, whose traced steps are as fast as the others, keeps N/M.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

namespace stepscope::collector::cupti {

enum class WindowSwitch { None, Off, On };

// The off phase lasts at least this many times the last detach + attach cost (≤ 1% of the time switching).
inline constexpr int64_t kSwitchCostFactor = 100;
// The detach waits this long, or two traced steps if longer, after tracing went off: the GPU may still run the
// last traced step's kernels, whose records come after they end.
inline constexpr int64_t kMinDetachGraceNs = 100000000;
// Tracing's measured cost (traced and grace steps' excess, switching) as a share of the wall time, at most:
// with the CPU sampler's ~1.3% at 1 kHz (H100 machine, docs/performance.md) the whole record stays under +3%.
inline constexpr double kGpuCostBudget = 0.015;
// The budget lengthens an off phase to this at most: a window of evidence every two minutes, whatever it
// costs.
inline constexpr int64_t kMaxBudgetOffNs = 120000000000LL;

// A driving sequence that has marked no step for this many times its own last step (and at least
// kMinDriverStaleNs) has ended: the next sequence to complete a step drives the windows from then on.
inline constexpr int64_t kDriverStaleFactor = 4;
inline constexpr int64_t kMinDriverStaleNs = 2000000000LL;

// Which step sequence — a (source, thread) pair: stepscope.step() on three threads makes three — switches the
// windows. One at a time: counting every thread's boundaries would make each thread's step a fraction of a
// window, and following the highest count stalled the schedule for good once that thread's loop ended (an
// evaluation thread, a finished worker) while the others, lower, kept marking. The first sequence to complete
// a step drives; another takes over only once the driver has gone quiet (kDriverStaleFactor × its last step),
// its first step taken as long as the old driver's last (the quiet span where none was measured), so two
// sequences marking in turn (the optimizer hook and stepscope.step() half a step apart) never hand it back
// and forth, and a loop back from a stall takes it back within kDriverStaleFactor of its own step. No
// allocation: it runs on the program's thread at every step; a source is known by a hash of its whole name (a
// Python caller's string does not outlive the call).
class WindowDriver {
 public:
  // A boundary completing a step of (source, tid) at `now`: whether it is the driver's (and counts).
  bool drives(const char* source, int32_t tid, int64_t now) {
    const uint64_t name = name_hash(source);
    if (driving_ && tid == tid_ && name == name_) {
      if (!std::exchange(skip_next_, false)) last_step_ns_ = now - last_at_;
      last_at_ = now;
      return true;
    }
    const int64_t quiet = now - last_at_;
    if (driving_ && quiet < std::max(kMinDriverStaleNs, kDriverStaleFactor * last_step_ns_)) return false;
    // The new driver's step is not measured yet: it is taken as the old one's last step, or where that was
    // never measured (the run's first driver), as the quiet span (the old driver may only have resumed after
    // a stall; the run's first two sequences half a step apart must not hand the windows back and forth).
    if (driving_ && last_step_ns_ <= 0) last_step_ns_ = quiet;
    driving_ = true, skip_next_ = false, tid_ = tid, name_ = name, last_at_ = now;
    ++drivers_;
    return true;
  }
  // CUDA tracing was lent (to torch.profiler) until `now`: the driver's quiet span starts again here, and its
  // next step, which held the lend, is no step's length.
  void restart(int64_t now) {
    if (!driving_) return;
    last_at_ = now;
    skip_next_ = true;
  }
  // How many sequences have driven so far (1 in a run with one).
  int64_t drivers() const { return drivers_; }

 private:
  static uint64_t name_hash(const char* s) {  // FNV-1a over the whole name
    uint64_t h = 0xcbf29ce484222325ull;
    for (; s && *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 0x100000001b3ull;
    return h;
  }
  bool driving_ = false, skip_next_ = false;
  int32_t tid_ = 0;
  uint64_t name_ = 0;
  int64_t last_at_ = 0, last_step_ns_ = 0, drivers_ = 0;
};

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
    // An interval that is no step (forget_last_step) inside a traced window: left out of its per-step time.
    if (gap_from_ > 0) {
      if (tracing_ && !(first_window_ && steps_ == 1)) gap_ns_ += now - gap_from_, ++gaps_;
      gap_from_ = 0;
    }
    // The first traced step after an On holds the re-attach (counted in the switch cost): not a traced pace.
    if (last_at_ > 0 && !(tracing_ && (first_window_ || std::exchange(reattach_step_, false)))) {
      // Off steps before the grace ended ran with CUPTI attached; the ones after it, detached (or kinds off).
      (tracing_                      ? traced_paces_
       : last_at_ - off_at_ < grace_ ? grace_paces_
                                     : detached_paces_)
          .add(now - last_at_);
    }
    last_at_ = now;
    // Traced steps are timed from the boundary that switched tracing on; the first window from its first
    // boundary (what came before is start-up, not a step), also where the flight recorder armed it before
    // then.
    if (tracing_ && first_window_ && steps_ == 1) on_at_ = now;
    if (armed_ > 0) {
      if (tracing_) {
        length_ = std::max<int64_t>(n_, steps_ + armed_);
        armed_ = 0;
        return WindowSwitch::None;
      }
      end_off_phase();
      tracing_ = true;
      reattach_step_ = true;
      steps_ = 0;
      gap_ns_ = gaps_ = 0;
      on_at_ = now;
      length_ = std::max(n_, armed_);
      armed_ = 0;
      return WindowSwitch::On;
    }
    if (tracing_) {
      if (steps_ < std::max<int64_t>(n_, length_)) return WindowSwitch::None;
      length_ = 0;
      const int64_t intervals = (first_window_ ? steps_ - 1 : steps_) - gaps_;
      const int64_t window_ns = now - on_at_ - gap_ns_;
      gap_ns_ = gaps_ = 0;
      const int64_t per_step = intervals > 0 ? window_ns / intervals : 0;
      grace_ = std::max(kMinDetachGraceNs, 2 * per_step);
      // Detach when the off phase is long enough to stay detached a while. Short steps (< 50 ms) get a longer
      // off phase for it — windows of N steps a few times a second; long steps with few off steps keep M−N
      // steps and only switch the kinds off, so the traced share stays N/M.
      last_traced_step_ns_ = traced_paces_.median();
      traced_paces_.clear();
      budget_off_ = off_for_budget(intervals, window_ns);
      const int64_t by_steps = std::max(per_step * (m_ - n_), budget_off_);
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
    end_off_phase();
    tracing_ = true;
    reattach_step_ = true;
    steps_ = 0;
    gap_ns_ = gaps_ = 0;
    on_at_ = now;
    return WindowSwitch::On;
  }

  // The last detach + attach took `ns` (measured by the recorder); later off phases last ≥ kSwitchCostFactor×.
  void set_switch_cost(int64_t ns) { switch_cost_ = std::max<int64_t>(0, ns); }
  int64_t min_off_ns() const { return min_off_; }
  // The last off phase's length by the cost budget (0: none), and the paces it came from (medians, ns):
  // traced, in the grace, detached.
  int64_t budget_off_ns() const { return budget_off_; }
  int64_t traced_step_ns() const { return last_traced_step_ns_; }
  int64_t grace_step_ns() const { return grace_step_ns_; }
  int64_t detached_step_ns() const { return detached_step_ns_; }
  int64_t detach_grace_ns() const { return grace_; }
  bool detach_this_phase() const { return detach_; }
  // The next boundary's interval is no step's pace (CUDA tracing was lent meanwhile: cupti_recorder.cpp).
  // The interval up to the next boundary is no step (a lend, a new driver's first): kept out of the paces and
  // out of the window's per-step time (which sets the grace and the off phase).
  void forget_last_step() {
    if (last_at_ > 0) gap_from_ = last_at_;
    last_at_ = 0;
  }
  bool tracing() const { return tracing_; }

 private:
  int n_, m_;
  bool tracing_ = true, first_window_ = true, detach_ = false;
  int64_t steps_ = 0;  // boundaries in the current phase
  int64_t gap_from_ = 0;  // the boundary before an interval that is no step (forget_last_step); 0: none
  int64_t gap_ns_ = 0, gaps_ = 0;  // such intervals in this window: their time and count
  int armed_ = 0;       // steps the flight recorder asked to trace
  int64_t length_ = 0;  // this window's steps when armed (0: n_)
  int64_t on_at_ = 0, off_at_ = 0, min_off_ = 0, switch_cost_ = 0, grace_ = kMinDetachGraceNs;
  // Step times of one kind: how many, and the median of the last 64 (a checkpoint or a stall among them does
  // not make tracing look free). No allocation: at_step runs on the program's thread at every step.
  struct Paces {
    std::array<int64_t, 64> last{};
    int64_t count = 0;
    void add(int64_t ns) { last[size_t(count++ % int64_t(last.size()))] = ns; }
    void clear() { count = 0; }
    int64_t median() const {
      if (count == 0) return 0;
      std::array<int64_t, 64> v = last;
      const auto n = size_t(std::min<int64_t>(count, int64_t(v.size())));
      std::nth_element(v.begin(), v.begin() + n / 2, v.begin() + n);
      return v[n / 2];
    }
  };
  // The cost budget's measurements: the current phase's steps by kind, and the last off phase's paces.
  Paces traced_paces_, grace_paces_, detached_paces_;
  int64_t last_at_ = 0, detached_step_ns_ = 0, grace_step_ns_ = 0, grace_step_count_ = 0, budget_off_ = 0;
  int64_t last_traced_step_ns_ = 0;
  bool reattach_step_ = false;  // the next traced step is the first after an On

  // What the off phase that ends measured: the pace of a step with CUPTI attached but not tracing, and
  // detached.
  void end_off_phase() {
    if (detached_paces_.count > 0) detached_step_ns_ = detached_paces_.median();
    if (grace_paces_.count > 0)
      grace_step_ns_ = grace_paces_.median(), grace_step_count_ = grace_paces_.count;
    grace_paces_.clear();
    detached_paces_.clear();
  }

  // The off phase the cost budget asks for after a window of `steps` traced steps (`window_ns` in all, their
  // pace last_traced_step_ns_), from the paces the last off phase measured; 0 before any was measured.
  int64_t off_for_budget(int64_t steps, int64_t window_ns) const {
    if (detached_step_ns_ <= 0 || steps <= 0 || last_traced_step_ns_ <= 0) return 0;
    const double u = double(detached_step_ns_);
    const double cost = double(steps) * std::max(0.0, double(last_traced_step_ns_) - u) +
                        double(grace_step_count_) * std::max(0.0, double(grace_step_ns_) - u) +
                        double(switch_cost_);
    const double off = cost / kGpuCostBudget - double(window_ns);
    return off <= 0 ? 0 : off >= double(kMaxBudgetOffNs) ? kMaxBudgetOffNs : int64_t(off);
  }
};

// Detaching CUPTI (cuptiFinalize) happens inside a CUDA API call's exit callback on a program thread, as NVIDIA
// documents for a safe detach; the recorder asks for it, a callback performs it, a new window attaches again.
enum class Link : int { Attached = 0, DetachRequested = 1, Detaching = 2, Detached = 3 };

// A CUDA graph instantiated or run under CUPTI forbids any later detach (docs/collector.md, "CUDA graphs keep
// CUPTI attached"). Two program threads meet here without a lock: one at a CUDA call's exit about to
// finalize, one about to make or launch a graph. Both sides are sequentially consistent, so either the
// finalizing thread sees the pin or the pinning thread sees the finalize (Detaching, or already Detached) and
// lets it end first.

// At a CUDA call's exit with a detach asked for: true when the caller must call cuptiFinalize now (`link` is
// Detaching; the caller then sets Detached or, on failure, Attached); false when another thread took the
// request, or a pin called it off (`link` back to Attached).
inline bool begin_detach(std::atomic<int>& link, const std::atomic<bool>& pinned) {
  int expected = int(Link::DetachRequested);
  if (pinned.load()) {
    link.compare_exchange_strong(expected, int(Link::Attached));
    return false;
  }
  if (!link.compare_exchange_strong(expected, int(Link::Detaching))) return false;
  if (pinned.load()) {  // pinned between the two reads: that thread saw Detaching and waits for us
    link.store(int(Link::Attached));
    return false;
  }
  return true;
}

// A graph is about to be made or launched: pins. True when a finalize had begun (the caller waits until
// `link` leaves Detaching: the graph is then made detached).
inline bool pin_attached(std::atomic<bool>& pinned, const std::atomic<int>& link) {
  pinned.store(true);
  const int l = link.load();
  return l == int(Link::Detaching) || l == int(Link::Detached);
}

}  // namespace stepscope::collector::cupti
