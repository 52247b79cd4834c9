// `stepscope report FILE [--format text|md|html|json] [-o OUT]`: the analysis of one store or trace as a
// terminal report, a GitHub step summary, a self-contained HTML page or the analyzer's JSON.
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
      throw CLI::ValidationError("--format", "unknown format '" + a.format + "' (text, md, html, json)");
    return f;
  }
  std::string ext = std::filesystem::path(a.out).extension().string();
  if (ext == ".html" || ext == ".htm") return analyzer::ReportFormat::Html;
  if (ext == ".md" || ext == ".markdown") return analyzer::ReportFormat::Markdown;
  if (ext == ".json") return analyzer::ReportFormat::Json;
  return f;
}

int run_report(ReportArgs& a) {
  analyzer::ReportFormat format = pick_format(a);
  if (a.files.size() > 1 || std::filesystem::is_directory(a.files.front())) {
    analyzer::MultiRankOptions options;
    options.analyze.step_regex = a.step_regex;
    auto m = analyzer::analyze_ranks(analyzer::expand_rank_inputs(a.files), options);
    analyzer::write_file_atomically(a.out.empty() ? "-" : a.out, analyzer::render_multirank_report(m, format));
    if (!a.out.empty()) fmt::print(stderr, "stepscope: wrote {}\n", a.out);
    return 0;
  }
  a.file = a.files.front();
  store::Trace trace = analyzer::load_trace(a.file);
  analyzer::AnalyzeOptions options;
  options.step_regex = a.step_regex;
  analyzer::Analysis analysis = analyzer::analyze(trace, options);
  if (analysis.source_file.empty()) analysis.source_file = a.file;
  std::string text = analyzer::render_report(analysis, format);
  analyzer::write_file_atomically(a.out.empty() ? "-" : a.out, text);
  if (!a.out.empty()) fmt::print(stderr, "stepscope: wrote {}\n", a.out);
  return 0;
}

CommandRegistration report_command(40, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("report", "Report one store or trace as text, Markdown (CI step summary), "
                                           "self-contained HTML or JSON");
  auto args = std::make_shared<ReportArgs>();
  sub->add_option("FILE", args->files, "A stepscope store or any importable trace (Kineto JSON, Nsight Systems "
                                       "SQLite); several files or a directory: the ranks of one job")
      ->required();
  sub->add_option("--format,-f", args->format, "text, md, html or json (default: from -o's extension, else text)");
  sub->add_option("-o,--output", args->out, "Write here (atomically) instead of stdout");
  sub->add_option("--step-regex", args->step_regex, "NVTX/annotation ranges whose names match this regex are steps");
  sub->callback([&exit_code, args] { exit_code = run_report(*args); });
});

}  // namespace
}  // namespace stepscope::cli
