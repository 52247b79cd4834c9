// What building a TimelineModel's tracks and answering its queries share: events as spans, stacking them into
// lanes, the events gathered per future track (internal to the model: timeline_tracks.cpp, timeline_graphs.cpp,
// timeline_queries.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

namespace timeline_detail {

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

inline Item same(const Item& it) { return it; }

template <class Row>
Item item_of(const Row& r, uint32_t row, EventKind kind) {
  return Item{r.start, std::max(r.start, r.end), row, kind};
}

}  // namespace timeline_detail

namespace timeline_detail {

using Key = std::pair<int64_t, int64_t>;  // (pid, tid) or (device, stream)

// An event's time span, whichever table it lives in.
struct SpanOf {
  const store::Trace& t;
  const std::vector<GraphReplay>* replays = nullptr;
  const KernelColumns* kernels = nullptr;  // a model built from a store keeps its kernels here
  const ApiCallColumns* calls = nullptr;   // and its API calls here
  Item operator()(EventRef e) const {
    switch (e.kind) {
      case EventKind::Kernel:
        if (kernels) return Item{kernels->starts[e.row], kernels->end(e.row), e.row, e.kind};
        return item_of(t.kernels[e.row], e.row, e.kind);
      case EventKind::Memcpy: return item_of(t.memcpys[e.row], e.row, e.kind);
      case EventKind::Memset: return item_of(t.memsets[e.row], e.row, e.kind);
      case EventKind::ApiCall:
        if (calls) return Item{calls->starts[e.row], calls->end(e.row), e.row, e.kind};
        return item_of(t.api_calls[e.row], e.row, e.kind);
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

}  // namespace timeline_detail

// The trace's events as 8-byte references per future track: host events and data waits per thread, GPU activity
// per stream, samples per thread.
struct TimelineModel::EventsByTrack {
  using Key = timeline_detail::Key;
  using Refs = std::map<Key, std::vector<EventRef>>;
  Refs host, waits, gpu;
  Refs graph;  // per stream: the rows of CUDA graph replays (graph_id != 0), taken out of `gpu`
  std::map<Key, std::vector<std::pair<int64_t, uint32_t>>> samples;  // (time, samples row)
};

}  // namespace stepscope::gui
