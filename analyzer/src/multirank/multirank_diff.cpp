// The per-rank section of `stepscope diff BASE_DIR NEW_DIR` (docs/multi-rank.md, "diff").
#include <fmt/format.h>

#include <map>

#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::analyzer {
namespace {

struct Means {
  double step = 0, compute = 0, exposed = 0, wait = 0;
};

// Per rank (by rank number), means over the aligned steps.
std::map<int64_t, Means> means_by_rank(const MultiRankAnalysis& m) {
  std::map<int64_t, Means> out;
  if (m.steps.empty()) return out;
  const double k = double(m.steps.size());
  for (size_t r = 0; r < m.ranks.size(); ++r) {
    Means x;
    for (const auto& a : m.steps) {
      if (const RankStep* s = find_step(m.ranks[r], a.index))
        x.step += double(s->dur_ns), x.compute += double(s->compute_ns),
            x.exposed += double(s->exposed_comm_ns);
      x.wait += double(a.wait_ns[r]);
    }
    x.step /= k, x.compute /= k, x.exposed /= k, x.wait /= k;
    out[m.ranks[r].rank >= 0 ? m.ranks[r].rank : -int64_t(r) - 1] = x;
  }
  return out;
}

std::string finding_line(const MultiRankAnalysis& m, const char* rule) {
  for (const auto& f : m.findings)
    if (f.rule == rule)
      return fmt::format("{:.3f} ms/step: {}", f.est_savings_us_per_step / 1000.0, f.summary);
  return "none";
}

std::string pct(double base, double now) {
  return base > 0 ? fmt::format("{:+.1f}%", 100.0 * (now - base) / base) : std::string("-");
}

}  // namespace

std::string render_multirank_diff(const MultiRankAnalysis& base, const MultiRankAnalysis& now,
                                  bool markdown) {
  const auto b = means_by_rank(base), n = means_by_rank(now);
  std::string o;
  auto ms = [](double ns) { return fmt::format("{:.3f}", ns / 1e6); };
  const char* head[] = {
      "rank",           "step ms base",         "step ms new",         "step",           "compute ms base",
      "compute ms new", "exposed comm ms base", "exposed comm ms new", "waited ms base", "waited ms new"};
  if (markdown) {
    o += "\n### Per rank\n\n|";
    for (const char* h : head) o += fmt::format(" {} |", h);
    o += "\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  } else {
    o += fmt::format("\nPer rank (mean over aligned steps; base {} rank(s), new {} rank(s))\n",
                     base.ranks.size(), now.ranks.size());
    o += fmt::format("{:>5} {:>12} {:>12} {:>8} {:>15} {:>15} {:>20} {:>20} {:>14} {:>14}\n", head[0],
                     head[1], head[2], head[3], head[4], head[5], head[6], head[7], head[8], head[9]);
  }
  for (const auto& [rank, x] : b) {
    auto it = n.find(rank);
    if (it == n.end()) continue;
    const Means& y = it->second;
    const std::string label = rank >= 0 ? std::to_string(rank) : "?";
    if (markdown)
      o += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", label, ms(x.step), ms(y.step),
                       pct(x.step, y.step), ms(x.compute), ms(y.compute), ms(x.exposed), ms(y.exposed),
                       ms(x.wait), ms(y.wait));
    else
      o += fmt::format("{:>5} {:>12} {:>12} {:>8} {:>15} {:>15} {:>20} {:>20} {:>14} {:>14}\n", label,
                       ms(x.step), ms(y.step), pct(x.step, y.step), ms(x.compute), ms(y.compute),
                       ms(x.exposed), ms(y.exposed), ms(x.wait), ms(y.wait));
  }
  size_t only = 0;
  for (const auto& [rank, x] : b) only += n.count(rank) ? 0 : 1;
  for (const auto& [rank, y] : n) only += b.count(rank) ? 0 : 1;
  if (only) o += fmt::format("{}{} rank(s) on one side only, not compared\n", markdown ? "\n" : "", only);
  for (const char* rule : {"straggler", "exposed-comm"}) {
    o += fmt::format("{}{} base: {}\n", markdown ? "\n- " : "", rule, finding_line(base, rule));
    o += fmt::format("{}{} new:  {}\n", markdown ? "- " : "", rule, finding_line(now, rule));
  }
  return o;
}

}  // namespace stepscope::analyzer
