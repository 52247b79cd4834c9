// `stepscope report`: renders an Analysis as text, Markdown (a GitHub step summary), one self-contained
// HTML file (inline CSS and SVG, no script, no network) or the analyzer's JSON (docs/report.md).
#pragma once

#include <string>
#include <string_view>

#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer {

enum class ReportFormat { Text, Markdown, Html, Json, Metrics };

// "text", "md"/"markdown", "html", "json", "metrics"; false when unknown.
bool parse_report_format(std::string_view name, ReportFormat& out);

std::string render_report(const Analysis& a, ReportFormat format);
// columns > 0: the step bars as wide as a terminal of that many columns leaves (none where under 10 would).
std::string render_text_report(const Analysis& a, int columns = 0);
// A step row's bar after `figures` columns of text (its frame counted there): 40 characters, or what a
// terminal of `columns` leaves (a row that wraps is no table), 0 (no bar) where under 10 would be left; 40
// for columns <= 0 (no terminal). Shared by `report -f text` and `analyze`.
int step_bar_width(int figures, int columns);
// A step row's last cell: its bound, padded, then its bar; the bound alone where no bar is drawn.
std::string bound_and_bar(std::string_view bound, std::string_view bar);
// The text report's "Slow steps" section (empty when there are too few steps to have a median), shared with
// `stepscope analyze`.
std::string render_slow_steps_text(const Analysis& a);
// The host activity (HostActivity) in words, shared by every view: a heading ("What the training thread ran while
// the GPU waited for the host", "Where the training thread spent the steps"), one sentence on the thread and its
// on/off-CPU time in the window, one on the other threads; and the text section `stepscope analyze` and the text
// report print (empty when there is nothing to show).
std::string host_activity_heading(const HostActivity& h);
std::string host_activity_sentence(const HostActivity& h);
std::string host_activity_others_sentence(const HostActivity& h, size_t max_threads = 4);
std::string render_host_activity_text(const HostActivity& h, size_t max_rows);
// The text report's "GPU breakdowns" section (HTA's definitions); empty without GPU work.
std::string render_gpu_breakdowns_text(const GpuBreakdowns& b, size_t max_rows);
// The text report's "CUDA graphs" section: the per-graph table (graph_replays.h); empty without graph replays.
std::string render_graphs_text(const GraphTable& g, size_t max_rows);
// The critical path in one sentence, shared by every view: "Critical path over the N steady GPU-traced steps
// (docs/critical-path.md): GPU compute 72%, host code 23%, …" (kinds ≥ 0.5%, largest first); empty without one.
std::string critical_path_sentence(const CriticalPaths& cp);
// The text section: that sentence and the longest stretches of the slowest traced step.
std::string render_critical_path_text(const CriticalPaths& cp);
// "What-if replay over N steady GPU-traced steps: …" — the replayed step unchanged and with each cure; "" when
// nothing was replayed.
std::string what_if_sentence(const WhatIf& w);
std::string render_markdown_report(const Analysis& a);
std::string render_html_report(const Analysis& a);
// One flat JSON object of numbers for experiment trackers (mlflow.log_metrics, TensorBoard scalars): steps, step
// median/p95, each bound's share of the step time, each finding's saving (docs/report.md, "Metrics").
std::string render_metrics_report(const Analysis& a);

// A finding's evidence (its JSON object) as HTML a person reads: labelled rows for figures (times with units,
// shares as percentages), small tables for lists of records (kernels, sequences, gap histograms, calls), names
// shortened (display_names.h) with the full name as a tooltip. With a `link_prefix`, each kernel/call/op name is
// a link "PREFIX<percent-encoded full name>" (the GUI highlights its occurrences). Empty for "{}".
std::string render_evidence_html(std::string_view evidence_json, std::string_view link_prefix = {});
// The same for the terminal (aligned "label  value" lines and column tables, each line prefixed by `indent`) and
// for Markdown (a list and GFM tables). At most 12 rows per table; the full JSON is in the JSON outputs.
std::string render_evidence_text(std::string_view evidence_json, std::string_view indent = {});
std::string render_evidence_markdown(std::string_view evidence_json);

// Escaping for names taken from traces (kernel names hold <, >, &, quotes; any byte may appear).
// Invalid UTF-8 becomes U+FFFD in every one of them.
std::string html_escape(std::string_view s);      // text and attribute values
std::string xml_escape(std::string_view s);       // XML 1.0: also drops characters XML forbids
std::string markdown_escape(std::string_view s);  // inside a GFM table cell: one line, no HTML, no markup
// `s` as a Markdown code span: one line, backslashes and entities literal (GFM does not read them there),
// only a table's pipes escaped (`in_table`), fenced by more backticks than any run in it; "" for an empty `s`
// (Markdown has no empty code span).
std::string markdown_code_span(std::string_view s, bool in_table);
std::string valid_utf8(std::string_view s);

// store::write_file_atomically (a private file, whole or not at all), or stdout for "-".
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace stepscope::analyzer
