// Several ranks in one trace for the timeline (`stepscope-gui DIR`): one group per rank, aligned at step
// starts.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {
namespace {

// Rank k's pids become (k + 1) * kPidBase + pid, its devices (k + 1) * kDeviceBase + device, and its
// correlation ids move past every other rank's, so tracks, groups and launch flows never mix ranks.
constexpr int64_t kPidBase = kRankPidBase;
constexpr int64_t kDeviceBase = kRankDeviceBase;
constexpr int kCorrelationShift = 40;

void relabel(store::Trace& t, size_t k, const std::string& label, int64_t shift) {
  const int64_t pid_off = int64_t(k + 1) * kPidBase, dev_off = int64_t(k + 1) * kDeviceBase;
  const int64_t corr_off = int64_t(k + 1) << kCorrelationShift;
  auto pid = [&](int64_t& p) { p = p ? p + pid_off : 0; };
  auto corr = [&](int64_t& c) { c = c ? c + corr_off : 0; };
  auto times = [&](auto& rows) {
    for (auto& r : rows) r.start += shift, r.end += shift;
  };
  std::set<int64_t> with_row;
  for (auto& p : t.processes) {
    with_row.insert(p.pid);
    pid(p.pid);
    pid(p.parent_pid);
    p.name = t.intern(label + " · " + t.str(p.name));
  }
  // A process with no row of its own still gets the rank's label: its group title must differ from another rank's
  // process of the same pid (views show the recorded pid).
  auto name_process = [&](int64_t p) {
    if (p && with_row.insert(p).second) t.processes.push_back({p + pid_off, t.intern(label), 0});
  };
  for (const auto& th : t.threads) name_process(th.pid);
  for (const auto& r : t.api_calls) name_process(r.pid);
  for (const auto& r : t.ranges) name_process(r.pid);
  for (const auto& r : t.samples) name_process(r.pid);
  for (const auto& r : t.data_waits) name_process(r.pid);
  for (auto& th : t.threads) pid(th.pid);
  std::set<int64_t> named;
  for (auto& d : t.devices) {
    named.insert(d.id);
    d.id += dev_off;
    d.name = t.intern(label + " · " + t.str(d.name));
  }
  auto device = [&](int64_t& d) {
    if (!named.count(d)) {  // a device with no row of its own still gets the rank's label
      named.insert(d);
      store::Device row;
      row.id = d + dev_off;
      row.name = t.intern(label);
      t.devices.push_back(row);
    }
    d += dev_off;
  };
  for (auto& r : t.kernels) pid(r.pid), corr(r.correlation), device(r.device);
  for (auto& r : t.memcpys) pid(r.pid), corr(r.correlation), device(r.device);
  for (auto& r : t.memsets) pid(r.pid), corr(r.correlation), device(r.device);
  for (auto& r : t.syncs) pid(r.pid), corr(r.correlation), r.device += dev_off;
  for (auto& r : t.api_calls) pid(r.pid), corr(r.correlation);
  for (auto& r : t.ranges) pid(r.pid), corr(r.correlation);
  for (auto& r : t.samples) pid(r.pid), r.time += shift;
  for (auto& r : t.data_waits) pid(r.pid);
  for (auto& r : t.steps) pid(r.pid);
  for (auto& r : t.modules) pid(r.pid);
  times(t.kernels), times(t.memcpys), times(t.memsets), times(t.syncs), times(t.api_calls), times(t.ranges);
  times(t.data_waits), times(t.steps);
  t.findings.clear();  // each rank's own findings would point at its unshifted steps
}

}  // namespace

store::Trace merge_ranks_for_timeline(const std::vector<std::string>& files) {
  struct One {
    store::Trace t;
    int64_t rank = -1;
    std::map<int64_t, int64_t> step_start;  // index → start
  };
  // As `analyze` does: inputs that are not one job's ranks are not merged; the first is shown alone, and why.
  auto alone = [&](store::Trace t, const std::string& why) {
    t.meta["ranks.not_one_job"] = why;
    t.meta["source_file"] = files.front();
    return t;
  };
  if (std::string why = why_stores_not_one_job(files); !why.empty())
    return alone(load_trace(files.front()), why);
  std::vector<One> ranks;
  std::vector<RankIdentity> ids;
  for (const auto& f : files) {
    One o;
    o.t = load_trace(f);
    ids.push_back(rank_identity(o.t.meta, o.t.processes, f));
    o.rank = ids.back().rank;
    ranks.push_back(std::move(o));
  }
  if (std::string why = why_not_one_job(ids); !why.empty()) return alone(std::move(ranks.front().t), why);
  for (size_t k = 0; k < ranks.size(); ++k) {
    for (const auto& s : analyze(ranks[k].t).steps) ranks[k].step_start.emplace(s.index, s.start_ns);
    ranks[k].t.meta["source_file"] = files[k];
  }
  std::stable_sort(ranks.begin(), ranks.end(), [](const One& a, const One& b) {
    if ((a.rank < 0) != (b.rank < 0)) return a.rank >= 0;
    return a.rank < b.rank;
  });
  // As `analyze DIR` does (combine_ranks): an input without steps or without a rank among ranked ones (the
  // launcher's own store, `record -o run-%r.db` → run-launcher.db) is left out, and said.
  std::string left_out;
  const bool any_ranked = std::any_of(ranks.begin(), ranks.end(), [](const One& o) { return o.rank >= 0; });
  const bool any_steps = std::any_of(ranks.begin(), ranks.end(), [](const One& o) { return !o.step_start.empty(); });
  auto why_left_out = [&](const One& o) -> const char* {
    if (any_steps && o.step_start.empty()) return "no steps";
    if (any_ranked && o.rank < 0) return "no rank, unlike the others";
    return nullptr;
  };
  // Nothing would be left to show (ranked inputs without steps beside one unranked with steps): show them all.
  if (std::any_of(ranks.begin(), ranks.end(), [&](const One& o) { return !why_left_out(o); })) {
    std::vector<One> shown;
    for (auto& o : ranks) {
      if (const char* why = why_left_out(o))
        left_out += (left_out.empty() ? "" : "; ") + o.t.meta["source_file"] + ": " + why;
      else
        shown.push_back(std::move(o));
    }
    ranks = std::move(shown);
  }
  // Align at the first step index every rank has; ranks without it keep their own times.
  int64_t common = -1;
  if (!ranks.empty())
    for (const auto& entry : ranks.front().step_start) {
      const int64_t index = entry.first;  // a plain variable: clang 14 cannot capture a structured binding
      if (std::all_of(ranks.begin(), ranks.end(),
                      [&](const One& o) { return o.step_start.count(index) > 0; })) {
        common = index;
        break;
      }
    }
  store::Trace all;
  std::string sources;
  for (size_t k = 0; k < ranks.size(); ++k) {
    One& o = ranks[k];
    const int64_t shift = common >= 0 ? ranks.front().step_start[common] - o.step_start[common] : 0;
    relabel(o.t, k, o.rank >= 0 ? fmt::format("rank {}", o.rank) : fmt::format("input {}", k), shift);
    sources += (sources.empty() ? "" : ";") + o.t.meta["source_file"];
    all.meta[fmt::format("ranks.file.{}", k)] = o.t.meta["source_file"];
    all.meta[fmt::format("ranks.shift.{}", k)] = std::to_string(shift);
    merge_into(all, o.t);
    o.t = store::Trace();  // keep one copy of each rank's rows
  }
  all.meta.erase("rank");
  all.meta["source_file"] = sources;
  all.meta["ranks"] = std::to_string(ranks.size());
  all.meta["ranks.aligned_step"] = std::to_string(common);
  if (!left_out.empty()) all.meta["ranks.left_out"] = left_out;
  sort_by_time(all);
  return all;
}

std::vector<RankPlacement> rank_placements(const std::map<std::string, std::string>& meta) {
  std::vector<RankPlacement> out;
  for (size_t k = 0;; ++k) {
    auto file = meta.find(fmt::format("ranks.file.{}", k));
    auto shift = meta.find(fmt::format("ranks.shift.{}", k));
    if (file == meta.end() || shift == meta.end()) break;
    out.push_back({file->second, std::stoll(shift->second)});
  }
  return out;
}

void adopt_rank_verdicts(Analysis& merged, const MultiRankAnalysis& m, const std::map<std::string, std::string>& meta) {
  std::map<std::string, int64_t> shift_of;  // input file → the ns its times move on the merged clock
  for (const auto& p : rank_placements(meta)) shift_of[p.file] = p.shift_ns;
  if (shift_of.empty()) return;
  // The host's steps and, where the merged trace's host runs ahead, the GPU's ones the views show then.
  for (auto* rows : {&merged.steps, &merged.gpu_steps})
    for (auto& s : *rows) {
      std::map<Bound, int> votes;
      for (const auto& r : m.ranks)
        if (!shift_of.count(r.file)) continue;  // a rank the timeline left out
        else if (const RankStep* rs = find_step(r, s.index); rs && rs->bound != Bound::Untraced) ++votes[rs->bound];
      int best = 0;
      for (const auto& [b, n] : votes)
        if (n > best) best = n, s.bound = b;
    }
  std::vector<FindingResult> findings;
  for (const auto& r : m.ranks) {
    auto it = shift_of.find(r.file);
    if (it == shift_of.end()) continue;
    const std::string who = r.rank >= 0 ? fmt::format("rank {}: ", r.rank) : r.file + ": ";
    for (FindingResult f : r.findings) {
      f.summary = who + f.summary;
      for (auto& range : f.ranges) range.start_ns += it->second, range.end_ns += it->second;
      findings.push_back(std::move(f));
    }
  }
  // Largest total saving first, as one analysis orders its findings.
  std::stable_sort(findings.begin(), findings.end(), [](const FindingResult& x, const FindingResult& y) {
    return x.est_savings_us_per_step * double(x.steps.size()) > y.est_savings_us_per_step * double(y.steps.size());
  });
  merged.findings = std::move(findings);
}

}  // namespace stepscope::analyzer
