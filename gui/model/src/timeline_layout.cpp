#include "stepscope/gui/timeline_layout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace stepscope::gui {

void Viewport::zoom_about(double x, double factor, double min_span) {
  const double anchor = time_at(x);
  double span = (t1 - t0) * factor;
  if (span < min_span) span = min_span;
  const double frac = x / (width > 0 ? width : 1);
  t0 = anchor - span * frac;
  t1 = t0 + span;
}

void Viewport::pan_px(double dx) {
  const double d = dx * ns_per_px();
  t0 += d;
  t1 += d;
}

void Viewport::clamp_to(double lo, double hi) {
  // Allow a margin of 5% of the trace on each side, so edge events are not glued to the border.
  const double margin = (hi - lo) * 0.05;
  lo -= margin;
  hi += margin;
  double span = t1 - t0;
  if (span > hi - lo) {
    t0 = lo;
    t1 = hi;
    return;
  }
  if (t0 < lo) {
    t0 = lo;
    t1 = lo + span;
  }
  if (t1 > hi) {
    t1 = hi;
    t0 = hi - span;
  }
}

std::string graph_key(const Track& track) { return track.group + " / " + track.title; }

TimelineLayout::TimelineLayout(const TimelineModel& model, LayoutMetrics metrics, const LayoutState& state)
    : metrics_(metrics) {
  const auto& tracks = model.tracks();
  row_of_track_.assign(tracks.size(), -1);
  for (size_t k = 0; k < tracks.size(); ++k)
    if (tracks[k].graphs_open_inside && state.open_graphs.count(graph_key(tracks[k])))
      open_graph_tracks_.push_back(static_cast<int>(k));
  int y = 0;
  for (size_t i = 0; i < tracks.size();) {
    const std::string& group = tracks[i].group;
    size_t end = i;
    while (end < tracks.size() && tracks[end].group == group) ++end;
    const bool open = !state.collapsed.count(group);
    Row header{-1, group, y, metrics_.group_header_height, RowKind::Header};
    header.open = open;
    rows_.push_back(header);
    y += metrics_.group_header_height;
    if (open) {
      std::set<int64_t> folded_threads;
      for (size_t k = i; k < end; ++k)
        if (tracks[k].folded) folded_threads.insert(tracks[k].tid);
      const bool others_open = state.expanded_others.count(group) > 0;
      bool others_done = false;
      for (size_t k = i; k < end; ++k) {
        const Track& tr = tracks[k];
        if (tr.folded && !others_done) {  // folded tracks follow the group's other tracks
          Row r{-1, group, y, metrics_.lane_height, RowKind::Others};
          r.others = static_cast<int>(folded_threads.size());
          r.open = others_open;
          rows_.push_back(r);
          y += metrics_.lane_height + metrics_.track_gap;
          others_done = true;
        }
        if (tr.folded && !others_open) continue;
        const int h = tr.kind == TrackKind::CpuSamples
                          ? metrics_.samples_height
                          : std::max(1, int(lanes_shown(tr, static_cast<int>(k)))) * metrics_.lane_height;
        row_of_track_[k] = static_cast<int>(rows_.size());
        rows_.push_back({static_cast<int>(k), group, y, h, RowKind::Track});
        y += h + metrics_.track_gap;
      }
    }
    i = end;
  }
  total_height_ = y;
}

const TimelineLayout::Row* TimelineLayout::row_of_track(int track) const {
  if (track < 0 || static_cast<size_t>(track) >= row_of_track_.size() || row_of_track_[track] < 0) return nullptr;
  return &rows_[row_of_track_[track]];
}

const TimelineLayout::Row* TimelineLayout::row_at(int y) const {
  auto it = std::upper_bound(rows_.begin(), rows_.end(), y, [](int v, const Row& r) { return v < r.y; });
  if (it == rows_.begin()) return nullptr;
  --it;
  return y < it->y + it->height ? &*it : nullptr;
}

int TimelineLayout::lane_y(int track, int lane) const {
  const Row* r = row_of_track(track);
  return r ? r->y + lane * metrics_.lane_height : 0;
}

bool TimelineLayout::graphs_open(int track) const {
  return std::binary_search(open_graph_tracks_.begin(), open_graph_tracks_.end(), track);
}

size_t TimelineLayout::lanes_shown(const Track& track, int index) const {
  return track.lanes.size() + (graphs_open(index) ? track.graph_lanes.size() : 0);
}

std::vector<int> TimelineLayout::tracks_in(int y0, int y1) const {
  std::vector<int> out;
  for (const Row& r : rows_)
    if (r.track >= 0 && r.y < y1 && r.y + r.height > y0) out.push_back(r.track);
  return out;
}

namespace {

void lod_lane(const TimelineModel& model, const Lane& lane, int track, int lane_index, const Viewport& vp,
              const LodOptions& opt, bool busy_strips, DrawList& out) {
  const size_t n = lane.size();
  if (!n) return;
  const double npp = vp.ns_per_px();
  const double merge_ns = opt.merge_px * npp;
  const int64_t t0 = static_cast<int64_t>(std::floor(vp.t0));
  const int64_t t1 = static_cast<int64_t>(std::ceil(vp.t1));
  size_t i = lane.first_ending_after(t0);
  while (i < n && lane.starts[i] < t1) {
    ++out.events_visited;
    const int64_t s = lane.starts[i];
    int64_t e = lane.end(i);
    DrawItem item;
    item.track = track;
    item.lane = static_cast<int16_t>(lane_index);
    item.index = static_cast<uint32_t>(i);
    item.colour = model.colour_key(lane.ref(i));
    size_t next = i + 1;
    // A merged block takes the colour most of it has: the one most frequent among the events the merge lands on
    // (one a pixel or so), not the first event's (launch_bound_graph's 3000 steps, 2863 of them gpu-bound, were
    // drawn sync red after their first step).
    // Misra-Gries over kSlots counters: the majority colour is always among them (steps have 7 bounds, the
    // critical path 8 kinds, other lanes many names).
    constexpr size_t kSlots = 8;
    uint32_t votes_colour[kSlots] = {item.colour};
    uint32_t votes[kSlots] = {1};
    size_t kinds = 1;
    auto vote = [&](uint32_t c) {
      for (size_t k = 0; k < kinds; ++k)
        if (votes_colour[k] == c) return void(++votes[k]);
      if (kinds < kSlots) return void((votes_colour[kinds] = c, votes[kinds++] = 1));
      size_t k = 0;  // all slots taken: every counter loses one, and an empty one goes
      while (k < kinds) {
        if (--votes[k] == 0) {
          votes[k] = votes[kinds - 1], votes_colour[k] = votes_colour[kinds - 1], --kinds;
        } else {
          ++k;
        }
      }
    };
    if (static_cast<double>(e - s) < merge_ns) {
      // Sub-pixel: absorb every event starting less than a pixel after the block's end, until a gap of at
      // least one pixel or a wide event (which gets its own rectangle and label). The end advances by at
      // least a pixel every two rounds, so a block costs O(its width in pixels) binary searches.
      // A block reaching past the window's end stops there: nothing beyond is visible.
      while (e < t1) {
        const int64_t boundary = e + static_cast<int64_t>(std::ceil(npp));
        size_t j = lane.first_starting_at_or_after(std::max(boundary, lane.starts[next - 1] + 1), next);
        // Lanes hold non-overlapping events, so only the last absorbed one can be wide.
        if (j > next && static_cast<double>(lane.dur(j - 1)) >= merge_ns) --j;
        if (j <= next) break;
        e = std::max(e, lane.max_end_at(j - 1));
        next = j;
        ++out.events_visited;
        vote(model.colour_key(lane.ref(j - 1)));
      }
      for (size_t k = 1; k < kinds; ++k)
        if (votes[k] > votes[0]) std::swap(votes[0], votes[k]), std::swap(votes_colour[0], votes_colour[k]);
      if (kinds > 0) item.colour = votes_colour[0];  // none left: no colour held a majority; the first event's
    }
    item.start = static_cast<double>(s);
    item.end = static_cast<double>(e);
    item.count = static_cast<uint32_t>(next - i);
    if (item.count > 1 && busy_strips) {
      // One column per pixel on the viewport's grid, one covered_before() per column edge: O(pixels · log n) still.
      const double x0 = std::max(0.0, std::floor(vp.x_of(item.start)));
      const double x1 = std::min(double(vp.width), std::ceil(vp.x_of(item.end)));
      if (x1 > x0) {
        BusyStrip strip;
        strip.t0 = vp.time_at(x0);
        strip.bucket_ns = npp;
        strip.share.reserve(size_t(x1 - x0));
        // Neighbouring columns share their edge: one covered_before() per edge.
        int64_t a = static_cast<int64_t>(std::floor(vp.time_at(x0)));
        int64_t covered_a = lane.covered_before(a);
        for (double x = x0; x < x1; ++x) {
          const int64_t b = std::max(a + 1, static_cast<int64_t>(std::floor(vp.time_at(x + 1))));
          const int64_t covered_b = lane.covered_before(b);
          strip.share.push_back(float(double(std::clamp<int64_t>(covered_b - covered_a, 0, b - a)) / double(b - a)));
          a = b, covered_a = covered_b;
          ++out.busy_columns;
        }
        item.busy = static_cast<int32_t>(out.busy.size());
        out.busy.push_back(std::move(strip));
      }
    }
    out.items.push_back(item);
    i = next;
  }
}

void density(const Track& tr, int track, const Viewport& vp, const LodOptions& opt, DrawList& out) {
  DensityStrip strip;
  strip.track = track;
  strip.t0 = vp.t0;
  strip.bucket_ns = vp.ns_per_px() * opt.density_bucket_px;
  const int buckets = (vp.width + opt.density_bucket_px - 1) / opt.density_bucket_px;
  strip.counts.resize(buckets);
  strip.values.resize(buckets);
  const auto& v = tr.sample_times;
  auto lo = std::lower_bound(v.begin(), v.end(), static_cast<int64_t>(std::floor(vp.t0)));
  uint32_t peak = 0;
  // With off-CPU samples (--wall) the height is the on-CPU ones against the densest bucket of all samples.
  const bool wall = !tr.on_cpu_before.empty();
  std::vector<uint32_t> on_cpu(wall ? size_t(buckets) : 0);
  for (int b = 0; b < buckets; ++b) {
    const int64_t edge = static_cast<int64_t>(std::floor(vp.t0 + (b + 1) * strip.bucket_ns));
    auto hi = std::lower_bound(lo, v.end(), edge);
    strip.counts[b] = static_cast<uint32_t>(hi - lo);
    if (wall)
      on_cpu[size_t(b)] = tr.on_cpu_before[size_t(hi - v.begin())] - tr.on_cpu_before[size_t(lo - v.begin())];
    peak = std::max(peak, strip.counts[b]);
    out.events_visited += 1;
    lo = hi;
  }
  for (int b = 0; b < buckets; ++b)
    strip.values[b] = peak ? float(wall ? on_cpu[size_t(b)] : strip.counts[b]) / float(peak) : 0.f;
  out.density.push_back(std::move(strip));
}

}  // namespace

DrawList build_draw_list(const TimelineModel& model, const Viewport& vp, const std::vector<int>& tracks,
                         const LodOptions& options) {
  DrawList out;
  out.viewport = vp;
  out.tracks = tracks;
  for (int ti : tracks) {
    if (ti < 0 || static_cast<size_t>(ti) >= model.tracks().size()) continue;
    const Track& tr = model.tracks()[ti];
    if (tr.kind == TrackKind::CpuSamples) {
      density(tr, ti, vp, options, out);
      continue;
    }
    const bool graphs = std::binary_search(options.open_graphs.begin(), options.open_graphs.end(), ti);
    const size_t lanes = tr.lanes.size() + (graphs ? tr.graph_lanes.size() : 0);
    for (size_t li = 0; li < lanes; ++li)
      lod_lane(model, tr.lane_at(li), ti, static_cast<int>(li), vp, options, !tiles_the_run(tr.kind), out);
  }
  return out;
}

std::optional<Hit> hit_test(const TimelineModel& model, const TimelineLayout& layout, const Viewport& vp, double x,
                            int y, double tolerance_px) {
  const TimelineLayout::Row* row = layout.row_at(y);
  if (!row || row->track < 0) return std::nullopt;
  const Track& tr = model.tracks()[row->track];
  const double t = vp.time_at(x);
  const double tol = tolerance_px * vp.ns_per_px();
  if (tr.kind == TrackKind::CpuSamples) {
    const auto& v = tr.sample_times;
    if (v.empty()) return std::nullopt;
    size_t i = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), static_cast<int64_t>(t)) - v.begin());
    size_t best = v.size();
    double best_d = tol + 1;
    for (size_t k : {i, i - 1}) {
      if (k >= v.size()) continue;
      double d = std::abs(static_cast<double>(v[k]) - t);
      if (d < best_d) {
        best_d = d;
        best = k;
      }
    }
    if (best == v.size() || best_d > tol) return std::nullopt;
    Hit h;
    h.track = row->track;
    h.lane = 0;
    h.index = best;
    h.sample_row = tr.sample_rows[best];
    return h;
  }
  const int lane = (y - row->y) / layout.metrics().lane_height;
  if (lane < 0 || static_cast<size_t>(lane) >= layout.lanes_shown(tr, row->track)) return std::nullopt;
  const Lane& l = tr.lane_at(size_t(lane));
  if (!l.size()) return std::nullopt;
  // Candidates: events overlapping [t - tol, t + tol].
  size_t i = l.first_ending_after(static_cast<int64_t>(std::floor(t - tol)));
  size_t best = l.size();
  double best_d = 0;
  for (; i < l.size() && static_cast<double>(l.starts[i]) <= t + tol; ++i) {
    const double s = static_cast<double>(l.starts[i]), e = static_cast<double>(l.end(i));
    if (e < t - tol) continue;  // only possible in overlapping lanes
    const double d = t < s ? s - t : (t > e ? t - e : 0.0);
    // Prefer containment; among containing events the shortest (the most specific).
    if (best == l.size() || d < best_d || (d == 0 && best_d == 0 && e - s < double(l.dur(best)))) {
      best = i;
      best_d = d;
    }
  }
  if (best == l.size()) return std::nullopt;
  Hit h;
  h.track = row->track;
  h.lane = lane;
  h.index = best;
  h.event = l.ref(best);
  return h;
}

std::string format_duration(double ns, int significant) {
  const double a = std::abs(ns);
  const char* unit = "ns";
  double v = ns;
  if (a >= 1e9) {
    v = ns / 1e9;
    unit = "s";
  } else if (a >= 1e6) {
    v = ns / 1e6;
    unit = "ms";
  } else if (a >= 1e3) {
    v = ns / 1e3;
    unit = "µs";
  }
  char buf[64];
  if (unit[0] == 'n' && unit[1] == 's') {
    std::snprintf(buf, sizeof buf, "%.0f ns", v);
  } else {
    // Keep `significant` digits without trailing noise: 12.5 ms, 830 µs, 1.20 s.
    const double av = std::abs(v);
    int decimals = av >= 100 ? 0 : av >= 10 ? 1 : 2;
    decimals = std::max(0, decimals - (3 - significant));
    std::snprintf(buf, sizeof buf, "%.*f %s", decimals, v, unit);
  }
  return buf;
}

double ruler_step(const Viewport& vp, double target_px) {
  const double raw = vp.ns_per_px() * target_px;
  if (raw <= 1) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

double first_ruler_tick(const Viewport& vp, double origin, double step) {
  return origin + std::ceil((vp.t0 - origin) / step) * step;
}

}  // namespace stepscope::gui
