// TimelineModel: its tracks built from the trace — the analysis tracks, the ranks', the GPU streams', the threads'.
#include "stepscope/gui/timeline_model.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/multi_rank.h"
#include "timeline_build.h"

namespace stepscope::gui {

using namespace timeline_detail;

void TimelineModel::build_tracks() {
  const store::Trace& t = *trace_;
  // Recordings older than v4 said nothing and traced each replay as one interval (docs/schema.md).
  std::string recorded = store::graph_records_of(t);
  // Built from a store, the trace's kernels are in columns: a graph row with a node id says "nodes" there.
  if (kcols_ && !t.meta.count("gpu.graph_records") &&
      std::any_of(kcols_->graph_rows.begin(), kcols_->graph_rows.end(),
                  [](const auto& g) { return g.second.graph_node_id != 0; }))
    recorded = "nodes";
  graph_records_ = recorded == "graph" ? "graph" : "nodes";
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
  // Columns (a store's kernels and API calls): the same walk over their slot numbers, each naming its key.
  auto slot_key = [](const std::vector<Key>& keys) { return [&keys](uint32_t slot) { return keys[slot]; }; };
  std::map<Key, size_t> gpu_n, host_n, waits_n;
  auto count = [](size_t& n, uint32_t) { ++n; };
  if (kcols_) gather(kcols_->streams, slot_key(kcols_->stream_keys), gpu_n, count);
  gather(t.kernels, gpu_key, gpu_n, count);
  gather(t.memcpys, gpu_key, gpu_n, count);
  gather(t.memsets, gpu_key, gpu_n, count);
  if (acols_) gather(acols_->threads, slot_key(acols_->thread_keys), host_n, count);
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
  if (kcols_) gather(kcols_->streams, slot_key(kcols_->stream_keys), ev.gpu, add(EventKind::Kernel));
  gather(t.kernels, gpu_key, ev.gpu, add(EventKind::Kernel));
  gather(t.memcpys, gpu_key, ev.gpu, add(EventKind::Memcpy));
  gather(t.memsets, gpu_key, ev.gpu, add(EventKind::Memset));
  if (acols_) gather(acols_->threads, slot_key(acols_->thread_keys), ev.host, add(EventKind::ApiCall));
  gather(t.api_calls, thread_key, ev.host, add(EventKind::ApiCall));
  gather(t.ranges, thread_key, ev.host, add(EventKind::Range));
  gather(t.syncs, thread_key, ev.host, add(EventKind::Sync));
  gather(t.data_waits, thread_key, ev.waits, add(EventKind::DataWait));
  // A graph replay's rows are drawn as one block (and open into their own lanes): set them apart.
  auto graph_of = [&t, this](EventRef e) -> int64_t {
    if (e.kind == EventKind::Kernel && kcols_)
      return kcols_->graph_row(e.row) ? 1 : 0;  // graph ids are not 0
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
        auto at = wait_sources_.find(kept.back().row);
        if (at == wait_sources_.end())
          at = wait_sources_.emplace(kept.back().row, wait_sources(kept.back().row)).first;
        std::string& srcs = at->second;
        const std::string s =
            t.str(w.source).empty() ? std::string() : analyzer::data_wait_source_words(t.str(w.source));
        if (!s.empty() && (", " + srcs + ", ").find(", " + s + ", ") == std::string::npos)
          srcs += (srcs.empty() ? "" : ", ") + s;
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
    // One lane (or more, where its ranges overlap) a finding, in the findings' order: packed first-fit, a rule
    // moved from lane to lane at every step (no-tensor-cores on top at step 0, input-bound at step 1). In a folder
    // of ranks the ranks' findings of one rule share a lane ("launch-overhead · 8 ranks"; DLRM's 8 ranks filled 23
    // lanes), drawn by the most severe of them, whose colour and selection the blocks take.
    std::vector<std::vector<uint32_t>> groups;
    std::map<std::string, size_t> group_of_rule;
    for (size_t i = 0; i < findings_.size(); ++i) {
      const FindingInfo& f = findings_[i];
      if (!cross_rank_ || f.cross_rank) {
        groups.push_back({uint32_t(i)});
        continue;
      }
      auto [it, fresh] = group_of_rule.emplace(f.rule, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(uint32_t(i));
    }
    for (const auto& g : groups) {
      const uint32_t head = *std::max_element(g.begin(), g.end(), [&](uint32_t a, uint32_t b) {
        return severity_rank(findings_[a].severity) < severity_rank(findings_[b].severity);  // the first of the most severe
      });
      for (uint32_t i : g) findings_[i].drawn_by = head == i ? -1 : int32_t(head);
      findings_[head].drawn_for = uint32_t(g.size());
      // Each member's steps (a step once, however many ranks share it); a member with none, its ranges.
      std::vector<Item> items, ranged;
      std::set<int> positions;
      for (uint32_t i : g) {
        bool any = false;
        for (int64_t s : findings_[i].cross_rank ? std::vector<int64_t>() : findings_[i].steps)
          if (int p = step_position(s); p >= 0) {
            any = true;
            if (positions.insert(p).second) items.push_back({steps_[p].start, steps_[p].end, head, EventKind::Finding});
          }
        if (!any)
          for (const auto& r : findings_[i].ranges) ranged.push_back({r.first, r.second, head, EventKind::Finding});
      }
      if (g.size() > 1 && !ranged.empty()) {  // the ranks' ranges as their union: one lane, not one a rank again
        std::sort(ranged.begin(), ranged.end(), [](const Item& a, const Item& b) { return a.start < b.start; });
        size_t kept = 0;
        for (const Item& it : ranged)
          if (kept && it.start <= ranged[kept - 1].end)
            ranged[kept - 1].end = std::max(ranged[kept - 1].end, it.end);
          else
            ranged[kept++] = it;
        ranged.resize(kept);
      }
      items.insert(items.end(), ranged.begin(), ranged.end());
      for (Lane& l : stack_into_lanes(items, same)) tr.lanes.push_back(std::move(l));
    }
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
  const SpanOf span_of{t, &replays_, kernel_columns(), api_call_columns()};
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
  const SpanOf span_of{t, nullptr, nullptr, api_call_columns()};
  auto process_label = [&](int64_t pid) {
    std::string s = "Process " + std::to_string(shown_pid(pid));
    auto it = process_names.find(pid);
    if (it != process_names.end() && !it->second.empty()) s += " " + it->second;
    return s;
  };
  std::set<Key> launches;  // threads that launch GPU work (an API call with a correlation id) or sync with it
  for (uint32_t i = 0; i < api_call_count(); ++i)
    if (api_correlation(i)) launches.insert(api_thread(i));
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
  std::set<Key> ranged;  // threads with ops, annotations or Python functions: a real thread, not CUPTI's id
  for (const auto& r : t.ranges) ranged.insert({r.pid, r.tid});
  auto thread_title = [&](const Key& k) {
    auto it = thread_names.find(k);
    if (it != thread_names.end() && !it->second.empty())  // Kineto's names already hold the id: "thread 25738 (python)"
      return it->second.find(std::to_string(k.second)) != std::string::npos ? it->second
                                                                            : it->second + " " + std::to_string(k.second);
    // CUPTI reports API calls under its own thread id, which no thread record names.
    if (launches.count(k) && !samples.count(k) && !waits.count(k) && !ranged.count(k))
      return "CUDA API · thread " + std::to_string(k.second);
    // An id above Linux's largest thread id (PID_MAX_LIMIT) is CUPTI's (older recordings put its API calls
    // and its overhead ranges there), whatever ranges it carries: "Thread 3781806016" read as a thread of the
    // program.
    constexpr int64_t kLinuxMaxTid = 4194304;
    if ((k.second > kLinuxMaxTid || k.second < 0) && !samples.count(k) && !waits.count(k))
      return (launches.count(k) ? "CUDA API · CUPTI thread id " : "CUPTI thread id ") +
             std::to_string(k.second);
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
          if (std::any_of(tr.sample_rows.begin(), tr.sample_rows.end(),
                          [&](uint32_t r) { return !t.samples[r].on_cpu; })) {
            tr.on_cpu_before.resize(tr.sample_rows.size() + 1, 0);
            for (size_t k = 0; k < tr.sample_rows.size(); ++k)
              tr.on_cpu_before[k + 1] = tr.on_cpu_before[k] + (t.samples[tr.sample_rows[k]].on_cpu ? 1 : 0);
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

}  // namespace stepscope::gui
