// The critical-path walk over a built Context (analysis room internal).
#pragma once

#include <algorithm>
#include <map>
#include <utility>
#include <string_view>
#include <vector>

#include "analysis/context.h"
#include "stepscope/analyzer/critical_path.h"

namespace stepscope::analyzer::detail {

// What the walk and the what-if replay read the same way.
// Back-to-back work on a stream: a gap this short is the GPU's own scheduling, not a wait for anything.
inline constexpr int64_t kQueuedGapNs = 2'000;
// A call longer than this (HTA's runtime outlier cut-off) that returned within kWakeUpNs of GPU work ending
// was blocked on that work.
inline constexpr int64_t kBlockedCallNs = 50'000;
inline constexpr int64_t kWakeUpNs = 20'000;

enum class HostKind : uint8_t { Launch, Sync, Api, DataWait };

// 32 bytes: a host timeline holds one a call of the launching threads (a name's text is looked up when used).
struct HostEvent {
  int64_t start = 0, end = 0;
  store::StringId what = 0;  // the call's name, or the data wait's source or range name
  int32_t api = -1;          // trace.api_calls index (collect_gpu_ops refuses 2^31 calls and more)
  HostKind kind = HostKind::Api;
};

// One thread's calls and waits, sorted by start, with the running maximum of their ends: the event covering a
// time is the outermost one (a runtime call around its driver call, a DataLoader wait around its copies).
struct HostTimeline {
  std::vector<HostEvent> events;
  std::vector<uint32_t> widest;  // widest[i]: the event among 0..i that ends last

  void finish() {
    std::sort(events.begin(), events.end(), [](const HostEvent& a, const HostEvent& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    widest.resize(events.size());
    for (size_t i = 0; i < events.size(); ++i)
      widest[i] = i > 0 && events[widest[i - 1]].end >= events[i].end ? widest[i - 1] : uint32_t(i);
  }
  // The event that ends last among those starting before t; nullptr when none.
  const HostEvent* before(int64_t t) const {
    auto it = std::lower_bound(events.begin(), events.end(), t,
                               [](const HostEvent& e, int64_t v) { return e.start < v; });
    if (it == events.begin()) return nullptr;
    return &events[widest[size_t(it - events.begin()) - 1]];
  }
};

// The host as the GPU sees it: the calls and waits of the step's thread and of every thread of its process that
// launches GPU work (the critical path and the what-if replay walk it).
HostTimeline host_timeline(const Context& ctx, int64_t pid, int64_t tid);

// The host timelines of the step-drawing threads, by (pid, tid): built by the walk, reused by the what-if replay.
using HostTimelines = std::map<std::pair<int64_t, int64_t>, HostTimeline>;

// keep_segments: fill CriticalPaths::path. `timelines`, when given, receives the host timelines the walk built.
CriticalPaths critical_paths(const Context& ctx, bool keep_segments = false, HostTimelines* timelines = nullptr);

}  // namespace stepscope::analyzer::detail
