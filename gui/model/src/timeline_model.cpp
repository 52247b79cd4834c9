#include "stepscope/gui/timeline_model.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::gui {

const char* to_string(EventKind k) {
  switch (k) {
    case EventKind::Kernel: return "kernel";
    case EventKind::Memcpy: return "memcpy";
    case EventKind::Memset: return "memset";
    case EventKind::ApiCall: return "API call";
    case EventKind::Range: return "range";
    case EventKind::Sync: return "sync";
    case EventKind::DataWait: return "data wait";
    case EventKind::Step: return "step";
    case EventKind::Finding: return "finding";
    case EventKind::PathSegment: return "critical path";
    case EventKind::GraphReplay: return "CUDA graph replay";
    case EventKind::RankPath: return "job critical path";
    case EventKind::RankWait: return "waited for the straggler";
  }
  return "event";
}

const char* to_string(TrackKind k) {
  switch (k) {
    case TrackKind::Steps: return "steps";
    case TrackKind::Findings: return "findings";
    case TrackKind::CriticalPath: return "critical path";
    case TrackKind::CpuSamples: return "cpu samples";
    case TrackKind::CpuRanges: return "cpu ranges";
    case TrackKind::DataWaits: return "data waits";
    case TrackKind::GpuStream: return "gpu stream";
    case TrackKind::RankLane: return "rank";
  }
  return "track";
}

const char* bound_name(analyzer::Bound b) { return analyzer::to_string(b); }

uint32_t TimelineModel::bound_code(const std::string& b) {
  if (b == "input") return 0;
  if (b == "launch") return 1;
  if (b == "sync") return 2;
  if (b == "host") return 3;
  if (b == "gpu") return 4;
  return 5;
}

size_t Lane::first_ending_after(int64_t t) const {
  if (!max_end.empty())
    return static_cast<size_t>(std::upper_bound(max_end.begin(), max_end.end(), t) - max_end.begin());
  size_t lo = 0, hi = size();  // ends are non-decreasing: first i with end(i) > t
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (end(mid) <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

size_t Lane::first_starting_at_or_after(int64_t t, size_t from) const {
  return static_cast<size_t>(std::lower_bound(starts.begin() + static_cast<ptrdiff_t>(from), starts.end(), t) -
                             starts.begin());
}

int64_t Lane::long_dur(size_t i) const {
  auto it = std::lower_bound(long_durs.begin(), long_durs.end(), static_cast<uint32_t>(i),
                             [](const std::pair<uint32_t, int64_t>& p, uint32_t v) { return p.first < v; });
  return it != long_durs.end() && it->first == i ? it->second : int64_t(kLongDur);
}

size_t Lane::bytes() const {
  return starts.capacity() * sizeof(int64_t) + durs.capacity() * sizeof(uint32_t) +
         rows.capacity() * sizeof(uint32_t) + kinds.capacity() * sizeof(EventKind) +
         long_durs.capacity() * sizeof(long_durs[0]) + max_end.capacity() * sizeof(int64_t) +
         busy_marks.capacity() * sizeof(int64_t);
}

void Lane::index_busy() {
  busy_marks.assign(size() / kBusyStride + 1, 0);
  int64_t sum = 0;
  for (size_t i = 0; i < size(); ++i) {
    if (i % kBusyStride == 0) busy_marks[i / kBusyStride] = sum;
    sum += dur(i);
  }
  if (size() % kBusyStride == 0) busy_marks.back() = sum;
}

int64_t Lane::summed_dur(size_t i) const {
  const size_t k = busy_marks.empty() ? 0 : std::min(i / kBusyStride, busy_marks.size() - 1);
  int64_t sum = busy_marks.empty() ? 0 : busy_marks[k];
  for (size_t j = k * kBusyStride; j < i; ++j) sum += dur(j);
  return sum;
}

int64_t Lane::covered_before(int64_t t) const {
  // Events before i ended by t; event i may straddle t. (In the overflow lane, whose events overlap, this is an
  // approximation — overlaps counted twice, a later event ended by t missed — clamped by busy_in to the span.)
  const size_t i = first_ending_after(t);
  int64_t covered = summed_dur(i);
  if (i < size() && starts[i] < t) covered += std::min(dur(i), t - starts[i]);
  return covered;
}

int64_t Lane::busy_in(int64_t a, int64_t b) const {
  if (b <= a || !size()) return 0;
  return std::clamp<int64_t>(covered_before(b) - covered_before(a), 0, b - a);
}

// Several ranks in one trace (merge_ranks_for_timeline) keep their ids apart with offsets: show the recorded ones.
int64_t TimelineModel::shown_pid(int64_t pid) const {
  return trace_->meta.count("ranks") && pid > 0 ? pid % analyzer::kRankPidBase : pid;
}

int64_t TimelineModel::shown_device(int64_t device) const {
  return trace_->meta.count("ranks") && device > 0 ? device % analyzer::kRankDeviceBase : device;
}

size_t TimelineModel::lane_bytes() const {
  size_t n = 0;
  for (const Track& tr : tracks_) {
    for (const Lane& l : tr.lanes) n += l.bytes();
    n += tr.sample_times.capacity() * sizeof(int64_t) + tr.sample_rows.capacity() * sizeof(uint32_t);
  }
  return n;
}

FindingInfo finding_info(const analyzer::FindingResult& f) {
  FindingInfo fi;
  fi.rule = f.rule;
  fi.severity = store::to_string(f.severity);
  fi.summary = f.summary;
  fi.suggestion = f.suggestion;
  fi.evidence_json = f.evidence_json;
  fi.steps = f.steps;
  fi.est_savings_us_per_step = f.est_savings_us_per_step;
  fi.share = f.share;
  fi.replayed_cure = f.replayed_cure;
  fi.replayed_step_us = f.replayed_step_us;
  fi.replayed_saving_us = f.replayed_saving_us;
  return fi;
}

std::shared_ptr<const TimelineModel> TimelineModel::build(std::shared_ptr<const store::Trace> trace,
                                                          std::shared_ptr<const analyzer::Analysis> analysis,
                                                          std::shared_ptr<const analyzer::MultiRankAnalysis> ranks) {
  std::shared_ptr<TimelineModel> m(new TimelineModel());
  m->trace_ = trace ? std::move(trace) : std::make_shared<store::Trace>();
  m->analysis_ = std::move(analysis);
  m->index_api_calls();
  m->build_steps_and_findings();
  if (ranks) m->build_cross_rank(std::move(ranks));
  m->build_tracks();
  return m;
}

void TimelineModel::build_steps_and_findings() {
  const store::Trace& t = *trace_;
  if (analysis_ && !analysis_->steps.empty()) {
    for (const auto& s : analysis_->steps)
      steps_.push_back({s.index, s.start_ns, s.start_ns + std::max<int64_t>(0, s.dur_ns), bound_name(s.bound), s.warmup});
  } else {
    for (const auto& s : t.steps) steps_.push_back({s.index, s.start, std::max(s.start, s.end), "", false});
  }
  std::sort(steps_.begin(), steps_.end(), [](const StepInfo& a, const StepInfo& b) { return a.start < b.start; });

  if (analysis_) {
    const double mean_step_us = analyzer::traced_mean_step_us(*analysis_);
    for (const auto& f : analysis_->findings) {
      FindingInfo fi = finding_info(f);
      fi.replay_note = analyzer::estimate_replay_sentence(f, mean_step_us);
      for (const auto& r : f.ranges) fi.ranges.emplace_back(r.start_ns, std::max(r.start_ns, r.end_ns));
      findings_.push_back(std::move(fi));
    }
  } else {
    for (const auto& f : t.findings) {
      FindingInfo fi;
      fi.rule = t.str(f.rule);
      fi.severity = store::to_string(f.severity);
      fi.summary = t.str(f.message);
      fi.evidence_json = f.evidence_json;
      for (int64_t s = f.first_step; s >= 0 && s <= f.last_step; ++s) fi.steps.push_back(s);
      fi.est_savings_us_per_step = f.est_savings_ns / 1000.0;
      findings_.push_back(std::move(fi));
    }
  }
  for (size_t i = 0; i < findings_.size(); ++i) {
    auto ext = finding_extent(i);
    if (ext) {
      findings_[i].start = ext->first;
      findings_[i].end = ext->second;
    }
  }
}

int TimelineModel::step_position(int64_t step_index) const {
  for (size_t i = 0; i < steps_.size(); ++i)
    if (steps_[i].index == step_index) return static_cast<int>(i);
  return -1;
}

std::optional<std::pair<int64_t, int64_t>> TimelineModel::steady_extent() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const StepInfo& s : steps_)
    if (!s.warmup) lo = std::min(lo, s.start), hi = std::max(hi, s.end);
  // A host that runs ahead queues work the GPU does later: the GPU's own steps belong in the frame too. They run
  // from a step's first GPU work to the next step's, so the last step has none: it is given the last one's length.
  if (analysis_ && !analysis_->gpu_steps.empty()) {
    for (const auto& g : analysis_->gpu_steps)
      if (!g.warmup && g.dur_ns > 0) lo = std::min(lo, g.start_ns), hi = std::max(hi, g.start_ns + g.dur_ns);
    const auto& last = analysis_->gpu_steps.back();
    hi = std::max(hi, last.start_ns + 2 * last.dur_ns);
  }
  if (lo >= hi) return std::nullopt;
  return std::make_pair(lo, hi);
}

std::vector<std::string> TimelineModel::run_notes() const {
  std::vector<std::string> out;
  if (!analysis_) return out;
  for (std::string n : {analyzer::malformed_events_note(analysis_->summary), analyzer::no_gpu_note(analysis_->summary),
                        analyzer::steps_advice(analysis_->summary)})
    if (!n.empty()) out.push_back(std::move(n));
  return out;
}

int TimelineModel::worst_finding() const {
  // A directory of ranks opens on the cross-rank findings (largest saving first): what the job waits for.
  if (!findings_.empty() && findings_.front().cross_rank) return 0;
  int best = -1;
  for (size_t i = 0; i < findings_.size(); ++i) {
    const FindingInfo& f = findings_[i];
    if (best < 0) {
      best = int(i);
      continue;
    }
    const FindingInfo& b = findings_[size_t(best)];
    const bool same_severity = severity_rank(f.severity) == severity_rank(b.severity);
    if (severity_rank(f.severity) > severity_rank(b.severity) || (same_severity && f.share > b.share) ||
        (same_severity && f.share == b.share && f.est_savings_us_per_step > b.est_savings_us_per_step))
      best = int(i);
  }
  return best;
}

std::optional<std::pair<int64_t, int64_t>> TimelineModel::finding_extent(size_t finding) const {
  if (finding >= findings_.size()) return std::nullopt;
  const FindingInfo& f = findings_[finding];
  if (f.cross_rank) {  // its first step, across every rank
    if (f.ranges.empty()) return std::nullopt;
    return f.ranges.front();
  }
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (int64_t s : f.steps) {
    int p = step_position(s);
    if (p < 0) continue;
    lo = std::min(lo, steps_[p].start);
    hi = std::max(hi, steps_[p].end);
  }
  if (lo > hi) {  // no steps: fall back to the evidence ranges
    for (const auto& r : f.ranges) {
      lo = std::min(lo, r.first);
      hi = std::max(hi, r.second);
    }
  }
  if (lo > hi) return std::nullopt;
  return std::make_pair(lo, hi);
}
}  // namespace stepscope::gui
