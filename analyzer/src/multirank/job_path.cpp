// The job's critical path across ranks, round by round (docs/multi-rank.md, "The job's critical path").
#include "multirank/job_path.h"

#include <algorithm>
#include <cstdint>

namespace stepscope::analyzer::multirank {
namespace {

using Part = AlignedStep::PathPart;

void add_own(Part& p, const WorkSplit& w) {
  p.compute_ns += w.compute_ns;
  p.data_wait_ns += w.data_wait_ns;
  p.host_ns += w.host_ns();
}

// Own work only: compute, data wait, host (a path's communication is added beside it).
void add_own(Part& p, const Part& o) {
  p.compute_ns += o.compute_ns;
  p.data_wait_ns += o.data_wait_ns;
  p.host_ns += o.host_ns;
}

int64_t part_of(const Part& p, RankCure::Part which) {
  switch (which) {
    case RankCure::Part::Compute:
      return p.compute_ns;
    case RankCure::Part::DataWait:
      return p.data_wait_ns;
    case RankCure::Part::Host:
      return p.host_ns;
  }
  return 0;
}

}  // namespace

StepRounds::StepRounds(const std::vector<const RankStep*>& per_rank, std::vector<MatchedCollective> matched) {
  n_ = per_rank.size();
  // Completion order: the same instants on every rank, so any one rank's end order is the job's.
  std::stable_sort(matched.begin(), matched.end(), [](const MatchedCollective& x, const MatchedCollective& y) {
    return x[0]->end_order < y[0]->end_order;
  });
  // Each rank's calls by end order (end_order is 0..k-1 over the step's calls), rank r's from first[r]: one
  // array for all ranks, as everything here that is per rank, so 10,000 ranks cost no 10,000 allocations.
  std::vector<size_t> first(n_ + 1, 0);
  for (size_t r = 0; r < n_; ++r) first[r + 1] = first[r] + per_rank[r]->collectives.size();
  constexpr uint32_t kNone = UINT32_MAX;
  std::vector<uint32_t> by_end(first[n_], kNone);  // the call's place in its rank's collectives
  for (size_t r = 0; r < n_; ++r) {
    const auto& calls = per_rank[r]->collectives;
    for (size_t i = 0; i < calls.size(); ++i)
      if (calls[i].end_order >= 0 && size_t(calls[i].end_order) < calls.size())
        by_end[first[r] + size_t(calls[i].end_order)] = uint32_t(i);
  }
  std::vector<int64_t> done(n_, -1);  // per rank: the end order of the last call accounted
  std::vector<int64_t> since(n_);     // per rank: the end of that call (its step's start before any)
  for (size_t r = 0; r < n_; ++r) since[r] = per_rank[r]->start_ns;
  auto take = [&](size_t r, int64_t upto, bool with_last, Part& p) {
    for (int64_t j = done[r] + 1; j <= upto; ++j) {
      const uint32_t i = by_end[first[r] + size_t(j)];
      if (i == kNone) continue;
      const CollectiveCall& c = per_rank[r]->collectives[i];
      add_own(p, c.before);
      if (j < upto || with_last) p.comm_ns += c.after_ns;  // a collective of its own before it arrived
    }
  };
  // Per round only what the path and the replays read: the longest own work (its rank and the next longest),
  // the last arrival's; per rank its own work summed over the rounds.
  have_.assign(n_, {});
  std::vector<Part> own(n_);
  auto close_round = [&](size_t last, int64_t transfer) {
    int64_t top = 0, second = 0;
    size_t who = 0;
    for (size_t r = 0; r < n_; ++r) {
      const int64_t v = own[r].total();
      if (v > top)
        second = top, top = v, who = r;
      else if (v > second)
        second = v;
      add_own(have_[r], own[r]);
    }
    top_.push_back(top), second_.push_back(second), top_rank_.push_back(who), top_own_.push_back(own[who]);
    last_own_.push_back(own[last]), transfer_.push_back(transfer), last_.push_back(last);
  };
  for (const auto& one : matched) {
    size_t last = 0;  // the shortest call: the last rank to arrive (lowest rank on a tie), as combine_ranks
    for (size_t r = 1; r < n_; ++r)
      if (one[r]->dur_ns < one[last]->dur_ns) last = r;
    std::fill(own.begin(), own.end(), Part{});
    int64_t transfer = 0;
    for (size_t r = 0; r < n_; ++r) {
      const int64_t pos = one[r]->end_order;
      if (pos <= done[r]) continue;  // this rank completed it before an earlier round's (concurrent groups)
      take(r, pos, false, own[r]);
      const int64_t end = one[r]->start_ns + one[r]->dur_ns;
      if (r == last) {
        transfer = one[r]->after_ns;
        where_.push_back({r, since[r], end - transfer, end});
      }
      done[r] = pos;
      since[r] = std::max(since[r], end);
    }
    close_round(last, transfer);
  }
  // The tail: whatever each rank did after its last matched collective, unmatched collectives included.
  std::fill(own.begin(), own.end(), Part{});
  size_t longest = 0;
  for (size_t r = 0; r < n_; ++r) {
    take(r, int64_t(first[r + 1] - first[r]) - 1, true, own[r]);
    add_own(own[r], per_rank[r]->tail);
    if (own[r].total() > own[longest].total()) longest = r;
  }
  const int64_t step_end = per_rank[longest]->start_ns + per_rank[longest]->dur_ns;
  if (own[longest].total() > 0) where_.push_back({longest, since[longest], step_end, step_end});
  close_round(longest, 0);
}

std::vector<AlignedStep::PathPart> StepRounds::critical_path() const {
  std::vector<Part> path(n_);
  for (size_t k = 0; k < last_.size(); ++k) {
    Part& p = path[last_[k]];
    add_own(p, last_own_[k]);
    p.comm_ns += last_own_[k].comm_ns + transfer_[k];
  }
  return path;
}

int64_t StepRounds::replayed_ns() const {
  int64_t t = 0;
  for (size_t k = 0; k < top_.size(); ++k) t += top_[k] + transfer_[k];
  return t;
}

int64_t StepRounds::replayed_ns(size_t r, RankCure::Part part, int64_t cut_ns) const {
  const int64_t have = part_of(have_[r], part);
  const double keep = have > 0 ? 1.0 - double(std::min(cut_ns, have)) / double(have) : 1.0;
  int64_t t = 0;
  for (size_t k = 0; k < top_.size(); ++k) {
    int64_t latest = top_[k];
    if (top_rank_[k] == r) {  // only the longest can make the round shorter
      const int64_t p = part_of(top_own_[k], part);
      latest = std::max(second_[k], top_own_[k].total() - (p - int64_t(double(p) * keep + 0.5)));
    }
    t += latest + transfer_[k];
  }
  return t;
}

}  // namespace stepscope::analyzer::multirank
