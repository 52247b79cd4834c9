// The critical path, walked once over the trace and cut by steps (stepscope/analyzer/critical_path.h,
// docs/critical-path.md).
#include "analysis/critical_path.h"

#include <algorithm>
#include <limits>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <utility>

#include "analysis/names.h"

namespace stepscope::analyzer {

const char* to_string(PathKind k) {
  switch (k) {
    case PathKind::GpuCompute:
      return "gpu_compute";
    case PathKind::GpuComm:
      return "gpu_comm";
    case PathKind::GpuMemory:
      return "gpu_memory";
    case PathKind::Launch:
      return "launch";
    case PathKind::Host:
      return "host";
    case PathKind::DataWait:
      return "data_wait";
    case PathKind::Sync:
      return "sync";
    case PathKind::Other:
      return "other";
  }
  return "other";
}

namespace detail {

// The host as the GPU sees it: the step's thread and every thread of its process that launches GPU work
// (PyTorch's backward launches from the autograd engine's thread while the training thread waits in
// backward()).
HostTimeline host_timeline(const Context& ctx, int64_t pid, int64_t tid) {
  const store::Trace& t = ctx.t();
  std::unordered_map<int64_t, bool> launching{{tid, true}};
  for (size_t i = 0; i < t.api_calls.size() && i < ctx.api_op_count.size(); ++i)
    if (ctx.api_op_count[i] > 0 && (!pid || !t.api_calls[i].pid || t.api_calls[i].pid == pid))
      launching[t.api_calls[i].tid] = true;
  auto ours = [&](int64_t p, int64_t th) { return launching.count(th) && (!pid || !p || p == pid); };
  auto our_call = [&](const store::ApiCall& c) { return ours(c.pid, c.tid) && c.end > c.start; };
  auto our_wait = [&](const auto& d) {  // the training thread's own waits: data wait rows and ranges
    return d.tid == tid && (!pid || !d.pid || d.pid == pid) && d.end > d.start;
  };
  std::vector<const store::Range*> wait_ranges;
  for (const auto& r : t.ranges)
    if (our_wait(r) && r.source != store::RangeSource::GpuAnnotation && is_data_wait_range(t.str(r.name)))
      wait_ranges.push_back(&r);
  // Counted first: grown by doubling, the array peaked at 1.5 times its size during the analysis' peak.
  const size_t n = size_t(std::count_if(t.api_calls.begin(), t.api_calls.end(), our_call)) +
                   size_t(std::count_if(t.data_waits.begin(), t.data_waits.end(), our_wait)) +
                   wait_ranges.size();
  // HostTimeline::widest numbers them in 32 bits (HostEvent::api's bound is collect_gpu_ops').
  if (n >= size_t(UINT32_MAX))
    throw std::length_error("more than 4,294,967,294 host calls and waits: too many for the host timeline");
  HostTimeline h;
  h.events.reserve(n);
  for (size_t i = 0; i < t.api_calls.size(); ++i) {
    const auto& c = t.api_calls[i];
    if (!our_call(c)) continue;
    const std::string& name = t.str(c.name);
    const HostKind k = is_sync_api(name) || is_sync_memcpy_api(name)            ? HostKind::Sync
                       : ctx.api_op_count.size() > i && ctx.api_op_count[i] > 0 ? HostKind::Launch
                       : is_kernel_launch_api(name)                             ? HostKind::Launch
                                                                                : HostKind::Api;
    h.events.push_back({c.start, c.end, c.name, int32_t(i), k});
  }
  for (const auto& d : t.data_waits)
    if (our_wait(d)) h.events.push_back({d.start, d.end, d.source, -1, HostKind::DataWait});
  for (const store::Range* r : wait_ranges)
    h.events.push_back({r->start, r->end, r->name, -1, HostKind::DataWait});
  h.finish();
  return h;
}

namespace {

constexpr size_t kLongest = 5;
constexpr int64_t kMaxSegments = 500'000'000;
constexpr int64_t kMaxStalledTurns = 64;

// What the walk reads of an op besides its times, 16 bytes (its name is found when a segment is made).
struct OpInfo {
  int64_t pid = 0;
  PathKind kind = PathKind::GpuCompute;
};

// Time on the path attributed to the steps it crosses, as the backward walk produces it (latest first).
class StepAttribution {
 public:
  StepAttribution(std::vector<CriticalPath>& paths, std::vector<std::pair<int64_t, int64_t>> spans,
                  std::vector<PathSegment>* keep)
      : paths_(paths), spans_(std::move(spans)), k_(int64_t(spans_.size()) - 1), keep_(keep) {}

  void add(PathKind kind, int64_t a, int64_t b, std::string_view what) {
    ++segments_;
    while (b > a && k_ >= 0) {
      if (spans_[size_t(k_)].first >= b) {
        --k_;
        continue;
      }
      const int64_t lo = std::max(a, spans_[size_t(k_)].first), hi = std::min(b, spans_[size_t(k_)].second);
      if (hi > lo) {
        CriticalPath& p = paths_[size_t(k_)];
        p.ns[int(kind)] += hi - lo;
        ++p.segments;
        keep_longest(p, kind, lo, hi, what);
        if (keep_) keep_->push_back({lo, hi, p.step, kind, what});
      }
      b = std::max(a, spans_[size_t(k_)].first);
    }
  }
  int64_t segments() const { return segments_; }

 private:
  static void keep_longest(CriticalPath& p, PathKind kind, int64_t lo, int64_t hi, std::string_view what) {
    const auto len = [](const CriticalPath::Segment& x) { return x.end - x.start; };
    if (p.longest.size() == kLongest && len(p.longest.back()) >= hi - lo) return;  // no string made for it
    p.longest.push_back({kind, lo, hi, std::string(what)});
    std::sort(p.longest.begin(), p.longest.end(),
              [&](const auto& u, const auto& v) { return len(u) > len(v); });
    if (p.longest.size() > kLongest) p.longest.pop_back();
  }

  std::vector<CriticalPath>& paths_;
  std::vector<std::pair<int64_t, int64_t>> spans_;  // the steps' [start, end), sorted, as paths_
  int64_t k_;
  std::vector<PathSegment>* keep_;  // latest first
  int64_t segments_ = 0;
};

class Walker {
 public:
  explicit Walker(const Context& ctx) : ctx_(ctx), t_(ctx.t()) {
    if (ctx.ops.size() >= std::numeric_limits<uint32_t>::max())
      throw std::length_error(
          "more than 4,294,967,294 GPU operations: the critical path numbers them in 32 bits");
    info_.resize(ctx.ops.size());
    prev_on_stream_.assign(ctx.ops.size(), kNoOp);
    std::map<std::pair<int64_t, int64_t>, uint32_t> last_on_stream;  // ctx.ops is sorted by start
    for (size_t i = 0; i < ctx.ops.size(); ++i) {
      const GpuOp& o = ctx.ops[i];
      OpInfo& in = info_[i];
      int64_t device = 0, stream = 0;
      switch (o.kind) {
        case GpuOpKind::Kernel: {
          const auto& k = t_.kernels[o.index];
          in = {k.pid, PathKind::GpuCompute};
          device = k.device, stream = k.stream;
          const auto& n = t_.str(k.name);
          if ((n.rfind("nccl", 0) == 0 || n.rfind("rccl", 0) == 0) && n.find("Kernel") != std::string::npos)
            in.kind = PathKind::GpuComm;
          break;
        }
        case GpuOpKind::Memcpy: {
          const auto& m = t_.memcpys[o.index];
          in = {m.pid, PathKind::GpuMemory};
          device = m.device, stream = m.stream;
          break;
        }
        case GpuOpKind::Memset: {
          const auto& m = t_.memsets[o.index];
          in = {m.pid, PathKind::GpuMemory};
          device = m.device, stream = m.stream;
          break;
        }
      }
      auto [it, first] = last_on_stream.try_emplace({device, stream}, uint32_t(i));
      if (!first) prev_on_stream_[i] = std::exchange(it->second, uint32_t(i));
    }
    own_op_.assign(t_.api_calls.size(), kNoOp);
    for (size_t i = 0; i < ctx.ops.size(); ++i)
      if (ctx.ops[i].api >= 0 && size_t(ctx.ops[i].api) < own_op_.size()) {
        uint32_t& o = own_op_[size_t(ctx.ops[i].api)];
        if (o == kNoOp || ctx.ops[o].end < ctx.ops[i].end) o = uint32_t(i);  // the call's op that ends last
      }
    by_end_.resize(ctx.ops.size());
    for (size_t i = 0; i < by_end_.size(); ++i) by_end_[i] = uint32_t(i);
    std::sort(by_end_.begin(), by_end_.end(),
              [&](uint32_t a, uint32_t b) { return ctx.ops[a].end < ctx.ops[b].end; });
  }

  // One walk back over the whole trace of process `pid`, from the latest of `host_end` and its last GPU work
  // to `begin`: at each point the dependency that ended last decided when the next thing could start. Walking
  // the whole trace, not each step from its host end, follows a pipelined GPU-bound run into the GPU's work
  // (a step's host end waits for nothing on the GPU).
  void walk(int64_t pid, int64_t begin, int64_t host_end, const HostTimeline& host,
            StepAttribution& out) const {
    int64_t t = host_end;
    int64_t op =
        last_op_ending_in(begin, INT64_MAX, pid);  // on the GPU at the end of ctx.ops[op], else on the host
    if (op >= 0 && ctx_.ops[size_t(op)].end >= host_end)
      t = ctx_.ops[size_t(op)].end;
    else
      op = -1;
    int64_t stalled = 0, last_t = INT64_MAX;
    for (int64_t guard = 0; t > begin && guard < kMaxSegments; ++guard) {
      // Every turn moves back in time or onto another lane at the same time; a lane change that keeps coming
      // back to the same time is a cycle the trace's clocks made (a launch ending after its kernel started).
      stalled = t < last_t ? 0 : stalled + 1;
      last_t = t;
      if (stalled > kMaxStalledTurns) {
        out.add(PathKind::Other, begin, t, "walk stopped (inconsistent times)");
        return;
      }
      if (op >= 0) {
        const GpuOp& o = ctx_.ops[size_t(op)];
        out.add(info_[size_t(op)].kind, std::min(o.start, t), t, name_of(o));
        t = std::min(t, o.start);
        // Its start waited for the later of the stream's previous op and its own launch call (the longest
        // path's edge); a gap after both is a wait the trace does not name — another stream's work when some
        // ended right before it, else the GPU's own scheduling.
        const int64_t prev = op_or_none(prev_on_stream_[size_t(op)]);
        const int64_t pe = prev >= 0 ? std::min(ctx_.ops[size_t(prev)].end, t) : INT64_MIN;
        // The launch edge leaves the call's end, or its start when the op began inside the call (a
        // synchronous copy, a kernel on an idle GPU): the op waited for the call to issue it, not to return.
        int64_t la = INT64_MIN;
        if (o.api >= 0) {
          const auto& c = t_.api_calls[size_t(o.api)];
          la = std::min(c.end <= o.start ? c.end : c.start, t);
        }
        const bool waited = std::max(pe, la) < t - kQueuedGapNs;
        if (waited) {
          // Work of another stream that ended after both: the latest such is what it waited for (an event the
          // trace does not record, a collective on the communication stream).
          const int64_t other = last_op_ending_in(std::max({pe, la, begin}), t, pid);
          if (other >= 0 && other != op) {
            const int64_t oe = std::min(ctx_.ops[size_t(other)].end, t);
            out.add(PathKind::Other, oe, t, "another stream's work");
            t = oe;
            op = other;
            continue;
          }
          if (std::max(pe, la) != INT64_MIN) {
            out.add(PathKind::Other, std::max(pe, la), t, "a wait the trace does not show");
            t = std::max(pe, la);
          }
        }
        if (pe != INT64_MIN && pe >= la) {
          out.add(PathKind::Other, pe, t, "stream scheduling");
          t = pe;
          op = prev;
          continue;
        }
        if (la != INT64_MIN) {
          out.add(PathKind::Launch, la, t, t_.str(t_.api_calls[size_t(o.api)].name));  // launch to GPU start
          t = la;
          op = -1;
          continue;
        }
        // No launch known (an imported trace without flows, a window's first op): the host's side is unknown;
        // go on from the host at the op's start.
        op = -1;
        continue;
      }
      const HostEvent* e = host.before(t);
      if (!e || e->end < t) {
        // Host code since the last call or wait ended (or since the walk's start).
        const int64_t from = e ? std::max(begin, e->end) : begin;
        out.add(PathKind::Host, from, t, "host code");
        t = from;  // next: the call or wait that ended there
        continue;
      }
      // Inside (or at the end of) a call or wait on this thread.
      switch (e->kind) {
        case HostKind::DataWait:
          out.add(PathKind::DataWait, e->start, t, t_.str(e->what));
          t = e->start;
          break;
        case HostKind::Launch:
        case HostKind::Api: {
          // A long call that returned right after GPU work ended was waiting for the GPU (a full launch
          // queue, an allocator or a copy that synchronizes): it is a sync in effect.
          const int64_t to = std::min(t, e->end);
          if (to - e->start > kBlockedCallNs && e->api >= 0 && own_op_[size_t(e->api)] != kNoOp &&
              !is_kernel_launch_api(t_.str(e->what))) {
            // A long copy call whose own GPU work ended inside it (a pageable copy, "Async" or not): the call
            // returned once its copy was done.
            const int64_t own = own_op_[size_t(e->api)];  // not kNoOp, tested above
            const GpuOp& oo = ctx_.ops[size_t(own)];
            if (oo.end <= to && oo.end > e->start && oo.start < oo.end) {
              out.add(PathKind::Sync, oo.end, t, t_.str(e->what));
              t = oo.end;
              op = own;
              break;
            }
          }
          if (to - e->start > kBlockedCallNs) {
            if (const int64_t running = op_running_at(to, pid);
                running >= 0 && ctx_.ops[size_t(running)].start < to) {
              out.add(PathKind::Sync, to, t, t_.str(e->what));
              t = to;
              op = running;  // still running on the GPU when the call returned: the call waited for room
              break;
            }
            const int64_t waited = last_op_ending_in(e->start, to, pid);
            if (waited >= 0 && ctx_.ops[size_t(waited)].end >= to - kWakeUpNs) {
              out.add(PathKind::Sync, ctx_.ops[size_t(waited)].end, t, t_.str(e->what));
              t = ctx_.ops[size_t(waited)].end;
              op = waited;
              break;
            }
          }
          out.add(e->kind == HostKind::Launch ? PathKind::Launch : PathKind::Host, e->start, t,
                  t_.str(e->what));
          t = e->start;
          break;
        }
        case HostKind::Sync: {
          // What it waited for: the GPU work of this process that ended last inside the call.
          const int64_t waited = last_op_ending_in(e->start, t, pid);
          if (waited < 0) {
            out.add(PathKind::Sync, e->start, t, t_.str(e->what));
            t = e->start;
          } else {
            out.add(PathKind::Sync, ctx_.ops[size_t(waited)].end, t, t_.str(e->what));
            t = ctx_.ops[size_t(waited)].end;
            op = waited;
          }
          break;
        }
      }
    }
    if (t > begin) out.add(PathKind::Other, begin, t, "walk limit");
  }

 private:
  std::string_view name_of(const GpuOp& o) const {
    switch (o.kind) {
      case GpuOpKind::Kernel:
        return t_.str(t_.kernels[o.index].name);
      case GpuOpKind::Memcpy:
        return "copy";
      case GpuOpKind::Memset:
        return "memset";
    }
    return {};
  }

  // The op of this process running at time x (the latest-starting one among the last kScanBack starts), or
  // -1.
  int64_t op_running_at(int64_t x, int64_t pid) const {
    constexpr int kScanBack = 256;
    auto it = std::upper_bound(ctx_.ops.begin(), ctx_.ops.end(), x,
                               [](int64_t v, const GpuOp& o) { return v < o.start; });
    for (int n = 0; it != ctx_.ops.begin() && n < kScanBack; ++n) {
      --it;
      const size_t i = size_t(it - ctx_.ops.begin());
      if (it->end >= x && (!pid || !info_[i].pid || info_[i].pid == pid)) return int64_t(i);
    }
    return -1;
  }

  // The op of this process that ends last in (from, to], or -1.
  int64_t last_op_ending_in(int64_t from, int64_t to, int64_t pid) const {
    auto it = std::upper_bound(by_end_.begin(), by_end_.end(), to,
                               [&](int64_t v, uint32_t i) { return v < ctx_.ops[i].end; });
    while (it != by_end_.begin()) {
      --it;
      const GpuOp& o = ctx_.ops[*it];
      if (o.end <= from) return -1;
      if (!pid || !info_[*it].pid || info_[*it].pid == pid) return int64_t(*it);
    }
    return -1;
  }

  const Context& ctx_;
  const store::Trace& t_;
  std::vector<OpInfo> info_;
  // Op indexes in 32 bits (the constructor refuses more ops), kNoOp for none: 4 bytes an op and a call.
  static constexpr uint32_t kNoOp = std::numeric_limits<uint32_t>::max();
  static int64_t op_or_none(uint32_t i) { return i == kNoOp ? -1 : int64_t(i); }
  std::vector<uint32_t> prev_on_stream_;
  std::vector<uint32_t> own_op_;  // per trace.api_calls index: the op it launched that ends last
  std::vector<uint32_t> by_end_;
};

}  // namespace

CriticalPaths critical_paths(const Context& ctx, bool keep_segments, HostTimelines* timelines) {
  CriticalPaths out;
  if (ctx.ops.empty() || ctx.steps.empty()) return out;
  Walker walker(ctx);
  // The traced steps by the host thread that drew them (one walk per thread: ranks in one trace walk apart).
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < ctx.steps.size(); ++i) {
    if (!ctx.steps[i].gpu_traced || ctx.steps[i].dur_ns <= 0) continue;
    StepWindow w = ctx.windows[i];
    if (!w.tid) w.pid = ctx.training_pid, w.tid = ctx.training_tid;
    by_thread[{w.pid, w.tid}].push_back(i);
  }
  std::vector<CriticalPath> all(ctx.steps.size());
  for (auto& [who, steps] : by_thread) {
    std::sort(steps.begin(), steps.end(),
              [&](size_t a, size_t b) { return ctx.steps[a].start_ns < ctx.steps[b].start_ns; });
    std::vector<CriticalPath> paths(steps.size());
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (size_t j = 0; j < steps.size(); ++j) {
      const auto& s = ctx.steps[steps[j]];
      paths[j].step = s.index;
      spans.emplace_back(s.start_ns, s.start_ns + s.dur_ns);
    }
    const int64_t begin = spans.front().first;
    int64_t host_end = 0;
    for (const auto& sp : spans) host_end = std::max(host_end, sp.second);
    HostTimeline built;
    const HostTimeline& host =
        timelines ? ((*timelines)[who] = host_timeline(ctx, who.first, who.second)) : (built = host_timeline(ctx, who.first, who.second));
    std::vector<PathSegment> kept;
    StepAttribution attribution(paths, std::move(spans), keep_segments ? &kept : nullptr);
    walker.walk(who.first, begin, host_end, host, attribution);
    out.path.insert(out.path.end(), kept.rbegin(), kept.rend());
    out.segments += attribution.segments();
    for (size_t j = 0; j < steps.size(); ++j) all[steps[j]] = std::move(paths[j]);
  }
  if (by_thread.size() > 1)
    std::stable_sort(out.path.begin(), out.path.end(),
                     [](const PathSegment& a, const PathSegment& b) { return a.start < b.start; });
  for (size_t i = 0; i < ctx.steps.size(); ++i) {
    if (!ctx.steps[i].gpu_traced || ctx.steps[i].dur_ns <= 0) continue;
    if (i < ctx.steady.size() && ctx.steady[i]) {
      for (int k = 0; k < kPathKinds; ++k) out.ns[k] += all[i].ns[k];
      out.total_ns += ctx.steps[i].dur_ns;
    }
    out.steps.push_back(std::move(all[i]));
  }
  return out;
}

}  // namespace detail
}  // namespace stepscope::analyzer
