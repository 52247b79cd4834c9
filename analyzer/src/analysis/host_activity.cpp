#include "analysis/host_activity.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "analysis/names.h"
#include "stepscope/analyzer/collector_threads.h"
#include "stepscope/analyzer/display_names.h"

namespace stepscope::analyzer::detail {

namespace {

int64_t thread_key(int64_t pid, int64_t tid) { return (pid << 32) ^ tid; }

std::string meta_or(const store::Trace& t, const char* key) {
  auto it = t.meta.find(key);
  return it == t.meta.end() ? std::string() : it->second;
}

using FunctionKey = std::pair<std::string, bool>;  // (name, on_cpu)

// Fills each listed function's inclusive time, then lists after them the callers that own much of the time
// with little or none of their own (hot_loop's descend): at most kMoreCallers, each holding at least a tenth
// of the thread's time on (or off) CPU, the largest first; entry points (`_start`, `main`, `<module>`) left out.
void add_inclusive(HostActivity& out, const std::map<FunctionKey, HostFunctionStat>& by,
                   const std::map<FunctionKey, int64_t>& inclusive, size_t top) {
  constexpr size_t kMoreCallers = 5;
  std::set<FunctionKey> listed;
  for (auto& f : out.functions) {
    auto it = inclusive.find({f.name, f.on_cpu});
    f.inclusive_ns = it == inclusive.end() ? f.time_ns : std::max(it->second, f.time_ns);
    listed.insert({f.name, f.on_cpu});
  }
  // Entry points own every sample of their thread and say nothing about where the time went.
  auto entry_point = [](const std::string& name) {
    for (const char* e : {"_start", "main", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
                          "clone3", "thread_start"})
      if (name == e || name.rfind(std::string(e) + "@", 0) == 0) return true;
    return name.rfind("<module> (", 0) == 0;
  };
  std::vector<HostFunctionStat> more;
  for (const auto& [k, ns] : inclusive) {
    const int64_t whole = k.second ? out.on_cpu_ns : out.off_cpu_ns;
    if (listed.count(k) || whole <= 0 || ns * 10 < whole || entry_point(k.first)) continue;
    auto b = by.find(k);
    HostFunctionStat f = b == by.end() ? HostFunctionStat{} : b->second;
    f.name = k.first, f.on_cpu = k.second, f.inclusive_ns = ns;
    more.push_back(std::move(f));
  }
  std::sort(more.begin(), more.end(), [](const auto& x, const auto& y) {
    return x.inclusive_ns > y.inclusive_ns || (x.inclusive_ns == y.inclusive_ns && x.name < y.name);
  });
  if (more.size() > std::min(top, kMoreCallers)) more.resize(std::min(top, kMoreCallers));
  for (auto& f : more) out.functions.push_back(std::move(f));
}

}  // namespace

int64_t sample_period_ns(const store::Trace& t, std::string* source) {
  if (t.samples.empty()) return 0;
  const std::string timer = meta_or(t, "collector.timer"), mode = meta_or(t, "collector.mode");
  // Rates outside what the collector accepts are not believed (a period must fit int64 and be non-zero).
  double hz = std::atof(meta_or(t, "collector.cpu_hz").c_str());
  if (!(hz >= 1 && hz <= 1e6)) hz = 0;
  // perf_event task-clock fires after each period of the thread's own CPU time, a CLOCK_MONOTONIC timer
  // (--wall) after each period of wall time. The CPU-clock fallback fires on the scheduler tick whatever is
  // asked; where the collector counted the expiries it merged (collector.timer_overruns present: a sample
  // carries 1 + them as its periods), a period is the asked one there too.
  const bool counted_overruns = t.meta.count("collector.timer_overruns") > 0;
  if (hz > 0 && (timer.rfind("perf_event", 0) == 0 || mode == "wall" || counted_overruns)) {
    if (source) *source = "meta collector.cpu_hz (" + (mode == "wall" ? std::string("wall timer") : timer) + ")";
    return int64_t(1e9 / hz + 0.5);
  }
  std::unordered_map<int64_t, std::vector<int64_t>> times;
  for (const auto& s : t.samples) times[thread_key(s.pid, s.tid)].push_back(s.time);
  std::vector<int64_t> gaps;
  for (auto& [k, v] : times) {
    std::sort(v.begin(), v.end());
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[i - 1]) gaps.push_back(v[i] - v[i - 1]);
  }
  if (gaps.empty()) return 0;
  std::nth_element(gaps.begin(), gaps.begin() + int64_t(gaps.size() / 2), gaps.end());
  if (source) *source = "median sample spacing";
  return gaps[gaps.size() / 2];
}

ThreadKey training_thread(const Context& ctx, std::string* reason) {
  const store::Trace& t = ctx.t();
  if (t.samples.empty()) return {};
  const CollectorThreads collector(t);
  std::unordered_map<int64_t, int64_t> sampled;  // on-CPU samples per thread
  for (const auto& s : t.samples)
    if (!collector.contains(s)) sampled[thread_key(s.pid, s.tid)] += s.on_cpu;
  auto pick = [&](const std::map<std::pair<int64_t, int64_t>, int64_t>& weight, const char* why) -> ThreadKey {
    ThreadKey best;
    int64_t best_w = 0;
    for (const auto& [k, w] : weight)
      if (w > best_w && sampled.count(thread_key(k.first, k.second))) best = {k.first, k.second}, best_w = w;
    if (best_w > 0 && reason) *reason = why;
    return best;
  };
  // Step windows sit on the thread that marked them; CUPTI's own thread ids (0.1 stores) never match a sample.
  std::map<std::pair<int64_t, int64_t>, int64_t> by_steps, by_launches, by_samples;
  for (const auto& w : ctx.windows)
    if (w.tid != 0) by_steps[{w.pid, w.tid}] += w.end - w.start;
  if (auto k = pick(by_steps, "runs the steps"); k.tid) return k;
  for (size_t i = 0; i < t.api_calls.size(); ++i)
    if (i < ctx.api_op_count.size() && ctx.api_op_count[i]) by_launches[{t.api_calls[i].pid, t.api_calls[i].tid}]++;
  if (auto k = pick(by_launches, "launches GPU work"); k.tid) return k;
  // Without markers or launches, the thread that waited for its batches, then the one running the Python
  // code: by samples alone an OpenBLAS worker (blas_thread_server) out-sampled python_input_bound.py's main
  // thread.
  std::map<std::pair<int64_t, int64_t>, int64_t> by_waits, by_python;
  for (const auto& d : t.data_waits)
    if (ctx.windows.empty() || ctx.step_at(d.start) >= 0) by_waits[{d.pid, d.tid}] += d.end - d.start;
  if (auto k = pick(by_waits, "waits for the input"); k.tid) return k;
  std::unordered_map<int64_t, size_t> stack_row;
  for (size_t i = 0; i < t.stacks.size(); ++i) stack_row.emplace(t.stacks[i].id, i);
  std::unordered_set<int64_t> python_frames;
  for (const auto& f : t.frames)
    if (f.kind == store::FrameKind::Python) python_frames.insert(f.id);
  std::vector<int8_t> python_in(t.stacks.size(), -1);  // per stacks row: a Python frame at or above it
  auto has_python = [&](int64_t id) {
    std::vector<size_t> path;
    int8_t known = 0;
    for (auto it = stack_row.find(id); it != stack_row.end();
         it = stack_row.find(t.stacks[it->second].parent)) {
      const size_t row = it->second;
      if (python_in[row] >= 0) {
        known = python_in[row];
        break;
      }
      path.push_back(row);
      if (python_frames.count(t.stacks[row].frame)) {
        known = 1;
        break;
      }
    }
    // Everything below a Python frame has one above it; the path walked to a known node shares its answer.
    for (size_t row : path) python_in[row] = known;
    return known == 1;
  };
  // A DataLoader worker runs Python too, and in an input-bound run it is the busiest: never the training
  // thread.
  const std::set<int64_t> loader_pids = dataloader_worker_pids(t);
  for (const auto& s : t.samples)
    if (s.on_cpu && !collector.contains(s) && (ctx.windows.empty() || ctx.step_at(s.time) >= 0)) {
      by_samples[{s.pid, s.tid}]++;
      if (!loader_pids.count(s.pid) && has_python(s.stack)) by_python[{s.pid, s.tid}]++;
    }
  if (auto k = pick(by_python, "runs the Python code"); k.tid) return k;
  return pick(by_samples, "most samples in the steps");
}

template <class Rows>
SampleNamer::Positions::Positions(const Rows& rows) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& r : rows) lo = std::min(lo, r.id), hi = std::max(hi, r.id);
  if (!rows.empty() && lo >= 0 && hi < int64_t(2 * rows.size() + 1024) && rows.size() < size_t(INT32_MAX)) {
    dense_.assign(size_t(hi) + 1, -1);
    for (size_t i = 0; i < rows.size(); ++i) dense_[size_t(rows[i].id)] = int32_t(i);
  } else {
    for (size_t i = 0; i < rows.size(); ++i) sparse_[rows[i].id] = i;
  }
}

int64_t SampleNamer::Positions::find(int64_t id) const {
  if (!dense_.empty()) return id >= 0 && size_t(id) < dense_.size() ? dense_[size_t(id)] : -1;
  auto it = sparse_.find(id);
  return it == sparse_.end() ? -1 : int64_t(it->second);
}

SampleNamer::SampleNamer(const store::Trace& t)
    : t_(t), stack_pos_(t.stacks), frame_pos_(t.frames), frames_(t.frames.size()) {}

SampleNamer::Module SampleNamer::module_kind(store::StringId m) {
  auto it = modules_.find(m);
  if (it != modules_.end()) return it->second;
  std::string_view path = t_.str(m);
  const size_t slash = path.find_last_of('/');
  const std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  auto starts = [&](std::string_view p) { return base.substr(0, p.size()) == p; };
  Module k = Module::User;
  if (is_collector_module(base) || starts("libcupti"))
    k = Module::Profiler;
  else if (starts("libc.so") || starts("libc-") || starts("linux-vdso") || starts("linux-gate") || starts("ld-linux") ||
           starts("libpthread") || starts("libdl.so") || starts("librt.so") || base == "[vdso]")
    k = Module::System;
  return modules_.emplace(m, k).first->second;
}

// A symbolized frame; an address the symbolizer could not name (stored empty or as "module+0xoffset", a stripped
// library such as libcuda) folds into its named caller like the C library does.
bool SampleNamer::named(const store::Frame& f) const {
  const std::string& sym = t_.str(f.symbol);
  if (sym.empty()) return false;
  const size_t plus = sym.rfind("+0x");
  return plus == std::string::npos || sym.find_first_not_of("0123456789abcdef", plus + 3) != std::string::npos;
}

const SampleNamer::FrameFacts& SampleNamer::facts(size_t pos) {
  FrameFacts& x = frames_[pos];
  if (x.known) return x;
  const store::Frame& f = t_.frames[pos];
  x.known = true;
  if (f.kind == store::FrameKind::Python) {
    x.profiler_python = is_profiler_python_frame(t_, f);
    x.profiler_owned = is_profiler_owned_python_frame(t_, f);
  } else {
    x.module = module_kind(f.module);
    x.named = named(f);
  }
  x.display = intern(frame_display_name(t_, f, /*full=*/true));
  return x;
}

template <class Visit>
void SampleNamer::walk(int64_t stack, Visit&& visit) {
  for (int64_t id = stack, guard = 0; id != 0 && guard < 4096; ++guard) {
    const int64_t sp = stack_pos_.find(id);
    if (sp < 0) break;
    const auto& node = t_.stacks[size_t(sp)];
    id = node.parent;
    const int64_t fp = frame_pos_.find(node.frame);
    if (fp < 0) continue;
    if (!visit(t_.frames[size_t(fp)], facts(size_t(fp)))) return;
  }
}

uint32_t SampleNamer::name_id(int64_t stack) {
  auto [it, fresh] = names_.try_emplace(stack, 0);
  if (!fresh) return it->second;
  uint32_t& out = it->second;  // clang before 16 captures no structured binding in a lambda
  const FrameFacts *leaf = nullptr, *native = nullptr;
  bool profiler = false, done = false, owned = false;
  walk(stack, [&](const store::Frame&, const FrameFacts& f) {  // the collector's start-up anywhere: ours
    owned = f.profiler_owned;
    return !owned;
  });
  if (owned) return out;
  walk(stack, [&](const store::Frame& frame, const FrameFacts& f) {
    if (!leaf) leaf = &f;
    // The innermost Python frame is the line of the user's program; native frames name C/C++ programs' time.
    // The Python hooks' own frames (a --step-func trampoline, a DataLoader wrapper) are the profiler's.
    if (frame.kind == store::FrameKind::Python && f.profiler_python) {
      if (!native) {
        out = 0;
        done = true;
        return false;
      }
      return true;
    }
    if (frame.kind == store::FrameKind::Python) {
      out = f.display;
      done = true;
      return false;
    }
    if (f.module == Module::User && !native && f.named) native = &f;
    profiler |= f.module == Module::Profiler && !native;
    return true;
  });
  if (done) return out;
  // Only system and profiler frames below the first user frame: the profiler's own work is left out; a libc-only
  // stack keeps its leaf.
  if (native) out = native->display;
  else if (!profiler) out = leaf ? leaf->display : intern("[unknown]");
  return out;
}

const std::vector<uint32_t>& SampleNamer::inclusive_ids(int64_t stack) {
  if (auto it = inclusive_.find(stack); it != inclusive_.end()) return it->second;
  const uint32_t self = name_id(stack);
  std::vector<uint32_t>& out = inclusive_[stack];
  if (self == 0) return out;  // the profiler's own work: in neither column
  std::vector<uint32_t> python;
  walk(stack, [&](const store::Frame& frame, const FrameFacts& f) {
    if (frame.kind == store::FrameKind::Python) {
      if (!f.profiler_python) python.push_back(f.display);
    } else if (f.module == Module::User && f.named) {
      out.push_back(f.display);
    }
    return true;
  });
  if (!python.empty()) out = std::move(python);
  out.push_back(self);
  // Once per sample: a recursive function (hot_loop's descend, 30 deep) is on the stack many times.
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

HostActivity host_activity(const Context& ctx, const std::vector<Interval>& other, size_t top, std::string window) {
  const store::Trace& t = ctx.t();
  HostActivity out;
  out.window = std::move(window);
  for (const auto& i : other) out.window_ns += i.end - i.start;
  if (other.empty()) return out;
  // Time of [lo, hi) inside the window.
  auto overlap = [&](int64_t lo, int64_t hi) {
    int64_t sum = 0;
    auto it = std::upper_bound(other.begin(), other.end(), lo, [](int64_t x, const Interval& i) { return x < i.end; });
    for (; it != other.end() && it->start < hi; ++it) sum += std::min(hi, it->end) - std::max(lo, it->start);
    return sum;
  };
  std::map<FunctionKey, HostFunctionStat> by;
  std::map<FunctionKey, int64_t> inclusive;  // samples' time with the function on the stack
  if (!t.samples.empty()) {
    out.source = "samples";
    out.sample_period_ns = ctx.sample_period_ns, out.period_source = ctx.sample_period_source;
    const ThreadKey main{ctx.training_pid, ctx.training_tid};
    out.pid = main.pid, out.tid = main.tid, out.thread_reason = ctx.training_reason;
    std::unordered_map<int64_t, std::string> thread_names;
    for (const auto& th : t.threads) thread_names[thread_key(th.pid, th.tid)] = t.str(th.name);
    out.thread_name = thread_names[thread_key(main.pid, main.tid)];
    const CollectorThreads collector_threads(t);
    SampleNamer namer(t);
    // Summed by interned name, named once at the end: a 5 kHz recording of `import torch` has 35,000 samples
    // of ~30 functions each.
    const uint32_t unknown = namer.intern("[unknown]");
    auto key_of = [](uint32_t name, bool on_cpu) { return uint64_t(name) << 1 | uint64_t(on_cpu); };
    std::unordered_map<uint64_t, HostFunctionStat> by_id;
    std::unordered_map<uint64_t, int64_t> inclusive_by_id;
    // A sample stands for the period of the thread's time that ended at it: (t - period, t], cut at the
    // thread's previous sample; periods of them when its timer merged expiries while the thread waited for a
    // core (--wall on a busy machine: 1,175 of 3,000 expiries in 3 s beside three busy loops). Only its part
    // inside the window counts, so a window of many gaps shorter than the period (a launch-bound GPU run)
    // gets the part of each sample's period it covers, never a whole period per sample, and one thread's time
    // never exceeds the window.
    std::map<std::pair<int64_t, int64_t>, std::vector<const store::Sample*>> by_thread;
    for (const auto& s : t.samples) {
      out.wall |= !s.on_cpu;
      if (!collector_threads.contains(s)) by_thread[{s.pid, s.tid}].push_back(&s);
    }
    const int64_t period = out.sample_period_ns;
    int64_t on = 0, off = 0;
    for (auto& [key, samples] : by_thread) {
      std::sort(samples.begin(), samples.end(), [](const store::Sample* a, const store::Sample* b) { return a->time < b->time; });
      const bool training = key.first == main.pid && key.second == main.tid;
      HostThreadStat o;
      int64_t prev = INT64_MIN;
      for (const store::Sample* s : samples) {
        const int64_t lo = std::max(s->time - period * s->periods, prev), hi = s->time;
        prev = s->time;
        const int64_t in = hi > lo ? overlap(lo, hi) : 0;
        if (in <= 0) continue;
        if (!training) {
          if (s->on_cpu) o.samples++, o.on_cpu_ns += in;
          continue;
        }
        const uint32_t name = s->stack ? namer.name_id(s->stack) : unknown;
        if (name == 0) continue;  // the profiler's own frames
        auto& f = by_id[key_of(name, s->on_cpu)];
        f.samples++;
        f.periods += s->periods;
        f.time_ns += in;
        (s->on_cpu ? on : off) += in;
        if (!s->stack)
          inclusive_by_id[key_of(name, s->on_cpu)] += in;
        else
          for (const uint32_t n : namer.inclusive_ids(s->stack)) inclusive_by_id[key_of(n, s->on_cpu)] += in;
      }
      if (!training && o.samples) {
        o.pid = key.first, o.tid = key.second;
        o.name = thread_names[thread_key(o.pid, o.tid)];
        o.other_process = main.tid != 0 && o.pid != main.pid;
        out.other_threads.push_back(std::move(o));
      }
    }
    for (auto& [k, f] : by_id) by.emplace(FunctionKey{namer.text(uint32_t(k >> 1)), bool(k & 1)}, f);
    for (const auto& [k, ns] : inclusive_by_id) inclusive.emplace(FunctionKey{namer.text(uint32_t(k >> 1)), bool(k & 1)}, ns);
    out.on_cpu_ns = on;
    // No thread ran the steps on CPU in the window: nothing is the training thread's, nothing inferred for it.
    out.off_cpu_ns = main.tid == 0 ? 0 : out.wall ? off : std::max<int64_t>(0, out.window_ns - out.on_cpu_ns);
    for (auto& [k, f] : by) f.name = k.first, f.on_cpu = k.second;
    std::sort(out.other_threads.begin(), out.other_threads.end(), [](const HostThreadStat& x, const HostThreadStat& y) {
      return x.on_cpu_ns > y.on_cpu_ns ||
             (x.on_cpu_ns == y.on_cpu_ns && std::make_pair(x.pid, x.tid) < std::make_pair(y.pid, y.tid));
    });
    if (out.other_threads.size() > top) out.other_threads.resize(top);
  } else {
    // Threads that drive the GPU: those with launch calls (or the step thread).
    std::unordered_map<int64_t, bool> launching;  // key: thread_key(pid, tid)
    for (size_t i = 0; i < t.api_calls.size(); ++i)
      if (ctx.api_op_count[i]) launching[thread_key(t.api_calls[i].pid, t.api_calls[i].tid)] = true;
    for (const auto& w : ctx.windows) launching[thread_key(w.pid, w.tid)] = true;
    std::vector<uint32_t> rs;
    for (uint32_t i = 0; i < t.ranges.size(); ++i) {
      const auto& r = t.ranges[i];
      if (r.source != store::RangeSource::GpuAnnotation && launching.count(thread_key(r.pid, r.tid))) rs.push_back(i);
    }
    auto thread_then_time = [&](uint32_t x, uint32_t y) {
      const auto &p = t.ranges[x], &q = t.ranges[y];
      if (p.pid != q.pid || p.tid != q.tid) return std::make_pair(p.pid, p.tid) < std::make_pair(q.pid, q.tid);
      return p.start < q.start || (p.start == q.start && p.end > q.end);
    };
    if (!std::is_sorted(rs.begin(), rs.end(), thread_then_time)) std::sort(rs.begin(), rs.end(), thread_then_time);
    // Exclusive time of each range: a stack sweep per thread.
    std::unordered_map<store::StringId, int64_t> excl;
    std::vector<uint32_t> stack;
    int64_t cursor = 0;
    auto emit = [&](uint32_t ri, int64_t s, int64_t e) {
      if (e <= s) return;
      auto it = std::upper_bound(other.begin(), other.end(), s, [](int64_t x, const Interval& i) { return x < i.end; });
      int64_t sum = 0;
      for (; it != other.end() && it->start < e; ++it) sum += std::min(e, it->end) - std::max(s, it->start);
      if (sum) excl[t.ranges[ri].name] += sum;
    };
    auto pop_until = [&](int64_t ts) {
      while (!stack.empty() && t.ranges[stack.back()].end <= ts) {
        emit(stack.back(), cursor, t.ranges[stack.back()].end);
        cursor = t.ranges[stack.back()].end;
        stack.pop_back();
      }
    };
    for (size_t i = 0; i < rs.size(); ++i) {
      const auto& r = t.ranges[rs[i]];
      if (i > 0 && (t.ranges[rs[i - 1]].pid != r.pid || t.ranges[rs[i - 1]].tid != r.tid)) {
        pop_until(INT64_MAX);
        stack.clear();
      }
      pop_until(r.start);
      if (!stack.empty()) emit(stack.back(), std::max(cursor, t.ranges[stack.back()].start), r.start);
      cursor = r.start;
      stack.push_back(rs[i]);
    }
    pop_until(INT64_MAX);
    for (auto& [n, ns] : excl) {
      auto name = strip_numeric_suffix(t.str(n));
      auto& s = by[{name, true}];
      s.name = name;
      s.time_ns += ns;
    }
    if (!by.empty()) out.source = "ranges";
  }
  auto& v = out.functions;
  for (auto& [n, s] : by) v.push_back(std::move(s));
  std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.time_ns > y.time_ns || (x.time_ns == y.time_ns && x.name < y.name); });
  if (v.size() > top) v.resize(top);
  if (!inclusive.empty()) add_inclusive(out, by, inclusive, top);
  return out;
}


}  // namespace stepscope::analyzer::detail
