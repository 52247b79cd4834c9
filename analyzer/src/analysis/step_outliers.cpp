#include "stepscope/analyzer/step_outliers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "analysis/host_activity.h"
#include "analysis/names.h"
#include "format/units.h"
#include "stepscope/analyzer/collector_threads.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer {

const std::vector<StepCategory>& step_categories() {
  static const std::vector<StepCategory> categories = {
      {"gpu_busy", "GPU busy", &StepBreakdown::gpu_busy_ns, "kernel,copy"},
      {"data_wait", "data wait", &StepBreakdown::data_wait_ns, "wait,function,op"},
      {"launch_idle", "launch idle", &StepBreakdown::launch_idle_ns, "op,call,function"},
      {"host_idle", "host code between launches", &StepBreakdown::host_idle_ns, "op,function,call"},
      {"sync_idle", "sync idle", &StepBreakdown::sync_idle_ns, "sync,call,op,function"},
      {"other_idle", "other idle", &StepBreakdown::other_idle_ns, "op,function,call"},
      {"profiler", "profiler's own cost", &StepBreakdown::profiler_ns, "call"},
  };
  return categories;
}

const StepCategory* find_step_category(const std::string& key) {
  for (const auto& c : step_categories())
    if (key == c.key) return &c;
  return nullptr;
}

const char* step_category_label(const StepCategory& c, bool has_gpu) {
  // Without device activity a step is only its wait for input and the training thread's own work: every view
  // (text, Markdown, HTML, the GUI) says so in these words.
  if (!has_gpu && std::string_view(c.key) == "host_idle") return "the training thread's own work";
  if (!has_gpu && std::string_view(c.key) == "data_wait") return "waiting for input";
  return c.label;
}

int64_t median_of_steps(std::vector<int64_t> values) { return detail::median(std::move(values)); }

namespace {

// WaitSource: a data_waits row, by its source; Wait: a data-loader range, by its name. Both read "wait".
// A range within this share of the step's duration (at least 1 µs) of both ends of a step window is that
// step's marker (steps found from API calls start a little before the user's "step" range).
constexpr double kMarkerSlackShare = 0.01;

// OtherFunction: a function sampled in a process other than the training thread's (a DataLoader worker).
enum class Kind : uint8_t { Kernel, Copy, Wait, Op, Call, Sync, Function, WaitSource, OtherFunction };
constexpr const char* kKindNames[] = {"kernel", "copy", "wait", "op", "call", "sync", "function", "wait", "function"};

// A contributor: its kind and an id within the kind (a string id, a copy kind, a frame id).
using Key = uint64_t;
Key key_of(Kind k, int64_t id) { return (uint64_t(k) << 56) | (uint64_t(id) & ((uint64_t(1) << 56) - 1)); }
Kind kind_of(Key k) { return Kind(k >> 56); }
int64_t id_of(Key k) { return int64_t(k & ((uint64_t(1) << 56) - 1)); }

// Time per contributor inside each step: GPU work by its overlap with each step, host events in the step their
// start falls in, clipped to it (add()).
class StepContributions {
 public:
  StepContributions(const store::Trace& t, const std::vector<StepBreakdown>& steps, int64_t training_pid,
                    int64_t training_tid)
      : t_(t), steps_(steps), per_step_(steps.size()), training_pid_(training_pid), training_tid_(training_tid) {
    for (const auto& s : steps) starts_.push_back(s.start_ns);
    for (const auto& k : t.kernels) add(Kind::Kernel, k.name, k.start, k.end);
    for (const auto& m : t.memcpys) add(Kind::Copy, int64_t(m.kind), m.start, m.end);
    for (const auto& w : t.data_waits) add(Kind::WaitSource, w.source, w.start, w.end);
    for (const auto& a : t.api_calls) add(Kind::Call, a.name, a.start, a.end);
    for (const auto& s : t.syncs) add(Kind::Sync, int64_t(s.type), s.start, s.end);
    add_ranges();
    add_samples();
  }

  int64_t value(size_t step, Key k) const {
    auto it = per_step_[step].find(k);
    return it == per_step_[step].end() ? 0 : it->second;
  }
  const std::unordered_map<Key, int64_t>& of(size_t step) const { return per_step_[step]; }
  // The training thread's on-CPU time inside each step (its on-CPU samples' periods, clipped to the step);
  // empty when the thread or the samples are unknown. A step's duration minus it is time the thread was not
  // running: preempted on a busy machine, or blocked (host_activity.cpp counts the same way).
  const std::vector<int64_t>& training_on_cpu() const { return training_on_cpu_; }
  bool has_wall_samples() const { return wall_; }
  // A sampled function's time is known to a sampling period: 50 samples at 100 Hz in a 502 ms step read 500
  // ms.
  int64_t sample_period_ns() const { return sample_period_ns_; }
  int64_t median(Key k) {
    auto it = medians_.find(k);
    if (it != medians_.end()) return it->second;
    std::vector<int64_t> v(steps_.size());
    for (size_t i = 0; i < steps_.size(); ++i) v[i] = value(i, k);
    return medians_[k] = median_of_steps(std::move(v));
  }
  std::string name(Key k) const {
    const int64_t id = id_of(k);
    switch (kind_of(k)) {
      case Kind::Copy: return std::string("Memcpy ") + store::to_string(store::CopyKind(id));
      case Kind::Sync: return std::string("sync (") + store::to_string(store::SyncType(id)) + ")";
      case Kind::WaitSource: {
        // Reads "wait in the DataLoader's __next__"; the sources are the collector's (docs/schema.md).
        const std::string s = t_.str(store::StringId(id));
        if (s.empty()) return "of unknown source";
        if (s == "dataloader") return "in the DataLoader's __next__";
        if (s == "tf.data") return "in tf.data's next batch";
        if (s == "api") return "marked by stepscope_data_wait_begin/end";
        if (s == "nvtx") return "in an NVTX data range";
        if (s == "python" || s == "data-wait-func") return "in the --data-wait-func function";
        return "from " + s;
      }
      case Kind::Function:
      case Kind::OtherFunction: {
        std::string n = id >= 0 && size_t(id) < names_.size() ? names_[size_t(id)] : std::string("[unknown]");
        return kind_of(k) == Kind::OtherFunction ? n + " [another process]" : n;
      }
      default: return t_.str(store::StringId(id));
    }
  }

 private:
  int step_at(int64_t ts) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), ts);
    if (it == starts_.begin()) return -1;
    const size_t i = size_t(it - starts_.begin()) - 1;
    return ts < steps_[i].start_ns + steps_[i].dur_ns ? int(i) : -1;
  }
  // Calls fn(step, overlap) for each step [start, end) overlaps.
  template <typename Fn>
  void for_each_step_in(int64_t start, int64_t end, Fn&& fn) const {
    auto it = std::upper_bound(starts_.begin(), starts_.end(), start);
    for (size_t i = it == starts_.begin() ? 0 : size_t(it - starts_.begin()) - 1; i < steps_.size() && steps_[i].start_ns < end;
         ++i) {
      const int64_t d = std::min(end, steps_[i].start_ns + steps_[i].dur_ns) - std::max(start, steps_[i].start_ns);
      if (d > 0) fn(i, d);
    }
  }
  // GPU work counts in every step it runs in (a kernel crossing a boundary ran in both). Host events count in the
  // step their start falls in, clipped to it: spread over the steps, a range or a thread present throughout (an
  // NVTX capture range over 9 steps, a pool's always-running worker) grows with every step by exactly its excess
  // and was named the biggest contributor of each slow step.
  void add(Kind kind, int64_t id, int64_t start, int64_t end) {
    if (kind == Kind::Kernel || kind == Kind::Copy) {
      for_each_step_in(start, end, [&](size_t i, int64_t d) { per_step_[i][key_of(kind, id)] += d; });
      return;
    }
    const int s = step_at(start);
    if (s < 0) return;
    const int64_t d = std::min(end, steps_[s].start_ns + steps_[s].dur_ns) - start;
    if (d > 0) per_step_[size_t(s)][key_of(kind, id)] += d;
  }
  // Host ranges by exclusive time (a parent's own time, not its children's), so an enclosing op does not grow
  // with everything inside it. Step markers are the step itself; data-loader ranges are waits.
  void add_ranges() {
    // Step markers: ranges that are the step window itself (ProfilerStep#N, a user's "step" NVTX range).
    std::unordered_map<store::StringId, bool> marker;
    for (const auto& r : t_.ranges) {
      const int s = step_at(r.start);
      if (s < 0) continue;
      const int64_t slack = std::max<int64_t>(1000, int64_t(kMarkerSlackShare * double(steps_[s].dur_ns)));
      if (r.start - steps_[s].start_ns <= slack && std::llabs(r.end - (steps_[s].start_ns + steps_[s].dur_ns)) <= slack)
        marker[r.name] = true;
    }
    std::vector<uint32_t> rs;
    for (uint32_t i = 0; i < t_.ranges.size(); ++i) {
      const auto& r = t_.ranges[i];
      if (r.source == store::RangeSource::GpuAnnotation || marker.count(r.name)) continue;
      const std::string& n = t_.str(r.name);
      if (detail::is_profiler_step_range(n)) continue;
      if (detail::is_data_wait_range(n)) {
        add(Kind::Wait, r.name, r.start, r.end);
        continue;
      }
      rs.push_back(i);
    }
    std::sort(rs.begin(), rs.end(), [&](uint32_t x, uint32_t y) {
      const auto &p = t_.ranges[x], &q = t_.ranges[y];
      if (p.pid != q.pid || p.tid != q.tid) return std::make_pair(p.pid, p.tid) < std::make_pair(q.pid, q.tid);
      return p.start != q.start ? p.start < q.start : p.end > q.end;
    });
    std::vector<int64_t> self(rs.size());
    std::vector<size_t> stack;
    for (size_t k = 0; k < rs.size(); ++k) {
      const auto& r = t_.ranges[rs[k]];
      self[k] = std::max<int64_t>(0, r.end - r.start);
      if (k > 0 && (t_.ranges[rs[k - 1]].pid != r.pid || t_.ranges[rs[k - 1]].tid != r.tid)) stack.clear();
      while (!stack.empty() && t_.ranges[rs[stack.back()]].end <= r.start) stack.pop_back();
      if (!stack.empty()) {
        const auto& parent = t_.ranges[rs[stack.back()]];
        self[stack.back()] -= std::max<int64_t>(0, std::min(r.end, parent.end) - r.start);
      }
      stack.push_back(k);
    }
    for (size_t k = 0; k < rs.size(); ++k) {
      const auto& r = t_.ranges[rs[k]];
      add(Kind::Op, r.name, r.start, r.start + std::max<int64_t>(0, self[k]));
    }
  }
  // CPU samples named as the host activity names them (detail::SampleNamer: the innermost Python frame, else
  // the innermost symbolized native frame; libc, unsymbolized addresses and the profiler's frames fold into
  // their caller), each worth its sampling periods (one, or more when a POSIX timer merged expiries) ending
  // at it.
  void add_samples() {
    if (t_.samples.empty()) return;
    detail::SampleNamer namer(t_);
    std::unordered_map<std::string, int64_t> ids;  // display name → index into names_
    // One sampling period, as the host activity counts it (detail::sample_period_ns): a sample stands for the
    // period of its thread's time that ended at it.
    const int64_t p = detail::sample_period_ns(t_);
    if (p <= 0) return;
    sample_period_ns_ = p;
    // The profiler's own work is not what made a step slow: skip stepscope's threads (v2 stores mark them) and
    // stacks that are only the profiler's (the namer gives them no name).
    const CollectorThreads own(t_);
    for (const auto& s : t_.samples) {
      if (own.contains(s)) continue;
      wall_ |= !s.on_cpu;
      if (s.on_cpu && training_tid_ != 0 && s.tid == training_tid_ &&
          (training_pid_ == 0 || s.pid == training_pid_)) {
        // The training thread's time on CPU: a sample's period in every step it covers (a 12 ms step whose thread
        // ran 0.8 ms, sampled once only after the boundary, read as off CPU the whole step).
        for_each_step_in(s.time - p * s.periods, s.time, [&](size_t i, int64_t d) {
          if (training_on_cpu_.empty()) training_on_cpu_.assign(steps_.size(), 0);
          training_on_cpu_[i] += d;
        });
      }
      if (!s.stack) continue;
      // Wall-clock samples of a thread blocked off the CPU (a pool's idle worker, a helper waiting for work) are
      // no work the step did; the training thread's are (the step itself waiting).
      if (!s.on_cpu && training_tid_ != 0 && s.tid != training_tid_) continue;
      const std::string& sampled_name = namer.name(s.stack);
      if (sampled_name.empty()) continue;
      const bool other = training_pid_ != 0 && s.pid != training_pid_;
      // Another thread of the training process (an OpenBLAS worker) is said to be one: "the training thread
      // was not running …; on CPU, the biggest contributor: function blas_thread_server" read as its own
      // work.
      const bool other_thread = !other && training_tid_ != 0 && s.tid != training_tid_;
      const std::string name = other_thread ? sampled_name + " [another thread]" : sampled_name;
      auto [it, fresh] = ids.try_emplace(name, int64_t(names_.size()));
      if (fresh) names_.push_back(name);
      add(other ? Kind::OtherFunction : Kind::Function, it->second, s.time - p * s.periods, s.time);
    }
  }

  const store::Trace& t_;
  const std::vector<StepBreakdown>& steps_;
  std::vector<int64_t> starts_;
  std::vector<std::unordered_map<Key, int64_t>> per_step_;
  std::unordered_map<Key, int64_t> medians_;
  std::vector<std::string> names_;  // sampled functions' display names (Kind::Function ids)
  int64_t training_pid_ = 0, training_tid_ = 0;
  int64_t sample_period_ns_ = 0;  // the samples' period (0: no samples), the resolution of a function's time
  std::vector<int64_t> training_on_cpu_;
  bool wall_ = false;  // off-CPU samples (`record --wall`): blocked time has functions of its own
};

bool allows(const StepCategory& c, Kind k) {
  const std::string list = std::string(",") + c.contributors + ",";
  return list.find(std::string(",") + kKindNames[int(k)] + ",") != std::string::npos;
}

std::string ms(int64_t ns) { return units::format_us(double(ns) / 1e3); }

// Driver calls that do one-time work: a step they make slow is slow once, at start-up or on first use of a
// module (lazy loading), not every step.
const char* one_time_call(std::string_view name) {
  for (std::string_view p : {"cuLibraryLoad", "cuModuleLoad", "cudaLibraryLoad"})
    if (name.substr(0, p.size()) == p) return "CUDA loading its modules, once";
  for (std::string_view p : {"cuCtxCreate", "cuDevicePrimaryCtxRetain", "cuInit"})
    if (name.substr(0, p.size()) == p) return "CUDA creating its context, once";
  return nullptr;
}

}  // namespace

std::string contributor_display_name(const SlowStep& s) {
  // Kernels and native functions are C++ symbols; waits, ops, calls and Python lines are shown as recorded. A
  // function's " [another thread]" / " [another process]" stays beside its folded name.
  if (s.contributor_kind != "kernel" && s.contributor_kind != "function") return s.contributor;
  for (const std::string_view tag :
       {std::string_view(" [another thread]"), std::string_view(" [another process]")})
    if (s.contributor.size() > tag.size() &&
        s.contributor.compare(s.contributor.size() - tag.size(), tag.size(), tag) == 0)
      return short_symbol(std::string_view(s.contributor).substr(0, s.contributor.size() - tag.size())) +
             std::string(tag);
  return short_symbol(s.contributor);
}

StepOutliers explain_slow_steps(const store::Trace& trace, const std::vector<StepBreakdown>& steps, int64_t training_pid,
                                int64_t training_tid) {
  StepOutliers out;
  if (steps.size() < kSlowStepMinSteps) return out;
  std::vector<int64_t> durs;
  for (const auto& s : steps) durs.push_back(s.dur_ns);
  out.median_ns = median_of_steps(durs);
  std::vector<int64_t> dev;
  for (int64_t d : durs) dev.push_back(std::llabs(d - out.median_ns));
  out.noise_ns = int64_t(std::llround(1.4826 * double(median_of_steps(dev))));
  out.threshold_ns = std::max(int64_t(std::llround(kSlowStepNoiseSigmas * double(out.noise_ns))),
                              int64_t(std::llround(kSlowStepMinShare * double(out.median_ns))));
  std::vector<size_t> slow;
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i].dur_ns - out.median_ns > out.threshold_ns) slow.push_back(i);
  out.slow_count = int64_t(slow.size());
  if (slow.empty()) return out;
  std::stable_sort(slow.begin(), slow.end(), [&](size_t a, size_t b) { return steps[a].dur_ns > steps[b].dur_ns; });
  if (slow.size() > kSlowStepsExplained) slow.resize(kSlowStepsExplained);

  const auto& cats = step_categories();
  std::vector<int64_t> cat_median;
  for (const auto& c : cats) {
    std::vector<int64_t> v;
    for (const auto& s : steps) v.push_back(s.*(c.field));
    cat_median.push_back(median_of_steps(std::move(v)));
  }
  StepContributions contrib(trace, steps, training_pid, training_tid);
  const bool has_gpu = trace.gpu_event_count() > 0;
  // The training thread's time off CPU in each step, and in the median step (empty: not measured).
  std::vector<int64_t> off_cpu;
  for (size_t i = 0; i < contrib.training_on_cpu().size(); ++i)
    off_cpu.push_back(std::max<int64_t>(0, steps[i].dur_ns - contrib.training_on_cpu()[i]));
  const int64_t off_cpu_median = median_of_steps(off_cpu);
  for (size_t i : slow) {
    const StepBreakdown& s = steps[i];
    SlowStep r;
    r.index = s.index;
    r.start_ns = s.start_ns;
    r.dur_ns = s.dur_ns;
    r.excess_ns = s.dur_ns - out.median_ns;
    size_t best = 0;
    int64_t best_growth = INT64_MIN;
    for (size_t c = 0; c < cats.size(); ++c) {
      const int64_t g = s.*(cats[c].field) - cat_median[c];
      if (g > best_growth) best_growth = g, best = c;
    }
    const StepCategory& cat = cats[best];
    // No category grew (a step outside the GPU windows has no breakdown): none is named, never "+0 µs".
    const bool grew = best_growth > 0;
    if (grew) {
      r.category = cat.key;
      r.category_ns = s.*(cat.field);
      r.category_median_ns = cat_median[best];
    }
    Key top = 0;
    int64_t top_growth = 0;
    // The training thread's process first; another process's function (a DataLoader worker) only when nothing in
    // the training process grew.
    for (int pass = 0; pass < 2 && top_growth == 0 && grew; ++pass) {
      for (const auto& [k, v] : contrib.of(i)) {
        if (!allows(cat, kind_of(k)) || (kind_of(k) == Kind::OtherFunction) != (pass == 1)) continue;
        if (v - 0 <= top_growth) continue;  // cannot beat the best even against a zero median
        const int64_t g = v - contrib.median(k);
        // Samples of several threads (or processes) add up past wall time: a contributor that grew more than
        // both the step's excess and its category explains something else. A sampled function may pass them
        // by one period, its resolution: a 500 ms sleep in a 502 ms step, 499 ms over the median, read 500 ms
        // at 100 Hz and was passed over for a 2 ms function (the flight test, 2 of 8 runs on a loaded
        // machine).
        const bool sampled = kind_of(k) == Kind::Function || kind_of(k) == Kind::OtherFunction;
        const int64_t resolution = sampled ? contrib.sample_period_ns() : 0;
        if (g > std::max(r.excess_ns, r.category_ns - r.category_median_ns) + resolution) continue;
        if (g > top_growth || (g == top_growth && k < top)) top_growth = g, top = k;
      }
    }
    // Below a microsecond a contributor reads "+0 µs": it explains nothing.
    if (top_growth >= 1000) {
      r.contributor_kind = kKindNames[int(kind_of(top))];
      r.contributor = contrib.name(top);
      r.contributor_ns = contrib.value(i, top);
      r.contributor_median_ns = contrib.median(top);
    }
    const char* once = r.contributor_kind == "call" ? one_time_call(r.contributor) : nullptr;
    r.startup = s.warmup || (once && r.contributor_ns - r.contributor_median_ns >= r.excess_ns / 2);
    if (!off_cpu.empty()) r.off_cpu_ns = off_cpu[i], r.off_cpu_median_ns = off_cpu_median;
    // What the named contributor explains; when it is less than half the excess and the training thread's
    // time off CPU grew by at least half of it, the step was slow because the thread was not running
    // (preempted on a busy machine, or blocked where on-CPU samples cannot see), not because any code took
    // longer.
    // Only where the step grew in time the thread should have been running: a step that grew in GPU work, a
    // sync or a data wait has the thread off CPU by design (waiting for the device or the batch), and that wait
    // is the explanation (a GPU-bound step was said "not running", with a host-to-device copy "on CPU").
    const std::string_view grown = grew ? cat.key : "";
    const bool host_side = grown != "gpu_busy" && grown != "sync_idle" && grown != "data_wait";  // or none grew
    const int64_t explained = r.contributor.empty() ? 0 : r.contributor_ns - r.contributor_median_ns;
    r.not_running = host_side && !r.startup && r.off_cpu_ns >= 0 && 2 * explained < r.excess_ns &&
                    2 * (r.off_cpu_ns - r.off_cpu_median_ns) >= r.excess_ns;
    r.explanation = fmt::format("step {} took {}, {} over the median step ({})", s.index, ms(s.dur_ns),
                                ms(r.excess_ns), ms(out.median_ns));
    if (r.startup) r.explanation += ": start-up (a one-time cost, not the loop's)";
    if (grew)
      r.explanation +=
          fmt::format(": {} {} vs {} (+{})", step_category_label(cat, has_gpu), ms(r.category_ns),
                      ms(r.category_median_ns), ms(r.category_ns - r.category_median_ns));
    if (r.not_running)
      r.explanation += fmt::format(
          "; the training thread was not running (preempted or blocked{}): off CPU {} vs {} (+{})",
          contrib.has_wall_samples() ? "" : "; `record --wall` shows where", ms(r.off_cpu_ns),
          ms(r.off_cpu_median_ns), ms(r.off_cpu_ns - r.off_cpu_median_ns));
    if (!r.contributor.empty())
      r.explanation += fmt::format(
          "; {}biggest contributor: {} {}{} {} vs {} (+{})", r.not_running ? "on CPU, the " : "",
          r.contributor_kind, contributor_display_name(r), once ? fmt::format(" ({})", once) : "",
          ms(r.contributor_ns), ms(r.contributor_median_ns), ms(r.contributor_ns - r.contributor_median_ns));
    out.slow.push_back(std::move(r));
  }
  return out;
}


}  // namespace stepscope::analyzer
