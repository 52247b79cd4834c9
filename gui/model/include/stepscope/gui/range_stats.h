// What happened in a selected time range: a call tree of the CPU samples (or, for traces without samples,
// of the host ranges weighted by time) and per-kernel statistics.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

class CallTree {
 public:
  enum class Direction { TopDown, BottomUp };
  struct Node {
    int32_t name = -1;    // index into names(); -1 for the root
    int32_t parent = -1;
    std::vector<int32_t> children;  // sorted by total, largest first (until sort_children)
    double self = 0, total = 0;
  };

  // From the CPU samples in [t0, t1): weight = sample count. Top-down roots are threads. stepscope's own
  // collector threads (threads.collector) are the profiler's work, not the program's: left out unless asked.
  static CallTree from_samples(const TimelineModel& model, int64_t t0, int64_t t1, Direction dir,
                               bool collector_threads = false);
  // From host ranges and API calls overlapping [t0, t1): weight = time in the window (ns).
  static CallTree from_ranges(const TimelineModel& model, int64_t t0, int64_t t1, Direction dir);
  // Samples when the window has any, else ranges.
  static CallTree for_range(const TimelineModel& model, int64_t t0, int64_t t1, Direction dir,
                            bool collector_threads = false);

  const std::vector<Node>& nodes() const { return nodes_; }  // nodes()[0] is the root
  // The name shown (C++ symbols folded, display_names.h) and the full one (tooltips). Nodes are told apart by
  // the full name: two functions that fold to the same short name stay two nodes.
  const std::string& name(const Node& n) const;
  const std::string& full_name(const Node& n) const;
  const std::vector<std::string>& names() const { return shown_; }
  bool weighted_by_time() const { return by_time_; }  // false: sample counts
  // A Python function's node (trees of samples).
  bool is_python(const Node& n) const {
    return n.name >= 0 && size_t(n.name) < python_.size() && python_[n.name];
  }
  // Where the samples' own time went as `analyze` counts it: each sample to its innermost Python function, a
  // sample without one to its native leaf; largest first. Of a bottom-up tree of samples (else empty).
  struct Function {
    int32_t node = -1;  // a node with the function's name (the tooltip's full name, is_python)
    double weight = 0;
  };
  std::vector<Function> innermost_functions() const;
  Direction direction() const { return dir_; }
  // The bottom-up view of a top-down tree: each node's self weight re-inserted along its reversed path.
  CallTree inverted() const;
  // Every node's children ordered by name, self or total weight (a tree is made ordered by total, largest
  // first); ties keep their order.
  enum class Order { Name, Self, Total };
  void sort_children(Order order, bool descending);

 private:
  int32_t child(int32_t parent, int32_t name);
  int32_t intern(const std::string& s) { return intern(s, s); }
  int32_t intern(const std::string& full, const std::string& shown);
  void finish(bool totals_from_self);
  void drop_indexes();

  std::vector<Node> nodes_{Node{}};
  std::vector<std::string> names_;  // full names
  std::vector<std::string> shown_;
  std::vector<bool> python_;                         // by name id
  std::unordered_map<uint64_t, int32_t> child_map_;  // (parent << 32 | name) → node
  std::unordered_map<std::string, int32_t> name_map_;
  bool by_time_ = false;
  Direction dir_ = Direction::TopDown;
};

struct KernelStat {
  std::string name;       // as displayed (C++ symbols shortened)
  std::string full_name;  // demangled, for the tooltip
  int64_t count = 0;
  int64_t total_ns = 0, min_ns = 0, max_ns = 0;
  double mean_ns() const { return count ? double(total_ns) / double(count) : 0.0; }
};

// Where the time of a range went: GPU busy measured (the union of all streams' activity clipped to the range),
// and the analyzer's idle categories of the steps the range overlaps, each step's share prorated by how much of
// it lies in the range (the idle split itself is the analyzer's, per step).
struct RangeBreakdown {
  int64_t t0 = 0, t1 = 0;
  int64_t gpu_busy_ns = 0;
  int64_t in_steps_ns = 0;  // part of the range inside analysed steps
  std::vector<std::pair<std::string, int64_t>> idle;  // category label → ns (prorated), analyzer order
};
RangeBreakdown range_breakdown(const TimelineModel& model, int64_t t0, int64_t t1);

// GPU activities (kernels, copies, memsets) starting in [t0, t1), grouped by name; largest total first.
std::vector<KernelStat> kernel_stats(const TimelineModel& model, int64_t t0, int64_t t1);

}  // namespace stepscope::gui
