// Aligning ranks by step index and matching their collectives (docs/multi-rank.md, "How ranks are compared").
//
// The k-th collective of a kind in a step is the same collective on every rank (NCCL requires every rank to
// issue them in the same order). Every rank's kernel for it ends together, when the last rank has arrived
// and the transfer is done, so a rank's kernel lasts its wait for the last arrival plus the transfer; the
// shortest kernel belongs to the last rank to arrive. That needs no common clock across hosts.
#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "multirank/job_path.h"
#include "multirank/multirank_rule.h"

namespace stepscope::analyzer {

namespace multirank {

int64_t median_of(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  const size_t mid = (v.size() - 1) / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  return v[mid];
}

std::vector<MatchedCollective> match_collectives(const std::vector<const RankStep*>& per_rank,
                                                 std::map<std::string, size_t>* unmatched_seq,
                                                 std::map<std::string, size_t>* count_mismatch) {
  const size_t n = per_rank.size();
  std::vector<MatchedCollective> all;
  // Each rank's calls of one kind in one array, rank r's from first[r]: at 10,000 ranks a vector per rank was
  // 10,000 allocations a kind.
  std::vector<size_t> first(n + 1);
  std::vector<const CollectiveCall*> calls;
  for (int kind = 0; kind < kCollectiveKinds; ++kind) {
    calls.clear();
    size_t fewest = SIZE_MAX, most = 0;
    bool by_seq = true;
    for (size_t r = 0; r < n; ++r) {
      first[r] = calls.size();
      for (const auto& c : per_rank[r]->collectives)
        if (int(c.kind) == kind) calls.push_back(&c), by_seq = by_seq && per_rank[r]->host_call(c).seq >= 0;
      fewest = std::min(fewest, calls.size() - first[r]);
      most = std::max(most, calls.size() - first[r]);
    }
    first[n] = calls.size();
    if (most == 0) continue;
    // One collective across ranks: the same (process group, sequence number) where every call has one
    // (torch.distributed's hooks), else the j-th of its kind in the step on every rank.
    if (by_seq) {
      std::map<std::pair<std::string_view, int64_t>, std::vector<const CollectiveCall*>> by_key;
      for (size_t r = 0; r < n; ++r)
        for (size_t j = first[r]; j < first[r + 1]; ++j) {
          const CollectiveCall* c = calls[j];
          const HostCallId& h = per_rank[r]->host_call(*c);
          auto& v = by_key[{h.group.str(), h.seq}];
          v.resize(n, nullptr);
          if (!v[r]) v[r] = c;
        }
      for (auto& [key, v] : by_key)
        if (std::count(v.begin(), v.end(), nullptr) == 0)
          all.push_back(std::move(v));
        else if (unmatched_seq)
          ++(*unmatched_seq)[to_string(CollectiveKind(kind))];
    } else {
      if (fewest != most && count_mismatch) ++(*count_mismatch)[to_string(CollectiveKind(kind))];
      for (size_t j = 0; j < fewest; ++j) {
        all.emplace_back(n);
        for (size_t r = 0; r < n; ++r) all.back()[r] = calls[first[r] + j];
      }
    }
  }
  return all;
}

size_t last_arrival(const MatchedCollective& one) {
  size_t last = 0;  // shortest call: the last rank to arrive (lowest rank on a tie)
  for (size_t r = 1; r < one.size(); ++r)
    if (one[r]->dur_ns < one[last]->dur_ns) last = r;
  return last;
}

}  // namespace multirank

MultiRankAnalysis combine_ranks(std::vector<RankResult> ranks) {
  MultiRankAnalysis m;
  std::stable_sort(ranks.begin(), ranks.end(), [](const RankResult& a, const RankResult& b) {
    if ((a.rank < 0) != (b.rank < 0)) return a.rank >= 0;
    return a.rank < b.rank;
  });
  // An input with no steps (a launcher's own store, a trace of setup only) cannot be aligned: left out, said.
  // Nor can an input without a rank among ranked ones (`record -o run-%r.db` writes torchrun's agent to
  // run-launcher.db).
  const bool any_ranked =
      std::any_of(ranks.begin(), ranks.end(), [](const RankResult& r) { return r.rank >= 0; });
  // In place: a second vector of 10,000 results would double what the ranks keep while they are combined.
  size_t kept = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankResult& r = ranks[i];
    if (r.steps.empty()) {
      m.notes.push_back(fmt::format("{}: no steps; left out", r.file));
    } else if (any_ranked && r.rank < 0) {
      m.notes.push_back(fmt::format("{}: no rank, unlike the others; left out", r.file));
    } else {
      if (kept != i) ranks[kept] = std::move(ranks[i]);
      ++kept;
    }
  }
  ranks.resize(kept);
  m.ranks = std::move(ranks);
  const size_t n = m.ranks.size();
  if (n == 0) return m;

  std::set<int64_t> seen;
  for (size_t i = 0; i < n; ++i) {
    const auto& r = m.ranks[i];
    if (r.rank < 0)
      m.notes.push_back(fmt::format("{}: no rank in the input; numbered by its order", r.file));
    else if (!seen.insert(r.rank).second)
      m.notes.push_back(fmt::format("{}: rank {} appears more than once", r.file, r.rank));
  }
  const int64_t world = m.ranks.front().world_size;
  if (world > 0 && int64_t(n) != world)
    m.notes.push_back(
        fmt::format("{} of {} ranks given: waits and stragglers are among these only", n, world));

  // Step indexes present in every rank.
  std::map<int64_t, std::vector<const RankStep*>> by_index;
  for (size_t i = 0; i < n; ++i)
    for (const auto& s : m.ranks[i].steps) {
      auto& v = by_index[s.index];
      v.resize(n, nullptr);
      if (!v[i]) v[i] = &s;
    }
  size_t partial = 0;
  std::map<std::string, size_t> count_mismatch, unmatched_seq;
  // Every rank-level cure, for the what-if across ranks: the job's step per aligned step with it applied, in
  // one table [cure][aligned step].
  struct CureRun {
    size_t rank;
    const RankCure* cure;
  };
  std::vector<CureRun> cure_runs;
  for (size_t r = 0; r < n; ++r)
    for (const auto& c : m.ranks[r].cures) cure_runs.push_back({r, &c});
  const size_t aligned = size_t(std::count_if(by_index.begin(), by_index.end(), [](const auto& e) {
    return std::count(e.second.begin(), e.second.end(), nullptr) == 0;
  }));
  std::vector<int64_t> cured_job_step(cure_runs.size() * aligned);
  m.job_path.assign(n, {});
  int64_t path_sum = 0;
  for (const auto& [index, per_rank] : by_index) {
    if (std::count(per_rank.begin(), per_rank.end(), nullptr) > 0) {
      ++partial;
      continue;
    }
    AlignedStep a;
    a.index = index;
    a.wait_ns.assign(n, 0);
    a.caused_ns.assign(n, 0);
    a.critical_exposed_by_kind.assign(kCollectiveKinds, 0);
    std::vector<int64_t> durs;
    for (const auto* s : per_rank)
      durs.push_back(s->dur_ns), a.max_dur_ns = std::max(a.max_dur_ns, s->dur_ns);
    a.median_dur_ns = multirank::median_of(durs);

    std::vector<multirank::MatchedCollective> all_matched =
        multirank::match_collectives(per_rank, &unmatched_seq, &count_mismatch);
    for (const auto& one : all_matched) {
      const size_t last = multirank::last_arrival(one);
      int64_t second = -1;
      for (size_t r = 0; r < n; ++r) {
        a.wait_ns[r] += one[r]->dur_ns - one[last]->dur_ns;
        if (r != last && (second < 0 || one[r]->dur_ns < second)) second = one[r]->dur_ns;
      }
      // Had the last rank arrived with the others, the collective would have started when the second-last
      // rank arrived: the others would have waited that much less.
      if (second >= 0) a.caused_ns[last] += second - one[last]->dur_ns;
      a.critical_exposed_ns += one[last]->exposed_ns;
      a.critical_exposed_by_kind[size_t(one[last]->kind)] += one[last]->exposed_ns;
      ++a.matched_collectives;
    }
    // The job's critical path through the step, and each rank-level cure replayed on it.
    const multirank::StepRounds rounds(per_rank, std::move(all_matched));
    a.path = rounds.critical_path();
    a.path_rounds = rounds.rounds();
    for (size_t r = 0; r < n; ++r) {
      a.path_ns += a.path[r].total();
      auto& j = m.job_path[r];
      j.compute_ns += a.path[r].compute_ns, j.data_wait_ns += a.path[r].data_wait_ns;
      j.host_ns += a.path[r].host_ns, j.comm_ns += a.path[r].comm_ns;
    }
    path_sum += a.path_ns;
    const int64_t replayed = rounds.replayed_ns();
    for (size_t c = 0; c < cure_runs.size(); ++c) {
      const auto& run = cure_runs[c];
      const auto& steps = run.cure->steps;
      const bool applies = std::binary_search(steps.begin(), steps.end(), index);
      const int64_t cured =
          applies ? rounds.replayed_ns(run.rank, run.cure->part, run.cure->saving_ns) : replayed;
      cured_job_step[c * aligned + m.steps.size()] =
          std::max<int64_t>(0, a.median_dur_ns - (replayed - cured));
    }
    m.steps.push_back(std::move(a));
  }
  bool any_comm = false;
  for (const auto& r : m.ranks)
    for (const auto& s : r.steps) any_comm = any_comm || !s.collectives.empty();
  if (!any_comm)
    m.notes.push_back(
        "no communication in any rank's steps: no NCCL/RCCL kernels, no torch.distributed collectives (the "
        "collector records them under torch builds with ProcessGroup.register_pre_hook) and no "
        "record_param_comms ranges, so waits, stragglers and exposed communication are not measured");
  for (const auto& [kind, count] : unmatched_seq)
    m.notes.push_back(fmt::format(
        "{} {} collective(s) were recorded on some ranks only (by process group and sequence number) and "
        "were left out of the matching",
        count, kind));
  if (partial)
    m.notes.push_back(fmt::format("{} step index(es) are missing in some ranks and were left out", partial));
  for (const auto& [kind, steps] : count_mismatch)
    m.notes.push_back(
        fmt::format("{} step(s) have a different number of {} kernels on different ranks: only the "
                    "first ones common to all ranks were matched",
                    steps, kind));

  std::vector<std::unique_ptr<multirank::MultiRankRule>> rules;
  rules.push_back(multirank::make_straggler_rule());
  rules.push_back(multirank::make_exposed_comm_rule());
  for (const auto& rule : rules) rule->run(m, m.findings);

  // What-if (a): every step with the straggler arriving with the others, i.e. shorter by what it caused
  // (the collective time the other ranks waited for it beyond the second-last arrival).
  if (!m.steps.empty()) {
    std::vector<int64_t> job;
    for (const auto& s : m.steps) job.push_back(s.median_dur_ns);
    m.job_step_ns = multirank::median_of(job);
    const bool straggler = std::any_of(m.findings.begin(), m.findings.end(),
                                       [](const FindingResult& f) { return f.rule == "straggler"; });
    if (straggler) {
      std::vector<int64_t> caused(n, 0);
      for (const auto& s : m.steps)
        for (size_t r = 0; r < n; ++r) caused[r] += s.caused_ns[r];
      const size_t who = size_t(std::max_element(caused.begin(), caused.end()) - caused.begin());
      std::vector<int64_t> without;
      for (const auto& s : m.steps) without.push_back(std::max<int64_t>(0, s.median_dur_ns - s.caused_ns[who]));
      m.what_if.push_back({"at the median rank's pace (the straggler's own delay removed)", m.ranks[who].rank,
                           multirank::median_of(without), "straggler", 0});
    }
    // What-if (b): each rank-level finding's cure on the rank that has it, replayed round by round: the job
    // gains only where that rank was the last to arrive (or had the longest tail), and only down to the next
    // rank. Shortest job step first, ties in rank order: the cures are put in that order before their
    // what-ifs are made (sorting the what-ifs themselves stably took a buffer of half of them: 0.6 MB at
    // 10,000 ranks).
    std::vector<int64_t> cured_step(cure_runs.size());
    for (size_t c = 0; c < cure_runs.size(); ++c) {
      const auto from = cured_job_step.begin() + long(c * aligned);
      cured_step[c] = multirank::median_of(std::vector<int64_t>(from, from + long(aligned)));
    }
    std::vector<uint32_t> order(cure_runs.size());
    for (size_t c = 0; c < order.size(); ++c) order[c] = uint32_t(c);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t x, uint32_t y) { return cured_step[x] < cured_step[y]; });
    m.what_if.reserve(m.what_if.size() + cure_runs.size());
    for (const uint32_t c : order) {
      const auto& run = cure_runs[c];
      MultiRankAnalysis::WhatIf w;
      w.change = run.cure->rule.str() + " cured";
      w.rank = m.ranks[run.rank].rank;
      w.rule = run.cure->rule;
      w.rank_saving_ns = run.cure->saving_ns;
      w.job_step_ns = cured_step[c];
      m.what_if.push_back(w);
    }
    const int64_t k = int64_t(m.steps.size());
    for (auto& j : m.job_path) j.compute_ns /= k, j.data_wait_ns /= k, j.host_ns /= k, j.comm_ns /= k;
    m.job_path_ns = path_sum / k;
  }
  std::stable_sort(m.findings.begin(), m.findings.end(), [](const FindingResult& x, const FindingResult& y) {
    return x.est_savings_us_per_step > y.est_savings_us_per_step;
  });
  return m;
}

std::vector<CollectiveMatch> matched_collectives(const MultiRankAnalysis& m, int64_t index) {
  std::vector<const RankStep*> per_rank;
  for (const auto& r : m.ranks) {
    per_rank.push_back(find_step(r, index));
    if (!per_rank.back()) return {};
  }
  std::vector<CollectiveMatch> out;
  for (auto& one : multirank::match_collectives(per_rank, nullptr, nullptr)) {
    CollectiveMatch c;
    c.last = multirank::last_arrival(one);
    c.calls = std::move(one);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace stepscope::analyzer
