// TimelineModel: CUDA/HIP graph replays, each one block that opens into its records, and their capture origins.
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

// A stream's graph rows as replays: the rows of one launch (one correlation id), or without one, consecutive rows of
// one graph until a node repeats. Rows recorded one interval a replay are each a replay.
std::vector<EventRef> TimelineModel::gather_replays(std::vector<EventRef>& rows, bool& opens) {
  const store::Trace& t = *trace_;
  struct Rec {
    int64_t pid, graph, node, corr, start, end;
  };
  // A kernel's full row: the trace's, or built from a store, the columns' copy of a graph row (only graph
  // rows come here).
  auto kernel_row = [&t, this](uint32_t row) -> const store::Kernel& {
    return kcols_ ? *kcols_->graph_row(row) : t.kernels[row];
  };
  auto rec = [&t, &kernel_row](EventRef e) {
    auto of = [](const auto& r) { return Rec{r.pid, r.graph_id, r.graph_node_id, r.correlation, r.start, std::max(r.start, r.end)}; };
    return e.kind == EventKind::Memcpy   ? of(t.memcpys[e.row])
           : e.kind == EventKind::Memset ? of(t.memsets[e.row])
                                         : of(kernel_row(e.row));
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
    if (any.kind == EventKind::Kernel)
      g.device = kernel_row(any.row).device, g.stream = kernel_row(any.row).stream;
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

}  // namespace stepscope::gui
