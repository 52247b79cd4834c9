// Geometry of the timeline without widgets: the visible time window, where each track sits vertically,
// the level-of-detail draw list for a window, and hit-testing a pixel. The widget paints what these say,
// so tests and the benchmark exercise the same code the user sees.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

// The visible time window [t0, t1) mapped onto `width` pixels starting at x = 0.
struct Viewport {
  double t0 = 0, t1 = 1;  // ns (double: zooming about a point must not drift)
  int width = 1;

  double ns_per_px() const { return (t1 - t0) / (width > 0 ? width : 1); }
  double x_of(double t) const { return (t - t0) / ns_per_px(); }
  double time_at(double x) const { return t0 + x * ns_per_px(); }
  // Zooms by `factor` (< 1 zooms in) keeping the time under pixel x fixed.
  void zoom_about(double x, double factor, double min_span = 100.0);
  void pan_px(double dx);
  void clamp_to(double lo, double hi);
  bool operator==(const Viewport&) const = default;
};

struct LayoutMetrics {
  int lane_height = 18;
  int samples_height = 22;
  int group_header_height = 20;
  int track_gap = 3;
};

// What the user folded: groups collapsed to their header, processes whose "N other threads" row is open.
// Keyed by group title ("GPU 0 NVIDIA H100", "Process 1234 python3"); saved with the window layout.
struct LayoutState {
  std::set<std::string> collapsed;         // groups showing only their header
  std::set<std::string> expanded_others;  // groups whose folded threads are shown
  std::set<std::string> open_graphs;      // GPU streams (graph_key) whose CUDA graph replays show their kernels
  bool operator==(const LayoutState&) const = default;
};

// A GPU stream's key in LayoutState::open_graphs: "GPU 0 NVIDIA H100 / Stream 7".
std::string graph_key(const Track& track);

// Vertical placement of group headers and tracks; y = 0 is the top of the scrollable track area.
class TimelineLayout {
 public:
  enum class RowKind : uint8_t { Header, Track, Others };
  struct Row {
    int track = -1;  // -1: a group header or an "N other threads" row
    std::string group;
    int y = 0, height = 0;
    RowKind kind = RowKind::Track;
    int others = 0;  // Others: how many threads it folds
    bool open = true;  // Header: expanded; Others: its threads are shown
  };
  TimelineLayout() = default;
  TimelineLayout(const TimelineModel& model, LayoutMetrics metrics = {}, const LayoutState& state = {});

  const std::vector<Row>& rows() const { return rows_; }
  int total_height() const { return total_height_; }
  const LayoutMetrics& metrics() const { return metrics_; }
  // Row of a track, or nullptr.
  const Row* row_of_track(int track) const;
  // Row at y, or nullptr.
  const Row* row_at(int y) const;
  // Top of `lane` in `track` (y of the lane's rectangle).
  int lane_y(int track, int lane) const;
  // Tracks whose rows intersect [y0, y1).
  std::vector<int> tracks_in(int y0, int y1) const;
  // Does `track` show its graph lanes (Track::graph_lanes under the replay blocks)? And which tracks do, sorted.
  bool graphs_open(int track) const;
  const std::vector<int>& open_graph_tracks() const { return open_graph_tracks_; }
  // Lanes drawn for `track`: its lanes, and its graph lanes when open.
  size_t lanes_shown(const Track& track, int index) const;

 private:
  LayoutMetrics metrics_;
  std::vector<Row> rows_;
  std::vector<int> row_of_track_;
  std::vector<int> open_graph_tracks_;
  int total_height_ = 0;
};

// One rectangle to paint: a single event (count == 1) or several sub-pixel events merged into one block.
struct DrawItem {
  double start = 0, end = 0;  // ns; painted at least 1 px wide
  int32_t track = 0;
  int16_t lane = 0;
  uint32_t count = 1;   // events merged into this block
  uint32_t index = 0;   // lane position of the first event
  uint32_t colour = 0;  // TimelineModel::colour_key of the event, or the most frequent among the events a merged
                        // block's merge landed on (merged blocks are drawn muted)
  int32_t busy = -1;    // merged block of a GPU stream or thread lane: its busy share per pixel (DrawList::busy)
};

// A merged block drawn as what it is: the share of each pixel column its lane's events cover (as Nsight Systems'
// GPU utilization row and Perfetto's track summaries), not a box saying "N events".
struct BusyStrip {
  double t0 = 0, bucket_ns = 1;  // column k covers [t0 + k · bucket_ns, t0 + (k + 1) · bucket_ns)
  std::vector<float> share;      // 0..1
};

// Sample density of one CpuSamples track: fraction of the busiest bucket, per bucket of `bucket_px`.
struct DensityStrip {
  int32_t track = 0;
  double t0 = 0, bucket_ns = 1;
  std::vector<float> values;
  std::vector<uint32_t> counts;
};

struct DrawList {
  Viewport viewport;
  std::vector<int> tracks;  // the tracks it covers
  std::vector<DrawItem> items;
  std::vector<DensityStrip> density;
  std::vector<BusyStrip> busy;  // DrawItem::busy indexes it
  size_t events_visited = 0;  // lane positions touched (for the benchmark: bounded by pixels, not events)
  size_t busy_columns = 0;    // busy shares computed: one binary search and ≤ Lane::kBusyStride sums each
};

struct LodOptions {
  double merge_px = 2.0;  // events narrower than this merge with neighbours starting within the next pixel
  int density_bucket_px = 2;
  std::vector<int> open_graphs;  // GpuStream tracks whose graph lanes are drawn (TimelineLayout::open_graph_tracks)
};

// Builds what to paint for `tracks` in `vp`: per lane, a binary search to the first visible event, then
// one step per painted block — a run of sub-pixel events is skipped with one more binary search to the
// first event past the next pixel. Work is O(pixels · log n) per lane regardless of how many events the
// window holds. Thread-safe (reads the model only).
DrawList build_draw_list(const TimelineModel& model, const Viewport& vp, const std::vector<int>& tracks,
                         const LodOptions& options = {});

struct Hit {
  int track = -1, lane = -1;
  size_t index = 0;  // lane position (CpuSamples: position in sample_times)
  EventRef event;    // for CpuSamples: kind Kernel is meaningless; use sample_row
  std::optional<uint32_t> sample_row;
};

// The event under pixel (x, y) (x in viewport pixels, y in layout coordinates), preferring the event that
// contains the time under x, else the nearest within `tolerance_px`.
std::optional<Hit> hit_test(const TimelineModel& model, const TimelineLayout& layout, const Viewport& vp, double x,
                            int y, double tolerance_px = 2.0);

// "12.5 ms", "830 µs", "1.20 s" — for the ruler, tooltips and tables.
std::string format_duration(double ns, int significant = 3);
// Ruler ticks for a viewport: a "nice" step (1/2/5 × 10^k ns) giving about `target_px` between ticks.
double ruler_step(const Viewport& vp, double target_px = 100.0);
// The first tick at or after the viewport's start: whole steps from `origin` (the first event), as the ruler
// labels them ("1.3 s" is 1.3 s after it).
double first_ruler_tick(const Viewport& vp, double origin, double step);

}  // namespace stepscope::gui
