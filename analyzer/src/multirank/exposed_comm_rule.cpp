// `exposed-comm`: collective time on the critical path that no compute hides (docs/rules.md).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "multirank/multirank_rule.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::multirank {
namespace {

// A step counts when the exposed collective time of the last-arriving ranks is at least this share of the
// median rank's step...
constexpr double kExposedCommMinShare = 0.05;
// ... and at least this long.
constexpr int64_t kExposedCommMinNs = 20'000;
// Severity by exposed time over the median step: high from 20%, medium from 10%.
constexpr double kExposedCommHighShare = 0.20, kExposedCommMediumShare = 0.10;

std::string cure_for(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce:
      return "Overlap the gradient all-reduce with the backward pass. DDP does this bucket by bucket: a "
             "smaller "
             "`bucket_cap_mb` (default 25) starts the first all-reduce earlier, a larger one cuts per-call "
             "cost; "
             "`gradient_as_bucket_view=True` saves the copy. With gradient accumulation, skip the all-reduce "
             "of the "
             "micro-steps that do not step the optimizer:\n"
             "    for i, batch in enumerate(loader):\n"
             "        ctx = model.no_sync() if (i + 1) % accum else contextlib.nullcontext()\n"
             "        with ctx:\n"
             "            loss = model(batch).loss / accum\n"
             "            loss.backward()";
    case CollectiveKind::AllGather:
    case CollectiveKind::ReduceScatter:
      return "Let FSDP fetch the next parameters while this layer computes: `FSDP(model, "
             "forward_prefetch=True, "
             "backward_prefetch=BackwardPrefetch.BACKWARD_PRE)` (FSDP2: "
             "`module.set_modules_to_forward_prefetch`), "
             "and wrap larger units so each all-gather/reduce-scatter carries more; with gradient "
             "accumulation use "
             "`model.no_sync()` on the micro-steps that do not step the optimizer.";
    case CollectiveKind::AllToAll:
    case CollectiveKind::SendRecv:
      return "Overlap the exchange with compute: issue it for the next batch while this one computes "
             "(TorchRec's "
             "`TrainPipelineSparseDist` for embedding all-to-all, async `dist.isend/irecv` or "
             "`async_op=True` with "
             "the wait placed just before the result is used; pipeline-parallel schedules interleave "
             "micro-batches).";
    default:
      return "Issue the collective asynchronously (`async_op=True`, a separate stream) and wait on it only "
             "where "
             "its result is needed, so compute runs while it transfers.";
  }
}

class ExposedCommRule final : public MultiRankRule {
 public:
  const char* id() const override { return "exposed-comm"; }

  void run(const MultiRankAnalysis& m, std::vector<FindingResult>& out) const override {
    if (m.ranks.empty() || m.steps.empty()) return;
    FindingResult f;
    f.rule = id();
    int64_t exposed = 0, affected_median = 0, all_median = 0;
    std::vector<int64_t> by_kind(kCollectiveKinds, 0);
    for (const auto& s : m.steps) {
      all_median += s.median_dur_ns;
      if (s.critical_exposed_ns < kExposedCommMinNs ||
          double(s.critical_exposed_ns) < kExposedCommMinShare * double(s.median_dur_ns))
        continue;
      f.steps.push_back(s.index);
      exposed += s.critical_exposed_ns;
      affected_median += s.median_dur_ns;
      for (int k = 0; k < kCollectiveKinds; ++k) by_kind[size_t(k)] += s.critical_exposed_by_kind[size_t(k)];
    }
    if (f.steps.empty()) return;
    const CollectiveKind top =
        CollectiveKind(std::max_element(by_kind.begin(), by_kind.end()) - by_kind.begin());
    const double k = double(f.steps.size());
    const double per_step = double(exposed) / k;
    f.est_savings_us_per_step = per_step / 1000.0;
    f.share = all_median > 0 ? double(exposed) / double(all_median) : 0.0;
    const double frac = affected_median > 0 ? double(exposed) / double(affected_median) : 0.0;
    f.severity = frac >= kExposedCommHighShare     ? store::Severity::High
                 : frac >= kExposedCommMediumShare ? store::Severity::Medium
                                                   : store::Severity::Low;
    const std::string kernel = top_kernel(m, top);
    f.summary = fmt::format(
        "{} of collective time per step is on the critical path, not overlapped with compute "
        "({:.1f}% of the median step); most of it {} ({}{})",
        rules::format_us(per_step), 100.0 * frac, to_string(top),
        rules::format_us(double(by_kind[size_t(top)]) / k), kernel.empty() ? "" : ", " + kernel);
    f.suggestion = cure_for(top);
    for (const auto& s : m.ranks.front().steps)
      if (std::binary_search(f.steps.begin(), f.steps.end(), s.index) &&
          f.ranges.size() < rules::kMaxRangesPerFinding)
        f.ranges.push_back({s.start_ns, s.start_ns + s.dur_ns});

    std::string ev;
    JsonWriter w(ev);
    w.begin_object()
        .kv("collective", to_string(top))
        .kv("kernel", kernel)
        .kv("exposed_us_per_step", per_step / 1000.0);
    w.key("exposed_us_per_step_by_collective").begin_object();
    for (int i = 0; i < kCollectiveKinds; ++i)
      if (by_kind[size_t(i)]) w.kv(to_string(CollectiveKind(i)), double(by_kind[size_t(i)]) / k / 1000.0);
    w.end_object();
    w.key("exposed_us_per_step_by_rank").begin_array();
    for (const auto& r : m.ranks) {
      int64_t sum = 0;
      for (const auto& s : r.steps)
        if (std::binary_search(f.steps.begin(), f.steps.end(), s.index)) sum += s.exposed_comm_ns;
      w.value(double(sum) / k / 1000.0);
    }
    w.end_array().end_object();
    f.evidence_json = ev;
    out.push_back(std::move(f));
  }

 private:
  // The kernel name of that kind with the most exposed time on the first rank.
  static std::string top_kernel(const MultiRankAnalysis& m, CollectiveKind kind) {
    std::map<std::string, int64_t> by_name;
    for (const auto& s : m.ranks.front().steps)
      for (const auto& c : s.collectives)
        if (c.kind == kind) by_name[c.name] += c.exposed_ns;
    std::string best;
    int64_t most = -1;
    for (const auto& [name, ns] : by_name)
      if (ns > most) best = name, most = ns;
    return best;
  }
};

}  // namespace

std::unique_ptr<MultiRankRule> make_exposed_comm_rule() {
  return std::make_unique<ExposedCommRule>();
}

}  // namespace stepscope::analyzer::multirank
