// The reports' "CUDA graphs" section: the per-graph table (graph_replays.h) and the sentence above it, laid out by
// the text, Markdown and HTML renderers.
#include <fmt/format.h>

#include "report/gpu_breakdowns_tables.h"
#include "report/report_util.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

using report_util::format_us;
using report_util::kJsonHint;
using report_util::printable;
using report_util::shorten;

std::string graph_sentence(const GraphTable& g) {
  if (g.empty()) return "";
  int64_t whole = 0;
  for (const auto& s : g.graphs) whole += s.whole ? 1 : 0;
  std::string o = fmt::format("{} replay{} of {} graph{}", g.replays.size(), g.replays.size() == 1 ? "" : "s",
                              g.graphs.size(), g.graphs.size() == 1 ? "" : "s");
  if (whole == int64_t(g.graphs.size()))
    o += " (recorded as one interval per replay: the nodes inside a replay were not recorded)";
  else
    o += fmt::format(" ran {} of the {} GPU records; {} kernels ran outside graphs", g.replayed_records, g.gpu_records,
                     g.eager_kernels);
  o += ".";
  if (g.ids == "kernel-sequence")
    o += " The trace names no graphs: replays that ran the same sequence of kernels count as one graph.";
  o += " Per replay: GPU busy, the launch call on the host, GPU idle between its own nodes and before it since the "
       "previous replay.";
  return o;
}

BreakdownTable graph_table_rows(const GraphTable& g, size_t max_rows) {
  BreakdownTable t{"CUDA graphs",
                   {"graph", "replays", "nodes/replay", "GPU/replay", "launch call", "idle inside", "idle before",
                    "eager ops between", "first kernel"},
                   {},
                   ""};
  auto range = [](int64_t lo, int64_t hi) { return lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi); };
  for (size_t i = 0; i < g.graphs.size() && i < max_rows; ++i) {
    const GraphStat& s = g.graphs[i];
    t.rows.push_back({std::to_string(s.graph_id), std::to_string(s.replays),
                      s.whole ? "—" : range(s.nodes_min, s.nodes_max), format_us(s.gpu_us),
                      s.launch_calls ? format_us(s.launch_us) : "—", s.whole ? "—" : format_us(s.idle_inside_us),
                      s.idle_before_count ? format_us(s.idle_before_median_us) : "—", std::to_string(s.eager_ops_before),
                      short_symbol(s.first_kernel)});
  }
  if (g.graphs.size() > max_rows)
    t.note = fmt::format("… {} more graphs (all in the JSON: {})", g.graphs.size() - max_rows, kJsonHint);
  // Where each was captured, when the recording kept the stacks (schema v4): a column before the first kernel.
  bool captured = false;
  for (size_t i = 0; i < g.graphs.size() && i < max_rows; ++i) captured |= !g.graphs[i].captured_at.empty();
  if (captured) {
    t.head.insert(t.head.end() - 1, "captured at");
    for (size_t i = 0; i < t.rows.size(); ++i)
      t.rows[i].insert(t.rows[i].end() - 1, g.graphs[i].captured_at.empty() ? "—" : g.graphs[i].captured_at);
  }
  return t;
}

std::string render_graphs_text(const GraphTable& g, size_t max_rows) {
  if (g.empty()) return "";
  std::string o = "\nCUDA graphs\n" + printable(graph_sentence(g)) + "\n";
  const BreakdownTable t = graph_table_rows(g, max_rows);
  const bool captured = t.head.size() > 9;
  o += fmt::format("{:>8} {:>8} {:>12} {:>11} {:>11} {:>11} {:>11} {:>6}  {}\n", "graph", "replays", "nodes/replay",
                   "GPU/replay", "launch", "idle inside", "idle before", "eager",
                   captured ? "captured at / first kernel" : "first kernel");
  for (const auto& r : t.rows)
    o += fmt::format("{:>8} {:>8} {:>12} {:>11} {:>11} {:>11} {:>11} {:>6}  {}\n", r[0], r[1], r[2], r[3], r[4], r[5],
                     r[6], r[7],
                     printable(captured ? shorten(r[8], 40) + " / " + shorten(r[9], 40) : shorten(r[8], 60)));
  if (!t.note.empty()) o += printable(t.note) + "\n";
  o += "(launch: the launch call per replay; idle before: median GPU idle since the previous replay; eager: GPU ops "
       "outside graphs between replays)\n";
  return o;
}

}  // namespace stepscope::analyzer
