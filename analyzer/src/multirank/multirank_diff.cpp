// The per-rank section of `stepscope diff BASE_DIR NEW_DIR` (docs/multi-rank.md, "diff").
#include <fmt/format.h>

#include <map>

#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/analyzer/report.h"

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

const FindingResult* finding_of(const MultiRankAnalysis& m, const char* rule) {
  for (const auto& f : m.findings)
    if (f.rule == rule) return &f;
  return nullptr;
}

std::string finding_line(const MultiRankAnalysis& m, const char* rule) {
  if (const FindingResult* f = finding_of(m, rule))
    return fmt::format("{:.3f} ms/step: {}", f->est_savings_us_per_step / 1000.0, f->summary);
  return "none";
}

constexpr const char* kRankRules[] = {"straggler", "exposed-comm"};

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
  // A side missing ranks of its job: its waits and straggler are among the ranks it has (a folder of ranks 0-3 of
  // 8 named rank 2 the straggler where rank 7, absent, was it).
  for (const auto* side : {&base, &now})
    for (const auto& note : side->notes)
      o += fmt::format("{}{}: {}\n", markdown ? "\n" : "", side == &base ? "base" : "new",
                       markdown ? markdown_escape(note) : note);
  // A summary names kernels and ranks' files: escaped in Markdown, as every trace-derived name there is.
  auto line = [&](const MultiRankAnalysis& m, const char* rule) {
    const std::string l = finding_line(m, rule);
    return markdown ? markdown_escape(l) : l;
  };
  for (const char* rule : kRankRules) {
    o += fmt::format("{}{} base: {}\n", markdown ? "\n- " : "", rule, line(base, rule));
    o += fmt::format("{}{} new:  {}\n", markdown ? "- " : "", rule, line(now, rule));
  }
  return o;
}

std::string multirank_diff_json(const MultiRankAnalysis& base, const MultiRankAnalysis& now) {
  const auto b = means_by_rank(base), n = means_by_rank(now);
  std::string o;
  JsonWriter w(o);
  auto means = [&](const char* key, const Means& x) {
    w.key(key).begin_object();
    w.kv("step_ms", x.step / 1e6).kv("compute_ms", x.compute / 1e6);
    w.kv("exposed_comm_ms", x.exposed / 1e6).kv("waited_ms", x.wait / 1e6);
    w.end_object();
  };
  w.begin_object().kv("compared", true);
  w.kv("base_ranks", int64_t(base.ranks.size())).kv("new_ranks", int64_t(now.ranks.size()));
  w.kv("base_aligned_steps", int64_t(base.steps.size())).kv("new_aligned_steps", int64_t(now.steps.size()));
  w.key("per_rank").begin_array();
  int64_t only = 0;
  for (const auto& [rank, x] : b) {
    auto it = n.find(rank);
    if (it == n.end()) {
      ++only;
      continue;
    }
    w.begin_object();
    w.key("rank");
    if (rank >= 0)
      w.value(rank);
    else
      w.null();
    means("base", x);
    means("new", it->second);
    w.key("step_change");
    if (x.step > 0)
      w.value((it->second.step - x.step) / x.step);
    else
      w.null();
    w.end_object();
  }
  w.end_array();
  for (const auto& [rank, y] : n) only += b.count(rank) ? 0 : 1;
  w.kv("one_side_only", only);
  for (const auto* side : {&base, &now}) {
    w.key(side == &base ? "base_notes" : "new_notes").begin_array();
    for (const auto& note : side->notes) w.value(valid_utf8(note));
    w.end_array();
  }
  w.key("findings").begin_object();
  for (const char* rule : kRankRules) {
    w.key(rule).begin_object();
    for (const auto* side : {&base, &now}) {
      w.key(side == &base ? "base" : "new");
      const FindingResult* f = finding_of(*side, rule);
      if (!f) {
        w.null();
        continue;
      }
      w.begin_object().kv("severity", store::to_string(f->severity));
      w.kv("est_savings_ms_per_step", f->est_savings_us_per_step / 1000.0)
          .kv("summary", valid_utf8(f->summary));
      w.end_object();
    }
    w.end_object();
  }
  w.end_object();
  w.end_object();
  return o;
}

std::string multirank_diff_json_none(const std::string& why) {
  std::string o;
  JsonWriter w(o);
  w.begin_object().kv("compared", false).kv("why", valid_utf8(why)).end_object();
  return o;
}

}  // namespace stepscope::analyzer
