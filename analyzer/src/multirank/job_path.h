// The job's critical path through one aligned step, and the replay that says what a rank-level change does to
// the job's step (docs/multi-rank.md, "The job's critical path" and "What-if across ranks"). Internal.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::analyzer::multirank {

// One collective across ranks: per rank (parallel to the ranks), its call.
using MatchedCollective = std::vector<const CollectiveCall*>;

// The collectives of one step matched across ranks (docs/multi-rank.md, "How ranks are compared"), kind by kind:
// the same (process group, sequence number) where every call has one, else the j-th of its kind on every rank.
// What could not be matched is counted by kind name for the notes (either counter may be null).
std::vector<MatchedCollective> match_collectives(const std::vector<const RankStep*>& per_rank,
                                                 std::map<std::string, size_t>* unmatched_seq,
                                                 std::map<std::string, size_t>* count_mismatch);
// The rank that arrived last: the shortest call (the lowest rank on a tie).
size_t last_arrival(const MatchedCollective& one);

// A step of a synchronous job is a chain of rounds: a matched collective completes at the same instant on every
// rank, so each round runs from one completion to the next, and lasts the own work of the rank that arrived last
// (time from the previous completion to its issue, on its own clock) plus its call, the transfer: it waited for
// nobody. After the last completion, the longest tail ends the step. No common clock is needed.
class StepRounds {
 public:
  StepRounds(const std::vector<const RankStep*>& per_rank, std::vector<MatchedCollective> matched);

  // The critical path: per rank, its parts on it (the last arrival's own work and transfer in each round, the
  // longest tail's rank after the last).
  std::vector<AlignedStep::PathPart> critical_path() const;
  // Where the path runs, round by round (AlignedStep::path_rounds).
  const std::vector<AlignedStep::PathRound>& rounds() const { return where_; }

  // The step in the replay model: per round the latest own work plus the transfer, then the longest tail.
  int64_t replayed_ns() const;
  // The same with up to `cut_ns` of `part` taken off rank `r`'s own work, spread over the rounds as that part
  // lies in them.
  int64_t replayed_ns(size_t r, RankCure::Part part, int64_t cut_ns) const;

 private:
  size_t n_ = 0;
  // [round]; the last round is the tail after the last matched collective, with no transfer.
  std::vector<int64_t> transfer_;
  std::vector<size_t> last_;  // the rank that arrived last (the longest tail's, for the tail)
  std::vector<AlignedStep::PathPart> last_own_;  // its own work before it arrived (comm: other collectives it
                                                 // took part in meanwhile)
  std::vector<AlignedStep::PathRound> where_;
  // [round]: the longest own work, its rank, its parts, and the next longest: a cure on one rank changes a
  // round only where that rank is the longest, so a replay is O(rounds) however many ranks (10,000 ranks ×
  // their findings), and no [round][rank] table is kept.
  std::vector<int64_t> top_, second_;
  std::vector<size_t> top_rank_;
  std::vector<AlignedStep::PathPart> top_own_;
  std::vector<AlignedStep::PathPart> have_;  // [rank]: its own work over all rounds
};

}  // namespace stepscope::analyzer::multirank
