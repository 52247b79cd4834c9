// Per-step breakdown: GPU busy union and the classification of every GPU idle instant into
// data wait / sync / launch / other (definitions in docs/analysis-json.md, "Breakdown").
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>

#include "analysis/context.h"
#include "analysis/names.h"
#include "stepscope/analyzer/correlation_index.h"

namespace stepscope::analyzer::detail {
namespace {

std::vector<Interval> union_of(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (i.end <= i.start) continue;
    if (!out.empty() && i.start <= out.back().end) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

// Overlap of [a, b) with a sorted disjoint list, starting the search at the first piece ending after a.
template <class V>
int64_t overlap(const V& pieces, int64_t a, int64_t b) {
  auto it = std::upper_bound(pieces.begin(), pieces.end(), a,
                             [](int64_t t, const auto& p) { return t < p.end; });
  int64_t sum = 0;
  for (; it != pieces.end() && it->start < b; ++it) sum += std::min(b, it->end) - std::max(a, it->start);
  return sum;
}

struct SyncPiece {
  int64_t start, end;
  int32_t cause;
};

// Disjoint pieces covering the union of blocking [start, tail_end); each piece names the innermost
// (latest-started) call active over it.
std::vector<SyncPiece> sync_pieces(const std::vector<BlockingCall>& b) {
  struct Ev {
    int64_t t;
    int32_t id;
    bool open;
  };
  std::vector<Ev> evs;
  evs.reserve(b.size() * 2);
  for (int32_t i = 0; i < int32_t(b.size()); ++i) {
    if (b[i].tail_end <= b[i].start) continue;
    evs.push_back({b[i].start, i, true});
    evs.push_back({b[i].tail_end, i, false});
  }
  std::sort(evs.begin(), evs.end(), [](const Ev& x, const Ev& y) { return x.t < y.t || (x.t == y.t && !x.open && y.open); });
  std::vector<SyncPiece> out;
  std::vector<int32_t> active;
  int64_t prev = 0;
  for (const auto& e : evs) {
    if (!active.empty() && e.t > prev) {
      int32_t cause = active.front();
      for (int32_t id : active)
        if (b[id].start > b[cause].start) cause = id;
      if (!out.empty() && out.back().end == prev && out.back().cause == cause) out.back().end = e.t;
      else out.push_back({prev, e.t, cause});
    }
    prev = e.t;
    if (e.open) active.push_back(e.id);
    else active.erase(std::find(active.begin(), active.end(), e.id));
  }
  return out;
}


// The profiler's per-launch cost for this trace: a recording's own calibration, else stepscope 0.1's measured cost
// for recordings of the collector with CUDA activity; other traces (torch.profiler, nsys) are not corrected.
ProfilerCorrection profiler_correction(const store::Trace& t) {
  ProfilerCorrection p;
  auto meta = [&](const char* k) -> const std::string* {
    auto it = t.meta.find(k);
    return it == t.meta.end() ? nullptr : &it->second;
  };
  if (t.kernels.empty()) {
    p.source = "no GPU activity";
    return p;
  }
  if (const std::string* v = meta("cupti.launch_cost_ns")) {
    char* end = nullptr;
    double ns = std::strtod(v->c_str(), &end);
    if (end != v->c_str() && ns >= 0 && ns < 1e6) {
      p.applied = true;
      p.cost_ns_per_launch = ns;
      p.source = "calibrated at record time (meta cupti.launch_cost_ns)";
      return p;
    }
  }
  const std::string* recorder = meta("recorder");
  const std::string* source = meta("source");
  const bool collector = (recorder && *recorder == "stepscope record") || (source && *source == "stepscope-collector");
  if (collector) {
    p.applied = true;
    p.cost_ns_per_launch = double(kDefaultProfilerLaunchCostNs);
    p.source = "default for stepscope's CUPTI tracing (measured on an H100: 3.0 µs per launch); the recording "
               "carries no calibration";
    return p;
  }
  p.source = "not corrected: the recorder's per-launch cost is unknown";
  return p;
}

// `gpu` when the GPU is busy kGpuBoundBusyShare of the step, else the largest idle cause; host-bound idle (launch +
// host) counts as one cause, labelled `launch` when most of it is per-op dispatch and `host` otherwise.


// Host idle assumes the launching thread was running host code. Where wall-clock samples (`record --wall`) show it
// off the CPU instead — blocked in something that is neither a sync nor a data wait (a lock, a sleep, I/O) — that
// share of the segment is not host compute: it becomes other idle.
void split_off_cpu_host_idle(Context& ctx) {
  const store::Trace& t = ctx.t();
  bool any_off = false;
  for (const auto& s : t.samples) any_off |= !s.on_cpu;
  if (!any_off) return;
  struct Timed {
    int64_t time;
    bool on_cpu;
    int64_t periods;
    bool operator<(const Timed& o) const { return time < o.time; }
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Timed>> by_thread;
  for (const auto& s : t.samples) by_thread[{s.pid, s.tid}].push_back({s.time, s.on_cpu, s.periods});
  for (auto& [k, v] : by_thread)
    if (!std::is_sorted(v.begin(), v.end())) std::stable_sort(v.begin(), v.end());
  std::vector<IdleSegment> out;
  out.reserve(ctx.idle.size());
  for (const auto& seg : ctx.idle) {
    if (seg.kind != IdleKind::Host || seg.api < 0) {
      out.push_back(seg);
      continue;
    }
    const auto& a = t.api_calls[seg.api];
    auto it = by_thread.find({a.pid, a.tid});
    int64_t on = 0, off = 0;
    if (it != by_thread.end())
      for (auto p = std::lower_bound(it->second.begin(), it->second.end(), Timed{seg.start, false, 0});
           p != it->second.end() && p->time < seg.end; ++p)
        (p->on_cpu ? on : off) += p->periods;
    if (off == 0) {
      out.push_back(seg);
      continue;
    }
    const int64_t split = seg.start + (seg.end - seg.start) * on / (on + off);
    if (split > seg.start) out.push_back({seg.start, split, IdleKind::Host, -1, seg.api, seg.dispatch, seg.gap});
    out.push_back({split, seg.end, IdleKind::Other, -1, -1, false, -1});
  }
  ctx.idle = std::move(out);
}

}  // namespace

Bound bound_of(const StepBreakdown& st, bool no_gpu, int64_t dispatch_idle) {
  if (no_gpu)
    return st.dur_ns > 0 && double(st.host_data_wait_ns) >= kHostInputBoundShare * double(st.dur_ns) ? Bound::Input
                                                                                                      : Bound::Host;
  const int64_t dur = st.dur_ns - st.profiler_ns;
  if (dur > 0 && double(st.gpu_busy_ns) >= kGpuBoundBusyShare * double(dur)) return Bound::Gpu;
  const int64_t host_bound = st.launch_idle_ns + st.host_idle_ns;
  const Bound hb = 2 * dispatch_idle >= host_bound ? Bound::Launch : Bound::Host;
  std::pair<int64_t, Bound> c[] = {{st.data_wait_ns, Bound::Input}, {st.sync_idle_ns, Bound::Sync},
                                   {host_bound, hb}, {st.other_idle_ns, Bound::Other}};
  return std::max_element(std::begin(c), std::end(c), [](auto& x, auto& y) { return x.first < y.first; })->second;
}

int64_t SavingsLedger::unclaimed(int64_t start, int64_t end) const {
  if (end <= start) return 0;
  return (end - start) - overlap(claimed_, start, end);
}

int64_t SavingsLedger::claim(int64_t start, int64_t end) {
  if (end <= start) return 0;
  const int64_t fresh = unclaimed(start, end);
  if (fresh == 0) return 0;
  // Merge [start, end) into the sorted disjoint list.
  auto lo = std::lower_bound(claimed_.begin(), claimed_.end(), start, [](const Interval& i, int64_t v) { return i.end < v; });
  auto hi = std::upper_bound(lo, claimed_.end(), end, [](int64_t v, const Interval& i) { return v < i.start; });
  Interval merged{start, end};
  if (lo != hi) merged.start = std::min(start, lo->start), merged.end = std::max(end, (hi - 1)->end);
  auto pos = claimed_.erase(lo, hi);
  claimed_.insert(pos, merged);
  return fresh;
}

int32_t Context::step_at(int64_t ts) const {
  auto it = std::upper_bound(windows.begin(), windows.end(), ts, [](int64_t t, const StepWindow& w) { return t < w.start; });
  if (it == windows.begin()) return -1;
  --it;
  return ts < it->end ? int32_t(it - windows.begin()) : -1;
}

std::vector<int64_t> enclosing_ranges(const store::Trace& t, int64_t pid, int64_t tid, int64_t start, int64_t end) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < int64_t(t.ranges.size()); ++i) {
    const auto& r = t.ranges[i];
    if (r.pid == pid && r.tid == tid && r.start <= start && r.end >= end && r.source != store::RangeSource::GpuAnnotation)
      out.push_back(i);
  }
  std::sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
    const auto &x = t.ranges[a], &y = t.ranges[b];
    return x.start < y.start || (x.start == y.start && (x.end > y.end || (x.end == y.end && x.depth < y.depth)));
  });
  return out;
}

std::vector<std::vector<int64_t>> enclosing_ranges_batch(const store::Trace& t, const std::vector<RangeQuery>& q) {
  std::vector<std::vector<int64_t>> out(q.size());
  if (q.empty()) return out;
  std::vector<uint32_t> order(q.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return q[a].start < q[b].start; });
  for (int64_t ri = 0; ri < int64_t(t.ranges.size()); ++ri) {
    const auto& r = t.ranges[ri];
    if (r.source == store::RangeSource::GpuAnnotation) continue;
    auto it = std::lower_bound(order.begin(), order.end(), r.start, [&](uint32_t i, int64_t v) { return q[i].start < v; });
    for (; it != order.end() && q[*it].start <= r.end; ++it) {
      const auto& x = q[*it];
      if (x.end <= r.end && x.pid == r.pid && x.tid == r.tid) out[*it].push_back(ri);
    }
  }
  for (auto& v : out)
    std::sort(v.begin(), v.end(), [&](int64_t a, int64_t b) {
      const auto &x = t.ranges[a], &y = t.ranges[b];
      return x.start < y.start || (x.start == y.start && (x.end > y.end || (x.end == y.end && x.depth < y.depth)));
    });
  return out;
}

namespace {

// GPU work, each op tied to its launch call.
void collect_gpu_ops(Context& ctx, const CorrelationIndex& apis) {
  const store::Trace& t = ctx.t();
  ctx.ops.clear();
  ctx.ops.reserve(t.gpu_event_count());
  ctx.api_op_count.assign(t.api_calls.size(), 0);
  if (t.api_calls.size() > size_t(std::numeric_limits<int32_t>::max()))
    throw std::length_error("more than 2,147,483,647 API calls: the analysis numbers them in 32 bits");
  auto add_op = [&](int64_t s, int64_t e, uint32_t i, GpuOpKind k, int64_t corr, int64_t pid) {
    GpuOp op{s, std::max(s, e), i, -1, int32_t(apis.find(corr, pid)), k};
    if (op.api >= 0) ctx.api_op_count[op.api]++;
    ctx.ops.push_back(op);
  };
  for (uint32_t i = 0; i < t.kernels.size(); ++i)
    add_op(t.kernels[i].start, t.kernels[i].end, i, GpuOpKind::Kernel, t.kernels[i].correlation, t.kernels[i].pid);
  for (uint32_t i = 0; i < t.memcpys.size(); ++i)
    add_op(t.memcpys[i].start, t.memcpys[i].end, i, GpuOpKind::Memcpy, t.memcpys[i].correlation, t.memcpys[i].pid);
  for (uint32_t i = 0; i < t.memsets.size(); ++i)
    add_op(t.memsets[i].start, t.memsets[i].end, i, GpuOpKind::Memset, t.memsets[i].correlation, t.memsets[i].pid);
  // Each table is usually in time order already: sort the three runs only if needed, then merge them.
  auto by_time = [](const GpuOp& a, const GpuOp& b) { return a.start < b.start || (a.start == b.start && a.end < b.end); };
  auto k_end = ctx.ops.begin() + int64_t(t.kernels.size());
  auto c_end = k_end + int64_t(t.memcpys.size());
  for (auto [b, e] : {std::pair{ctx.ops.begin(), k_end}, std::pair{k_end, c_end}, std::pair{c_end, ctx.ops.end()}})
    if (!std::is_sorted(b, e, by_time)) std::sort(b, e, by_time);
  std::inplace_merge(ctx.ops.begin(), k_end, c_end, by_time);
  std::inplace_merge(ctx.ops.begin(), c_end, ctx.ops.end(), by_time);
}

// Steps own the work they launched; work without a known launch belongs to the step it ran in.
void assign_steps(Context& ctx) {
  const store::Trace& t = ctx.t();
  ctx.steps.assign(ctx.windows.size(), {});
  // The recorder's numbers where it numbered the steps, one after the other: a flight save's window starts
  // mid-run, and its "step 732 took 504 ms" must be step 732 here too (it was 729, the position in the
  // window), as in the GUI's step rows. Anything else (found here, numbers missing or repeated) is numbered
  // by position.
  bool recorded = !ctx.windows.empty();
  for (size_t i = 0; recorded && i < ctx.windows.size(); ++i)
    recorded = ctx.windows[i].number >= 0 && (i == 0 || ctx.windows[i].number > ctx.windows[i - 1].number);
  for (size_t i = 0; i < ctx.windows.size(); ++i) {
    ctx.steps[i].index = recorded ? ctx.windows[i].number : int64_t(i);
    ctx.steps[i].start_ns = ctx.windows[i].start;
    ctx.steps[i].dur_ns = ctx.windows[i].end - ctx.windows[i].start;
  }
  // GPU windows: which steps had their CUDA activity traced.
  ctx.gpu_windows.clear();
  if (!t.gpu_windows.empty()) {
    std::vector<Interval> w;
    for (const auto& g : t.gpu_windows)
      if (g.end > g.start) w.push_back({g.start, g.end});
    ctx.gpu_windows = union_of(std::move(w));
    for (auto& st : ctx.steps)
      st.gpu_traced = st.dur_ns > 0 && double(overlap(ctx.gpu_windows, st.start_ns, st.start_ns + st.dur_ns)) >=
                                           kGpuWindowCoverage * double(st.dur_ns);
  }
  for (auto& op : ctx.ops) {
    op.step = ctx.step_at(op.api >= 0 ? t.api_calls[op.api].start : op.start);
    if (op.step >= 0 && op.kind == GpuOpKind::Kernel) ctx.steps[op.step].kernels++;
  }
}

// Busy union over all devices and streams; for each piece, the launch call of its first op.
std::vector<int64_t> busy_union(Context& ctx) {
  ctx.busy.clear();
  std::vector<int64_t> piece_api;  // trace.api_calls index of each piece's first op, or -1
  for (const auto& op : ctx.ops) {
    if (op.end <= op.start) continue;
    if (!ctx.busy.empty() && op.start <= ctx.busy.back().end) {
      ctx.busy.back().end = std::max(ctx.busy.back().end, op.end);
    } else {
      ctx.busy.push_back({op.start, op.end});
      piece_api.push_back(op.api);
    }
  }
  return piece_api;
}

// Host-side data waits: the data_waits table and data-loader ranges (importers may provide either). The
// same wait may be recorded twice (a `with stepscope.data_wait()` around a hooked DataLoader call, or a
// loader range and its data_waits row): waits are a union, never a sum. When the steps were driven by one
// thread, only that thread's waits count: another thread's (a prefetcher's) do not stall it — also when the
// step thread recorded none (counting them then called a trainer whose prefetch thread waited, and whose loop
// did not, input-bound). The collector records a wait on the thread that waits; a trace's ranges may put the
// framework's wait on its own threads (TensorFlow's IteratorGetNext on an executor thread while the Python
// thread blocks on it), so when the step thread has no wait of its own, its process's wait ranges count.
// Other threads' waits of the step thread's process, inside the steps' span, are counted apart
// (steps_advice).
void collect_data_waits(Context& ctx) {
  const store::Trace& t = ctx.t();
  bool one_thread = !ctx.windows.empty();
  for (const auto& w : ctx.windows)
    one_thread = one_thread && (w.pid || w.tid) && w.pid == ctx.windows.front().pid &&
                 w.tid == ctx.windows.front().tid;
  const int64_t spid = one_thread ? ctx.windows.front().pid : 0,
                stid = one_thread ? ctx.windows.front().tid : 0;
  std::vector<Interval> own, other_rows, other_ranges;  // without one step thread, every wait is `own`
  auto add = [&](std::vector<Interval>& other, int64_t s, int64_t e, int64_t pid, int64_t tid) {
    if (!one_thread || (pid == spid && tid == stid))
      own.push_back({s, e});
    else if (pid == spid)
      other.push_back({s, e});
  };
  for (const auto& d : t.data_waits) add(other_rows, d.start, d.end, d.pid, d.tid);
  std::unordered_map<store::StringId, bool> is_dw;
  for (const auto& r : t.ranges) {
    if (r.source == store::RangeSource::GpuAnnotation) continue;
    auto it = is_dw.find(r.name);
    if (it == is_dw.end()) it = is_dw.emplace(r.name, is_data_wait_range(t.str(r.name))).first;
    if (it->second) add(other_ranges, r.start, r.end, r.pid, r.tid);
  }
  if (own.empty()) own.swap(other_ranges);
  ctx.data_waits = union_of(std::move(own));
  other_rows.insert(other_rows.end(), other_ranges.begin(), other_ranges.end());
  ctx.other_thread_waits = ctx.other_thread_wait_ns = 0;
  if (ctx.windows.empty()) return;
  const int64_t first = ctx.windows.front().start, last = ctx.windows.back().end;
  for (const auto& w : union_of(std::move(other_rows))) {
    const int64_t s = std::max(w.start, first), e = std::min(w.end, last);
    if (e <= s) continue;
    ++ctx.other_thread_waits;
    ctx.other_thread_wait_ns += e - s;
  }
}

// Host calls that block on the device — syncs, blocking and pageable copies, blocking ops — each with the tail
// of GPU idle it may leave behind.
void collect_blocking_calls(Context& ctx, const CorrelationIndex& apis) {
  const store::Trace& t = ctx.t();
  ctx.blocking.clear();
  {
    std::unordered_map<store::StringId, int> api_class;  // 0 none, 1 sync api, 2 sync memcpy api
    std::vector<uint8_t> api_blocking(t.api_calls.size(), 0);
    for (int64_t i = 0; i < int64_t(t.api_calls.size()); ++i) {
      const auto& a = t.api_calls[i];
      auto it = api_class.find(a.name);
      if (it == api_class.end()) {
        const auto& n = t.str(a.name);
        it = api_class.emplace(a.name, is_sync_api(n) ? 1 : is_sync_memcpy_api(n) ? 2 : 0).first;
      }
      if (it->second) {
        api_blocking[i] = 1;
        ctx.blocking.push_back({a.start, a.end, a.end, a.pid, a.tid, t.str(a.name), "", i, -1, -1, 0});
      }
    }
    // Async copies that held the host: pageable host memory, or the call returned only after the copy ended.
    for (const auto& m : t.memcpys) {
      int64_t ai = apis.find(m.correlation, m.pid);
      if (ai < 0 || api_blocking[ai]) continue;
      const auto& a = t.api_calls[ai];
      bool pageable = m.src_kind == store::MemoryKind::Pageable || m.dst_kind == store::MemoryKind::Pageable;
      if (a.end - a.start < kBlockingCopyMinNs) continue;
      if (!pageable && a.end < m.end) continue;
      api_blocking[ai] = 1;
      std::string what = std::string(store::to_string(m.kind)) + " " + store::to_string(m.src_kind) + " -> " +
                         store::to_string(m.dst_kind) + ", " + std::to_string(m.bytes) + " B";
      ctx.blocking.push_back({a.start, a.end, a.end, a.pid, a.tid, t.str(a.name), what, ai, -1, -1, 0});
    }
    for (const auto& s : t.syncs) {
      if (s.type == store::SyncType::StreamWaitEvent || s.type == store::SyncType::Unknown) continue;
      int64_t ai = apis.find(s.correlation, s.pid);
      if (ai >= 0) continue;  // the API call itself is the host-side record
      ctx.blocking.push_back({s.start, s.end, s.end, s.pid, s.tid, std::string("cuda_sync ") + store::to_string(s.type), "", -1, -1, -1, 0});
    }
    std::unordered_map<store::StringId, bool> op_blocks;
    for (int64_t i = 0; i < int64_t(t.ranges.size()); ++i) {
      const auto& r = t.ranges[i];
      auto it = op_blocks.find(r.name);
      if (it == op_blocks.end()) it = op_blocks.emplace(r.name, is_blocking_op(t.str(r.name))).first;
      if (it->second) ctx.blocking.push_back({r.start, r.end, r.end, r.pid, r.tid, t.str(r.name), "", -1, i, -1, 0});
    }
    // Tail: until the thread's next launch, at most kSyncTailMaxNs -- only when the call waited for GPU work
    // (the GPU was busy during it): then it drained the queue. A sync on an already idle GPU drains nothing.
    std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> launches;
    for (size_t i = 0; i < t.api_calls.size(); ++i)
      if (ctx.api_op_count[i]) launches[{t.api_calls[i].pid, t.api_calls[i].tid}].push_back(t.api_calls[i].start);
    for (auto& [k, v] : launches)
      if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
    for (auto& b : ctx.blocking) {
      // No later launch on the thread: it has not issued one within the tail either (the tail was 0, so a
      // trace's last sync booked its drained GPU's idle as "other").
      int64_t next = INT64_MAX;
      auto it = launches.find({b.pid, b.tid});
      if (it != launches.end()) {
        auto l = std::lower_bound(it->second.begin(), it->second.end(), b.end);
        if (l != it->second.end()) next = *l;
      }
      bool drained = overlap(ctx.busy, b.start, b.end) > 0;
      b.tail_end = drained ? std::max(b.end, std::min(next, b.end + kSyncTailMaxNs)) : b.end;
      b.step = ctx.step_at(b.start);
    }
    std::sort(ctx.blocking.begin(), ctx.blocking.end(), [](const BlockingCall& x, const BlockingCall& y) { return x.start < y.start; });
  }
}

// Classify GPU idle over the analysed span (steps and GPU activity).
void classify_idle(Context& ctx, const std::vector<SyncPiece>& sync, const std::vector<int64_t>& piece_api) {
  const store::Trace& t = ctx.t();
  ctx.idle.clear();
  int64_t span0 = INT64_MAX, span1 = INT64_MIN;
  for (const auto& w : ctx.windows) span0 = std::min(span0, w.start), span1 = std::max(span1, w.end);
  if (!ctx.busy.empty()) span0 = std::min(span0, ctx.busy.front().start), span1 = std::max(span1, ctx.busy.back().end);
  if (span0 < span1 && !ctx.busy.empty()) {
    size_t di = 0, si = 0;
    std::vector<int64_t> cuts;
    std::vector<IdleSegment> gap_segments;
    // The calls of each thread that issued GPU work, in start order: a gap's time inside any of them is the
    // launches' own cost, not host code (a first launch that loads a module runs for a millisecond or more).
    std::map<std::pair<int64_t, int64_t>, std::vector<Interval>> thread_launches;
    for (size_t i = 0; i < t.api_calls.size(); ++i)
      if (ctx.api_op_count[i]) thread_launches[{t.api_calls[i].pid, t.api_calls[i].tid}].push_back({t.api_calls[i].start, t.api_calls[i].end});
    const auto by_start = [](const Interval& x, const Interval& y) { return x.start < y.start; };
    for (auto& [k, v] : thread_launches)
      if (!std::is_sorted(v.begin(), v.end(), by_start)) std::sort(v.begin(), v.end(), by_start);
    const std::vector<Interval>* launches = nullptr;
    size_t launch_from = 0;
    // The queue model: the GPU idles between two pieces of work. When the work that ends the gap was submitted
    // only after the GPU ran dry (its launch call returned after the gap began, or the work started before the
    // call returned), the GPU waited for the host: the part inside launch calls of the launching thread is launch
    // idle, the rest before the call host idle (the launching thread ran dispatch, Python or other host code).
    // When the work was queued before the GPU ran dry, or waited in the queue longer than a launch latency after
    // its call returned, the gap is the GPU's own (dependencies, scheduling, untraced work): other.
    auto classify = [&](int64_t a, int64_t b, int64_t gap_len, int64_t api) {
      const store::ApiCall* call = api >= 0 ? &t.api_calls[api] : nullptr;
      const bool queue_empty = call && std::min(call->end, b) > a;
      const int64_t launch_start = queue_empty ? call->start : INT64_MAX;
      const int64_t queued_from =
          queue_empty && b - call->end > kQueuedLatencyMaxNs ? std::max(a, call->end) : INT64_MAX;
      cuts.assign({a, b});
      while (di < ctx.data_waits.size() && ctx.data_waits[di].end <= a) ++di;
      while (si < sync.size() && sync[si].end <= a) ++si;
      for (size_t j = di; j < ctx.data_waits.size() && ctx.data_waits[j].start < b; ++j)
        cuts.push_back(ctx.data_waits[j].start), cuts.push_back(ctx.data_waits[j].end);
      for (size_t j = si; j < sync.size() && sync[j].start < b; ++j) cuts.push_back(sync[j].start), cuts.push_back(sync[j].end);
      if (launch_start > a && launch_start < b) cuts.push_back(launch_start);
      if (queued_from > a && queued_from < b) cuts.push_back(queued_from);
      launches = nullptr;
      if (queue_empty && launch_start > a) {
        auto it = thread_launches.find({call->pid, call->tid});
        if (it != thread_launches.end()) {
          launches = &it->second;
          auto l = std::lower_bound(launches->begin(), launches->end(), a,
                                    [](const Interval& x, int64_t v) { return x.start < v; });
          // One thread's launch calls do not nest (a kernel joins one runtime call): only the call before a may
          // still run at a.
          if (l != launches->begin() && std::prev(l)->end > a) --l;
          launch_from = size_t(l - launches->begin());
          for (; l != launches->end() && l->start < launch_start; ++l)
            if (l->end > a) cuts.push_back(l->start), cuts.push_back(std::min(l->end, launch_start));
        }
      }
      std::sort(cuts.begin(), cuts.end());
      gap_segments.clear();
      int64_t host_bound = 0;
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        int64_t s = std::max(a, cuts[c]), e = std::min(b, cuts[c + 1]);
        if (e <= s) continue;
        IdleSegment seg{s, e, IdleKind::Other, -1, -1, false};
        bool data = false;
        for (size_t j = di; j < ctx.data_waits.size() && ctx.data_waits[j].start < e; ++j)
          if (ctx.data_waits[j].start <= s && ctx.data_waits[j].end >= e) data = true;
        if (data) {
          seg.kind = IdleKind::Data;
        } else {
          for (size_t j = si; j < sync.size() && sync[j].start < e; ++j)
            if (sync[j].start <= s && sync[j].end >= e) seg.kind = IdleKind::Sync, seg.cause = sync[j].cause;
          if (seg.kind != IdleKind::Sync) {
            if (queue_empty && s < queued_from) {
              bool in_launch = s >= launch_start;
              for (size_t j = launch_from; !in_launch && launches && j < launches->size() && (*launches)[j].start < e; ++j)
                in_launch = (*launches)[j].start <= s && (*launches)[j].end >= e;
              seg.kind = in_launch ? IdleKind::Launch : IdleKind::Host;
              seg.api = api;
              seg.gap = a;
              host_bound += e - s;
            } else if (!call && gap_len <= kLaunchGapMaxNs) {
              // No launch call known (a trace without API rows): a short gap is a launch latency plus dispatch.
              seg.kind = IdleKind::Launch;
              seg.dispatch = true;
            }
          }
        }
        gap_segments.push_back(seg);
      }
      // Dispatch or a host computation of its own: judged on the time the GPU waited for the host in this gap,
      // not on the data waits and syncs around it.
      for (auto& seg : gap_segments) {
        if (seg.api >= 0) seg.dispatch = host_bound <= kDispatchGapMaxNs;
        if (!ctx.idle.empty() && ctx.idle.back().end == seg.start && ctx.idle.back().kind == seg.kind &&
            ctx.idle.back().cause == seg.cause && ctx.idle.back().api == seg.api && ctx.idle.back().dispatch == seg.dispatch &&
            ctx.idle.back().gap == seg.gap)
          ctx.idle.back().end = seg.end;
        else
          ctx.idle.push_back(seg);
      }
    };
    int64_t prev_end = span0;
    bool have_prev = false;
    for (size_t p = 0; p <= ctx.busy.size(); ++p) {
      int64_t next_start = p < ctx.busy.size() ? ctx.busy[p].start : span1;
      if (next_start > prev_end) {
        // Gaps open at either end of the GPU activity are never "within a launch latency".
        int64_t gap_len = (have_prev && p < ctx.busy.size()) ? next_start - prev_end : INT64_MAX;
        int64_t api = p < ctx.busy.size() ? piece_api[p] : -1;
        if (ctx.gpu_windows.empty()) {
          classify(prev_end, next_start, gap_len, api);
        } else {
          // Traced in windows: a gap across untraced time is, in each window it touches, a gap open at the
          // window's edge — like the run's own start and end — so each window reads as the whole run would.
          for (const auto& w : ctx.gpu_windows) {
            const int64_t a = std::max(prev_end, w.start), b = std::min(next_start, w.end);
            if (w.start >= next_start) break;
            if (b <= a) continue;
            if (a == prev_end && b == next_start) classify(a, b, gap_len, api);
            else if (b == next_start) classify(a, b, INT64_MAX, api);
            else classify(a, b, INT64_MAX, -1);
          }
        }
      }
      if (p < ctx.busy.size()) {
        prev_end = std::max(prev_end, ctx.busy[p].end);
        have_prev = true;
      }
    }
  } else if (span0 < span1) {
    // No GPU: the host's own time, split into its data waits and the rest.
    int64_t cur = span0;
    auto it = std::upper_bound(ctx.data_waits.begin(), ctx.data_waits.end(), span0,
                               [](int64_t x, const Interval& i) { return x < i.end; });
    for (; it != ctx.data_waits.end() && it->start < span1; ++it) {
      int64_t s = std::max(span0, it->start), e = std::min(span1, it->end);
      if (s > cur) ctx.idle.push_back({cur, s, IdleKind::Other, -1});
      ctx.idle.push_back({s, e, IdleKind::Data, -1});
      cur = e;
    }
    if (span1 > cur) ctx.idle.push_back({cur, span1, IdleKind::Other, -1});
  }
}

// Outside the GPU windows the GPU was not watched: its "idle" there is unknown, not idle.
void clip_idle_to_gpu_windows(Context& ctx) {
  if (!ctx.gpu_windows.empty()) {
    std::vector<IdleSegment> kept;
    auto w = ctx.gpu_windows.begin();
    for (const auto& seg : ctx.idle) {
      while (w != ctx.gpu_windows.end() && w->end <= seg.start) ++w;
      for (auto x = w; x != ctx.gpu_windows.end() && x->start < seg.end; ++x) {
        IdleSegment part = seg;
        part.start = std::max(seg.start, x->start), part.end = std::min(seg.end, x->end);
        if (part.end > part.start) kept.push_back(part);
      }
    }
    ctx.idle = std::move(kept);
  }
}

// Launch calls per step (API calls that issued GPU work), for the profiler-cost correction.
void count_launches(Context& ctx) {
  const store::Trace& t = ctx.t();
  ctx.launches.assign(ctx.windows.size(), 0);
  for (size_t i = 0; i < t.api_calls.size(); ++i)
    if (ctx.api_op_count[i])
      if (int32_t st = ctx.step_at(t.api_calls[i].start); st >= 0) ctx.launches[st]++;
  ctx.profiler = profiler_correction(t);
  // The Python hooks of --step-func/--data-wait-func: one hooked call per step boundary of step-func and per
  // data wait of data-wait-func, each at its kind's measured cost.
  ctx.hook_ns.assign(ctx.windows.size(), 0);
  auto cost = [&](const char* key) {
    auto it = t.meta.find(key);
    const double ns = it == t.meta.end() ? 0 : std::strtod(it->second.c_str(), nullptr);
    return ns > 0 && ns < 1e6 ? ns : 0.0;
  };
  ProfilerCorrection& p = ctx.profiler;
  p.hook_ns_per_step_call = cost("python.hook_ns_per_step_call");
  p.hook_ns_per_wait_call = cost("python.hook_ns_per_wait_call");
  if (p.hook_ns_per_step_call > 0 && ctx.step_source == "step-func") {
    for (auto& ns : ctx.hook_ns) ns += int64_t(p.hook_ns_per_step_call);
    p.hook_step_calls = int64_t(ctx.windows.size());
  }
  if (p.hook_ns_per_wait_call > 0)
    for (const auto& d : t.data_waits)
      if (t.str(d.source) == "data-wait-func")
        if (int32_t st = ctx.step_at(d.start); st >= 0) {
          ctx.hook_ns[st] += int64_t(p.hook_ns_per_wait_call);
          p.hook_wait_calls++;
        }
}

// Per step: GPU busy and the idle split by cause (data, launch, host, sync, other), the profiler's own cost
// taken out, and the step's bound.
void break_down_steps(Context& ctx) {
  ctx.total_step_ns = 0;
  ctx.traced_step_ns = 0;
  ctx.traced_steps = 0;
  ctx.total_gpu_idle_ns = 0;
  ctx.dispatch_idle.assign(ctx.windows.size(), 0);
  ctx.dispatch_launch_idle.assign(ctx.windows.size(), 0);
  for (size_t i = 0; i < ctx.windows.size(); ++i) {
    auto& st = ctx.steps[i];
    int64_t a = ctx.windows[i].start, b = ctx.windows[i].end;
    st.host_data_wait_ns = overlap(ctx.data_waits, a, b);
    ctx.total_step_ns += st.dur_ns;
    if (!st.gpu_traced) {
      st.kernels = 0;
      st.bound = Bound::Untraced;
      continue;
    }
    st.gpu_busy_ns = overlap(ctx.busy, a, b);
    int64_t launch_dispatch = 0, host_dispatch = 0;
    auto it = std::upper_bound(ctx.idle.begin(), ctx.idle.end(), a, [](int64_t x, const IdleSegment& s) { return x < s.end; });
    for (; it != ctx.idle.end() && it->start < b; ++it) {
      int64_t d = std::min(b, it->end) - std::max(a, it->start);
      switch (it->kind) {
        case IdleKind::Data: st.data_wait_ns += d; break;
        case IdleKind::Launch:
          st.launch_idle_ns += d;
          if (it->dispatch) launch_dispatch += d;
          break;
        case IdleKind::Host:
          st.host_idle_ns += d;
          if (it->dispatch) host_dispatch += d;
          break;
        case IdleKind::Sync:
          st.sync_idle_ns += d;
          if (it->cause >= 0) ctx.blocking[it->cause].in_step_idle_ns += d;
          break;
        case IdleKind::Other: st.other_idle_ns += d; break;
      }
    }
    int64_t idle = st.data_wait_ns + st.launch_idle_ns + st.sync_idle_ns + st.host_idle_ns + st.other_idle_ns;
    if (!ctx.busy.empty()) {
      // busy + idle == dur by construction; any rounding left is host time.
      st.other_idle_ns += std::max<int64_t>(0, st.dur_ns - st.gpu_busy_ns - idle);
    } else {
      // No device activity: the step is the training loop's wait for input and its own host work, nothing else.
      st.data_wait_ns = std::min(st.host_data_wait_ns, st.dur_ns);
      st.host_idle_ns = st.dur_ns - st.data_wait_ns;
      st.launch_idle_ns = st.sync_idle_ns = st.other_idle_ns = 0;
    }
    // The profiler's own cost: each traced launch made the host slower by cost_ns_per_launch. Where the GPU
    // waited for the host, that cost is GPU idle the unprofiled program does not have: take it out of the
    // launch idle first (the cost is paid inside the launch call), then out of the host idle.
    if (ctx.profiler.applied) {
      int64_t want = int64_t(double(ctx.launches[i]) * ctx.profiler.cost_ns_per_launch);
      int64_t from_launch = std::min(want, st.launch_idle_ns);
      int64_t from_host = std::min(want - from_launch, st.host_idle_ns);
      st.launch_idle_ns -= from_launch, st.host_idle_ns -= from_host;
      st.profiler_ns = from_launch + from_host;
      // Keep the dispatch parts in proportion to what was left.
      launch_dispatch -= std::min(launch_dispatch, from_launch);
      host_dispatch -= std::min(host_dispatch, from_host);
    }
    // The Python hooks' own calls ran on the host: out of its time.
    if (const int64_t hooks = ctx.hook_ns[i]; hooks > 0) {
      const int64_t from_host = std::min(hooks, st.host_idle_ns);
      st.host_idle_ns -= from_host;
      st.profiler_ns += from_host;
    }
    ctx.dispatch_idle[i] = launch_dispatch + host_dispatch;
    ctx.dispatch_launch_idle[i] = launch_dispatch;
    ctx.traced_step_ns += st.dur_ns;
    ++ctx.traced_steps;
    ctx.total_gpu_idle_ns += st.dur_ns - st.gpu_busy_ns - st.profiler_ns;
    st.bound = bound_of(st, ctx.busy.empty(), ctx.dispatch_idle[i]);
  }
  for (const auto& seg : ctx.idle)
    if (seg.kind == IdleKind::Sync && seg.cause >= 0) ctx.blocking[seg.cause].idle_ns += seg.end - seg.start;
}

// Steady steps: a first step much longer than the others carries one-time costs (CUDA context and module
// loading, allocator growth, autotuning, the first batch with nothing to prefetch behind) that no suggested
// change removes and that weigh differently in a 60- and a 600-step run. With 4 steps or more such a first
// step is left out of the shares that decide severities (torch.profiler's schedule skips warm-up steps for
// the same reason); with 2 or 3 steps, a first step more than kFewStepsWarmupFactor times the longest of the
// others.
void mark_steady_steps(Context& ctx) {
  ctx.steady.assign(ctx.steps.size(), 1);
  // A recording attached to a running program (`stepscope attach`, the trainer callbacks' windows) starts in its
  // steady loop: its first step carries no start-up, and a long one is the loop's own (a trainer window whose last
  // step the end of training cut short made its only waiting step a "warm-up" and the window "no findings").
  const bool attached = ctx.t().meta.count("attach.start_ns") > 0;
  if (!attached && ctx.steps.size() >= 4) {
    std::vector<int64_t> rest;
    for (size_t i = 1; i < ctx.steps.size(); ++i) rest.push_back(ctx.steps[i].dur_ns);
    std::nth_element(rest.begin(), rest.begin() + int64_t(rest.size() / 2), rest.end());
    if (double(ctx.steps[0].dur_ns) > kWarmupStepFactor * double(rest[rest.size() / 2])) {
      ctx.steady[0] = 0;
      ctx.steps[0].warmup = true;
    }
  } else if (!attached && ctx.steps.size() >= 2) {
    int64_t longest = 0;
    for (size_t i = 1; i < ctx.steps.size(); ++i) longest = std::max(longest, ctx.steps[i].dur_ns);
    if (double(ctx.steps[0].dur_ns) > kFewStepsWarmupFactor * double(longest)) {
      ctx.steady[0] = 0;
      ctx.steps[0].warmup = true;
    }
  }
  // Steps outside the GPU windows take no part in findings: their GPU side is unknown.
  for (size_t i = 0; i < ctx.steps.size(); ++i)
    if (!ctx.steps[i].gpu_traced) ctx.steady[i] = 0;
  ctx.steady_step_ns = 0;
  for (size_t i = 0; i < ctx.steps.size(); ++i)
    if (ctx.steady[i]) ctx.steady_step_ns += ctx.steps[i].dur_ns;
  ctx.residual_gap_ns = kResidualGapNs;
}

}  // namespace

void build_breakdown(Context& ctx) {
  const CorrelationIndex apis(ctx.t().api_calls);
  collect_gpu_ops(ctx, apis);
  assign_steps(ctx);
  const std::vector<int64_t> piece_api = busy_union(ctx);
  collect_data_waits(ctx);
  collect_blocking_calls(ctx, apis);
  classify_idle(ctx, sync_pieces(ctx.blocking), piece_api);
  split_off_cpu_host_idle(ctx);
  clip_idle_to_gpu_windows(ctx);
  count_launches(ctx);
  break_down_steps(ctx);
  mark_steady_steps(ctx);
}

}  // namespace stepscope::analyzer::detail
