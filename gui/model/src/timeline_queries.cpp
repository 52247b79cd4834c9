// TimelineModel: what a view asks of an event — its times, names, colour, flows, location, stacks, samples.
#include "stepscope/gui/timeline_model.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/multi_rank.h"
#include "timeline_build.h"

namespace stepscope::gui {

using namespace timeline_detail;

// Launch calls by correlation id: the first call with an id is its launch (as ids are unique per process,
// duplicates are rare).
void TimelineModel::index_api_calls() {
  api_by_correlation_.clear();
  {
    const uint32_t calls = static_cast<uint32_t>(api_call_count());
    size_t n = 0;
    for (uint32_t i = 0; i < calls; ++i) n += api_correlation(i) != 0;
    api_by_correlation_.reserve(n);
    for (uint32_t i = 0; i < calls; ++i)
      if (const int64_t c = api_correlation(i)) api_by_correlation_.emplace_back(c, i);
    if (!std::is_sorted(api_by_correlation_.begin(), api_by_correlation_.end()))
      std::sort(api_by_correlation_.begin(), api_by_correlation_.end());
    api_by_correlation_.erase(std::unique(api_by_correlation_.begin(), api_by_correlation_.end(),
                                          [](const auto& a, const auto& b) { return a.first == b.first; }),
                              api_by_correlation_.end());
  }
}

std::optional<uint32_t> TimelineModel::api_call_of(int64_t corr) const {
  auto it = std::lower_bound(api_by_correlation_.begin(), api_by_correlation_.end(), corr,
                             [](const std::pair<int64_t, uint32_t>& p, int64_t v) { return p.first < v; });
  if (it == api_by_correlation_.end() || it->first != corr) return std::nullopt;
  return it->second;
}

// Flows between host and device: the GPU work each launch call launched, as a sorted array of correlation
// ids.
void TimelineModel::index_flows() {
  const store::Trace& t = *trace_;
  // Traces without API calls (or without correlation ids) have no flows: skip the GPU side entirely.
  if (!api_by_correlation_.empty()) {
    size_t n = 0;
    if (kcols_)
      n += kcols_->launches.size() - size_t(std::count(kcols_->launches.begin(), kcols_->launches.end(), 0u));
    for (const auto& k : t.kernels) n += k.correlation != 0;
    for (const auto& k : t.memcpys) n += k.correlation != 0;
    for (const auto& k : t.memsets) n += k.correlation != 0;
    gpu_by_correlation_.reserve(n);
    auto add_flow = [&](const auto& rows, EventKind kind) {
      for (size_t i = 0; i < rows.size(); ++i)
        if (rows[i].correlation) gpu_by_correlation_.push_back({rows[i].correlation, {kind, static_cast<uint32_t>(i)}});
    };
    add_flow(t.kernels, EventKind::Kernel);
    if (kcols_)  // the columns keep a kernel's launch, not its correlation id: its launch's is the same
      for (size_t i = 0; i < kcols_->launches.size(); ++i)
        if (const uint32_t api = kcols_->launches[i])
          gpu_by_correlation_.push_back(
              {api_correlation(api - 1), {EventKind::Kernel, static_cast<uint32_t>(i)}});
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
    if (kcols_)
      for (uint32_t row = 0; row < kcols_->size(); ++row) mark(kcols_->name(row));
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
    case EventKind::Kernel:
      return kernel_start(e.row);
    case EventKind::Memcpy: return t.memcpys[e.row].start;
    case EventKind::Memset: return t.memsets[e.row].start;
    case EventKind::ApiCall:
      return api_start(e.row);
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
    case EventKind::Kernel:
      end = kernel_end(e.row);
      break;
    case EventKind::Memcpy: end = t.memcpys[e.row].end; break;
    case EventKind::Memset: end = t.memsets[e.row].end; break;
    case EventKind::ApiCall:
      end = api_end(e.row);
      break;
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
  if (e.kind == EventKind::Kernel) return analyzer::full_symbol(t.str(kernel_name(e.row)));
  if (e.kind == EventKind::Range) return t.str(t.ranges[e.row].name);
  return name_of(e);
}

std::string TimelineModel::wait_sources(uint32_t row) const {
  auto all = wait_sources_.find(row);
  if (all != wait_sources_.end()) return all->second;
  const std::string& source = trace_->str(trace_->data_waits[row].source);
  return source.empty() ? source : analyzer::data_wait_source_words(source);
}

std::string TimelineModel::name_of(EventRef e) const {
  const store::Trace& t = *trace_;
  auto shown = [&](store::StringId id) {
    auto it = short_names_.find(id);
    return it != short_names_.end() ? it->second : t.str(id);
  };
  switch (e.kind) {
    case EventKind::Kernel:
      return shown(kernel_name(e.row));
    case EventKind::Memcpy: {
      const auto& m = t.memcpys[e.row];
      return std::string("Memcpy ") + store::to_string(m.kind);
    }
    case EventKind::Memset: return "Memset";
    case EventKind::ApiCall:
      return t.str(api_call_name(e.row));
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
    case EventKind::Finding: {
      const FindingInfo& f = findings_[e.row];
      return f.drawn_for > 1 ? f.rule + " · " + std::to_string(f.drawn_for) + " ranks" : f.rule;
    }
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
      return d.call->name.str() + " · waited for " + rank_name(uint32_t(cross_rank_->straggler));
    }
  }
  return {};
}

uint32_t TimelineModel::colour_key(EventRef e) const {
  const store::Trace& t = *trace_;
  switch (e.kind) {
    case EventKind::Kernel:
      return static_cast<uint32_t>(kernel_name(e.row)) & ~kSpecialMask;
    case EventKind::ApiCall:
      return static_cast<uint32_t>(api_call_name(e.row)) & ~kSpecialMask;
    case EventKind::Range: return static_cast<uint32_t>(t.ranges[e.row].name) & ~kSpecialMask;
    case EventKind::Memcpy: return kMemcpyKey | static_cast<uint32_t>(t.memcpys[e.row].kind);
    case EventKind::Memset: return kMemsetKey;
    case EventKind::Sync: return kSyncKey;
    case EventKind::DataWait: return kDataWaitKey;
    case EventKind::Step: return kStepKey | bound_code(steps_[e.row].bound);
    case EventKind::Finding: {
      return kFindingKey | uint32_t(severity_rank(findings_[e.row].severity));
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
  if (e.kind == EventKind::Kernel && kcols_) {
    if (kcols_->launches.empty() || !kcols_->launches[e.row]) return std::nullopt;
    return kcols_->launches[e.row] - 1;
  }
  if (e.kind == EventKind::Kernel) corr = t.kernels[e.row].correlation;
  else if (e.kind == EventKind::Memcpy) corr = t.memcpys[e.row].correlation;
  else if (e.kind == EventKind::Memset) corr = t.memsets[e.row].correlation;
  else if (e.kind == EventKind::GraphReplay) corr = replays_[e.row].correlation;
  if (!corr) return std::nullopt;
  return api_call_of(corr);
}

std::vector<EventRef> TimelineModel::launched_by(uint32_t api_row) const {
  if (api_row >= api_call_count())
    throw std::out_of_range("launched_by: no API call row " + std::to_string(api_row));
  const int64_t corr = api_correlation(api_row);
  if (!corr) return {};
  auto it = std::lower_bound(gpu_by_correlation_.begin(), gpu_by_correlation_.end(), corr,
                             [](const std::pair<int64_t, EventRef>& p, int64_t v) { return p.first < v; });
  std::vector<EventRef> out;
  for (; it != gpu_by_correlation_.end() && it->first == corr; ++it) out.push_back(it->second);
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
    case EventKind::Kernel: {
      const auto [device, stream] = kernel_stream(e.row);
      track = find(gpu_track_, device, stream);
      break;
    }
    case EventKind::Memcpy: track = find(gpu_track_, t.memcpys[e.row].device, t.memcpys[e.row].stream); break;
    case EventKind::Memset: track = find(gpu_track_, t.memsets[e.row].device, t.memsets[e.row].stream); break;
    case EventKind::ApiCall: {
      const auto [pid, tid] = api_thread(e.row);
      track = find(ranges_track_, pid, tid);
      break;
    }
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
  if (e.kind == EventKind::Finding && findings_[e.row].drawn_by >= 0) {
    // A rank's finding drawn by its rule's lane in a folder of ranks: the block of that lane where it begins.
    const uint32_t by = uint32_t(findings_[e.row].drawn_by);
    for (size_t li = 0; li < tr.lanes.size(); ++li) {
      const Lane& l = tr.lanes[li];
      for (size_t i = 0; i < l.size(); ++i)
        if (l.rows[i] == by && l.starts[i] <= start && (l.end(i) > start || l.starts[i] == start))
          return Location{track, static_cast<int>(li), i};
    }
    return std::nullopt;
  }
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

std::string TimelineModel::thread_label(int64_t pid, int64_t tid) const {
  const Track* track = nullptr;
  for (const PairMap* m : {&ranges_track_, &samples_track_, &waits_track_})
    if (auto it = m->find({pid, tid}); it != m->end()) {
      track = &tracks_[size_t(it->second)];
      break;
    }
  if (!track) return "Thread " + std::to_string(tid);
  std::string title = track->title;
  for (const std::string_view suffix : {std::string_view(" · samples"), std::string_view(" · data waits")})
    if (title.size() > suffix.size() &&
        title.compare(title.size() - suffix.size(), suffix.size(), suffix) == 0)
      title.erase(title.size() - suffix.size());
  const bool several_processes = std::any_of(tracks_.begin(), tracks_.end(), [pid](const Track& t) {
    return (t.kind == TrackKind::CpuSamples || t.kind == TrackKind::CpuRanges ||
            t.kind == TrackKind::DataWaits) &&
           t.pid != pid;
  });
  return several_processes ? title + " · " + track->group : title;
}

std::vector<uint32_t> TimelineModel::samples_in(int64_t t0, int64_t t1) const {
  const auto& s = trace_->samples;
  auto lo = std::lower_bound(samples_by_time_.begin(), samples_by_time_.end(), t0,
                             [&](uint32_t r, int64_t v) { return s[r].time < v; });
  auto hi = std::lower_bound(lo, samples_by_time_.end(), t1, [&](uint32_t r, int64_t v) { return s[r].time < v; });
  return std::vector<uint32_t>(lo, hi);
}

}  // namespace stepscope::gui
