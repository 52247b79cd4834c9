// A directory of ranks (`stepscope-gui DIR`): the cross-rank analysis placed on the merged timeline — its
// findings first, the job's critical path round by round on each rank's lane, the collectives that waited for
// the straggler, and the straggler's groups (docs/multi-rank.md, "GUI").
#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

std::string TimelineModel::rank_name(uint32_t i) const {
  if (!cross_rank_ || i >= cross_rank_->analysis->ranks.size()) return "rank ?";
  const auto& r = cross_rank_->analysis->ranks[i];
  return r.rank >= 0 ? "rank " + std::to_string(r.rank) : r.file;
}

void TimelineModel::build_cross_rank(std::shared_ptr<const analyzer::MultiRankAnalysis> ranks) {
  const auto& meta = trace_->meta;
  if (!ranks || ranks->ranks.empty() || !meta.count("ranks")) return;
  CrossRank cr;
  cr.analysis = std::move(ranks);
  const analyzer::MultiRankAnalysis& m = *cr.analysis;
  const size_t n = m.ranks.size();
  // Rank i of the analysis is the merged trace's rank k whose input is the same file.
  cr.merged.assign(n, -1);
  cr.shift.assign(n, 0);
  const auto placed = analyzer::rank_placements(meta);
  for (size_t k = 0; k < placed.size(); ++k)
    for (size_t i = 0; i < n; ++i)
      if (m.ranks[i].file == placed[k].file) {
        cr.merged[i] = int(k);
        cr.shift[i] = placed[k].shift_ns;
      }
  cr.report = analyzer::render_multirank_report(m, analyzer::ReportFormat::Text);

  // The step across every rank on the merged clock: where a cross-rank finding's step lies.
  auto step_extent = [&](int64_t index) -> std::optional<std::pair<int64_t, int64_t>> {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (size_t i = 0; i < n; ++i) {
      const analyzer::RankStep* s = analyzer::find_step(m.ranks[i], index);
      if (!s || cr.merged[i] < 0) continue;
      lo = std::min(lo, s->start_ns + cr.shift[i]);
      hi = std::max(hi, s->start_ns + s->dur_ns + cr.shift[i]);
    }
    if (lo > hi) return std::nullopt;
    return std::make_pair(lo, hi);
  };
  std::vector<FindingInfo> first;
  for (const auto& f : m.findings) {
    FindingInfo fi = finding_info(f);
    fi.cross_rank = true;
    for (int64_t s : f.steps)
      if (auto ext = step_extent(s)) fi.ranges.push_back(*ext);
    if (!fi.ranges.empty()) fi.start = fi.ranges.front().first, fi.end = fi.ranges.front().second;
    if (f.rule == "straggler") {
      // The evidence names the straggler's input; the rank number alone may be -1 (inputs without one).
      const QJsonObject ev = QJsonDocument::fromJson(QByteArray::fromStdString(f.evidence_json)).object();
      const std::string file = ev.value("file").toString().toStdString();
      for (size_t i = 0; i < n; ++i)
        if (m.ranks[i].file == file) cr.straggler = int(i);
      // The collectives it delayed: in its affected steps, every other rank's call of a collective it was the
      // last to arrive at.
      if (cr.straggler >= 0 && cr.merged[size_t(cr.straggler)] >= 0)
        for (int64_t s : f.steps)
          for (const auto& c : analyzer::matched_collectives(m, s)) {
            if (int(c.last) != cr.straggler) continue;
            for (size_t r = 0; r < n; ++r) {
              const int64_t wait = c.calls[r]->dur_ns - c.calls[c.last]->dur_ns;
              if (r == c.last || wait <= 0 || cr.merged[r] < 0) continue;
              DelayedCollective d;
              d.rank = uint32_t(r);
              d.step = s;
              d.call = c.calls[r];
              d.wait_ns = wait;
              d.start = c.calls[r]->start_ns + cr.shift[r];
              d.end = d.start + c.calls[r]->dur_ns;
              cr.delayed.push_back(d);
            }
          }
    }
    first.push_back(std::move(fi));
  }
  findings_.insert(findings_.begin(), std::make_move_iterator(first.begin()),
                   std::make_move_iterator(first.end()));

  // The job's critical path: each round on its rank's lane, own work to its arrival, then the transfer.
  for (const auto& a : m.steps)
    for (size_t j = 0; j < a.path_rounds.size(); ++j) {
      const auto& rd = a.path_rounds[j];
      if (rd.rank >= n || cr.merged[rd.rank] < 0) continue;
      const int64_t sh = cr.shift[rd.rank];
      cr.path.push_back(
          {uint32_t(rd.rank), a.index, uint32_t(j), false, rd.start_ns + sh, rd.arrive_ns + sh});
      if (rd.end_ns > rd.arrive_ns)
        cr.path.push_back({uint32_t(rd.rank), a.index, uint32_t(j), true, rd.arrive_ns + sh, rd.end_ns + sh});
    }
  cross_rank_ = std::move(cr);
}

// The straggler's processes and GPUs: their pids and device ids carry its merged index (multi_rank.h).
void TimelineModel::mark_straggler_groups() {
  if (!cross_rank_ || cross_rank_->straggler < 0) return;
  const int64_t k = cross_rank_->merged[size_t(cross_rank_->straggler)];
  for (const Track& t : tracks_) {
    int64_t of = -1;
    if (t.kind == TrackKind::GpuStream)
      of = t.device / analyzer::kRankDeviceBase - 1;
    else if (t.kind == TrackKind::CpuRanges || t.kind == TrackKind::CpuSamples ||
             t.kind == TrackKind::DataWaits)
      of = t.pid / analyzer::kRankPidBase - 1;
    if (of == k) straggler_groups_.insert(t.group);
  }
}

}  // namespace stepscope::gui
