// `stepscope diff BASE NEW` or `stepscope diff --base A --base B --new C ...`: compares per-step
// distributions and exits 1 on a regression (0 otherwise, 2 on bad input), for CI gates.
#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "command.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

struct DiffArgs {
  std::vector<std::string> positional, base, now;
  std::string config, junit, md, json, format = "text", step_regex;
  double kernel_regression_us = -1;  // --kernel-regression-us; < 0: the config's
};

int run_diff(const DiffArgs& a) {
  std::vector<std::string> base = a.base, now = a.now;
  bool ranks = false;  // BASE_DIR NEW_DIR: the ranks of two jobs; their steps pool, plus a per-rank section
  if (base.empty() && now.empty()) {
    if (a.positional.size() != 2)
      throw CLI::ValidationError("FILES", "give BASE NEW, or --base FILE... --new FILE... for several runs per side");
    base = {a.positional[0]};
    now = {a.positional[1]};
  } else {
    if (!a.positional.empty())
      throw CLI::ValidationError("FILES", "positional files cannot be mixed with --base/--new");
    if (base.empty() || now.empty()) throw CLI::ValidationError("FILES", "--base and --new both need at least one file");
  }
  {
    std::error_code ec;  // a symlink loop is no folder: its file's error says what it is
    ranks = base.size() == 1 && now.size() == 1 && std::filesystem::is_directory(base[0], ec) &&
            std::filesystem::is_directory(now[0], ec);
  }
  if (ranks) base = analyzer::expand_rank_inputs(base), now = analyzer::expand_rank_inputs(now);
  if (a.format != "text" && a.format != "md" && a.format != "json")
    throw CLI::ValidationError("--format", "unknown format '" + a.format + "' (text, md, json)");

  // The outputs' folders before any file is read: a typo in --json must not cost the whole analysis, and
  // nothing is written when one of them cannot be (see StagedFiles below).
  for (const std::string* out : {&a.junit, &a.md, &a.json}) {
    if (out->empty() || *out == "-") continue;
    store::require_output_folder(*out);  // "no such folder … (create it first)", as record and report say
    const std::filesystem::path parent = std::filesystem::path(*out).parent_path();
    const std::string dir = parent.empty() ? "." : parent.string();
    std::error_code ec;
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
      throw store::StoreError(*out, "cannot write here: " + dir + ": " + std::strerror(errno));
    if (std::filesystem::is_directory(*out, ec))
      throw store::StoreError(*out, "is a folder, not a file to write");
    for (const auto* side : {&base, &now}) store::require_not_an_input(*out, *side);
    if (!a.config.empty()) store::require_not_an_input(*out, {a.config});
  }
  analyzer::DiffConfig config;
  if (!a.config.empty()) config = analyzer::load_diff_config(a.config);
  if (a.kernel_regression_us >= 0) config.kernel_regression_us = a.kernel_regression_us;
  analyzer::AnalyzeOptions options;
  options.step_regex = a.step_regex;
  auto load_side = [&](const std::vector<std::string>& files) {
    std::vector<analyzer::DiffRun> runs;
    for (const auto& f : files) {
      store::Trace t = analyzer::load_trace(f);  // throws StoreError("FILE: reason") → exit 2
      runs.push_back(analyzer::make_diff_run(f, t, options, config.skip_first_steps));
    }
    return runs;
  };
  auto base_runs = load_side(base);
  auto new_runs = load_side(now);
  analyzer::DiffResult d = analyzer::diff_runs(base_runs, new_runs, config);
  // A side with no step at all (an empty store, a run that crashed before its first step) is nothing to
  // compare: bad input, not a pass (it exited 0, "no regression", and turned a crashed run's CI green).
  for (const auto* side : {&d.base, &d.now})
    if (side->steps == 0) {
      std::string files;
      for (const auto& f : side->files) files += (files.empty() ? "" : ", ") + f;
      throw store::StoreError(files,
                              std::string("nothing to compare: no step with a duration on the ") +
                                  (side == &d.base ? "base" : "new") +
                                  " side (an empty recording, or a run that ended before its first step)");
    }

  // Two job folders: the per-rank comparison, in every output (text, Markdown, and the JSON's "ranks").
  std::string rank_text, rank_md;
  if (ranks) {
    analyzer::MultiRankOptions mo;
    mo.analyze = options;
    const auto base_ranks = analyzer::analyze_ranks(base, mo), new_ranks = analyzer::analyze_ranks(now, mo);
    // Saves of one process or unrelated programs pool as runs above; they have no per-rank section.
    std::string why;
    if (!base_ranks.not_one_job.empty())
      why = a.positional[0] + ": not the ranks of one job (" + base_ranks.not_one_job + ")";
    else if (!new_ranks.not_one_job.empty())
      why = a.positional[1] + ": not the ranks of one job (" + new_ranks.not_one_job + ")";
    if (why.empty()) {
      rank_text = analyzer::render_multirank_diff(base_ranks, new_ranks, false);
      rank_md = analyzer::render_multirank_diff(base_ranks, new_ranks, true);
      d.ranks_json = analyzer::multirank_diff_json(base_ranks, new_ranks);
    } else {
      rank_text = "\nNo per-rank section: " + why + ".\n";
      rank_md = "\nNo per-rank section: " + analyzer::markdown_escape(why) + ".\n";
      d.ranks_json = analyzer::multirank_diff_json_none(why);
    }
  }

  // "-": to stdout, before what --format prints there.
  store::StagedFiles outputs;
  std::string to_stdout;
  auto output = [&](const std::string& path, std::string text) {
    if (path.empty()) return;
    if (path == "-")
      to_stdout += text;
    else
      outputs.add(path, text);
  };
  output(a.junit, analyzer::diff_to_junit(d));
  output(a.md, analyzer::diff_to_markdown(d) + rank_md);
  output(a.json, analyzer::diff_to_json(d));
  const int columns = terminal_columns();
  const std::string out = a.format == "md" ? analyzer::diff_to_markdown(d) + rank_md
                          : a.format == "json"
                              ? analyzer::diff_to_json(d)
                              : wrapped_to(analyzer::diff_to_text(d, columns), columns) + rank_text;
  outputs.commit();
  analyzer::write_file_atomically("-", to_stdout + out);
  return d.exit_code();
}

CommandRegistration diff_command(50, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "diff", "Compare runs step by step (BASE NEW, or --base/--new for repeated runs); exit 1 on a regression");
  auto args = std::make_shared<DiffArgs>();
  sub->add_option("FILES", args->positional, "BASE NEW: two stores or traces, or two directories of rank files");
  sub->add_option("--base", args->base, "A base run (repeat for several runs; their steps pool)")->allow_extra_args(false);
  sub->add_option("--new", args->now, "A new run (repeat for several runs; their steps pool)")->allow_extra_args(false);
  sub->add_option("--config", args->config, "Thresholds and test settings (TOML or JSON; see docs/ci.md)");
  sub->add_option(
         "--kernel-regression-us", args->kernel_regression_us,
         "Fail when a kernel or op grows by more than US per step (and 10% of its base); a new one above US")
      ->check(at_least_zero(false));
  sub->add_option("--junit", args->junit, "Write JUnit XML here: one testcase per metric, failures for regressions");
  sub->add_option("--md", args->md, "Write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)");
  sub->add_option("--json", args->json, "Write the stepscope.diff/1 JSON here");
  sub->add_option("--format", args->format, "What to print on stdout: text (default), md or json");
  sub->add_option("--step-regex", args->step_regex,
                  "NVTX/annotation ranges whose names match this regex are steps")
      ->check(regex_option());
  sub->callback([&exit_code, args] { exit_code = run_diff(*args); });
});

}  // namespace
}  // namespace stepscope::cli
