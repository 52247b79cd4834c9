// Whether several inputs are the ranks of one job (docs/multi-rank.md, "Which inputs are ranks"), decided by
// their metadata alone, never by their file names: two flight saves of one trainer, or a folder of unrelated
// programs, once read as "ranks" and gave findings whose figures came from one program and whose notes came
// from another (issue 47).
#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <set>

#include "multirank/shared_name_format.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {
namespace {

std::string meta_str(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? std::string() : it->second;
}

int64_t meta_int(const std::map<std::string, std::string>& m, const char* key, int64_t fallback) {
  const std::string v = meta_str(m, key);
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 18) return fallback;
  return std::stoll(v);
}

}  // namespace

RankIdentity rank_identity(const std::map<std::string, std::string>& meta,
                           const std::vector<store::Process>& processes, const std::string& file) {
  RankIdentity id;
  id.file = file;
  id.rank = meta_int(meta, "rank", -1);
  id.world_size = meta_int(meta, "world_size", 0);
  id.job = meta_str(meta, "job");
  id.host = meta_str(meta, "host");
  id.flight_save = meta_str(meta, "flight.save");
  id.pid = meta_int(meta, "flight.pid", 0);
  if (id.pid == 0) {
    // The recorded command: the first process whose parent is not in the input (workers are its children).
    std::set<int64_t> pids;
    for (const auto& p : processes) pids.insert(p.pid);
    for (const auto& p : processes)
      if (p.pid > 0 && !pids.count(p.parent_pid)) {
        id.pid = p.pid;
        break;
      }
  }
  return id;
}

std::string why_not_one_job(const std::vector<RankIdentity>& inputs) {
  if (inputs.size() < 2) return "";
  std::vector<const RankIdentity*> ranked;
  for (const auto& in : inputs)
    if (in.rank >= 0) ranked.push_back(&in);
  if (ranked.empty()) {
    // Nothing says they are ranks. Say what they are when their metadata tells: saves of one process.
    const RankIdentity& a = inputs.front();
    const bool one_process =
        a.pid > 0 && !a.host.empty() && std::all_of(inputs.begin(), inputs.end(), [&](const RankIdentity& x) {
          return x.pid == a.pid && x.host == a.host;
        });
    const bool flight = std::all_of(inputs.begin(), inputs.end(),
                                    [](const RankIdentity& x) { return !x.flight_save.empty(); });
    if (one_process)
      return fmt::format("{} {} of one process (pid {} on {})", inputs.size(),
                         flight ? "flight saves" : "recordings", a.pid, a.host);
    return fmt::format("{} inputs, none with a rank in its metadata", inputs.size());
  }
  // The first ranked input that differs from an earlier one in `field` (where both have it).
  auto differ = [&](auto field, bool both_needed) -> std::pair<const RankIdentity*, const RankIdentity*> {
    const RankIdentity* first = nullptr;
    for (const auto* r : ranked) {
      const bool has = field(*r) != decltype(field(*r)){};
      if (!has && both_needed) continue;
      if (!first) {
        first = r;
        continue;
      }
      if (field(*r) != field(*first)) return {first, r};
    }
    return {nullptr, nullptr};
  };
  if (auto [a, b] = differ([](const RankIdentity& x) { return x.job; }, true); a)
    return fmt::format("job {} in {} but {} in {}", a->job, a->file, b->job, b->file);
  if (ranked.size() == 1)  // one rank and unranked inputs: nothing to compare the rank with
    return fmt::format("only {} of {} inputs has a rank in its metadata ({})", ranked.size(), inputs.size(),
                       ranked.front()->file);
  // A world size known on one input and not on another is a difference too: Kineto traces of programs without
  // torch.distributed say `"rank": 0` alone.
  if (auto [a, b] = differ([](const RankIdentity& x) { return x.world_size; }, false); a) {
    auto size = [](const RankIdentity* x) {
      return x->world_size ? std::to_string(x->world_size) : "unknown";
    };
    return fmt::format("world size {} in {} but {} in {}", size(a), a->file, size(b), b->file);
  }
  // Flight saves hold a moment each: ranks of different saves (or a save beside a whole run) are not aligned.
  if (auto [a, b] = differ([](const RankIdentity& x) { return x.flight_save; }, false); a) {
    if (a->flight_save.empty() || b->flight_save.empty()) {
      const RankIdentity* save = a->flight_save.empty() ? b : a;
      const RankIdentity* run = save == a ? b : a;
      return fmt::format("{} is a flight save ({}), {} is not", save->file, save->flight_save, run->file);
    }
    return fmt::format("flight save {} in {} but {} in {}", a->flight_save, a->file, b->flight_save, b->file);
  }
  std::map<int64_t, const RankIdentity*> seen;
  for (const auto* r : ranked)
    if (auto [it, fresh] = seen.emplace(r->rank, r); !fresh)
      return fmt::format("rank {} in both {} and {}", r->rank, it->second->file, r->file);
  return "";
}

std::string why_stores_not_one_job(const std::vector<std::string>& files) {
  if (files.size() < 2) return "";
  std::vector<RankIdentity> ids;
  try {
    for (const auto& f : files) {
      if (store::sniff_file(f) != store::FileKind::Store) return "";
      store::StoreReader reader(f);
      ids.push_back(rank_identity(reader.meta(), reader.processes(), f));
    }
  } catch (const std::exception&) {
    return "";  // a bad store: the full load names it, as for any input
  }
  return why_not_one_job(ids);
}

}  // namespace stepscope::analyzer
