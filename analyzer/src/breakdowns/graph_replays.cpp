// CUDA/HIP graph replays and the per-graph table (stepscope/analyzer/graph_replays.h).
#include "stepscope/analyzer/graph_replays.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "stepscope/analyzer/correlation_index.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer {
namespace {

double replay_us(int64_t ns) { return double(ns) / 1000.0; }

// One GPU record: a kernel, a copy or a memset.
struct ReplayRec {
  int64_t start = 0, end = 0, pid = 0, device = 0, correlation = 0, graph_id = 0, node_id = 0;
  store::StringId name = -1;  // kernels only
  uint8_t kind = 0;           // 0 kernel, 1 memcpy, 2 memset
  bool in_graph = false;
};

// Sorted disjoint union of intervals.
std::vector<std::pair<int64_t, int64_t>> replay_union(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& x : v) {
    if (x.second <= x.first) continue;
    if (!out.empty() && x.first <= out.back().second) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  }
  return out;
}

// Covered length of [a, b) by a sorted disjoint union.
int64_t covered_ns(const std::vector<std::pair<int64_t, int64_t>>& u, int64_t a, int64_t b) {
  if (b <= a) return 0;
  auto it = std::upper_bound(u.begin(), u.end(), a, [](int64_t x, const auto& iv) { return x < iv.second; });
  int64_t c = 0;
  for (; it != u.end() && it->first < b; ++it) c += std::min(b, it->second) - std::max(a, it->first);
  return c;
}

// Frames of the profiler and of CUDA itself (the collector's capture, CUPTI's callback, the driver and
// runtime the launch went through): the leaf end of every capture stack, none of them the program's.
bool is_capture_machinery(std::string_view module) {
  const size_t slash = module.find_last_of('/');
  const std::string_view base = slash == std::string_view::npos ? module : module.substr(slash + 1);
  auto starts = [&](std::string_view p) { return base.substr(0, p.size()) == p; };
  return base.find("libstepscope_collector") != std::string_view::npos || starts("libcupti") ||
         starts("libcuda.so") || starts("libcudart") || starts("libamdhip64");
}

// The CUDA runtime linked into the program (nvcc's default, static cudart): its entry points and internals.
bool is_cuda_runtime_symbol(std::string_view symbol) {
  auto starts = [&](std::string_view pre) { return symbol.substr(0, pre.size()) == pre; };
  return starts("cuda") || starts("__cuda") || starts("__cudart") || starts("cudart::");
}

// The frame a person looks for in a capture stack: the innermost Python frame that is not the profiler's,
// else the innermost native frame past the profiler and CUDA (the program's launch: "launch_bound.cu:84",
// where the leaf is the collector's own stack capture), else the innermost frame.
std::string capture_frame(const store::Trace& t, int64_t stack, const std::unordered_map<int64_t, size_t>& stack_at,
                          const std::unordered_map<int64_t, size_t>& frame_at) {
  const store::Frame* leaf = nullptr;
  const store::Frame* program = nullptr;
  for (int guard = 0; stack && guard < 4096; ++guard) {
    auto it = stack_at.find(stack);
    if (it == stack_at.end()) break;
    const store::Stack& node = t.stacks[it->second];
    auto f = frame_at.find(node.frame);
    if (f != frame_at.end()) {
      const store::Frame& fr = t.frames[f->second];
      if (!leaf) leaf = &fr;
      if (fr.kind == store::FrameKind::Python && !is_profiler_python_frame(t, fr)) return frame_display_name(t, fr);
      if (!program && fr.kind != store::FrameKind::Python && !is_capture_machinery(t.str(fr.module)) &&
          !is_cuda_runtime_symbol(t.str(fr.symbol)))
        program = &fr;
    }
    stack = node.parent;
  }
  return program ? frame_display_name(t, *program) : leaf ? frame_display_name(t, *leaf) : std::string();
}

}  // namespace

bool is_graph_launch(const std::string& api_name) { return api_name.find("GraphLaunch") != std::string::npos; }

GraphTable graph_table(const store::Trace& t) {
  GraphTable g;
  g.records = store::graph_records_of(t);
  if (auto it = t.meta.find("gpu.graph_ids"); it != t.meta.end()) g.ids = it->second;
  const bool whole = g.records == "graph";

  // Launch calls by correlation; which of them replay a graph.
  std::optional<CorrelationIndex> launches;  // made below when there are replays to find
  std::unordered_map<store::StringId, bool> graph_call;
  auto launch_of = [&](const ReplayRec& r) -> int64_t {
    return launches ? launches->find(r.correlation, r.pid) : -1;
  };
  auto is_graph_call = [&](store::StringId n) {
    auto it = graph_call.find(n);
    if (it == graph_call.end()) it = graph_call.emplace(n, is_graph_launch(t.str(n))).first;
    return it->second;
  };
  auto by_graph_call = [&](int64_t api) { return api >= 0 && is_graph_call(t.api_calls[size_t(api)].name); };

  // No row of a graph and no graph launch: every record is eager, nothing to gather (the records below would
  // be ~150 bytes a kernel at the peak, 1.4 GB for 10M kernels).
  auto any_graph_row = [](const auto& rows) {
    return std::any_of(rows.begin(), rows.end(), [](const auto& r) { return r.graph_id != 0; });
  };
  if (!any_graph_row(t.kernels) && !any_graph_row(t.memcpys) && !any_graph_row(t.memsets) &&
      std::none_of(t.api_calls.begin(), t.api_calls.end(),
                   [&](const store::ApiCall& a) { return a.correlation && is_graph_call(a.name); })) {
    g.gpu_records = int64_t(t.gpu_event_count());
    g.eager_kernels = int64_t(t.kernels.size());
    return g;
  }

  launches.emplace(t.api_calls);

  std::vector<ReplayRec> recs;
  recs.reserve(t.gpu_event_count());
  for (const auto& k : t.kernels)
    recs.push_back({k.start, k.end, k.pid, k.device, k.correlation, k.graph_id, k.graph_node_id, k.name, 0, false});
  for (const auto& m : t.memcpys)
    recs.push_back({m.start, m.end, m.pid, m.device, m.correlation, m.graph_id, m.graph_node_id, -1, 1, false});
  for (const auto& m : t.memsets)
    recs.push_back({m.start, m.end, m.pid, m.device, m.correlation, m.graph_id, m.graph_node_id, -1, 2, false});
  std::stable_sort(recs.begin(), recs.end(), [](const ReplayRec& a, const ReplayRec& b) { return a.start < b.start; });
  g.gpu_records = int64_t(recs.size());

  // Replays: records of one launch (pid, graph, correlation); without a correlation, consecutive records of one
  // graph on one device, a new replay when another graph's or an eager record comes between or a node repeats.
  std::map<std::tuple<int64_t, int64_t, int64_t>, size_t> by_launch;
  struct Open {
    size_t replay;
    int64_t graph_id;
    std::unordered_set<int64_t> nodes;
  };
  std::map<std::pair<int64_t, int64_t>, Open> open;  // (pid, device) → replay being filled (no correlation)
  std::vector<std::vector<const ReplayRec*>> members;
  std::vector<int64_t> apis;
  auto start_replay = [&](const ReplayRec& r, int64_t api) {
    GraphReplay p;
    p.pid = r.pid, p.graph_id = r.graph_id, p.correlation = r.correlation, p.api = api, p.device = r.device;
    p.whole = whole;
    g.replays.push_back(p);
    members.emplace_back();
    return g.replays.size() - 1;
  };
  for (auto& r : recs) {
    const int64_t api = launch_of(r);
    r.in_graph = r.graph_id != 0 || by_graph_call(api);
    auto dev = std::make_pair(r.pid, r.device);
    if (!r.in_graph) {
      open.erase(dev);
      if (r.kind == 0) ++g.eager_kernels;
      continue;
    }
    ++g.replayed_records;
    size_t idx;
    if (whole) {
      idx = start_replay(r, api);  // each record is a whole replay
    } else if (r.correlation) {
      auto [it, fresh] = by_launch.emplace(std::make_tuple(r.pid, r.graph_id, r.correlation), 0);
      if (fresh) it->second = start_replay(r, api);
      idx = it->second;
    } else {
      auto it = open.find(dev);
      if (it == open.end() || it->second.graph_id != r.graph_id || (r.node_id && it->second.nodes.count(r.node_id)))
        it = open.insert_or_assign(dev, Open{start_replay(r, api), r.graph_id, {}}).first;
      if (r.node_id) it->second.nodes.insert(r.node_id);
      idx = it->second.replay;
    }
    members[idx].push_back(&r);
  }
  if (g.replays.empty()) return g;

  for (size_t i = 0; i < g.replays.size(); ++i) {
    GraphReplay& p = g.replays[i];
    std::vector<std::pair<int64_t, int64_t>> iv;
    p.start_ns = members[i].front()->start;
    p.end_ns = members[i].front()->end;
    for (const ReplayRec* r : members[i]) {
      iv.push_back({r->start, r->end});
      if (r->kind == 0 && !p.first_kernel) p.first_kernel = r->name, p.first_node = r->node_id;
      p.start_ns = std::min(p.start_ns, r->start);
      p.end_ns = std::max(p.end_ns, r->end);
      (r->kind == 0 ? p.kernels : r->kind == 1 ? p.memcpys : p.memsets) += 1;
    }
    for (const auto& u : replay_union(std::move(iv))) p.busy_ns += u.second - u.first;
  }
  // Keep the records' order for the replays (by first record), then the GPU idle between consecutive replays on a
  // device: the gap minus whatever GPU work (eager or not) ran in it.
  std::vector<size_t> order(g.replays.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return g.replays[a].start_ns < g.replays[b].start_ns; });
  std::vector<GraphReplay> sorted;
  sorted.reserve(order.size());
  for (size_t i : order) sorted.push_back(g.replays[i]);
  g.replays = std::move(sorted);

  std::map<std::pair<int64_t, int64_t>, std::vector<std::pair<int64_t, int64_t>>> busy;  // (pid, device) → union
  std::map<std::pair<int64_t, int64_t>, std::vector<int64_t>> eager_starts;
  for (const auto& r : recs) {
    busy[{r.pid, r.device}].push_back({r.start, r.end});
    if (!r.in_graph) eager_starts[{r.pid, r.device}].push_back(r.start);
  }
  for (auto& [k, v] : busy) v = replay_union(std::move(v));
  std::map<std::pair<int64_t, int64_t>, int64_t> last_end;
  for (auto& p : g.replays) {
    const auto dev = std::make_pair(p.pid, p.device);
    auto it = last_end.find(dev);
    if (it != last_end.end()) {
      const int64_t a = it->second, b = p.start_ns;
      p.idle_before_ns = b > a ? (b - a) - covered_ns(busy[dev], a, b) : 0;
      const auto& e = eager_starts[dev];
      p.eager_ops_before = b > a ? int64_t(std::lower_bound(e.begin(), e.end(), b) - std::lower_bound(e.begin(), e.end(), a)) : 0;
      it->second = std::max(it->second, p.end_ns);
    } else {
      last_end.emplace(dev, p.end_ns);
    }
  }

  // Where each graph was captured: its own row's stack, else that of the graph it came from.
  std::map<std::pair<int64_t, int64_t>, const store::Graph*> graph_row;
  for (const auto& r : t.graphs) graph_row.emplace(std::make_pair(r.pid, r.graph_id), &r);
  std::map<std::pair<int64_t, int64_t>, const store::GraphNode*> node_row;
  for (const auto& n : t.graph_nodes) node_row.emplace(std::make_pair(n.pid, n.node_id), &n);
  std::unordered_map<int64_t, size_t> stack_at, frame_at;
  if (!t.graphs.empty() || !t.graph_nodes.empty()) {
    for (size_t i = 0; i < t.stacks.size(); ++i) stack_at.emplace(t.stacks[i].id, i);
    for (size_t i = 0; i < t.frames.size(); ++i) frame_at.emplace(t.frames[i].id, i);
  }
  auto capture_of = [&](GraphStat& s, int64_t first_node) {
    auto it = graph_row.find({s.pid, s.graph_id});
    for (int hops = 0; it != graph_row.end() && hops < 8; ++hops) {
      const store::Graph& r = *it->second;
      if (r.stack) {
        s.captured_at = capture_frame(t, r.stack, stack_at, frame_at);
        s.kind = r.kind;
        return;
      }
      if (!r.source_graph_id) break;
      it = graph_row.find({r.pid, r.source_graph_id});
    }
    auto n = first_node ? node_row.find({s.pid, first_node}) : node_row.end();
    for (int hops = 0; n != node_row.end() && hops < 8; ++hops) {
      if (n->second->stack) {
        s.captured_at = capture_frame(t, n->second->stack, stack_at, frame_at);
        return;
      }
      if (!n->second->source_node_id) return;
      n = node_row.find({s.pid, n->second->source_node_id});
    }
  };

  // Per graph.
  std::map<std::pair<int64_t, int64_t>, std::vector<const GraphReplay*>> by_graph;
  for (const auto& p : g.replays) by_graph[{p.pid, p.graph_id}].push_back(&p);
  std::vector<int64_t> busy_total;
  for (const auto& [key, rs] : by_graph) {
    GraphStat s;
    s.pid = key.first, s.graph_id = key.second;
    s.replays = int64_t(rs.size());
    s.whole = rs.front()->whole;
    s.nodes_min = s.kernels_min = INT64_MAX;
    int64_t busy_sum = 0, span_sum = 0, launch_sum = 0, before_sum = 0;
    std::vector<int64_t> before;
    for (const GraphReplay* p : rs) {
      const int64_t nodes = p->kernels + p->memcpys + p->memsets;
      s.nodes_min = std::min(s.nodes_min, nodes), s.nodes_max = std::max(s.nodes_max, nodes);
      s.kernels_min = std::min(s.kernels_min, p->kernels), s.kernels_max = std::max(s.kernels_max, p->kernels);
      busy_sum += p->busy_ns, span_sum += p->end_ns - p->start_ns;
      if (p->api >= 0) {
        const auto& a = t.api_calls[size_t(p->api)];
        launch_sum += a.end - a.start;
        ++s.launch_calls;
      }
      if (p->idle_before_ns >= 0) {
        before.push_back(p->idle_before_ns);
        before_sum += p->idle_before_ns;
      }
      s.eager_ops_before += p->eager_ops_before;
    }
    const double n = double(s.replays);
    s.gpu_us = replay_us(busy_sum) / n;
    s.span_us = replay_us(span_sum) / n;
    s.idle_inside_us = s.whole ? 0 : replay_us(span_sum - busy_sum) / n;
    s.launch_us = s.launch_calls ? replay_us(launch_sum) / double(s.launch_calls) : 0;
    s.idle_before_count = int64_t(before.size());
    if (!before.empty()) {
      s.idle_before_us = replay_us(before_sum) / double(before.size());
      std::nth_element(before.begin(), before.begin() + int64_t(before.size() / 2), before.end());
      s.idle_before_median_us = replay_us(before[before.size() / 2]);
    }
    s.first_kernel = t.str(rs.front()->first_kernel);
    capture_of(s, rs.front()->first_node);
    g.graphs.push_back(std::move(s));
    busy_total.push_back(busy_sum);
  }
  std::vector<size_t> idx(g.graphs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return busy_total[a] > busy_total[b]; });
  std::vector<GraphStat> graphs;
  for (size_t i : idx) graphs.push_back(std::move(g.graphs[i]));
  g.graphs = std::move(graphs);
  return g;
}


}  // namespace stepscope::analyzer
