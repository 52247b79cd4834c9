// The job's critical path across ranks, round by round (docs/multi-rank.md, "The job's critical path").
#include "multirank/job_path.h"

#include <algorithm>

namespace stepscope::analyzer::multirank {
namespace {

using Part = AlignedStep::PathPart;

void add_own(Part& p, const WorkSplit& w) {
  p.compute_ns += w.compute_ns;
  p.data_wait_ns += w.data_wait_ns;
  p.host_ns += w.host_ns();
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
  // Each rank's calls by end order (end_order is 0..k-1 over the step's calls).
  std::vector<std::vector<const CollectiveCall*>> by_end(n_);
  for (size_t r = 0; r < n_; ++r) {
    by_end[r].assign(per_rank[r]->collectives.size(), nullptr);
    for (const auto& c : per_rank[r]->collectives)
      if (c.end_order >= 0 && size_t(c.end_order) < by_end[r].size()) by_end[r][size_t(c.end_order)] = &c;
  }
  std::vector<int64_t> done(n_, -1);  // per rank: the end order of the last call accounted
  std::vector<int64_t> since(n_);     // per rank: the end of that call (its step's start before any)
  for (size_t r = 0; r < n_; ++r) since[r] = per_rank[r]->start_ns;
  auto take = [&](size_t r, int64_t upto, bool with_last, Part& p) {
    for (int64_t j = done[r] + 1; j <= upto; ++j) {
      const CollectiveCall* c = by_end[r][size_t(j)];
      if (!c) continue;
      add_own(p, c->before);
      if (j < upto || with_last) p.comm_ns += c->after_ns;  // a collective of its own before it arrived
    }
  };
  for (const auto& one : matched) {
    size_t last = 0;  // the shortest call: the last rank to arrive (lowest rank on a tie), as combine_ranks
    for (size_t r = 1; r < n_; ++r)
      if (one[r]->dur_ns < one[last]->dur_ns) last = r;
    std::vector<Part> own(n_);
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
    own_.push_back(std::move(own));
    transfer_.push_back(transfer);
    last_.push_back(last);
  }
  // The tail: whatever each rank did after its last matched collective, unmatched collectives included.
  std::vector<Part> tail(n_);
  size_t longest = 0;
  for (size_t r = 0; r < n_; ++r) {
    take(r, int64_t(by_end[r].size()) - 1, true, tail[r]);
    add_own(tail[r], per_rank[r]->tail);
    if (tail[r].total() > tail[longest].total()) longest = r;
  }
  const int64_t step_end = per_rank[longest]->start_ns + per_rank[longest]->dur_ns;
  if (tail[longest].total() > 0) where_.push_back({longest, since[longest], step_end, step_end});
  own_.push_back(std::move(tail));
  transfer_.push_back(0);
  last_.push_back(longest);
  for (const auto& round : own_) {
    int64_t top = 0, second = 0;
    size_t who = 0;
    for (size_t r = 0; r < round.size(); ++r) {
      const int64_t v = round[r].total();
      if (v > top) second = top, top = v, who = r;
      else if (v > second) second = v;
    }
    top_.push_back(top), second_.push_back(second), top_rank_.push_back(who);
  }
}

std::vector<AlignedStep::PathPart> StepRounds::critical_path() const {
  std::vector<Part> path(n_);
  for (size_t k = 0; k < own_.size(); ++k) {
    Part& p = path[last_[k]];
    const Part& o = own_[k][last_[k]];
    p.compute_ns += o.compute_ns, p.data_wait_ns += o.data_wait_ns, p.host_ns += o.host_ns;
    p.comm_ns += o.comm_ns + transfer_[k];
  }
  return path;
}

int64_t StepRounds::replayed_ns() const {
  int64_t t = 0;
  for (size_t k = 0; k < own_.size(); ++k) t += top_[k] + transfer_[k];
  return t;
}

int64_t StepRounds::replayed_ns(size_t r, RankCure::Part part, int64_t cut_ns) const {
  int64_t have = 0;
  for (const auto& round : own_) have += part_of(round[r], part);
  const double keep = have > 0 ? 1.0 - double(std::min(cut_ns, have)) / double(have) : 1.0;
  int64_t t = 0;
  for (size_t k = 0; k < own_.size(); ++k) {
    int64_t latest = top_[k];
    if (top_rank_[k] == r && own_[k][r].total() == top_[k]) {  // only the longest can make the round shorter
      const int64_t p = part_of(own_[k][r], part);
      latest = std::max(second_[k], own_[k][r].total() - (p - int64_t(double(p) * keep + 0.5)));
    }
    t += latest + transfer_[k];
  }
  return t;
}

}  // namespace stepscope::analyzer::multirank
