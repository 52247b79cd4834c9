// Per-step breakdown: GPU busy union and the classification of every GPU idle instant into
// data wait / sync / launch / other (definitions in docs/analysis-json.md, "Breakdown").
#include <algorithm>
#include <map>
#include <unordered_map>

#include "analysis/context.h"
#include "analysis/names.h"

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

// Correlation id -> API call index, as a sorted vector (much smaller than a hash map on 10M-row traces).
class ApiIndex {
 public:
  explicit ApiIndex(const store::Trace& t) : t_(t) {
    by_corr_.reserve(t.api_calls.size());
    for (uint32_t i = 0; i < t.api_calls.size(); ++i)
      if (t.api_calls[i].correlation) by_corr_.push_back({t.api_calls[i].correlation, i});
    if (!std::is_sorted(by_corr_.begin(), by_corr_.end())) std::sort(by_corr_.begin(), by_corr_.end());
  }
  // pid disambiguates merged ranks whose correlation ids collide; 0 = unknown.
  int64_t find(int64_t corr, int64_t pid) const {
    if (!corr) return -1;
    auto it = std::lower_bound(by_corr_.begin(), by_corr_.end(), std::pair<int64_t, uint32_t>{corr, 0});
    int64_t first = -1;
    for (; it != by_corr_.end() && it->first == corr; ++it) {
      if (first < 0) first = it->second;
      if (!pid || t_.api_calls[it->second].pid == pid) return it->second;
    }
    return first;
  }

 private:
  const store::Trace& t_;
  std::vector<std::pair<int64_t, uint32_t>> by_corr_;
};

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

}  // namespace

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

void build_breakdown(Context& ctx) {
  const store::Trace& t = ctx.t();
  ApiIndex apis(t);

  // GPU work, each op tied to its launch call.
  ctx.ops.clear();
  ctx.ops.reserve(t.gpu_event_count());
  ctx.api_op_count.assign(t.api_calls.size(), 0);
  auto add_op = [&](int64_t s, int64_t e, uint32_t i, GpuOpKind k, int64_t corr, int64_t pid) {
    GpuOp op{s, std::max(s, e), i, k, -1, apis.find(corr, pid)};
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

  // Steps own the work they launched; work without a known launch belongs to the step it ran in.
  ctx.steps.assign(ctx.windows.size(), {});
  for (size_t i = 0; i < ctx.windows.size(); ++i) {
    ctx.steps[i].index = int64_t(i);
    ctx.steps[i].start_ns = ctx.windows[i].start;
    ctx.steps[i].dur_ns = ctx.windows[i].end - ctx.windows[i].start;
  }
  for (auto& op : ctx.ops) {
    op.step = ctx.step_at(op.api >= 0 ? t.api_calls[op.api].start : op.start);
    if (op.step >= 0 && op.kind == GpuOpKind::Kernel) ctx.steps[op.step].kernels++;
  }

  // Busy union over all devices and streams; for each piece, when the host began launching its first op.
  ctx.busy.clear();
  std::vector<int64_t> piece_launch;  // launch call start of each piece's first op, or INT64_MAX
  for (const auto& op : ctx.ops) {
    if (op.end <= op.start) continue;
    if (!ctx.busy.empty() && op.start <= ctx.busy.back().end) {
      ctx.busy.back().end = std::max(ctx.busy.back().end, op.end);
    } else {
      ctx.busy.push_back({op.start, op.end});
      piece_launch.push_back(op.api >= 0 ? t.api_calls[op.api].start : INT64_MAX);
    }
  }

  // Host-side data waits: the data_waits table and data-loader ranges (importers may provide either). The
  // same wait may be recorded twice (a `with stepscope.data_wait()` around a hooked DataLoader call, or a
  // loader range and its data_waits row): waits are a union, never a sum. When the steps were driven by one
  // thread that waited, only that thread's waits count: another thread's (a prefetcher's) do not stall it.
  {
    bool one_thread = !ctx.windows.empty();
    for (const auto& w : ctx.windows)
      one_thread = one_thread && (w.pid || w.tid) && w.pid == ctx.windows.front().pid && w.tid == ctx.windows.front().tid;
    const int64_t spid = one_thread ? ctx.windows.front().pid : 0, stid = one_thread ? ctx.windows.front().tid : 0;
    std::vector<Interval> all, own;
    auto add = [&](int64_t s, int64_t e, int64_t pid, int64_t tid) {
      all.push_back({s, e});
      if (one_thread && pid == spid && tid == stid) own.push_back({s, e});
    };
    for (const auto& d : t.data_waits) add(d.start, d.end, d.pid, d.tid);
    std::unordered_map<store::StringId, bool> is_dw;
    for (const auto& r : t.ranges) {
      if (r.source == store::RangeSource::GpuAnnotation) continue;
      auto it = is_dw.find(r.name);
      if (it == is_dw.end()) it = is_dw.emplace(r.name, is_data_wait_range(t.str(r.name))).first;
      if (it->second) add(r.start, r.end, r.pid, r.tid);
    }
    ctx.data_waits = union_of(own.empty() ? std::move(all) : std::move(own));
  }

  // Blocking host calls.
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
      int64_t next = b.end;
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
  std::vector<SyncPiece> sync = sync_pieces(ctx.blocking);

  // Classify GPU idle over the analysed span (steps and GPU activity).
  ctx.idle.clear();
  int64_t span0 = INT64_MAX, span1 = INT64_MIN;
  for (const auto& w : ctx.windows) span0 = std::min(span0, w.start), span1 = std::max(span1, w.end);
  if (!ctx.busy.empty()) span0 = std::min(span0, ctx.busy.front().start), span1 = std::max(span1, ctx.busy.back().end);
  if (span0 < span1 && !ctx.busy.empty()) {
    size_t di = 0, si = 0;
    std::vector<int64_t> cuts;
    auto classify = [&](int64_t a, int64_t b, int64_t gap_len, int64_t launch_start, bool after_idle) {
      cuts.assign({a, b});
      while (di < ctx.data_waits.size() && ctx.data_waits[di].end <= a) ++di;
      while (si < sync.size() && sync[si].end <= a) ++si;
      for (size_t j = di; j < ctx.data_waits.size() && ctx.data_waits[j].start < b; ++j)
        cuts.push_back(ctx.data_waits[j].start), cuts.push_back(ctx.data_waits[j].end);
      for (size_t j = si; j < sync.size() && sync[j].start < b; ++j) cuts.push_back(sync[j].start), cuts.push_back(sync[j].end);
      if (launch_start > a && launch_start < b) cuts.push_back(launch_start);
      std::sort(cuts.begin(), cuts.end());
      for (size_t c = 0; c + 1 < cuts.size(); ++c) {
        int64_t s = std::max(a, cuts[c]), e = std::min(b, cuts[c + 1]);
        if (e <= s) continue;
        IdleSegment seg{s, e, IdleKind::Other, -1};
        bool data = false;
        for (size_t j = di; j < ctx.data_waits.size() && ctx.data_waits[j].start < e; ++j)
          if (ctx.data_waits[j].start <= s && ctx.data_waits[j].end >= e) data = true;
        if (data) {
          seg.kind = IdleKind::Data;
        } else {
          for (size_t j = si; j < sync.size() && sync[j].start < e; ++j)
            if (sync[j].start <= s && sync[j].end >= e) seg.kind = IdleKind::Sync, seg.cause = sync[j].cause;
          // Launch idle: a short gap, or the tail of a long one after the host began issuing the work that
          // ends it (only when that launch came after the GPU went idle: HTA's "host wait").
          if (seg.kind != IdleKind::Sync && (gap_len <= kLaunchGapMaxNs || (after_idle && s >= launch_start)))
            seg.kind = IdleKind::Launch;
        }
        if (!ctx.idle.empty() && ctx.idle.back().end == s && ctx.idle.back().kind == seg.kind && ctx.idle.back().cause == seg.cause)
          ctx.idle.back().end = e;
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
        int64_t launch = p < ctx.busy.size() ? piece_launch[p] : INT64_MAX;
        classify(prev_end, next_start, gap_len, launch, !have_prev || launch > prev_end);
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

  // Per step.
  ctx.total_step_ns = 0;
  ctx.total_gpu_idle_ns = 0;
  for (size_t i = 0; i < ctx.windows.size(); ++i) {
    auto& st = ctx.steps[i];
    int64_t a = ctx.windows[i].start, b = ctx.windows[i].end;
    st.gpu_busy_ns = overlap(ctx.busy, a, b);
    st.host_data_wait_ns = overlap(ctx.data_waits, a, b);
    auto it = std::upper_bound(ctx.idle.begin(), ctx.idle.end(), a, [](int64_t x, const IdleSegment& s) { return x < s.end; });
    for (; it != ctx.idle.end() && it->start < b; ++it) {
      int64_t d = std::min(b, it->end) - std::max(a, it->start);
      switch (it->kind) {
        case IdleKind::Data: st.data_wait_ns += d; break;
        case IdleKind::Launch: st.launch_idle_ns += d; break;
        case IdleKind::Sync:
          st.sync_idle_ns += d;
          if (it->cause >= 0) ctx.blocking[it->cause].in_step_idle_ns += d;
          break;
        case IdleKind::Other: st.other_idle_ns += d; break;
      }
    }
    int64_t idle = st.data_wait_ns + st.launch_idle_ns + st.sync_idle_ns + st.other_idle_ns;
    if (!ctx.busy.empty()) {
      // busy + idle == dur by construction; any rounding left is host time.
      st.other_idle_ns += std::max<int64_t>(0, st.dur_ns - st.gpu_busy_ns - idle);
    }
    ctx.total_step_ns += st.dur_ns;
    ctx.total_gpu_idle_ns += st.dur_ns - st.gpu_busy_ns;
    // Label: `gpu` when the GPU is busy for kGpuBoundBusyShare of the step, else the largest idle cause.
    if (ctx.busy.empty()) {
      // Host-only trace: the step waits for input, or computes.
      st.bound = st.dur_ns > 0 && double(st.data_wait_ns) >= kHostInputBoundShare * double(st.dur_ns) ? Bound::Input
                                                                                                       : Bound::Host;
    } else if (st.dur_ns > 0 && double(st.gpu_busy_ns) >= kGpuBoundBusyShare * double(st.dur_ns)) {
      st.bound = Bound::Gpu;
    } else {
      std::pair<int64_t, Bound> c[] = {{st.data_wait_ns, Bound::Input}, {st.sync_idle_ns, Bound::Sync},
                                       {st.launch_idle_ns, Bound::Launch}, {st.other_idle_ns, Bound::Host}};
      st.bound = std::max_element(std::begin(c), std::end(c), [](auto& x, auto& y) { return x.first < y.first; })->second;
    }
  }
  for (const auto& seg : ctx.idle)
    if (seg.kind == IdleKind::Sync && seg.cause >= 0) ctx.blocking[seg.cause].idle_ns += seg.end - seg.start;
}

}  // namespace stepscope::analyzer::detail
