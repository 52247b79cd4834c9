// `stepscope report FILE [--format text|md|html|json|metrics] [-o OUT]`: the analysis of one store or trace as a
// terminal report, a GitHub step summary, a self-contained HTML page, the analyzer's JSON, or the flat metrics
// an experiment tracker logs.
#include <fmt/format.h>

#include <filesystem>

#include "command.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

struct ReportArgs {
  std::vector<std::string> files;  // several files or a directory: the ranks of one job (docs/multi-rank.md)
  std::string file, format, out, step_regex;
};

// --format wins; else the output file's extension; else text.
analyzer::ReportFormat pick_format(const ReportArgs& a) {
  analyzer::ReportFormat f = analyzer::ReportFormat::Text;
  if (!a.format.empty()) {
    if (!analyzer::parse_report_format(a.format, f))
      throw CLI::ValidationError("--format", "unknown format '" + a.format + "' (text, md, html, json, metrics)");
    return f;
  }
  std::string ext = std::filesystem::path(a.out).extension().string();
  if (ext == ".html" || ext == ".htm") return analyzer::ReportFormat::Html;
  if (ext == ".md" || ext == ".markdown") return analyzer::ReportFormat::Markdown;
  if (ext == ".json") return analyzer::ReportFormat::Json;
  return f;
}

// One input's report, rendered while its trace lives (the analysis points into the trace's strings).
std::string report_one(const std::string& file, const ReportArgs& a, analyzer::ReportFormat format) {
  store::Trace trace = analyzer::load_trace(file);
  analyzer::AnalyzeOptions options;
  options.step_regex = a.step_regex;
  analyzer::Analysis analysis = analyzer::analyze(trace, options);
  if (analysis.source_file.empty()) analysis.source_file = file;
  // Text to a terminal: its step bars fit the terminal's width.
  if (format == analyzer::ReportFormat::Text && (a.out.empty() || a.out == "-"))
    return analyzer::render_text_report(analysis, terminal_columns());
  return analyzer::render_report(analysis, format);
}

// Inputs that are not the ranks of one job: as `analyze`, one line saying why, then each input's own report
// (JSON: an array of stepscope.analysis/1 objects, the line on stderr). An HTML page holds one report:
// refused.
int run_report_one_by_one(const ReportArgs& a, const std::vector<std::string>& files, const std::string& why,
                          analyzer::ReportFormat format) {
  std::string names;
  for (const auto& f : a.files) names += (names.empty() ? "" : " ") + f;
  if (format == analyzer::ReportFormat::Html)
    throw store::StoreError(names, "not the ranks of one job (" + why +
                                       "): an HTML report holds one; report each file on its own");
  const std::string line = "Not the ranks of one job: " + why + "; each is reported on its own.";
  std::string out = format == analyzer::ReportFormat::Json ? "[" : line + "\n";
  if (format == analyzer::ReportFormat::Json) fmt::print(stderr, "stepscope: {}\n", line);
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string one = report_one(files[i], a, format);
    out += format == analyzer::ReportFormat::Json ? (i ? "," : "") + one : "\n" + one;
  }
  if (format == analyzer::ReportFormat::Json) out += "]\n";
  analyzer::write_file_atomically(a.out.empty() ? "-" : a.out, out);
  if (!a.out.empty()) fmt::print(stderr, "stepscope: wrote {}\n", a.out);
  return 0;
}

int run_report(ReportArgs& a) {
  analyzer::ReportFormat format = pick_format(a);
  if (!a.out.empty() && a.out != "-")
    store::require_output_folder(a.out);  // before the analysis: a typo is cheap
  store::require_not_an_input(a.out, analyzer::expand_rank_inputs(a.files));  // a folder's files too
  std::error_code ec;
  if (a.files.size() > 1 || std::filesystem::is_directory(a.files.front(), ec)) {
    if (format == analyzer::ReportFormat::Metrics)
      throw CLI::ValidationError("--format", "metrics summarizes one run: give one store or trace");
    analyzer::MultiRankOptions options;
    options.analyze.step_regex = a.step_regex;
    const auto files = analyzer::expand_rank_inputs(a.files);
    auto m = analyzer::analyze_ranks(files, options);
    if (!m.not_one_job.empty()) return run_report_one_by_one(a, files, m.not_one_job, format);
    analyzer::write_file_atomically(a.out.empty() ? "-" : a.out, analyzer::render_multirank_report(m, format));
    if (!a.out.empty()) fmt::print(stderr, "stepscope: wrote {}\n", a.out);
    return 0;
  }
  a.file = a.files.front();
  analyzer::write_file_atomically(a.out.empty() ? "-" : a.out, report_one(a.file, a, format));
  if (!a.out.empty()) fmt::print(stderr, "stepscope: wrote {}\n", a.out);
  return 0;
}

CommandRegistration report_command(40, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("report", "Report one store or trace as text, Markdown (CI step summary), "
                                           "self-contained HTML, JSON or flat metrics (MLflow, TensorBoard)");
  auto args = std::make_shared<ReportArgs>();
  sub->add_option("FILE", args->files, "A stepscope store or any importable trace (Kineto JSON, Nsight Systems "
                                       "SQLite); several files or a directory: the ranks of one job")
      ->required();
  sub->add_option("--format,-f", args->format, "text, md, html, json, or metrics (one flat JSON object of numbers for MLflow/TensorBoard; "
                                      "default: from -o's extension, else text)");
  sub->add_option("-o,--output", args->out, "Write here (atomically) instead of stdout");
  sub->add_option("--step-regex", args->step_regex,
                  "NVTX/annotation ranges whose names match this regex are steps")
      ->check(regex_option());
  sub->callback([&exit_code, args] { exit_code = run_report(*args); });
});

}  // namespace
}  // namespace stepscope::cli
