// What-if replay (stepscope/analyzer/what_if.h, docs/critical-path.md "What-if replay"): the steady
// GPU-traced steps of the training thread, rebuilt as a program — host code, calls and waits in order; the
// GPU work each call launched, in stream order; the GPU work each blocking call waited for — and run forward
// again, unchanged and with each cure applied.
#include "analysis/what_if.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <span>
#include <stdexcept>
#include <unordered_map>

#include "analysis/critical_path.h"
#include "analysis/names.h"

namespace stepscope::analyzer::detail {
namespace {

// The GPU's own gap between queued ops replayed at most this long (its launch processing, an event record);
// a longer one waited for another stream, which the replay does not model.
constexpr int64_t kMaxSchedGapNs = 10'000;
// Host cost of one cudaGraphLaunch when the trace has none of its own: the mean cudaGraphLaunch of the H100
// recording of `launch_bound --graph` (31 kernels per graph, stepscope 0.1 tracing it: shared/recordings/
// h100-2026-11-22, 3050 calls, mean 33.9 µs). Traced, so an upper bound of the plain cost.
constexpr int64_t kGraphLaunchHostNs = 33'900;
// Kernels shorter than this, back to back in one launch run, are the elementwise chains fusion merges into
// one kernel as long as the longest of them (one pass over memory instead of N); longer ones stay as they
// are.
constexpr int64_t kFusableKernelNs = 10'000;
// A run of at least this many identical GEMM kernels is a loop that one batched GEMM replaces (the
// small-gemm-loop rule's own cut).
constexpr size_t kMinGemmRun = 8;
// Steps replayed together: long enough to hold a loader's cycle (4 or 8 workers) and a host running ahead of
// a GPU-bound loop, short enough that a rare stall of the recording spoils one window of many.
constexpr size_t kWindowSteps = 8;
// Two steps of a thread follow each other in a window when no step of that thread lies between them (a
// warm-up or untraced one left out of the replay) and the later starts at most this long after the earlier
// ends: the host code between them is replayed as any other. Kineto's ProfilerStep# ranges leave the Python
// of prof.step() between steps (31-70 µs on the shared V100/A100 traces); a window of one step each would
// start every step with the GPU free and leave out the work its host was blocked behind (a full launch
// queue), then drain the step's own work after it: +26% on the GPU-bound V100 ResNet. Longer: an untraced
// stretch.
constexpr int64_t kMaxStepGapNs = 1'000'000;
// SMs when the trace does not say (an H100 SXM).
constexpr int64_t kDefaultSmCount = 132;
// Copies at least this large are data copies (the pageable-memcpy cure), not a scalar read-back that syncs.
constexpr int64_t kDataCopyBytes = 64 * 1024;
// Host-to-device bandwidth of pinned memory when the trace has no large pinned copy of its own (bytes per
// µs): the 4 MiB pinned copies of shared/recordings/h100-2026-11-22/input_bound_prefetch (H100, PCIe Gen5: 60
// copies, 84.2 µs each, 49.8 GB/s).
constexpr double kPinnedBytesPerUs = 49'800.0;
// Pinned copies at least this large measure the link's bandwidth (smaller ones its latency).
constexpr int64_t kBandwidthCopyBytes = 1 << 20;

enum class Cure : uint8_t { Graph, Fused, Prefetch, Async, Batched, Pinned };
constexpr int kCures = 6;

// 48 bytes (a run holds one an op of its steps: millions); a kernel's name, device and launch shape are read
// from its row when the batched cure needs them (Replayer::shape).
struct Op {
  int64_t dur = 0;
  int64_t lat = -1;  // from its call's start to its start when it waited on the launch; -1: it was queued
  int64_t bytes = 0;
  int32_t stream = 0;   // index into the run's streams
  int32_t sched = 0;    // its recorded gap after the stream's previous op when queued (≤ kMaxSchedGapNs)
  uint32_t source = 0;  // ctx.ops index
  bool copy = false, pageable = false, h2d = false, gemm = false, kernel = false;
};
static_assert(sizeof(Op) == 48);
static_assert(kMaxSchedGapNs <= INT32_MAX);

// A kernel's launch as the batched cure's occupancy needs it.
struct KernelShape {
  int64_t device = 0;
  int64_t grid = 1;
  int64_t threads = 0, registers = 0, shared = 0;  // per block
};

enum class ItemKind : uint8_t { Launch, Api, Sync, DataWait };

struct Item {
  ItemKind kind = ItemKind::Api;
  int64_t gap = 0;          // host code before it
  int64_t dur = 0;          // recorded duration
  int64_t launches = 0;     // launch calls in it (the profiler's cost per launch)
  // The run's op indexes it launched, in stream order per stream: Run::item_ops[first_op, first_op + n_ops).
  uint32_t first_op = 0, n_ops = 0;
  int64_t waited = -1;      // the run's op it waited for (it returned kWakeUpNs after that op ended), or -1
  int64_t wake = 0;         // from that op's end to the call's return
  bool own_wait = false;    // it waited for its own copy (a synchronous or pageable copy)
  int32_t step = 0;         // which replayed step (0-based within the run)
};

struct Run {
  std::vector<Item> items;
  std::vector<Op> ops;
  std::vector<uint32_t> item_ops;    // every item's ops, item after item (one array, not a vector an item)
  std::vector<uint32_t> op_item;     // per op: the item that launched it (every op has one)
  std::vector<int64_t> stream_free;  // per stream: 0 (the window starts with the GPU free)
  int64_t trailing = 0;              // host code after the last item
  int64_t span = 0;                  // recorded length
  int64_t steps = 0;
  std::span<const uint32_t> ops_of(const Item& it) const { return {item_ops.data() + it.first_op, it.n_ops}; }
};

// One variant of the run after the cures' transformations: per item and op.
struct Plan {
  std::vector<int64_t> gap, dur, op_dur, op_extra_gap, op_lat, op_stream;
  std::vector<uint8_t> no_wait, data_wait;
  bool prefetch = false;  // data waits shrink to the loader workers' pace
};

// A launch's blocks or threads: x·y·z, held within ±2^40 (a trace's dimensions are whatever it says; three
// 32-bit factors can overflow 64 bits, and the replay multiplies threads by registers).
int64_t dims(int32_t x, int32_t y, int32_t z) {
  constexpr double kMax = double(int64_t{1} << 40);
  return int64_t(std::clamp(double(x) * double(y) * double(z), -kMax, kMax));
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : (v[h - 1] + v[h]) / 2;
}

class Replayer {
 public:
  Replayer(const Context& ctx, double cost_per_launch, int loader_workers)
      : ctx_(ctx), cost_(cost_per_launch), loader_workers_(loader_workers) {
    const store::Trace& t = ctx.t();
    for (const auto& d : t.devices)
      if (d.sm_count > 0) sm_[d.id] = {d.sm_count, d.cc_major * 10 + d.cc_minor};
    std::vector<int64_t> graph;
    for (const auto& c : t.api_calls)
      if (t.str(c.name) == "cudaGraphLaunch" || t.str(c.name) == "cuGraphLaunch")
        graph.push_back(c.end - c.start);
    graph_launch_ns_ = upper_median(graph, kGraphLaunchHostNs);
    double pinned_bytes = 0, pinned_ns = 0;
    for (const auto& m : t.memcpys)
      if ((m.src_kind == store::MemoryKind::Pinned || m.dst_kind == store::MemoryKind::Pinned) &&
          m.bytes >= kBandwidthCopyBytes && m.end > m.start) {
        pinned_bytes += double(m.bytes);
        pinned_ns += double(m.end - m.start);
      }
    pinned_bytes_per_us_ = pinned_ns > 0 ? pinned_bytes / (pinned_ns / 1e3) : kPinnedBytesPerUs;
    // Each op once: its stream, when its stream's earlier work ended, and when it was launched.
    if (ctx.ops.size() >= size_t(UINT32_MAX))  // Op::source numbers them in 32 bits
      throw std::length_error(
          "more than 4,294,967,294 GPU operations: the what-if replay numbers them in 32 bits");
    statics_.resize(ctx.ops.size());
    by_key_.reserve(ctx.ops.size());
    std::map<std::pair<int64_t, int64_t>, int32_t> streams;
    std::vector<int64_t> last_end;
    for (size_t oi = 0; oi < ctx.ops.size(); ++oi) {
      const GpuOp& o = ctx.ops[oi];
      OpStatic& st = statics_[oi];
      const Where w = where(o);
      auto [it, fresh] = streams.try_emplace({w.device, w.stream}, int32_t(streams.size()));
      if (fresh) last_end.push_back(INT64_MIN);
      st.stream = it->second;
      st.prev_end_on_stream = last_end[size_t(st.stream)];
      last_end[size_t(st.stream)] = std::max(st.prev_end_on_stream, o.end);
      by_key_.emplace_back(o.api >= 0 ? t.api_calls[size_t(o.api)].start : o.start, oi);
    }
    std::sort(by_key_.begin(), by_key_.end());
  }

  int64_t sm_count(int64_t device) const {
    auto it = sm_.find(device);
    return it != sm_.end() ? it->second.sms : kDefaultSmCount;
  }

  // Blocks of this kernel one SM holds at once, from its recorded block size, registers and shared memory and
  // the device's limits (CUDA's occupancy calculation, without the allocation granularities): the batched
  // GEMM's blocks run in waves of sm_count × this.
  int64_t blocks_per_sm(const KernelShape& op) const {
    auto it = sm_.find(op.device);
    const int cc = it != sm_.end() ? it->second.cc : 90;
    // Per SM: max resident blocks, threads, shared memory (bytes); 64K registers on every one listed.
    int64_t max_blocks = 32, max_threads = 2048, max_shared = 228 * 1024;
    if (cc < 75)
      max_shared = 96 * 1024;
    else if (cc < 80)
      max_blocks = 16, max_threads = 1024, max_shared = 64 * 1024;
    else if (cc == 80)
      max_shared = 164 * 1024;
    else if (cc < 89)
      max_blocks = 16, max_threads = 1536, max_shared = 100 * 1024;
    else if (cc < 90)
      max_blocks = 24, max_threads = 1536, max_shared = 100 * 1024;
    int64_t n = max_blocks;
    if (op.threads > 0) n = std::min(n, max_threads / op.threads);
    if (op.threads > 0 && op.registers > 0)  // over 64K registers a block: not one (and no overflow)
      n = std::min(n, op.registers > 65536 / op.threads ? 0 : 65536 / (op.registers * op.threads));
    if (op.shared > 0) n = std::min(n, max_shared / op.shared);
    return std::max<int64_t>(1, n);
  }

  // The run of contiguous steps [first, last] of one thread.
  Run build(const std::vector<size_t>& steps, const HostTimeline& host, int64_t pid) const {
    const auto& s0 = ctx_.steps[steps.front()];
    const auto& sl = ctx_.steps[steps.back()];
    const int64_t r0 = s0.start_ns, r1 = sl.start_ns + sl.dur_ns;
    Run run;
    run.span = r1 - r0;
    run.steps = int64_t(steps.size());
    // Outermost host events starting in the run.
    std::vector<const HostEvent*> kept;
    int64_t cur_end = INT64_MIN;
    auto first = std::lower_bound(host.events.begin(), host.events.end(), r0,
                                  [](const HostEvent& e, int64_t v) { return e.start < v; });
    for (auto ev = first; ev != host.events.end() && ev->start < r1; ++ev) {
      const HostEvent& e = *ev;
      if (e.start < cur_end) continue;
      kept.push_back(&e);
      cur_end = e.end;
    }
    if (kept.empty()) return run;
    auto item_at = [&](int64_t ts) -> int64_t {  // the last kept event starting at or before ts
      auto it = std::upper_bound(kept.begin(), kept.end(), ts,
                                 [](int64_t v, const HostEvent* e) { return v < e->start; });
      return it == kept.begin() ? 0 : int64_t(it - kept.begin()) - 1;
    };
    run.items.resize(kept.size());
    int64_t prev_end = r0;
    size_t step_k = 0;
    for (size_t i = 0; i < kept.size(); ++i) {
      const HostEvent& e = *kept[i];
      Item& it = run.items[i];
      it.kind = e.kind == HostKind::Launch     ? ItemKind::Launch
                : e.kind == HostKind::Sync     ? ItemKind::Sync
                : e.kind == HostKind::DataWait ? ItemKind::DataWait
                                               : ItemKind::Api;
      it.gap = std::max<int64_t>(0, e.start - prev_end);
      it.dur = e.end - e.start;
      while (step_k + 1 < steps.size() && e.start >= ctx_.steps[steps[step_k + 1]].start_ns) ++step_k;
      it.step = int32_t(step_k);
      prev_end = std::max(prev_end, e.end);
    }
    run.trailing = std::max<int64_t>(0, r1 - prev_end);
    const store::Trace& t = ctx_.t();
    // The ops launched by a call in the window (or, without a known call, starting in it), in start order.
    std::vector<size_t> mine;
    for (auto it = std::lower_bound(by_key_.begin(), by_key_.end(), std::make_pair(r0, size_t(0)));
         it != by_key_.end() && it->first < r1; ++it)
      if (const int64_t p = where(ctx_.ops[it->second]).pid; !pid || !p || p == pid)
        mine.push_back(it->second);
    std::sort(mine.begin(), mine.end());
    std::unordered_map<int64_t, int32_t> local_stream;
    std::vector<int64_t>
        launch_calls_seen;        // per item: its last launch call (one call may launch several ops)
    std::vector<int64_t> op_end;  // per run op: its recorded end
    // Per run op: how far into its item its own call began (another thread's launches inside this thread's
    // long blocking call, a runtime call's driver call); and the observed launch latencies, each from the
    // op's own call: from the item's start, the 139 ms cudaMemcpyAsync of the A100 rank's step thread gave
    // the 548 launches of its other thread inside it a median of 132.8 ms, which every queued op then waited.
    std::vector<int64_t> call_at, lats;
    // At their sizes once (a run is a whole steady region: millions of ops, ~64 bytes each, grown by
    // doubling half as much again at the peak).
    run.ops.reserve(mine.size());
    op_end.reserve(mine.size());
    run.op_item.reserve(mine.size());
    call_at.reserve(mine.size());
    for (size_t oi : mine) {
      const GpuOp& o = ctx_.ops[oi];
      const OpStatic& st = statics_[oi];
      Op op = make_op(o);
      auto [sit, fresh] = local_stream.try_emplace(st.stream, int32_t(local_stream.size()));
      if (fresh) run.stream_free.push_back(0);
      op.stream = sit->second;
      op.source = uint32_t(oi);
      const int64_t prev_end_on_stream = st.prev_end_on_stream;
      const int64_t call_start = o.api >= 0 ? t.api_calls[size_t(o.api)].start : INT64_MIN;
      // Which item launched it: its call's outermost event, else the event it started under. (Work launched
      // before the window is left out: a window starts with its GPU free, so a host that ran far ahead of a
      // GPU-bound loop does not bring the whole queue along.)
      const int64_t item = item_at(call_start != INT64_MIN ? call_start : o.start);
      const HostEvent& e = *kept[size_t(item)];
      const bool launched_by_item = call_start != INT64_MIN && call_start >= e.start && call_start <= e.end;
      // Queued behind its stream's work (the stream was still busy when its call returned): it started when
      // that work ended, after the GPU's own gap; else it waited for its launch, and its latency is from the
      // call.
      const int64_t call_end = o.api >= 0 ? t.api_calls[size_t(o.api)].end : INT64_MIN;
      const bool queued = prev_end_on_stream != INT64_MIN &&
                          (call_end != INT64_MIN ? prev_end_on_stream >= call_end
                                                 : o.start - prev_end_on_stream <= kQueuedGapNs);
      if (queued) op.sched = int32_t(std::clamp<int64_t>(o.start - prev_end_on_stream, 0, kMaxSchedGapNs));
      if (launched_by_item && !queued) op.lat = std::max<int64_t>(0, o.start - e.start);
      if (launched_by_item && !queued) lats.push_back(std::max<int64_t>(0, o.start - call_start));
      if (!launched_by_item) op.lat = std::max<int64_t>(0, o.start - e.start);  // it started under the item
      call_at.push_back(launched_by_item ? call_start - e.start : 0);
      run.op_item.push_back(uint32_t(item));
      ++run.items[size_t(item)].n_ops;
      if (launched_by_item && o.api >= 0) {
        if (launch_calls_seen.empty()) launch_calls_seen.assign(kept.size(), INT64_MIN);
        if (launch_calls_seen[size_t(item)] != o.api)
          ++run.items[size_t(item)].launches;  // one call, several ops
        launch_calls_seen[size_t(item)] = o.api;
      }
      op_end.push_back(o.end);
      run.ops.push_back(op);
    }
    // Each item's ops in one array, in the order they came (op index order).
    for (uint32_t i = 0, at = 0; i < run.items.size(); ++i)
      run.items[i].first_op = at, at += run.items[i].n_ops;
    run.item_ops.resize(run.ops.size());
    {
      std::vector<uint32_t> filled(run.items.size(), 0);
      for (uint32_t o = 0; o < run.op_item.size(); ++o) {
        const uint32_t i = run.op_item[o];
        run.item_ops[run.items[i].first_op + filled[i]++] = o;
      }
    }
    // Launch latency of the queued ops: the run's median of the observed ones, after their own call.
    const int64_t lat = upper_median(lats, 5'000);
    for (size_t k = 0; k < run.ops.size(); ++k)
      if (run.ops[k].lat < 0) run.ops[k].lat = call_at[k] + lat;
    // What each blocking call waited for: the run's op that ended last inside it, when the call returned
    // within kWakeUpNs of it (and was long enough to have blocked, or is a sync, or waited for its own copy).
    std::vector<size_t> by_end(run.ops.size());
    for (size_t i = 0; i < by_end.size(); ++i) by_end[i] = i;
    std::sort(by_end.begin(), by_end.end(), [&](size_t a, size_t b) { return op_end[a] < op_end[b]; });
    for (size_t i = 0; i < run.items.size(); ++i) {
      Item& it = run.items[i];
      const HostEvent& e = *kept[i];
      if (it.kind == ItemKind::DataWait) continue;
      auto pos = std::upper_bound(by_end.begin(), by_end.end(), e.end,
                                  [&](int64_t v, size_t k) { return v < op_end[k]; });
      if (pos == by_end.begin()) continue;
      const size_t w = *(pos - 1);
      if (op_end[w] <= e.start || e.end - op_end[w] > kWakeUpNs) continue;
      const auto mine_ops = run.ops_of(it);
      const bool own = std::find(mine_ops.begin(), mine_ops.end(), w) != mine_ops.end();
      const bool waits = it.kind == ItemKind::Sync || (own && run.ops[w].copy) ||
                         (it.dur > kBlockedCallNs && !is_kernel_launch_api(ctx_.t().str(e.what)));
      if (!waits) continue;
      it.waited = int64_t(w);
      it.wake = e.end - op_end[w];
      it.own_wait = own;
    }
    return run;
  }

  // The run's recorded program, then the cures' changes.
  Plan plan(const Run& run, const bool (&cures)[kCures], bool correct) const {
    Plan p;
    const size_t n = run.items.size(), m = run.ops.size();
    p.gap.resize(n), p.dur.resize(n), p.no_wait.assign(n, 0), p.data_wait.assign(n, 0);
    p.op_dur.resize(m), p.op_extra_gap.resize(m), p.op_lat.resize(m), p.op_stream.resize(m);
    for (size_t i = 0; i < n; ++i) {
      const Item& it = run.items[i];
      p.gap[i] = it.gap;
      p.dur[i] = it.dur;
      if (correct && it.launches > 0 && it.waited < 0) {
        const int64_t cut = int64_t(std::llround(cost_ * double(it.launches)));
        p.dur[i] = std::max(it.dur - cut, it.dur / 4);
      }
      p.data_wait[i] = it.kind == ItemKind::DataWait;
    }
    for (size_t k = 0; k < m; ++k) {
      p.op_dur[k] = run.ops[k].dur;
      p.op_extra_gap[k] = run.ops[k].sched;
      p.op_lat[k] = run.ops[k].lat;
      p.op_stream[k] = run.ops[k].stream;
    }
    std::vector<int64_t> launch_durs;
    for (size_t i = 0; i < n; ++i)
      if (run.items[i].kind == ItemKind::Launch && run.items[i].waited < 0) launch_durs.push_back(p.dur[i]);
    const int64_t one_launch = upper_median(launch_durs, 5'000);

    if (cures[int(Cure::Graph)] || cures[int(Cure::Fused)]) {
      // Launch runs: launch calls (and short other calls) of one step with host gaps shorter than dispatch,
      // no wait, no data wait in between. The first becomes the graph launch (or the fused kernels'
      // launches); the rest and the host code between them go.
      size_t i = 0;
      while (i < n) {
        if (run.items[i].kind != ItemKind::Launch || run.items[i].waited >= 0) {
          ++i;
          continue;
        }
        size_t j = i + 1, launches = 1;
        while (j < n && run.items[j].step == run.items[i].step && run.items[j].gap < kDispatchGapMaxNs &&
               run.items[j].waited < 0 &&
               (run.items[j].kind == ItemKind::Launch ||
                (run.items[j].kind == ItemKind::Api && run.items[j].dur < kDispatchGapMaxNs))) {
          launches += run.items[j].kind == ItemKind::Launch;
          ++j;
        }
        if (launches >= 2) {
          std::vector<size_t> ops;
          for (size_t k = i; k < j; ++k)
            for (uint32_t o : run.ops_of(run.items[k])) ops.push_back(o);
          for (size_t k = i + 1; k < j; ++k) p.gap[k] = 0, p.dur[k] = 0;
          if (cures[int(Cure::Fused)]) {
            // Back-to-back short kernels on a stream become one kernel as long as the longest of them.
            std::map<int64_t, std::vector<size_t>> by_stream;
            for (size_t o : ops) by_stream[run.ops[o].stream].push_back(o);
            int64_t fused_launches = 0;
            for (auto& [s, v] : by_stream) {
              std::sort(v.begin(), v.end());
              size_t a = 0;
              while (a < v.size()) {
                size_t b = a;
                int64_t longest = 0;
                while (b < v.size() && run.ops[v[b]].kernel && run.ops[v[b]].dur < kFusableKernelNs)
                  longest = std::max(longest, run.ops[v[b]].dur), ++b;
                if (b - a >= 2) {
                  p.op_dur[v[a]] = longest;
                  for (size_t c = a + 1; c < b; ++c) p.op_dur[v[c]] = 0, p.op_extra_gap[v[c]] = 0;
                  ++fused_launches;
                  a = b;
                } else {
                  ++fused_launches;
                  a = std::max(a + 1, b);
                }
              }
            }
            p.dur[i] = one_launch * std::max<int64_t>(1, fused_launches);
          } else {
            p.dur[i] = graph_launch_ns_;
            for (size_t o : ops)
              p.op_extra_gap[o] = std::min<int64_t>(p.op_extra_gap[o], ctx_.residual_gap_ns);
          }
        }
        i = j;
      }
    }
    if (cures[int(Cure::Batched)]) {
      // Runs of identical GEMMs on a stream within a step: one batched GEMM of the same blocks, in waves over
      // the SMs, launched by the first call; the loop's other launches and host code between them go.
      std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_stream;  // (step, stream) -> ops in order
      for (size_t o = 0; o < m; ++o)
        by_stream[{run.items[run.op_item[o]].step, run.ops[o].stream}].push_back(o);
      for (auto& [key, v] : by_stream) {
        std::sort(v.begin(), v.end());
        size_t a = 0;
        while (a < v.size()) {
          size_t b = a + 1;
          if (run.ops[v[a]].gemm)
            while (b < v.size() && run.ops[v[b]].gemm && same_name(run.ops[v[b]], run.ops[v[a]])) ++b;
          if (run.ops[v[a]].gemm && b - a >= kMinGemmRun) {
            std::vector<int64_t> durs;
            int64_t blocks = 0;
            for (size_t c = a; c < b; ++c)
              durs.push_back(run.ops[v[c]].dur), blocks += shape(run.ops[v[c]]).grid;
            const KernelShape first_shape = shape(run.ops[v[a]]);
            const int64_t slots = sm_count(first_shape.device) * blocks_per_sm(first_shape);
            const int64_t waves = (blocks + slots - 1) / slots;
            p.op_dur[v[a]] = waves * upper_median(durs, 0);
            for (size_t c = a + 1; c < b; ++c) p.op_dur[v[c]] = 0, p.op_extra_gap[v[c]] = 0;
            const int64_t first = run.op_item[v[a]], last = run.op_item[v[b - 1]];
            for (int64_t k = first + 1; k <= last; ++k) {
              p.gap[size_t(k)] = 0;
              bool only_loop = true;  // a call that launched nothing but the loop's GEMMs goes with the loop
              for (size_t o : run.ops_of(run.items[size_t(k)]))
                if (std::find(v.begin() + long(a), v.begin() + long(b), o) == v.begin() + long(b))
                  only_loop = false;
              if (only_loop && run.items[size_t(k)].waited < 0) p.dur[size_t(k)] = 0;
            }
            // The batched GEMM is issued when the loop's first launch is.
            for (size_t c = a + 1; c < b; ++c) p.op_lat[v[c]] = 0;
          }
          a = b;
        }
      }
    }
    if (cures[int(Cure::Async)]) {
      // Blocking calls made asynchronous: the host no longer waits for the GPU; a data copy keeps waiting
      // (the pageable-memcpy cure's business).
      for (size_t i = 0; i < n; ++i) {
        const Item& it = run.items[i];
        if (it.waited < 0 || it.kind == ItemKind::DataWait) continue;
        const Op& w = run.ops[size_t(it.waited)];
        if (it.own_wait && w.copy && w.bytes >= kDataCopyBytes) continue;
        p.no_wait[i] = 1;
        p.dur[i] = std::min(it.dur, std::max(it.wake, one_launch));
      }
    }
    p.prefetch = cures[int(Cure::Prefetch)];
    if (cures[int(Cure::Prefetch)]) {
      // Prefetching moves the batch's host-to-device copies into the input pipeline too (pinned buffers,
      // async copies on a side stream, a batch ahead: DataLoader pin_memory + non_blocking, a CUDA-stream
      // prefetcher): the step issues them for the next batch and waits for neither.
      for (size_t i = 0; i < n; ++i) {
        const Item& it = run.items[i];
        for (size_t o : run.ops_of(it)) {
          const Op& op = run.ops[o];
          if (!op.copy || !op.h2d || op.bytes < kDataCopyBytes) continue;
          p.op_stream[o] = int64_t(run.stream_free.size());  // the prefetch stream
          p.op_extra_gap[o] = 0;
          // Its call only queues it now (a synchronous copy's return can even come before its GPU end in a
          // recording's clocks, so the call's own length is what it cost).
          p.no_wait[i] = 1;
          p.dur[i] = std::min(it.dur, one_launch);
        }
      }
    }
    if (cures[int(Cure::Pinned)]) {
      for (size_t i = 0; i < n; ++i) {
        const Item& it = run.items[i];
        for (size_t o : run.ops_of(it)) {
          const Op& op = run.ops[o];
          if (!op.copy || !op.pageable || op.bytes < kDataCopyBytes) continue;
          p.op_dur[o] = std::min(op.dur, int64_t(double(op.bytes) / pinned_bytes_per_us_ * 1e3));
          p.no_wait[i] = 1;  // cudaMemcpyAsync from pinned memory: queued, the host goes on
          p.dur[i] = std::min(it.dur, one_launch);
        }
      }
    }
    return p;
  }

  // Runs the plan forward; returns the run's replayed length: until the host has finished its last step and
  // the GPU the work it was given (a GPU-bound loop's host runs ahead, and its steps are the GPU's).
  int64_t replay(const Run& run, const Plan& p) const {
    std::vector<int64_t> stream_free = run.stream_free;
    stream_free.push_back(0);  // the prefetch stream
    std::vector<int64_t> end(run.ops.size(), 0);
    int64_t host = 0, gpu_end = 0, batch = 0;
    // The loader in its steady state as the window starts: worker j began its batch a batch's time before it
    // is due, j batches' worth of the pipeline's pace after the first.
    std::vector<int64_t> workers(size_t(std::max(1, loader_workers_)), 0);
    if (p.prefetch) {
      int64_t waits = 0, n_waits = 0;
      for (size_t i = 0; i < run.items.size(); ++i)
        if (p.data_wait[i]) waits += p.dur[i], ++n_waits;
      const int64_t mean_wait = n_waits ? waits / n_waits : 0;
      for (size_t j = 0; j < workers.size(); ++j)
        workers[j] = int64_t(j) * mean_wait / int64_t(workers.size()) - mean_wait;
    }
    for (size_t i = 0; i < run.items.size(); ++i) {
      const Item& it = run.items[i];
      host += p.gap[i];
      const int64_t start = host;
      for (size_t o : run.ops_of(it)) {
        const int64_t ready = start + p.op_lat[o];
        int64_t& sf = stream_free[size_t(p.op_stream[o])];
        const int64_t s = std::max(sf + p.op_extra_gap[o], ready);
        end[o] = s + p.op_dur[o];
        sf = end[o];
        gpu_end = std::max(gpu_end, end[o]);
      }
      if (p.data_wait[i]) {
        int64_t d = p.dur[i];
        if (p.prefetch) {
          // The loader's workers take the batches in turn, each making its batch in the time the recorded
          // wait took, from the run's start on: batch k is ready when its worker has made batch k − workers
          // and then this one.
          int64_t& worker = workers[size_t(batch++) % workers.size()];
          worker += p.dur[i];
          d = std::max<int64_t>(0, worker - start);
        }
        host = start + d;
        continue;
      }
      if (it.waited >= 0 && !p.no_wait[i])
        host = std::max(start, end[size_t(it.waited)]) + it.wake;
      else
        host = start + p.dur[i];
    }
    host += run.trailing;
    return std::max(host, gpu_end);
  }

 private:
  const Context& ctx_;
  double cost_;
  int loader_workers_;
  struct DeviceLimits {
    int64_t sms = 0;
    int cc = 90;
  };
  std::unordered_map<int64_t, DeviceLimits> sm_;
  int64_t graph_launch_ns_ = kGraphLaunchHostNs;
  double pinned_bytes_per_us_ = kPinnedBytesPerUs;
  struct OpStatic {
    int64_t prev_end_on_stream = INT64_MIN;
    int32_t stream = 0;
  };
  struct Where {
    int64_t device = 0, stream = 0, pid = 0;
  };
  Where where(const GpuOp& o) const {
    const store::Trace& t = ctx_.t();
    switch (o.kind) {
      case GpuOpKind::Kernel: {
        const auto& k = t.kernels[o.index];
        return {k.device, k.stream, k.pid};
      }
      case GpuOpKind::Memcpy: {
        const auto& m = t.memcpys[o.index];
        return {m.device, m.stream, m.pid};
      }
      case GpuOpKind::Memset: {
        const auto& m = t.memsets[o.index];
        return {m.device, m.stream, m.pid};
      }
    }
    return {};
  }
  // What the replay needs of an op (GEMM names judged once per name).
  Op make_op(const GpuOp& o) const {
    const store::Trace& t = ctx_.t();
    Op op;
    op.dur = o.end - o.start;
    switch (o.kind) {
      case GpuOpKind::Kernel: {
        const auto& k = t.kernels[o.index];
        op.kernel = true;
        auto [it, fresh] = gemm_names_.try_emplace(k.name, false);
        if (fresh) it->second = is_gemm_kernel(t.str(k.name));
        op.gemm = it->second;
        break;
      }
      case GpuOpKind::Memcpy: {
        const auto& m = t.memcpys[o.index];
        op.copy = true;
        op.bytes = m.bytes;
        op.pageable = m.src_kind == store::MemoryKind::Pageable || m.dst_kind == store::MemoryKind::Pageable;
        op.h2d = m.kind == store::CopyKind::HtoD;
        break;
      }
      case GpuOpKind::Memset:
        break;
    }
    return op;
  }
  // A kernel op's row; nullptr for a copy or memset.
  const store::Kernel* kernel_row(const Op& op) const {
    const GpuOp& o = ctx_.ops[op.source];
    return o.kind == GpuOpKind::Kernel ? &ctx_.t().kernels[o.index] : nullptr;
  }
  // A kernel op's launch, from its row (the batched cure's GEMMs only).
  KernelShape shape(const Op& op) const {
    const store::Kernel* k = kernel_row(op);
    if (!k) return {};
    return {k->device, std::max<int64_t>(1, dims(k->grid_x, k->grid_y, k->grid_z)),
            dims(k->block_x, k->block_y, k->block_z), k->registers, k->shared_memory};
  }
  bool same_name(const Op& a, const Op& b) const {
    const store::Kernel *x = kernel_row(a), *y = kernel_row(b);
    if (!x || !y) return !x && !y;
    return x->name == y->name || ctx_.t().str(x->name) == ctx_.t().str(y->name);
  }
  mutable std::unordered_map<int64_t, bool> gemm_names_;
  std::vector<OpStatic> statics_;
  std::vector<std::pair<int64_t, size_t>>
      by_key_;  // (launch call's start, else the op's start; ctx.ops index)
};

}  // namespace

WhatIf what_if(const Context& ctx, const std::vector<FindingResult>& findings, int loader_workers,
               const HostTimelines* timelines) {
  WhatIf w;
  if (ctx.ops.empty() || ctx.steps.empty()) {
    w.note = "no GPU activity in the steps: nothing to replay";
    return w;
  }
  // The steady GPU-traced steps of the thread that draws the most of them, in contiguous runs.
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_thread;
  // Per step: its place among all the steps of its thread (ctx.windows is sorted by start).
  std::vector<size_t> place(ctx.steps.size(), 0);
  std::map<std::pair<int64_t, int64_t>, size_t> thread_steps;
  for (size_t i = 0; i < ctx.steps.size(); ++i) {
    StepWindow sw = ctx.windows[i];
    if (!sw.tid) sw.pid = ctx.training_pid, sw.tid = ctx.training_tid;
    place[i] = thread_steps[{sw.pid, sw.tid}]++;
    if (!ctx.steps[i].gpu_traced || ctx.steps[i].dur_ns <= 0) continue;
    if (i < ctx.steady.size() && !ctx.steady[i]) continue;
    by_thread[{sw.pid, sw.tid}].push_back(i);
  }
  if (by_thread.empty()) {
    w.note = "no steady GPU-traced step: nothing to replay";
    return w;
  }
  auto best = by_thread.begin();
  for (auto it = by_thread.begin(); it != by_thread.end(); ++it)
    if (it->second.size() > best->second.size()) best = it;
  std::vector<size_t> steps = best->second;
  std::sort(steps.begin(), steps.end(),
            [&](size_t a, size_t b) { return ctx.steps[a].start_ns < ctx.steps[b].start_ns; });
  HostTimeline built;
  const HostTimeline* found = nullptr;
  if (timelines)
    if (auto it = timelines->find(best->first); it != timelines->end()) found = &it->second;
  const HostTimeline& host =
      found ? *found : (built = host_timeline(ctx, best->first.first, best->first.second));
  const double cost = ctx.profiler.applied ? ctx.profiler.cost_ns_per_launch : 0.0;
  Replayer r(ctx, cost, loader_workers);

  std::vector<std::string> rules;
  for (const auto& f : findings) rules.push_back(f.rule);
  auto has = [&](const char* rule) { return std::find(rules.begin(), rules.end(), rule) != rules.end(); };
  struct Variant {
    std::string rule, cure;
    bool cures[kCures] = {};
    std::vector<double> per_step;  // ns per step, per window
  };
  std::vector<Variant> variants(2);  // 0: identity (profiler kept), 1: baseline (profiler removed)
  auto add = [&](const char* rule, const char* cure, Cure c) {
    Variant v;
    v.rule = rule, v.cure = cure;
    v.cures[int(c)] = true;
    variants.push_back(v);
  };
  if (has("launch-overhead"))
    add("launch-overhead", "cuda-graph", Cure::Graph), add("launch-overhead", "fused", Cure::Fused);
  if (has("input-bound")) add("input-bound", "prefetch", Cure::Prefetch);
  if (has("sync-stall")) add("sync-stall", "async", Cure::Async);
  if (has("small-gemm-loop")) add("small-gemm-loop", "batched", Cure::Batched);
  if (has("pageable-memcpy")) add("pageable-memcpy", "pinned", Cure::Pinned);
  Variant combined;
  for (size_t k = 2; k < variants.size(); ++k)
    if (variants[k].cure != "fused")
      for (int c = 0; c < kCures; ++c) combined.cures[c] |= variants[k].cures[c];
  const bool with_combined = variants.size() > 3;
  if (with_combined) variants.push_back(combined);

  std::vector<double> recorded;
  int64_t n_steps = 0;
  size_t a = 0;
  while (a < steps.size()) {
    size_t b = a + 1;
    while (b < steps.size()) {
      const auto& p = ctx.steps[steps[b - 1]];
      if (place[steps[b]] != place[steps[b - 1]] + 1 ||
          ctx.steps[steps[b]].start_ns - (p.start_ns + p.dur_ns) > kMaxStepGapNs)
        break;
      ++b;
    }
    // Windows of kWindowSteps contiguous steps (a shorter run is one window of its own).
    for (size_t c = a; c < b; c += kWindowSteps) {
      const size_t e = std::min(b, c + kWindowSteps);
      if (e - c < kWindowSteps && b - a >= kWindowSteps) break;  // a partial window after full ones
      std::vector<size_t> part(steps.begin() + long(c), steps.begin() + long(e));
      const Run run = r.build(part, host, best->first.first);
      if (run.items.empty()) continue;
      const double n = double(run.steps);
      recorded.push_back(double(run.span) / n);
      n_steps += run.steps;
      for (size_t k = 0; k < variants.size(); ++k)
        variants[k].per_step.push_back(double(r.replay(run, r.plan(run, variants[k].cures, k != 0))) / n);
    }
    a = b;
  }
  if (n_steps == 0) {
    w.note = "no host calls in the GPU-traced steps: nothing to replay";
    return w;
  }
  // The median window's mean step: a mean within the window (a periodic loop's steps of 45, 11, 7, 3 ms cost
  // 16.5 ms each, not their median), a median across windows (a rare stall of the recording stays in its
  // window).
  const auto per_step = [](const std::vector<double>& v) { return median_of(v) / 1e3; };
  w.steps = n_steps;
  w.recorded_step_us = per_step(recorded);
  w.identity_step_us = per_step(variants[0].per_step);
  w.replayed_step_us = per_step(variants[1].per_step);
  for (size_t k = 2; k < variants.size(); ++k) {
    if (with_combined && k + 1 == variants.size()) {
      w.combined_step_us = per_step(variants[k].per_step);
      break;
    }
    const double step_us = per_step(variants[k].per_step);
    w.cures.push_back({variants[k].rule, variants[k].cure, step_us, w.replayed_step_us - step_us});
  }
  if (!with_combined) w.combined_step_us = w.cures.empty() ? w.replayed_step_us : w.cures.front().step_us;
  return w;
}

}  // namespace stepscope::analyzer::detail
