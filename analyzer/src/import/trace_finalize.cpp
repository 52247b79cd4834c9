#include "import/trace_finalize.h"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace stepscope::analyzer::import {

using namespace stepscope::store;

std::string_view strip_api_version(std::string_view name) {
  size_t p = name.rfind("_v");
  if (p == std::string_view::npos || p + 2 >= name.size() || p == 0) return name;
  for (size_t i = p + 2; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return name;
  return name.substr(0, p);
}

MemoryKind parse_memory_kind(std::string_view w) {
  auto has = [&](std::string_view s) { return w.find(s) != std::string_view::npos; };
  if (has("Pageable")) return MemoryKind::Pageable;
  if (has("Pinned")) return MemoryKind::Pinned;
  if (has("Managed")) return MemoryKind::Managed;
  if (has("Device")) return MemoryKind::Device;
  return MemoryKind::Unknown;
}

void parse_memcpy_name(std::string_view name, CopyKind& kind, MemoryKind& src, MemoryKind& dst) {
  auto has = [&](std::string_view s) { return name.find(s) != std::string_view::npos; };
  if (has("HtoD") || has("Host-to-Device")) kind = CopyKind::HtoD;
  else if (has("DtoH") || has("Device-to-Host")) kind = CopyKind::DtoH;
  else if (has("DtoD") || has("Device-to-Device")) kind = CopyKind::DtoD;
  else if (has("PtoP") || has("Peer-to-Peer")) kind = CopyKind::PtoP;
  else if (has("HtoH") || has("Host-to-Host")) kind = CopyKind::HtoH;
  size_t open = name.find('(');
  size_t arrow = name.find("->", open == std::string_view::npos ? 0 : open);
  if (open != std::string_view::npos && arrow != std::string_view::npos) {
    src = parse_memory_kind(name.substr(open, arrow - open));
    dst = parse_memory_kind(name.substr(arrow));
  }
}

void compute_range_depths(Trace& t) {
  auto& r = t.ranges;
  // Ranges nest per (pid, tid), GPU annotations among themselves: one list each, in row order.
  using Key = std::tuple<int64_t, int64_t, bool>;
  std::map<Key, std::vector<uint32_t>> lists;
  std::vector<uint32_t>* list = nullptr;
  Key last{};
  for (uint32_t i = 0; i < r.size(); ++i) {
    Key k{r[i].pid, r[i].tid, r[i].source == RangeSource::GpuAnnotation};
    if (!list || k != last) list = &lists[k], last = k;
    list->push_back(i);
  }
  std::vector<int64_t> stack_end;
  for (auto& [key, idx] : lists) {
    // By start, the enclosing range first; identical intervals: the first in row order encloses the later
    // ones.
    auto outer_first = [&](uint32_t a, uint32_t b) {
      return r[a].start != r[b].start ? r[a].start < r[b].start : r[a].end > r[b].end;
    };
    if (!std::is_sorted(idx.begin(), idx.end(), outer_first))
      std::stable_sort(idx.begin(), idx.end(), outer_first);
    stack_end.clear();
    for (uint32_t i : idx) {
      Range& x = r[i];
      while (!stack_end.empty() && stack_end.back() <= x.start) stack_end.pop_back();
      x.depth = static_cast<int32_t>(stack_end.size());
      stack_end.push_back(x.end);
    }
  }
}

namespace {
// Stable, by start. Rows are 64–120 bytes: sorting (start, index) keys and moving each row once is several
// times faster than a merge sort moving rows log n times; a table already in order is left as it is.
template <class V>
void sort_by_start(V& v) {
  auto by_start = [](const auto& a, const auto& b) { return a.start < b.start; };
  if (std::is_sorted(v.begin(), v.end(), by_start)) return;
  std::vector<std::pair<int64_t, uint32_t>> keys(v.size());
  for (uint32_t i = 0; i < v.size(); ++i) keys[i] = {v[i].start, i};
  std::sort(keys.begin(), keys.end());  // equal starts keep their order: the index breaks the tie
  V sorted;
  sorted.reserve(v.size());
  for (const auto& k : keys) sorted.push_back(std::move(v[k.second]));
  v.swap(sorted);
}
}  // namespace

namespace {
// GPU records launched by a graph launch call are a replay's: they get their graph's id. Where the trace names no
// graph (Kineto before CUDA 12 and ROCm, nsys exports without graphId), replays with the same sequence of GPU
// records (kernel names; copies and memsets by kind) stand for one graph, numbered 1, 2, … by first replay.
void link_graph_replays(Trace& t, const CorrelationIndex& by_corr) {
  std::unordered_map<StringId, bool> graph_launch;  // API name → is a graph launch
  auto launched_by_graph = [&](int64_t pid, int64_t corr) {
    const int64_t row = by_corr.find(corr, pid);
    if (row < 0) return false;
    const StringId name = t.api_calls[size_t(row)].name;
    auto g = graph_launch.find(name);
    if (g == graph_launch.end())
      g = graph_launch.emplace(name, t.str(name).find("GraphLaunch") != std::string::npos).first;
    return g->second;
  };
  // A replay's records: (start, what it is, where its graph_id lives), per (pid, correlation).
  struct Member {
    int64_t start;
    StringId what;
    int64_t* graph_id;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Member>> replays;
  bool named = false, any = false;
  // Copies and memsets in a sequence: ids no string has.
  constexpr StringId kMemset = -1, kMemcpyBase = -16;
  auto see = [&](int64_t pid, int64_t corr, int64_t start, StringId what, int64_t& graph_id) {
    named |= graph_id != 0;
    any |= graph_id != 0;
    if (!launched_by_graph(pid, corr)) return;
    any = true;
    replays[{pid, corr}].push_back({start, what, &graph_id});
  };
  for (auto& k : t.kernels) see(k.pid, k.correlation, k.start, k.name, k.graph_id);
  for (auto& m : t.memcpys) see(m.pid, m.correlation, m.start, kMemcpyBase - StringId(m.kind), m.graph_id);
  for (auto& m : t.memsets) see(m.pid, m.correlation, m.start, kMemset, m.graph_id);
  if (any && !t.meta.count("gpu.graph_records")) t.meta["gpu.graph_records"] = "nodes";
  if (replays.empty()) return;
  if (named) {
    // Some records name their graph: their replay's other records share it.
    for (auto& [key, members] : replays) {
      int64_t id = 0;
      for (const auto& m : members) id = id ? id : *m.graph_id;
      for (auto& m : members)
        if (!*m.graph_id) *m.graph_id = id;
    }
    return;
  }
  std::vector<std::pair<int64_t, std::vector<Member>*>> order;  // replays by first record
  for (auto& [key, members] : replays) {
    std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) { return a.start < b.start; });
    order.push_back({members.front().start, &members});
  }
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<std::vector<StringId>, int64_t> ids;
  for (auto& [first, members] : order) {
    std::vector<StringId> sequence;
    sequence.reserve(members->size());
    for (const auto& m : *members) sequence.push_back(m.what);
    const int64_t id = ids.emplace(std::move(sequence), int64_t(ids.size()) + 1).first->second;
    for (auto& m : *members) *m.graph_id = id;
  }
  t.meta["gpu.graph_ids"] = "kernel-sequence";
}
}  // namespace

void sort_rows_by_start(Trace& t) {
  sort_by_start(t.kernels);
  sort_by_start(t.memcpys);
  sort_by_start(t.memsets);
  sort_by_start(t.syncs);
  sort_by_start(t.api_calls);
  sort_by_start(t.ranges);
  sort_by_start(t.data_waits);
  sort_by_start(t.steps);
  auto by_time = [](const Sample& a, const Sample& b) { return a.time < b.time; };
  if (!std::is_sorted(t.samples.begin(), t.samples.end(), by_time))
    std::stable_sort(t.samples.begin(), t.samples.end(), by_time);
}

void finalize_trace(Trace& t, const NameHints& names) {
  // Sorted first: a stable sort keeps identical ranges in file order, which is all the nesting needs of it.
  sort_rows_by_start(t);
  compute_range_depths(t);

  // Host processes and threads: wherever CPU-side rows live (a thread's rows come in runs).
  std::set<int64_t> pids;
  std::set<std::pair<int64_t, int64_t>> tids;
  std::pair<int64_t, int64_t> last_seen{};
  bool seen_any = false;
  auto see = [&](int64_t pid, int64_t tid) {
    if (seen_any && last_seen == std::pair<int64_t, int64_t>{pid, tid}) return;
    seen_any = true;
    last_seen = {pid, tid};
    pids.insert(pid);
    tids.insert(last_seen);
  };
  for (const auto& a : t.api_calls) see(a.pid, a.tid);
  for (const auto& x : t.ranges)
    if (x.source != RangeSource::GpuAnnotation) see(x.pid, x.tid);
  for (const auto& x : t.data_waits) see(x.pid, x.tid);
  for (const auto& x : t.steps)
    if (x.pid || x.tid) see(x.pid, x.tid);
  for (const auto& x : t.samples) see(x.pid, x.tid);

  std::set<int64_t> have_p;
  for (const auto& p : t.processes) have_p.insert(p.pid);
  for (int64_t pid : pids) {
    if (have_p.count(pid)) continue;
    Process p;
    p.pid = pid;
    auto it = names.process_names.find(pid);
    if (it != names.process_names.end()) p.name = t.intern(it->second);
    t.processes.push_back(p);
  }
  std::set<std::pair<int64_t, int64_t>> have_t;
  for (const auto& th : t.threads) have_t.insert({th.pid, th.tid});
  for (const auto& key : tids) {
    if (have_t.count(key)) continue;
    Thread th;
    th.pid = key.first;
    th.tid = key.second;
    auto it = names.thread_names.find(key);
    if (it != names.thread_names.end()) th.name = t.intern(it->second);
    t.threads.push_back(th);
  }

  // GPU work → launching process through the correlation id; syncs → the host thread that waited.
  const CorrelationIndex by_corr(t.api_calls);
  int64_t only_pid = pids.size() == 1 ? *pids.begin() : 0;
  auto owner = [&](int64_t corr) -> int64_t {
    const int64_t row = by_corr.find(corr);
    return row < 0 ? only_pid : t.api_calls[size_t(row)].pid;
  };
  for (auto& k : t.kernels)
    if (!k.pid) k.pid = owner(k.correlation);
  for (auto& m : t.memcpys)
    if (!m.pid) m.pid = owner(m.correlation);
  for (auto& m : t.memsets)
    if (!m.pid) m.pid = owner(m.correlation);
  for (auto& s : t.syncs) {
    // Its own process's call where the record names a host process (nsys: globalPid): merged processes' ids
    // collide. Kineto's sync events carry their GPU's track as pid (the device number): not a process.
    const int64_t row = by_corr.find(s.correlation, pids.count(s.pid) ? s.pid : 0);
    if (row >= 0) {
      if (t.api_calls[size_t(row)].pid) s.pid = t.api_calls[size_t(row)].pid;
      s.tid = t.api_calls[size_t(row)].tid;
    }
  }
  link_graph_replays(t, by_corr);

  std::set<int64_t> have_d;
  for (const auto& d : t.devices) have_d.insert(d.id);
  std::set<int64_t> used;
  int64_t last_device = 0;
  auto use = [&](int64_t device) {  // a trace's rows are mostly one device's, or runs of one
    if (used.empty() || device != last_device) used.insert(device);
    last_device = device;
  };
  for (const auto& k : t.kernels) use(k.device);
  for (const auto& m : t.memcpys) use(m.device);
  for (const auto& m : t.memsets) use(m.device);
  for (int64_t d : used)
    if (!have_d.count(d)) {
      Device dev;
      dev.id = d;
      t.devices.push_back(dev);
    }
  std::sort(t.devices.begin(), t.devices.end(), [](const Device& a, const Device& b) { return a.id < b.id; });
}

}  // namespace stepscope::analyzer::import
