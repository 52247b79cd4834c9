#include "stepscope/gui/timeline_model.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::gui {

const char* to_string(EventKind k) {
  switch (k) {
    case EventKind::Kernel: return "kernel";
    case EventKind::Memcpy: return "memcpy";
    case EventKind::Memset: return "memset";
    case EventKind::ApiCall: return "API call";
    case EventKind::Range: return "range";
    case EventKind::Sync: return "sync";
    case EventKind::DataWait: return "data wait";
    case EventKind::Step: return "step";
    case EventKind::Finding: return "finding";
    case EventKind::PathSegment: return "critical path";
    case EventKind::GraphReplay: return "CUDA graph replay";
    case EventKind::RankPath: return "job critical path";
    case EventKind::RankWait: return "waited for the straggler";
  }
  return "event";
}

const char* to_string(TrackKind k) {
  switch (k) {
    case TrackKind::Steps: return "steps";
    case TrackKind::Findings: return "findings";
    case TrackKind::CriticalPath: return "critical path";
    case TrackKind::CpuSamples: return "cpu samples";
    case TrackKind::CpuRanges: return "cpu ranges";
    case TrackKind::DataWaits: return "data waits";
    case TrackKind::GpuStream: return "gpu stream";
    case TrackKind::RankLane: return "rank";
  }
  return "track";
}

const char* bound_name(analyzer::Bound b) { return analyzer::to_string(b); }

uint32_t TimelineModel::bound_code(const std::string& b) {
  if (b == "input") return 0;
  if (b == "launch") return 1;
  if (b == "sync") return 2;
  if (b == "host") return 3;
  if (b == "gpu") return 4;
  return 5;
}

size_t Lane::first_ending_after(int64_t t) const {
  if (!max_end.empty())
    return static_cast<size_t>(std::upper_bound(max_end.begin(), max_end.end(), t) - max_end.begin());
  size_t lo = 0, hi = size();  // ends are non-decreasing: first i with end(i) > t
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (end(mid) <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

size_t Lane::first_starting_at_or_after(int64_t t, size_t from) const {
  return static_cast<size_t>(std::lower_bound(starts.begin() + static_cast<ptrdiff_t>(from), starts.end(), t) -
                             starts.begin());
}

int64_t Lane::long_dur(size_t i) const {
  auto it = std::lower_bound(long_durs.begin(), long_durs.end(), static_cast<uint32_t>(i),
                             [](const std::pair<uint32_t, int64_t>& p, uint32_t v) { return p.first < v; });
  return it != long_durs.end() && it->first == i ? it->second : int64_t(kLongDur);
}

size_t Lane::bytes() const {
  return starts.capacity() * sizeof(int64_t) + durs.capacity() * sizeof(uint32_t) +
         rows.capacity() * sizeof(uint32_t) + kinds.capacity() * sizeof(EventKind) +
         long_durs.capacity() * sizeof(long_durs[0]) + max_end.capacity() * sizeof(int64_t) +
         busy_marks.capacity() * sizeof(int64_t);
}

void Lane::index_busy() {
  busy_marks.assign(size() / kBusyStride + 1, 0);
  int64_t sum = 0;
  for (size_t i = 0; i < size(); ++i) {
    if (i % kBusyStride == 0) busy_marks[i / kBusyStride] = sum;
    sum += dur(i);
  }
  if (size() % kBusyStride == 0) busy_marks.back() = sum;
}

int64_t Lane::summed_dur(size_t i) const {
  const size_t k = busy_marks.empty() ? 0 : std::min(i / kBusyStride, busy_marks.size() - 1);
  int64_t sum = busy_marks.empty() ? 0 : busy_marks[k];
  for (size_t j = k * kBusyStride; j < i; ++j) sum += dur(j);
  return sum;
}

int64_t Lane::covered_before(int64_t t) const {
  // Events before i ended by t; event i may straddle t. (In the overflow lane, whose events overlap, this is an
  // approximation — overlaps counted twice, a later event ended by t missed — clamped by busy_in to the span.)
  const size_t i = first_ending_after(t);
  int64_t covered = summed_dur(i);
  if (i < size() && starts[i] < t) covered += std::min(dur(i), t - starts[i]);
  return covered;
}

int64_t Lane::busy_in(int64_t a, int64_t b) const {
  if (b <= a || !size()) return 0;
  return std::clamp<int64_t>(covered_before(b) - covered_before(a), 0, b - a);
}

// Several ranks in one trace (merge_ranks_for_timeline) keep their ids apart with offsets: show the recorded ones.
int64_t TimelineModel::shown_pid(int64_t pid) const {
  return trace_->meta.count("ranks") && pid > 0 ? pid % analyzer::kRankPidBase : pid;
}

int64_t TimelineModel::shown_device(int64_t device) const {
  return trace_->meta.count("ranks") && device > 0 ? device % analyzer::kRankDeviceBase : device;
}

size_t TimelineModel::lane_bytes() const {
  size_t n = 0;
  for (const Track& tr : tracks_) {
    for (const Lane& l : tr.lanes) n += l.bytes();
    n += tr.sample_times.capacity() * sizeof(int64_t) + tr.sample_rows.capacity() * sizeof(uint32_t);
  }
  return n;
}

namespace {

struct Item {
  int64_t start, end;
  uint32_t row;
  EventKind kind;
};

// Limits pathological overlap (e.g. a trace with thousands of concurrent async ranges) to a bounded number
// of lanes; the last lane then may overlap, which Lane::max_end accounts for.
constexpr size_t kMaxLanes = 48;

// Stacks events into lanes: first lane whose last event has ended. For properly nested ranges sorted by
// (start, longest first) this is exactly their nesting depth; for a GPU stream it is one lane unless the
// trace has overlapping activities on that stream. `span_of(item)` gives an Item; items are released.
// Two passes (assign lanes, then fill columns reserved to their exact size) so building never holds grown,
// half-empty vectors: the peak memory is what the lanes keep plus one byte per event.
template <class T, class SpanOf>
std::vector<Lane> stack_into_lanes(std::vector<T>& items, const SpanOf& span_of) {
  auto before = [&](const T& a, const T& b) {
    const Item x = span_of(a), y = span_of(b);
    return x.start != y.start ? x.start < y.start : x.end > y.end;
  };
  if (!std::is_sorted(items.begin(), items.end(), before)) std::sort(items.begin(), items.end(), before);
  struct LaneInfo {
    size_t count = 0, longs = 0;
    int64_t last_end = std::numeric_limits<int64_t>::min();  // running maximum
    bool ends_sorted = true, mixed = false;
    EventKind kind = EventKind::Kernel;
  };
  std::vector<LaneInfo> info;
  std::vector<uint8_t> lane_of(items.size());
  static_assert(kMaxLanes <= 256);
  for (size_t k = 0; k < items.size(); ++k) {
    const Item it = span_of(items[k]);
    size_t lane = 0;
    while (lane < info.size() && info[lane].last_end > it.start) ++lane;
    if (lane >= kMaxLanes) lane = kMaxLanes - 1;
    if (lane >= info.size()) {
      info.emplace_back();
      info.back().kind = it.kind;
    }
    LaneInfo& li = info[lane];
    if (it.end < li.last_end) li.ends_sorted = false;
    li.mixed |= it.kind != li.kind;
    li.longs += static_cast<uint64_t>(it.end - it.start) >= Lane::kLongDur;
    li.last_end = std::max(li.last_end, it.end);
    ++li.count;
    lane_of[k] = static_cast<uint8_t>(lane);
  }
  std::vector<Lane> lanes(info.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    Lane& l = lanes[i];
    l.starts.reserve(info[i].count);
    l.durs.reserve(info[i].count);
    l.rows.reserve(info[i].count);
    if (info[i].mixed) l.kinds.reserve(info[i].count);
    l.kind_all = info[i].kind;
    l.long_durs.reserve(info[i].longs);
  }
  for (size_t k = 0; k < items.size(); ++k) {
    const Item it = span_of(items[k]);
    Lane& l = lanes[lane_of[k]];
    const uint64_t d = static_cast<uint64_t>(it.end - it.start);
    if (d >= Lane::kLongDur) l.long_durs.emplace_back(static_cast<uint32_t>(l.size()), static_cast<int64_t>(d));
    l.durs.push_back(d >= Lane::kLongDur ? Lane::kLongDur : static_cast<uint32_t>(d));
    l.starts.push_back(it.start);
    l.rows.push_back(it.row);
    if (info[lane_of[k]].mixed) l.kinds.push_back(it.kind);
  }
  for (Lane& l : lanes) l.index_busy();
  for (size_t i = 0; i < lanes.size(); ++i) {
    if (info[i].ends_sorted) continue;
    Lane& l = lanes[i];
    l.max_end.resize(l.size());
    int64_t m = std::numeric_limits<int64_t>::min();
    for (size_t j = 0; j < l.size(); ++j) l.max_end[j] = m = std::max(m, l.end(j));
  }
  std::vector<T>().swap(items);
  return lanes;
}

Item same(const Item& it) { return it; }

template <class Row>
Item item_of(const Row& r, uint32_t row, EventKind kind) {
  return Item{r.start, std::max(r.start, r.end), row, kind};
}

}  // namespace

std::shared_ptr<const TimelineModel> TimelineModel::build(std::shared_ptr<const store::Trace> trace,
                                                          std::shared_ptr<const analyzer::Analysis> analysis,
                                                          std::shared_ptr<const analyzer::MultiRankAnalysis> ranks) {
  std::shared_ptr<TimelineModel> m(new TimelineModel());
  m->trace_ = trace ? std::move(trace) : std::make_shared<store::Trace>();
  m->analysis_ = std::move(analysis);
  m->build_steps_and_findings();
  if (ranks) m->build_cross_rank(std::move(ranks));
  m->build_tracks();
  return m;
}

void TimelineModel::build_steps_and_findings() {
  const store::Trace& t = *trace_;
  if (analysis_ && !analysis_->steps.empty()) {
    for (const auto& s : analysis_->steps)
      steps_.push_back({s.index, s.start_ns, s.start_ns + std::max<int64_t>(0, s.dur_ns), bound_name(s.bound), s.warmup});
  } else {
    for (const auto& s : t.steps) steps_.push_back({s.index, s.start, std::max(s.start, s.end), "", false});
  }
  std::sort(steps_.begin(), steps_.end(), [](const StepInfo& a, const StepInfo& b) { return a.start < b.start; });

  if (analysis_) {
    for (const auto& f : analysis_->findings) {
      FindingInfo fi;
      fi.rule = f.rule;
      fi.severity = store::to_string(f.severity);
      fi.summary = f.summary;
      fi.suggestion = f.suggestion;
      fi.evidence_json = f.evidence_json;
      fi.steps = f.steps;
      for (const auto& r : f.ranges) fi.ranges.emplace_back(r.start_ns, std::max(r.start_ns, r.end_ns));
      fi.est_savings_us_per_step = f.est_savings_us_per_step;
      fi.share = f.share;
      findings_.push_back(std::move(fi));
    }
  } else {
    for (const auto& f : t.findings) {
      FindingInfo fi;
      fi.rule = t.str(f.rule);
      fi.severity = store::to_string(f.severity);
      fi.summary = t.str(f.message);
      fi.evidence_json = f.evidence_json;
      for (int64_t s = f.first_step; s >= 0 && s <= f.last_step; ++s) fi.steps.push_back(s);
      fi.est_savings_us_per_step = f.est_savings_ns / 1000.0;
      findings_.push_back(std::move(fi));
    }
  }
  for (size_t i = 0; i < findings_.size(); ++i) {
    auto ext = finding_extent(i);
    if (ext) {
      findings_[i].start = ext->first;
      findings_[i].end = ext->second;
    }
  }
}

int TimelineModel::step_position(int64_t step_index) const {
  for (size_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].index == step_index) return static_cast<int>(i);
  return -1;
}

std::optional<std::pair<int64_t, int64_t>> TimelineModel::steady_extent() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const StepInfo& s : steps_)
    if (!s.warmup) lo = std::min(lo, s.start), hi = std::max(hi, s.end);
  // A host that runs ahead queues work the GPU does later: the GPU's own steps belong in the frame too. They run
  // from a step's first GPU work to the next step's, so the last step has none: it is given the last one's length.
  if (analysis_ && !analysis_->gpu_steps.empty()) {
    for (const auto& g : analysis_->gpu_steps)
      if (!g.warmup && g.dur_ns > 0) lo = std::min(lo, g.start_ns), hi = std::max(hi, g.start_ns + g.dur_ns);
    const auto& last = analysis_->gpu_steps.back();
    hi = std::max(hi, last.start_ns + 2 * last.dur_ns);
  }
  if (lo >= hi) return std::nullopt;
  return std::make_pair(lo, hi);
}

std::vector<std::string> TimelineModel::run_notes() const {
  std::vector<std::string> out;
  if (!analysis_) return out;
  for (std::string n :
       {analyzer::no_gpu_note(analysis_->summary), analyzer::steps_advice(analysis_->summary)})
    if (!n.empty()) out.push_back(std::move(n));
  return out;
}

int TimelineModel::worst_finding() const {
  // A directory of ranks opens on the cross-rank findings (largest saving first): what the job waits for.
  if (!findings_.empty() && findings_.front().cross_rank) return 0;
  auto rank = [](const std::string& severity) { return severity == "high" ? 2 : severity == "medium" ? 1 : 0; };
  int best = -1;
  for (size_t i = 0; i < findings_.size(); ++i) {
    const FindingInfo& f = findings_[i];
    if (best < 0) {
      best = int(i);
      continue;
    }
    const FindingInfo& b = findings_[size_t(best)];
    const bool same_severity = rank(f.severity) == rank(b.severity);
    if (rank(f.severity) > rank(b.severity) || (same_severity && f.share > b.share) ||
        (same_severity && f.share == b.share && f.est_savings_us_per_step > b.est_savings_us_per_step))
      best = int(i);
  }
  return best;
}

std::optional<std::pair<int64_t, int64_t>> TimelineModel::finding_extent(size_t finding) const {
  if (finding >= findings_.size()) return std::nullopt;
  const FindingInfo& f = findings_[finding];
  if (f.cross_rank) {  // its first step, across every rank
    if (f.ranges.empty()) return std::nullopt;
    return f.ranges.front();
  }
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t s : f.steps) {
    int p = step_position(s);
    if (p < 0) continue;
    lo = std::min(lo, steps_[p].start);
    hi = std::max(hi, steps_[p].end);
  }
  if (lo > hi) {  // no steps: fall back to the evidence ranges
    for (const auto& r : f.ranges) {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (lo > hi) return std::nullopt;
  return std::make_pair(lo, hi);
}

namespace {

using Key = std::pair<int64_t, int64_t>;  // (pid, tid) or (device, stream)

// An event's time span, whichever table it lives in.
struct SpanOf {
  const store::Trace& t;
  const std::vector<GraphReplay>* replays = nullptr;
  Item operator()(EventRef e) const {
    switch (e.kind) {
      case EventKind::Kernel: return item_of(t.kernels[e.row], e.row, e.kind);
      case EventKind::Memcpy: return item_of(t.memcpys[e.row], e.row, e.kind);
      case EventKind::Memset: return item_of(t.memsets[e.row], e.row, e.kind);
      case EventKind::ApiCall: return item_of(t.api_calls[e.row], e.row, e.kind);
      case EventKind::Range: return item_of(t.ranges[e.row], e.row, e.kind);
      case EventKind::Sync: return item_of(t.syncs[e.row], e.row, e.kind);
      case EventKind::DataWait: return item_of(t.data_waits[e.row], e.row, e.kind);
      case EventKind::GraphReplay: {
        const GraphReplay& g = (*replays)[e.row];
        return Item{g.start, g.end, e.row, e.kind};
      }
      case EventKind::Step:
      case EventKind::Finding:
      case EventKind::PathSegment:
      case EventKind::RankPath:
      case EventKind::RankWait: break;
    }
    return Item{0, 0, e.row, e.kind};
  }
};

}  // namespace

// The trace's events as 8-byte references per future track: host events and data waits per thread, GPU activity
// per stream, samples per thread.
struct TimelineModel::EventsByTrack {
  using Refs = std::map<Key, std::vector<EventRef>>;
  Refs host, waits, gpu;
  Refs graph;  // per stream: the rows of CUDA graph replays (graph_id != 0), taken out of `gpu`
  std::map<Key, std::vector<std::pair<int64_t, uint32_t>>> samples;  // (time, samples row)
};

void TimelineModel::build_tracks() {
  const store::Trace& t = *trace_;
  // Recordings older than v4 said nothing and traced each replay as one interval (docs/schema.md).
  if (auto it = t.meta.find("gpu.graph_records"); it != t.meta.end()) {
    graph_records_ = it->second == "graph" ? "graph" : "nodes";
  } else {
    auto src = t.meta.find("source_format");
    const bool recording = (src != t.meta.end() && src->second == "stepscope-collector") || t.meta.count("recorder");
    graph_records_ = recording ? "graph" : "nodes";
  }
  EventsByTrack events = gather_events();
  add_analysis_tracks();
  add_gpu_tracks(events);
  add_thread_tracks(events);
  mark_straggler_groups();
  measure_extent();
  index_flows();
  index_names_and_stacks();
}

// Events are gathered per track as references (not copies of their times), counted first so each list is
// allocated once at its exact size; a wait inside another wait of the same thread is one wait seen by several
// sources and is kept once, its sources remembered.
TimelineModel::EventsByTrack TimelineModel::gather_events() {
  const store::Trace& t = *trace_;
  EventsByTrack ev;
  auto gpu_key = [](const auto& r) { return Key{r.device, r.stream}; };
  auto thread_key = [](const auto& r) { return Key{r.pid, r.tid}; };
  // Calls f(row index, key) with a cached map slot: consecutive rows usually share a key.
  auto gather = [](const auto& rows, const auto& key_of, auto& map, const auto& f) {
    using Slot = typename std::remove_reference_t<decltype(map)>::mapped_type;
    Slot* cur = nullptr;
    Key cur_key{};
    for (size_t i = 0; i < rows.size(); ++i) {
      const Key key = key_of(rows[i]);
      if (!cur || key != cur_key) {
        cur = &map[key];
        cur_key = key;
      }
      f(*cur, static_cast<uint32_t>(i));
    }
  };
  std::map<Key, size_t> gpu_n, host_n, waits_n;
  auto count = [](size_t& n, uint32_t) { ++n; };
  gather(t.kernels, gpu_key, gpu_n, count);
  gather(t.memcpys, gpu_key, gpu_n, count);
  gather(t.memsets, gpu_key, gpu_n, count);
  gather(t.api_calls, thread_key, host_n, count);
  gather(t.ranges, thread_key, host_n, count);
  gather(t.syncs, thread_key, host_n, count);
  gather(t.data_waits, thread_key, waits_n, count);
  for (const auto& [k, n] : gpu_n) ev.gpu[k].reserve(n);
  for (const auto& [k, n] : host_n) ev.host[k].reserve(n);
  for (const auto& [k, n] : waits_n) ev.waits[k].reserve(n);
  auto add = [](EventKind kind) {
    return [kind](std::vector<EventRef>& v, uint32_t row) { v.push_back({kind, row}); };
  };
  gather(t.kernels, gpu_key, ev.gpu, add(EventKind::Kernel));
  gather(t.memcpys, gpu_key, ev.gpu, add(EventKind::Memcpy));
  gather(t.memsets, gpu_key, ev.gpu, add(EventKind::Memset));
  gather(t.api_calls, thread_key, ev.host, add(EventKind::ApiCall));
  gather(t.ranges, thread_key, ev.host, add(EventKind::Range));
  gather(t.syncs, thread_key, ev.host, add(EventKind::Sync));
  gather(t.data_waits, thread_key, ev.waits, add(EventKind::DataWait));
  // A graph replay's rows are drawn as one block (and open into their own lanes): set them apart.
  auto graph_of = [&t](EventRef e) {
    return e.kind == EventKind::Kernel ? t.kernels[e.row].graph_id
           : e.kind == EventKind::Memcpy ? t.memcpys[e.row].graph_id
                                         : t.memsets[e.row].graph_id;
  };
  for (auto& [k, refs] : ev.gpu) {
    const size_t n = size_t(std::count_if(refs.begin(), refs.end(), [&](EventRef e) { return graph_of(e) != 0; }));
    if (!n) continue;
    std::vector<EventRef>& g = ev.graph[k];
    g.reserve(n);
    std::vector<EventRef> rest;
    rest.reserve(refs.size() - n);
    for (EventRef e : refs) (graph_of(e) ? g : rest).push_back(e);
    refs = std::move(rest);
  }
  for (auto& [k, refs] : ev.waits) {
    std::sort(refs.begin(), refs.end(), [&t](EventRef a, EventRef b) {
      const auto &x = t.data_waits[a.row], &y = t.data_waits[b.row];
      return x.start != y.start ? x.start < y.start : x.end != y.end ? x.end > y.end : a.row < b.row;
    });
    std::vector<EventRef> kept;
    kept.reserve(refs.size());
    for (EventRef r : refs) {
      const auto& w = t.data_waits[r.row];
      if (!kept.empty() && w.end <= t.data_waits[kept.back().row].end) {
        std::string& srcs = wait_sources_[kept.back().row];
        if (srcs.empty()) srcs = t.str(t.data_waits[kept.back().row].source);
        const std::string s = t.str(w.source);
        if (!s.empty() && (", " + srcs + ", ").find(", " + s + ", ") == std::string::npos) srcs += ", " + s;
        continue;
      }
      kept.push_back(r);
    }
    refs = std::move(kept);
  }
  for (size_t i = 0; i < t.samples.size(); ++i)
    ev.samples[{t.samples[i].pid, t.samples[i].tid}].emplace_back(t.samples[i].time, static_cast<uint32_t>(i));
  return ev;
}

// What the user looks for first comes first: the analysis, then the GPU (busiest stream first), then per process
// the threads that launch GPU work or wait for data.
void TimelineModel::add_analysis_tracks() {
  if (!steps_.empty()) {
    Track tr;
    tr.kind = TrackKind::Steps;
    tr.group = "Analysis";
    tr.title = "Steps";
    std::vector<Item> items;
    for (size_t i = 0; i < steps_.size(); ++i)
      items.push_back({steps_[i].start, steps_[i].end, static_cast<uint32_t>(i), EventKind::Step});
    tr.lanes = stack_into_lanes(items, same);
    steps_track_ = static_cast<int>(tracks_.size());
    tracks_.push_back(std::move(tr));
  }
  if (analysis_ && !analysis_->critical_path.path.empty()) {
    // The analyzer's critical path through the traced steps, stretch by stretch (docs/critical-path.md).
    Track tr;
    tr.kind = TrackKind::CriticalPath;
    tr.group = "Analysis";
    tr.title = "Critical path";
    const auto& path = analysis_->critical_path.path;
    std::vector<Item> items;
    items.reserve(path.size());
    for (size_t i = 0; i < path.size(); ++i)
      items.push_back({path[i].start, path[i].end, static_cast<uint32_t>(i), EventKind::PathSegment});
    tr.lanes = stack_into_lanes(items, same);
    path_track_ = static_cast<int>(tracks_.size());
    tracks_.push_back(std::move(tr));
  }
  if (!findings_.empty()) {
    Track tr;
    tr.kind = TrackKind::Findings;
    tr.group = "Analysis";
    tr.title = "Findings";
    std::vector<Item> items;
    for (size_t i = 0; i < findings_.size(); ++i) {
      const FindingInfo& f = findings_[i];
      bool any = false;
      for (int64_t s : f.cross_rank ? std::vector<int64_t>() : f.steps) {
        int p = step_position(s);
        if (p < 0) continue;
        items.push_back({steps_[p].start, steps_[p].end, static_cast<uint32_t>(i), EventKind::Finding});
        any = true;
      }
      if (!any)
        for (const auto& r : f.ranges) items.push_back({r.first, r.second, static_cast<uint32_t>(i), EventKind::Finding});
    }
    tr.lanes = stack_into_lanes(items, same);
    findings_track_ = static_cast<int>(tracks_.size());
    tracks_.push_back(std::move(tr));
  }
  add_rank_tracks();
}

// A directory of ranks: one track per rank, in rank order, under the analysis: the job's critical path as it
// moves from rank to rank (own work, then transfer, round by round), and the rank's collectives that waited
// for the straggler in a lane below.
void TimelineModel::add_rank_tracks() {
  if (!cross_rank_) return;
  CrossRank& cr = *cross_rank_;
  const size_t n = cr.analysis->ranks.size();
  std::vector<std::vector<Item>> path(n), waits(n);
  for (size_t i = 0; i < cr.path.size(); ++i)
    path[cr.path[i].rank].push_back({cr.path[i].start, cr.path[i].end, uint32_t(i), EventKind::RankPath});
  for (size_t i = 0; i < cr.delayed.size(); ++i)
    waits[cr.delayed[i].rank].push_back({cr.delayed[i].start, cr.delayed[i].end, uint32_t(i), EventKind::RankWait});
  cr.track.assign(n, -1);
  for (size_t r = 0; r < n; ++r) {
    if (cr.merged[r] < 0) continue;
    Track tr;
    tr.kind = TrackKind::RankLane;
    tr.group = "Job critical path across ranks";
    tr.title = rank_name(uint32_t(r)) + (int(r) == cr.straggler ? " · straggler" : "");
    tr.lanes = stack_into_lanes(path[r], same);
    if (tr.lanes.empty()) tr.lanes.emplace_back();  // lane 0 is the path's, on every rank
    for (Lane& l : stack_into_lanes(waits[r], same)) tr.lanes.push_back(std::move(l));
    cr.track[r] = static_cast<int>(tracks_.size());
    tracks_.push_back(std::move(tr));
  }
}

void TimelineModel::add_gpu_tracks(EventsByTrack& events) {
  const store::Trace& t = *trace_;
  std::map<int64_t, std::string> device_names;
  for (const auto& d : t.devices) device_names[d.id] = t.str(d.name);
  const SpanOf span_of{t, &replays_};
  const size_t first_gpu = tracks_.size();
  for (const auto& kv : events.graph) events.gpu[kv.first];  // a stream running only graphs
  for (auto& [key, items] : events.gpu) {
    auto [device, stream] = key;
    Track tr;
    tr.kind = TrackKind::GpuStream;
    tr.group = "GPU " + std::to_string(shown_device(device));
    if (auto it = device_names.find(device); it != device_names.end() && !it->second.empty())
      tr.group += " " + it->second;
    tr.title = "Stream " + std::to_string(stream);
    tr.device = device;
    tr.stream = stream;
    for (EventRef e : items) {
      const Item it = span_of(e);
      tr.busy_ns += it.end - it.start;
    }
    if (auto g = events.graph.find(key); g != events.graph.end()) {
      for (EventRef e : g->second) {
        const Item it = span_of(e);
        tr.busy_ns += it.end - it.start;
      }
      const std::vector<EventRef> blocks = gather_replays(g->second, tr.graphs_open_inside);
      items.insert(items.end(), blocks.begin(), blocks.end());
      tr.graph_lanes = stack_into_lanes(g->second, span_of);
    }
    tr.lanes = stack_into_lanes(items, span_of);
    tracks_.push_back(std::move(tr));
  }
  std::stable_sort(tracks_.begin() + ptrdiff_t(first_gpu), tracks_.end(), [](const Track& a, const Track& b) {
    return a.device != b.device ? a.device < b.device : a.busy_ns > b.busy_ns;
  });
  for (size_t i = first_gpu; i < tracks_.size(); ++i) gpu_track_[{tracks_[i].device, tracks_[i].stream}] = static_cast<int>(i);
  std::sort(replay_of_.begin(), replay_of_.end());
}

// A stream's graph rows as replays: the rows of one launch (one correlation id), or without one, consecutive rows of
// one graph until a node repeats. Rows recorded one interval a replay are each a replay.
std::vector<EventRef> TimelineModel::gather_replays(std::vector<EventRef>& rows, bool& opens) {
  const store::Trace& t = *trace_;
  struct Rec {
    int64_t pid, graph, node, corr, start, end;
  };
  auto rec = [&t](EventRef e) {
    auto of = [](const auto& r) { return Rec{r.pid, r.graph_id, r.graph_node_id, r.correlation, r.start, std::max(r.start, r.end)}; };
    return e.kind == EventKind::Memcpy   ? of(t.memcpys[e.row])
           : e.kind == EventKind::Memset ? of(t.memsets[e.row])
                                         : of(t.kernels[e.row]);
  };
  std::sort(rows.begin(), rows.end(), [&](EventRef a, EventRef b) {
    const Rec x = rec(a), y = rec(b);
    if ((x.corr != 0) != (y.corr != 0)) return x.corr != 0;
    if (x.corr)
      return std::tie(x.pid, x.corr, x.graph, x.start, a.kind, a.row) < std::tie(y.pid, y.corr, y.graph, y.start, b.kind, b.row);
    return std::tie(x.start, x.pid, x.graph, a.kind, a.row) < std::tie(y.start, y.pid, y.graph, b.kind, b.row);
  });
  const bool whole = graph_records_ == "graph";
  std::vector<EventRef> out;
  std::set<int64_t> nodes;
  for (size_t i = 0; i < rows.size();) {
    const Rec first = rec(rows[i]);
    GraphReplay g;
    g.pid = first.pid;
    g.graph_id = first.graph;
    g.correlation = first.corr;
    g.start = first.start;
    g.end = first.end;
    g.whole = whole;
    g.first = static_cast<uint32_t>(replay_records_.size());
    nodes.clear();
    if (first.node) nodes.insert(first.node);
    size_t j = i + 1;
    for (; !whole && j < rows.size(); ++j) {
      const Rec r = rec(rows[j]);
      if (r.pid != first.pid || r.graph != first.graph || r.corr != first.corr) break;
      if (!first.corr && r.node && !nodes.insert(r.node).second) break;  // the graph's next replay
      g.start = std::min(g.start, r.start);
      g.end = std::max(g.end, r.end);
    }
    const size_t at = replay_records_.size();
    replay_records_.insert(replay_records_.end(), rows.begin() + ptrdiff_t(i), rows.begin() + ptrdiff_t(j));
    std::stable_sort(replay_records_.begin() + ptrdiff_t(at), replay_records_.end(),
                     [&](EventRef a, EventRef b) { return rec(a).start < rec(b).start; });
    g.count = static_cast<uint32_t>(j - i);
    for (size_t k = i; k < j; ++k)
      replay_of_.emplace_back(uint64_t(rows[k].kind) << 32 | rows[k].row, static_cast<uint32_t>(replays_.size()));
    const auto& any = rows[i];
    if (any.kind == EventKind::Kernel) g.device = t.kernels[any.row].device, g.stream = t.kernels[any.row].stream;
    else if (any.kind == EventKind::Memcpy) g.device = t.memcpys[any.row].device, g.stream = t.memcpys[any.row].stream;
    else g.device = t.memsets[any.row].device, g.stream = t.memsets[any.row].stream;
    opens |= !whole;
    out.push_back({EventKind::GraphReplay, static_cast<uint32_t>(replays_.size())});
    replays_.push_back(g);
    i = j;
  }
  return out;
}

std::vector<EventRef> TimelineModel::replay_records(uint32_t replay) const {
  const GraphReplay& g = replays_.at(replay);
  return std::vector<EventRef>(replay_records_.begin() + g.first, replay_records_.begin() + g.first + g.count);
}

std::optional<uint32_t> TimelineModel::replay_of(EventRef e) const {
  const uint64_t key = uint64_t(e.kind) << 32 | e.row;
  auto it = std::lower_bound(replay_of_.begin(), replay_of_.end(), key,
                             [](const std::pair<uint64_t, uint32_t>& p, uint64_t v) { return p.first < v; });
  if (it == replay_of_.end() || it->first != key) return std::nullopt;
  return it->second;
}

const store::Graph* TimelineModel::graph_row(int64_t pid, int64_t graph_id) const {
  auto it = graph_row_.find({pid, graph_id});
  return it == graph_row_.end() ? nullptr : &trace_->graphs[size_t(it->second)];
}

GraphNodeOrigin TimelineModel::graph_node_origin(int64_t pid, int64_t node_id) const {
  GraphNodeOrigin o;
  auto node = [&](int64_t id) -> const store::GraphNode* {
    auto it = node_row_.find({pid, id});
    return it == node_row_.end() ? nullptr : &trace_->graph_nodes[size_t(it->second)];
  };
  o.node = o.captured = node_id ? node(node_id) : nullptr;
  if (!o.node) return o;
  // An instantiated graph's node is a clone of the captured one (a clone of a clone, for a cloned graph).
  for (int guard = 0; guard < 16 && o.captured->source_node_id && o.captured->source_node_id != o.captured->node_id; ++guard) {
    const store::GraphNode* src = node(o.captured->source_node_id);
    if (!src) break;
    o.captured = src;
  }
  o.graph = graph_row(pid, o.node->graph_id);
  o.captured_graph = graph_row(pid, o.captured->graph_id);
  return o;
}

// Per process, first the threads that launch GPU work, sync with it, wait for data or hold the recorded steps;
// the other threads are folded (Track::folded) into one "N other threads" row that the layout expands on request.
void TimelineModel::add_thread_tracks(EventsByTrack& events) {
  const store::Trace& t = *trace_;
  auto& host = events.host;
  auto& waits = events.waits;
  auto& samples = events.samples;
  std::map<int64_t, std::string> process_names;
  for (const auto& p : t.processes) process_names[p.pid] = t.str(p.name);
  std::map<Key, std::string> thread_names;
  for (const auto& th : t.threads) thread_names[{th.pid, th.tid}] = t.str(th.name);
  const SpanOf span_of{t};
  auto process_label = [&](int64_t pid) {
    std::string s = "Process " + std::to_string(shown_pid(pid));
    auto it = process_names.find(pid);
    if (it != process_names.end() && !it->second.empty()) s += " " + it->second;
    return s;
  };
  std::set<Key> launches;  // threads that launch GPU work (an API call with a correlation id) or sync with it
  for (const auto& a : t.api_calls)
    if (a.correlation) launches.insert({a.pid, a.tid});
  for (const auto& s : t.syncs) launches.insert({s.pid, s.tid});  // a thread blocking on the GPU matters too
  std::map<int64_t, std::vector<Key>> threads_of;  // pid → threads
  {
    std::set<Key> threads;
    for (const auto& [k, v] : host) threads.insert(k);
    for (const auto& [k, v] : waits) threads.insert(k);
    for (const auto& [k, v] : samples) threads.insert(k);
    for (const Key& k : threads) threads_of[k.first].push_back(k);
  }
  auto events_of = [&](const Key& k) {
    size_t n = 0;
    if (auto it = host.find(k); it != host.end()) n += it->second.size();
    if (auto it = waits.find(k); it != waits.end()) n += it->second.size();
    if (auto it = samples.find(k); it != samples.end()) n += it->second.size();
    return n;
  };
  auto thread_title = [&](const Key& k) {
    auto it = thread_names.find(k);
    if (it != thread_names.end() && !it->second.empty())  // Kineto's names already hold the id: "thread 25738 (python)"
      return it->second.find(std::to_string(k.second)) != std::string::npos ? it->second
                                                                            : it->second + " " + std::to_string(k.second);
    // CUPTI reports API calls under its own thread id, which no thread record names.
    if (launches.count(k) && !samples.count(k) && !waits.count(k)) return "CUDA API · thread " + std::to_string(k.second);
    return "Thread " + std::to_string(k.second);
  };
  std::set<Key> stepping;  // threads whose steps the store recorded (the training loop)
  for (const auto& st : t.steps) stepping.insert({st.pid, st.tid});
  for (auto& [pid, keys] : threads_of) {
    std::vector<Key> key_threads, others;
    for (const Key& k : keys) (launches.count(k) || waits.count(k) || stepping.count(k) ? key_threads : others).push_back(k);
    // Older recordings put CUDA calls under CUPTI's thread ids, which no OS thread has: then the thread that
    // launched them is unknown, and the process's most-sampled thread is the best guess at it.
    if (std::none_of(key_threads.begin(), key_threads.end(), [&](const Key& k) { return samples.count(k) > 0; })) {
      auto sampled = [&](const Key& k) {
        auto it = samples.find(k);
        return it == samples.end() ? size_t(0) : it->second.size();
      };
      auto most = std::max_element(others.begin(), others.end(),
                                   [&](const Key& a, const Key& b) { return sampled(a) < sampled(b); });
      if (most != others.end() && sampled(*most) > 0) {
        key_threads.push_back(*most);
        others.erase(most);
      }
    }
    // Named threads (the OS threads the samples and data waits are on) before CUPTI's API-call rows.
    auto busiest = [&](const Key& a, const Key& b) {
      const bool ta = thread_names.count(a), tb = thread_names.count(b);
      if (ta != tb) return ta;
      const size_t na = events_of(a), nb = events_of(b);
      return na != nb ? na > nb : a.second < b.second;
    };
    std::stable_sort(key_threads.begin(), key_threads.end(), busiest);
    // Folding pays only when a process has threads that matter and more than one other.
    const bool fold = !key_threads.empty() && others.size() > 1;
    if (!fold) {
      key_threads.insert(key_threads.end(), others.begin(), others.end());
      others.clear();
    }
    const std::string group = process_label(pid);
    for (int part = 0; part < 2; ++part) {
      for (const Key& key : part == 0 ? key_threads : others) {
        const auto p = key.first, tid = key.second;  // not a structured binding: clang 14 cannot capture one
        const std::string title = thread_title(key);
        auto base = [&](TrackKind kind, std::string t) {
          Track tr;
          tr.kind = kind;
          tr.group = group;
          tr.title = std::move(t);
          tr.pid = p;
          tr.tid = tid;
          tr.folded = part == 1;
          return tr;
        };
        if (auto it = samples.find(key); it != samples.end()) {
          Track tr = base(TrackKind::CpuSamples, title + " · samples");
          auto& v = it->second;
          std::sort(v.begin(), v.end());
          for (auto& [time, row] : v) {
            tr.sample_times.push_back(time);
            tr.sample_rows.push_back(row);
          }
          samples_track_[key] = static_cast<int>(tracks_.size());
          tracks_.push_back(std::move(tr));
        }
        if (auto it = host.find(key); it != host.end()) {
          Track tr = base(TrackKind::CpuRanges, title);
          tr.lanes = stack_into_lanes(it->second, span_of);
          ranges_track_[key] = static_cast<int>(tracks_.size());
          tracks_.push_back(std::move(tr));
        }
        if (auto it = waits.find(key); it != waits.end()) {
          Track tr = base(TrackKind::DataWaits, title + " · data waits");
          tr.lanes = stack_into_lanes(it->second, span_of);
          waits_track_[key] = static_cast<int>(tracks_.size());
          tracks_.push_back(std::move(tr));
        }
      }
    }
  }
}

// The time the tracks span and how many events they hold.
void TimelineModel::measure_extent() {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const Track& tr : tracks_) {
    for (size_t li = 0; li < tr.all_lanes(); ++li) {
      const Lane& l = tr.lane_at(li);
      event_count_ += l.size();
      if (l.size()) {
        lo = std::min(lo, l.starts.front());
        hi = std::max(hi, l.max_end_at(l.size() - 1));
      }
    }
    if (!tr.sample_times.empty()) {
      event_count_ += tr.sample_times.size();
      lo = std::min(lo, tr.sample_times.front());
      hi = std::max(hi, tr.sample_times.back());
    }
  }
  event_count_ -= replays_.size();  // a replay's block stands for its rows, which are counted
  if (lo > hi) lo = hi = 0;
  begin_ = lo;
  end_ = std::max(hi, lo + 1);
}

// Flows between host and device: launch calls and the GPU work they launched, as sorted arrays of correlation ids.
void TimelineModel::index_flows() {
  const store::Trace& t = *trace_;
  {
    size_t n = 0;
    for (const auto& a : t.api_calls) n += a.correlation != 0;
    api_by_correlation_.reserve(n);
    for (size_t i = 0; i < t.api_calls.size(); ++i)
      if (t.api_calls[i].correlation) api_by_correlation_.emplace_back(t.api_calls[i].correlation, static_cast<uint32_t>(i));
    // The first call with a correlation id is its launch (as ids are unique per process, duplicates are rare).
    if (!std::is_sorted(api_by_correlation_.begin(), api_by_correlation_.end()))
      std::sort(api_by_correlation_.begin(), api_by_correlation_.end());
    api_by_correlation_.erase(std::unique(api_by_correlation_.begin(), api_by_correlation_.end(),
                                          [](const auto& a, const auto& b) { return a.first == b.first; }),
                              api_by_correlation_.end());
  }
  // Traces without API calls (or without correlation ids) have no flows: skip the GPU side entirely.
  if (!api_by_correlation_.empty()) {
    size_t n = 0;
    for (const auto& k : t.kernels) n += k.correlation != 0;
    for (const auto& k : t.memcpys) n += k.correlation != 0;
    for (const auto& k : t.memsets) n += k.correlation != 0;
    gpu_by_correlation_.reserve(n);
    auto add_flow = [&](const auto& rows, EventKind kind) {
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].correlation) gpu_by_correlation_.push_back({rows[i].correlation, {kind, static_cast<uint32_t>(i)}});
    };
    add_flow(t.kernels, EventKind::Kernel);
    add_flow(t.memcpys, EventKind::Memcpy);
    add_flow(t.memsets, EventKind::Memset);
    // Order by correlation, then kind and row (the order launched_by lists them in).
    auto before = [](const std::pair<int64_t, EventRef>& a, const std::pair<int64_t, EventRef>& b) {
      if (a.first != b.first) return a.first < b.first;
      if (a.second.kind != b.second.kind) return a.second.kind < b.second.kind;
      return a.second.row < b.second.row;
    };
    if (!std::is_sorted(gpu_by_correlation_.begin(), gpu_by_correlation_.end(), before))
      std::sort(gpu_by_correlation_.begin(), gpu_by_correlation_.end(), before);
    // Keep only GPU events whose launch is in the trace: one merge walk over both sorted arrays.
    size_t out = 0, a = 0;
    for (size_t i = 0; i < gpu_by_correlation_.size(); ++i) {
      const int64_t c = gpu_by_correlation_[i].first;
      while (a < api_by_correlation_.size() && api_by_correlation_[a].first < c) ++a;
      if (a < api_by_correlation_.size() && api_by_correlation_[a].first == c)
        gpu_by_correlation_[out++] = gpu_by_correlation_[i];
    }
    gpu_by_correlation_.resize(out);
    if (out < gpu_by_correlation_.capacity() / 2) gpu_by_correlation_.shrink_to_fit();
  }
}

// Lookups for details and names: samples in time order, short display names, stack and frame rows by id.
void TimelineModel::index_names_and_stacks() {
  const store::Trace& t = *trace_;
  samples_by_time_.resize(t.samples.size());
  for (size_t i = 0; i < t.samples.size(); ++i) samples_by_time_[i] = static_cast<uint32_t>(i);
  std::stable_sort(samples_by_time_.begin(), samples_by_time_.end(),
                   [&](uint32_t a, uint32_t b) { return t.samples[a].time < t.samples[b].time; });
  {  // Short display names, once per distinct kernel or range name (few thousand even in 10M events).
    std::vector<uint8_t> used(t.strings.size());  // a byte per string, not a set insert per event
    auto mark = [&](store::StringId id) {
      if (id >= 0 && size_t(id) < used.size()) used[size_t(id)] = 1;
    };
    for (const auto& k : t.kernels) mark(k.name);
    for (const auto& r : t.ranges) mark(r.name);
    for (size_t i = 0; i < used.size(); ++i) {
      if (!used[i]) continue;
      const store::StringId id = static_cast<store::StringId>(i);
      const std::string& full = t.str(id);
      std::string shown = analyzer::short_symbol(full);
      if (shown != full) short_names_.emplace(id, std::move(shown));
    }
  }
  for (size_t i = 0; i < t.stacks.size(); ++i) stack_row_[t.stacks[i].id] = static_cast<uint32_t>(i);
  for (size_t i = 0; i < t.frames.size(); ++i) frame_row_[t.frames[i].id] = static_cast<uint32_t>(i);
  for (size_t i = 0; i < t.graphs.size(); ++i) graph_row_.emplace(Key{t.graphs[i].pid, t.graphs[i].graph_id}, int(i));
  for (size_t i = 0; i < t.graph_nodes.size(); ++i)
    node_row_.emplace(Key{t.graph_nodes[i].pid, t.graph_nodes[i].node_id}, int(i));
}

int64_t TimelineModel::start_of(EventRef e) const {
  const store::Trace& t = *trace_;
  switch (e.kind) {
    case EventKind::Kernel: return t.kernels[e.row].start;
    case EventKind::Memcpy: return t.memcpys[e.row].start;
    case EventKind::Memset: return t.memsets[e.row].start;
    case EventKind::ApiCall: return t.api_calls[e.row].start;
    case EventKind::Range: return t.ranges[e.row].start;
    case EventKind::Sync: return t.syncs[e.row].start;
    case EventKind::DataWait: return t.data_waits[e.row].start;
    case EventKind::Step: return steps_[e.row].start;
    case EventKind::Finding: return findings_[e.row].start;
    case EventKind::PathSegment: return analysis_->critical_path.path[e.row].start;
    case EventKind::GraphReplay: return replays_[e.row].start;
    case EventKind::RankPath: return cross_rank_->path[e.row].start;
    case EventKind::RankWait: return cross_rank_->delayed[e.row].start;
  }
  return 0;
}

int64_t TimelineModel::end_of(EventRef e) const {
  const store::Trace& t = *trace_;
  int64_t end = 0;
  switch (e.kind) {
    case EventKind::Kernel: end = t.kernels[e.row].end; break;
    case EventKind::Memcpy: end = t.memcpys[e.row].end; break;
    case EventKind::Memset: end = t.memsets[e.row].end; break;
    case EventKind::ApiCall: end = t.api_calls[e.row].end; break;
    case EventKind::Range: end = t.ranges[e.row].end; break;
    case EventKind::Sync: end = t.syncs[e.row].end; break;
    case EventKind::DataWait: end = t.data_waits[e.row].end; break;
    case EventKind::Step: end = steps_[e.row].end; break;
    case EventKind::Finding: end = findings_[e.row].end; break;
    case EventKind::PathSegment: end = analysis_->critical_path.path[e.row].end; break;
    case EventKind::GraphReplay: end = replays_[e.row].end; break;
    case EventKind::RankPath: end = cross_rank_->path[e.row].end; break;
    case EventKind::RankWait: end = cross_rank_->delayed[e.row].end; break;
  }
  return std::max(end, start_of(e));
}

std::string TimelineModel::full_name_of(EventRef e) const {
  const store::Trace& t = *trace_;
  if (e.kind == EventKind::Kernel) return analyzer::full_symbol(t.str(t.kernels[e.row].name));
  if (e.kind == EventKind::Range) return t.str(t.ranges[e.row].name);
  return name_of(e);
}

std::string TimelineModel::wait_sources(uint32_t row) const {
  auto all = wait_sources_.find(row);
  return all != wait_sources_.end() ? all->second : trace_->str(trace_->data_waits[row].source);
}

std::string TimelineModel::name_of(EventRef e) const {
  const store::Trace& t = *trace_;
  auto shown = [&](store::StringId id) {
    auto it = short_names_.find(id);
    return it != short_names_.end() ? it->second : t.str(id);
  };
  switch (e.kind) {
    case EventKind::Kernel: return shown(t.kernels[e.row].name);
    case EventKind::Memcpy: {
      const auto& m = t.memcpys[e.row];
      return std::string("Memcpy ") + store::to_string(m.kind);
    }
    case EventKind::Memset: return "Memset";
    case EventKind::ApiCall: return t.str(t.api_calls[e.row].name);
    case EventKind::Range: return shown(t.ranges[e.row].name);
    case EventKind::Sync: return std::string("Sync (") + store::to_string(t.syncs[e.row].type) + ")";
    case EventKind::DataWait: {
      const std::string src = wait_sources(e.row);
      return src.empty() ? "Data wait" : "Data wait (" + src + ")";
    }
    case EventKind::Step: {
      const StepInfo& s = steps_[e.row];
      std::string n = "Step " + std::to_string(s.index);
      if (!s.bound.empty()) n += " · " + s.bound + "-bound";
      return n;
    }
    case EventKind::Finding: return findings_[e.row].rule;
    case EventKind::PathSegment: {
      const auto& sg = analysis_->critical_path.path[e.row];
      return std::string(analyzer::to_string(sg.kind)) + ": " + std::string(sg.what);
    }
    case EventKind::GraphReplay: {
      const GraphReplay& g = replays_[e.row];
      std::string vendor;
      for (const auto& d : t.devices)
        if (d.id == g.device) vendor = t.str(d.vendor);
      return (vendor == "amd" ? "HIP graph " : "CUDA graph ") + std::to_string(g.graph_id);
    }
    case EventKind::RankPath: {
      const RankPathSegment& sg = cross_rank_->path[e.row];
      return rank_name(sg.rank) + (sg.transfer ? " · transfer" : " · own work");
    }
    case EventKind::RankWait: {
      const DelayedCollective& d = cross_rank_->delayed[e.row];
      return d.call->name + " · waited for " + rank_name(uint32_t(cross_rank_->straggler));
    }
  }
  return {};
}

uint32_t TimelineModel::colour_key(EventRef e) const {
  const store::Trace& t = *trace_;
  switch (e.kind) {
    case EventKind::Kernel: return static_cast<uint32_t>(t.kernels[e.row].name) & ~kSpecialMask;
    case EventKind::ApiCall: return static_cast<uint32_t>(t.api_calls[e.row].name) & ~kSpecialMask;
    case EventKind::Range: return static_cast<uint32_t>(t.ranges[e.row].name) & ~kSpecialMask;
    case EventKind::Memcpy: return kMemcpyKey | static_cast<uint32_t>(t.memcpys[e.row].kind);
    case EventKind::Memset: return kMemsetKey;
    case EventKind::Sync: return kSyncKey;
    case EventKind::DataWait: return kDataWaitKey;
    case EventKind::Step: return kStepKey | bound_code(steps_[e.row].bound);
    case EventKind::Finding: {
      const std::string& s = findings_[e.row].severity;
      return kFindingKey | (s == "high" ? 2u : s == "medium" ? 1u : 0u);
    }
    case EventKind::PathSegment: return kPathKey | static_cast<uint32_t>(analysis_->critical_path.path[e.row].kind);
    case EventKind::GraphReplay: return kGraphKey | static_cast<uint32_t>(replays_[e.row].graph_id & 0xFFFF);
    case EventKind::RankPath: return kRankPathKey | (cross_rank_->path[e.row].transfer ? 1u : 0u);
    case EventKind::RankWait: return kRankWaitKey;
  }
  return 0;
}

std::optional<uint32_t> TimelineModel::launching_api_call(EventRef e) const {
  int64_t corr = 0;
  const store::Trace& t = *trace_;
  if (e.kind == EventKind::Kernel) corr = t.kernels[e.row].correlation;
  else if (e.kind == EventKind::Memcpy) corr = t.memcpys[e.row].correlation;
  else if (e.kind == EventKind::Memset) corr = t.memsets[e.row].correlation;
  else if (e.kind == EventKind::GraphReplay) corr = replays_[e.row].correlation;
  if (!corr) return std::nullopt;
  auto it = std::lower_bound(api_by_correlation_.begin(), api_by_correlation_.end(), corr,
                             [](const std::pair<int64_t, uint32_t>& p, int64_t v) { return p.first < v; });
  if (it == api_by_correlation_.end() || it->first != corr) return std::nullopt;
  return it->second;
}

std::vector<EventRef> TimelineModel::launched_by(uint32_t api_row) const {
  const auto& a = trace_->api_calls.at(api_row);
  if (!a.correlation) return {};
  auto it = std::lower_bound(gpu_by_correlation_.begin(), gpu_by_correlation_.end(), a.correlation,
                             [](const std::pair<int64_t, EventRef>& p, int64_t v) { return p.first < v; });
  std::vector<EventRef> out;
  for (; it != gpu_by_correlation_.end() && it->first == a.correlation; ++it) out.push_back(it->second);
  return out;
}

std::optional<TimelineModel::Location> TimelineModel::locate(EventRef e) const {
  const store::Trace& t = *trace_;
  int track = -1;
  auto find = [](const PairMap& m, int64_t a, int64_t b) {
    auto it = m.find({a, b});
    return it == m.end() ? -1 : it->second;
  };
  switch (e.kind) {
    case EventKind::Kernel: track = find(gpu_track_, t.kernels[e.row].device, t.kernels[e.row].stream); break;
    case EventKind::Memcpy: track = find(gpu_track_, t.memcpys[e.row].device, t.memcpys[e.row].stream); break;
    case EventKind::Memset: track = find(gpu_track_, t.memsets[e.row].device, t.memsets[e.row].stream); break;
    case EventKind::ApiCall: track = find(ranges_track_, t.api_calls[e.row].pid, t.api_calls[e.row].tid); break;
    case EventKind::Range: track = find(ranges_track_, t.ranges[e.row].pid, t.ranges[e.row].tid); break;
    case EventKind::Sync: track = find(ranges_track_, t.syncs[e.row].pid, t.syncs[e.row].tid); break;
    case EventKind::DataWait: track = find(waits_track_, t.data_waits[e.row].pid, t.data_waits[e.row].tid); break;
    case EventKind::Step: track = steps_track_; break;
    case EventKind::Finding: track = findings_track_; break;
    case EventKind::PathSegment: track = path_track_; break;
    case EventKind::GraphReplay: track = find(gpu_track_, replays_[e.row].device, replays_[e.row].stream); break;
    case EventKind::RankPath: track = cross_rank_->track[cross_rank_->path[e.row].rank]; break;
    case EventKind::RankWait: track = cross_rank_->track[cross_rank_->delayed[e.row].rank]; break;
  }
  if (track < 0) return std::nullopt;
  const int64_t start = start_of(e);
  const Track& tr = tracks_[track];
  for (size_t li = 0; li < tr.all_lanes(); ++li) {  // a graph's row: in graph_lanes, numbered after lanes
    const Lane& l = tr.lane_at(li);
    for (size_t i = l.first_starting_at_or_after(start); i < l.size() && l.starts[i] == start; ++i)
      if (l.rows[i] == e.row && l.kind(i) == e.kind) return Location{track, static_cast<int>(li), i};
  }
  return std::nullopt;
}

std::optional<uint32_t> TimelineModel::sample_near(int64_t pid, int64_t tid, int64_t at, int64_t window) const {
  auto it = samples_track_.find({pid, tid});
  if (it == samples_track_.end()) return std::nullopt;
  const Track& tr = tracks_[it->second];
  const auto& v = tr.sample_times;
  size_t i = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), at) - v.begin());
  std::optional<uint32_t> best;
  int64_t best_d = window + 1;
  for (size_t k : {i, i - 1}) {
    if (k >= v.size()) continue;  // i - 1 wraps when i == 0
    int64_t d = v[k] > at ? v[k] - at : at - v[k];
    if (d < best_d) {
      best_d = d;
      best = tr.sample_rows[k];
    }
  }
  return best;
}

std::vector<uint32_t> TimelineModel::stack_frames(int64_t stack_id) const {
  std::vector<uint32_t> out;
  const store::Trace& t = *trace_;
  for (int guard = 0; stack_id != 0 && guard < 4096; ++guard) {
    auto it = stack_row_.find(stack_id);
    if (it == stack_row_.end()) break;
    const store::Stack& s = t.stacks[it->second];
    auto f = frame_row_.find(s.frame);
    if (f != frame_row_.end()) out.push_back(f->second);
    stack_id = s.parent;
  }
  return out;
}

std::string TimelineModel::frame_name(uint32_t frame_row, bool full) const {
  return analyzer::frame_display_name(*trace_, trace_->frames.at(frame_row), full);
}

std::vector<EventRef> TimelineModel::enclosing_ranges(int64_t pid, int64_t tid, int64_t start, int64_t end) const {
  std::vector<EventRef> out;
  auto it = ranges_track_.find({pid, tid});
  if (it == ranges_track_.end()) return out;
  for (const Lane& l : tracks_[it->second].lanes) {
    size_t k = l.first_starting_at_or_after(start + 1);
    if (k == 0) continue;
    --k;
    if (l.end(k) >= end) out.push_back(l.ref(k));
  }
  return out;
}

std::vector<uint32_t> TimelineModel::samples_in(int64_t t0, int64_t t1) const {
  const auto& s = trace_->samples;
  auto lo = std::lower_bound(samples_by_time_.begin(), samples_by_time_.end(), t0,
                             [&](uint32_t r, int64_t v) { return s[r].time < v; });
  auto hi = std::lower_bound(lo, samples_by_time_.end(), t1, [&](uint32_t r, int64_t v) { return s[r].time < v; });
  return std::vector<uint32_t>(lo, hi);
}

}  // namespace stepscope::gui
