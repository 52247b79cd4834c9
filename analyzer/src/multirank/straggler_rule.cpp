// `straggler`: one rank reaches the collectives late and every other rank waits for it (docs/rules.md).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "multirank/multirank_rule.h"
#include "rules/rule.h"
#include "stepscope/analyzer/json_writer.h"

namespace stepscope::analyzer::multirank {
namespace {

// A step counts when the wait one rank causes is at least this share of the median rank's step...
constexpr double kStragglerMinShare = 0.05;
// ... and at least this long (shorter differences are launch jitter).
constexpr int64_t kStragglerMinNs = 20'000;
// Severity by saving over the median step: high from 20%, medium from 10%.
constexpr double kStragglerHighShare = 0.20, kStragglerMediumShare = 0.10;
// A component (compute, data wait, host) explains the lateness when it exceeds the median rank's by at least
// this share of the saving.
constexpr double kExplainsShare = 0.25;

class StragglerRule final : public MultiRankRule {
 public:
  const char* id() const override { return "straggler"; }

  void run(const MultiRankAnalysis& m, std::vector<FindingResult>& out) const override {
    const size_t n = m.ranks.size();
    if (n < 2 || m.steps.empty()) return;
    std::vector<int64_t> caused_total(n, 0);
    for (const auto& s : m.steps)
      for (size_t r = 0; r < n; ++r) caused_total[r] += s.caused_ns[r];
    const size_t who =
        size_t(std::max_element(caused_total.begin(), caused_total.end()) - caused_total.begin());

    FindingResult f;
    f.rule = id();
    int64_t saved = 0, affected_median_sum = 0, all_median = 0;
    int64_t d_compute = 0, d_data = 0, d_host = 0;
    std::vector<int64_t> others_wait;
    for (const auto& s : m.steps) {
      all_median += s.median_dur_ns;
      const int64_t c = s.caused_ns[who];
      if (c < kStragglerMinNs || double(c) < kStragglerMinShare * double(s.median_dur_ns)) continue;
      f.steps.push_back(s.index);
      saved += c;
      affected_median_sum += s.median_dur_ns;
      const RankStep* mine = find_step(m.ranks[who], s.index);
      std::vector<int64_t> compute, data, host, wait;
      for (size_t r = 0; r < n; ++r) {
        if (r == who) continue;
        const RankStep* o = find_step(m.ranks[r], s.index);
        compute.push_back(o->compute_ns), data.push_back(o->data_wait_ns), host.push_back(o->host_ns);
        wait.push_back(s.wait_ns[r]);
      }
      d_compute += mine->compute_ns - median_of(compute);
      d_data += mine->data_wait_ns - median_of(data);
      d_host += mine->host_ns - median_of(host);
      others_wait.push_back(median_of(wait));
      if (f.ranges.size() < rules::kMaxRangesPerFinding)
        f.ranges.push_back({mine->start_ns, mine->start_ns + mine->dur_ns});
    }
    if (f.steps.empty()) return;
    const double k = double(f.steps.size());
    const double saving_ns = double(saved) / k;
    const double over = double(affected_median_sum) / k;
    f.est_savings_us_per_step = saving_ns / 1000.0;
    f.share = all_median > 0 ? double(saved) / double(all_median) : 0.0;
    const double frac = over > 0 ? saving_ns / over : 0.0;
    // The margin every rule keeps around a threshold: a share of 0.0905 is medium, as 0.1005 is.
    const auto decision = rules::decide_severity(frac, kStragglerHighShare, kStragglerMediumShare);
    f.severity = decision ? decision->severity : store::Severity::Low;

    const auto& rank = m.ranks[who];
    const std::string name = rank.rank >= 0 ? fmt::format("rank {}", rank.rank) : rank.file;
    const double mc = double(d_compute) / k, md = double(d_data) / k, mh = double(d_host) / k;
    struct Part {
      const char* what;
      double ns;
    };
    std::vector<Part> parts = {{"GPU compute", mc}, {"data wait", md}, {"host time", mh}};
    std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) { return a.ns > b.ns; });
    const bool explained = parts[0].ns >= kExplainsShare * saving_ns;
    const auto kernels = longer_kernels(m, who);

    std::string why;
    if (explained) {
      why = fmt::format("its {} is {} longer than the median rank's", parts[0].what,
                        rules::format_us(parts[0].ns));
      if (std::string(parts[0].what) == "GPU compute" && !kernels.empty())
        why +=
            fmt::format(" (most in {}: +{})", kernels[0].first, rules::format_us(double(kernels[0].second)));
    } else {
      why =
          "none of its recorded work inside the step is longer than the median rank's: it started the step "
          "late "
          "(the delay lies before the recorded step: the previous step, a checkpoint, logging or a slower "
          "host)";
    }
    f.summary = fmt::format(
        "{} is the straggler: it reaches the collectives last, the other ranks' collectives wait {} per "
        "step (median rank); {}. Matching the median rank would save {} per step.",
        name, rules::format_us(double(median_of(others_wait))), why, rules::format_us(saving_ns));
    std::string cure;
    if (!explained)
      cure =
          "Look at what this rank does between steps that the others do not (rank-0-only logging, evaluation "
          "or "
          "checkpointing: do it on every rank or asynchronously), and at its host (CPU binding, other "
          "processes).";
    else if (std::string(parts[0].what) == "GPU compute")
      cure =
          "Its kernels run longer on the same work: check that GPU (clocks and throttling: `nvidia-smi -q -d "
          "PERFORMANCE`, another process on it, a slower PCIe/NVLink position), and whether its shard of the "
          "batch "
          "is larger (uneven sequence lengths: bucket by length or pad to the same shape on every rank).";
    else if (std::string(parts[0].what) == "data wait")
      cure =
          "Its input pipeline is slower: more DataLoader workers with pinned memory and prefetch, data on "
          "local "
          "disk for that host, and evenly sized shards (DistributedSampler with drop_last).";
    else
      cure =
          "Its host work is slower: bind each rank to its own cores and NUMA node (`torchrun` with numactl, "
          "`OMP_NUM_THREADS`), and move rank-specific host work (logging, metrics) off the step.";
    f.suggestion = cure;

    std::string ev;
    JsonWriter w(ev);
    w.begin_object().kv("rank", rank.rank).kv("file", rank.file).kv("saving_us_per_step", saving_ns / 1000.0);
    w.kv("others_wait_us_median", double(median_of(others_wait)) / 1000.0);
    if (decision) rules::write_severity_evidence(w, *decision);
    w.key("longer_than_median_us")
        .begin_object()
        .kv("compute", mc / 1000.0)
        .kv("data_wait", md / 1000.0)
        .kv("host", mh / 1000.0)
        .end_object();
    w.key("longer_kernels").begin_array();
    for (const auto& [kname, ns] : kernels)
      w.begin_object().kv("name", kname).kv("longer_us", double(ns) / 1000.0).end_object();
    w.end_array();
    w.key("caused_us_by_rank").begin_array();
    for (size_t r = 0; r < n; ++r) w.value(double(caused_total[r]) / 1000.0 / double(m.steps.size()));
    w.end_array().end_object();
    f.evidence_json = ev;
    out.push_back(std::move(f));
  }

 private:
  // Kernels (by name) whose time per step on the straggler exceeds the median of the other ranks', most
  // first.
  static std::vector<std::pair<std::string, int64_t>> longer_kernels(const MultiRankAnalysis& m, size_t who) {
    auto per_step = [](const RankResult& r, int64_t ns) {
      return ns / int64_t(std::max<size_t>(1, r.steps.size()));
    };
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& [name, ns] : m.ranks[who].kernel_ns) {
      std::vector<int64_t> others;
      for (size_t r = 0; r < m.ranks.size(); ++r) {
        if (r == who) continue;
        int64_t v = 0;
        for (const auto& [n2, ns2] : m.ranks[r].kernel_ns)
          if (n2 == name) v = per_step(m.ranks[r], ns2);
        others.push_back(v);
      }
      const int64_t d = per_step(m.ranks[who], ns) - median_of(others);
      if (d > 0) out.emplace_back(name, d);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (out.size() > 5) out.resize(5);
    return out;
  }
};

}  // namespace

std::unique_ptr<MultiRankRule> make_straggler_rule() {
  return std::make_unique<StragglerRule>();
}

}  // namespace stepscope::analyzer::multirank
