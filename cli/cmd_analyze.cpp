// `stepscope analyze FILE [--json] [--step-regex R] [--write-findings]`: where each step's time went and what
// to change. FILE is a store or any trace the importers read. Exit 0 whatever is found; 2 on bad input.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>

#include "command.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

struct AnalyzeArgs {
  std::vector<std::string> files;  // several files or a directory: the ranks of one job (docs/multi-rank.md)
  std::string file, step_regex;
  int what_if_workers = 4;
  bool what_if_workers_given = false;
  std::string rank_csv, job = "job";  // --rank-csv DIR: per-rank tables for a query engine (docs/scale.md)
  bool json = false, write_findings = false;
};

constexpr size_t kMaxStepRows = 40;

double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0; }

std::string ms(double us) { return fmt::format("{:.3f}", us / 1000.0); }

// One character per 1/width of the step: # GPU busy, D data wait, S sync, L launch, H host code between
// launches, . other, P the profiler's own cost. Framed by "|"; width 0: no bar.
std::string stacked_bar(const analyzer::StepBreakdown& s, int width) {
  std::string bar;
  if (width <= 0) return bar;
  if (s.dur_ns <= 0) return "||";
  const std::pair<int64_t, char> parts[] = {{s.gpu_busy_ns, '#'},    {s.data_wait_ns, 'D'}, {s.sync_idle_ns, 'S'},
                                            {s.launch_idle_ns, 'L'}, {s.host_idle_ns, 'H'}, {s.other_idle_ns, '.'},
                                            {s.profiler_ns, 'P'}};
  double acc = 0;
  for (auto [ns, c] : parts) {
    acc += double(ns);
    int upto = int(acc / double(s.dur_ns) * width + 0.5);
    while (int(bar.size()) < upto) bar += c;
  }
  bar.resize(size_t(width), '.');
  return "|" + bar + "|";
}

// A suggestion's prose is broken at ~110 columns where it was written; to be wrapped to a narrower terminal
// its unindented lines are joined into paragraphs first (a line ending in ':' ends one; indented lines are
// code).
std::string reflowed(const std::string& text) {
  std::string out;
  bool prose = false;  // the line before was unindented prose that goes on
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const bool unindented = !line.empty() && line[0] != ' ';
    if (!out.empty()) out += prose && unindented ? ' ' : '\n';
    out += line;
    prose = unindented && line.back() != ':';
    begin = end + 1;
  }
  return out;
}

std::string indent(const std::string& text, const std::string& pad) {
  std::string out = pad;
  for (char c : text) {
    out += c;
    if (c == '\n') out += pad;
  }
  return out;
}

// analyze's text: fitted to the terminal by the caller.
std::string text_of(const analyzer::Analysis& a, int terminal) {
  std::string o;
  const auto out = std::back_inserter(o);
  const auto& s = a.summary;
  fmt::format_to(out, "{}\n", a.source_file);
  if (auto note = analyzer::flight_note(s); !note.empty()) fmt::format_to(out, "{}\n", note);
  if (auto note = analyzer::malformed_events_note(s); !note.empty()) fmt::format_to(out, "{}\n", note);
  fmt::format_to(out, "{} step(s) (source: {}), {} kernels, {} memcpys, {} memsets\n", s.steps, s.step_source,
                 s.kernels, s.memcpys, s.memsets);
  if (!s.has_gpu) {
    fmt::format_to(out, "{}\n", analyzer::no_gpu_note(s));
  } else {
    // Every share below is of the same summed step time, and busy + the idle parts add up to it. The host's own
    // wait for input is said apart from the GPU idle it caused: a wait overlapped by queued GPU work costs nothing.
    fmt::format_to(
        out,
        "GPU busy {} ms over a {} ms GPU span; {:.1f}% of step time busy; GPU idle waiting for input {:.1f}% "
        "(the training loop waited {:.1f}%, the rest hidden behind queued GPU work)\n",
        ms(s.gpu_busy_us), ms(s.gpu_span_us), 100.0 * s.gpu_busy_share, 100.0 * s.input_idle_share,
        100.0 * s.data_wait_share);
    if (auto note = analyzer::gpu_window_note(s); !note.empty()) fmt::format_to(out, "{}\n", note);
    if (auto note = analyzer::host_ahead_note(s); !note.empty()) fmt::format_to(out, "{}\n", note);
  }
  if (auto note = analyzer::profiler_cost_note(s); !note.empty())
    fmt::format_to(out, "{}{}\n", note, s.profiler.applied ? " (" + s.profiler.source + ")" : "");
  if (auto note = analyzer::step_source_note(s); !note.empty()) fmt::format_to(out, "{}\n", note);
  if (auto advice = analyzer::steps_advice(s); !advice.empty()) fmt::format_to(out, "{}\n", advice);
  if (!a.steps.empty() && !s.has_gpu) {
    // Without device activity a step is the training loop's wait for input and its own work: say only that.
    const int bar =
        analyzer::step_bar_width(42 + 2, terminal);  // 42 columns of figures, 2 of the bar's frame
    if (bar > 0) fmt::format_to(out, "\nBars: D waiting for input, H the training thread's own work");
    fmt::format_to(out, "\n{:>5} {:>10} {:>7} {:>7}  {}\n", "step", "dur ms", "input%", "host%", "bound");
    size_t shown = 0;
    for (const auto& st : a.steps) {
      if (shown++ == kMaxStepRows) {
        fmt::format_to(out, "  ... {} more steps (--json lists them all)\n", a.steps.size() - kMaxStepRows);
        break;
      }
      fmt::format_to(out, "{:>5} {:>10} {:>7.1f} {:>7.1f}  {}\n", st.index, ms(double(st.dur_ns) / 1000.0),
                     pct(st.host_data_wait_ns, st.dur_ns), pct(st.host_idle_ns, st.dur_ns),
                     analyzer::bound_and_bar(analyzer::to_string(st.bound), stacked_bar(st, bar)));
    }
    const double total = s.step_time_us, wait = s.data_wait_share * total;
    fmt::format_to(out,
                   "\nBreakdown over {} ms of steps: the training loop waited for input {} ms ({:.1f}%), ran "
                   "its own work "
                   "{} ms ({:.1f}%)\n",
                   ms(total), ms(wait), 100.0 * s.data_wait_share, ms(total - wait),
                   100.0 * (1.0 - s.data_wait_share));
  } else if (!a.steps.empty()) {
    // The host runs ahead: its step windows are not the program's pace; show each step in the GPU's time.
    const auto& rows = analyzer::step_rows(a);
    if (auto note = analyzer::step_rows_note(a); !note.empty()) fmt::format_to(out, "\n{}", note);
    const int bar =
        analyzer::step_bar_width(76 + 2, terminal);  // 76 columns of figures, 2 of the bar's frame
    if (bar > 0)
      fmt::format_to(out, "\nBars: # GPU busy, D data, S sync, L launch, H host, . other, P profiler");
    fmt::format_to(out, "\n{:>5} {:>10} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6}  {}\n", "step", "dur ms",
                   "busy%", "data%", "sync%", "launch", "host%", "other%", "kernels", "bound");
    size_t shown = 0;
    for (const auto& st : rows) {
      if (shown++ == kMaxStepRows) {
        fmt::format_to(out, "  ... {} more steps (--json lists them all)\n", rows.size() - kMaxStepRows);
        break;
      }
      fmt::format_to(out, "{:>5} {:>10} {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} {:>6.1f} {:>7}  {}\n",
                     st.index, ms(double(st.dur_ns) / 1000.0), pct(st.gpu_busy_ns, st.dur_ns),
                     pct(st.data_wait_ns, st.dur_ns), pct(st.sync_idle_ns, st.dur_ns),
                     pct(st.launch_idle_ns, st.dur_ns), pct(st.host_idle_ns, st.dur_ns),
                     pct(st.other_idle_ns, st.dur_ns), st.kernels,
                     analyzer::bound_and_bar(analyzer::to_string(st.bound), stacked_bar(st, bar)));
    }
    // GPU shares are known in the GPU-traced steps only.
    const bool windowed = s.gpu_traced_steps < s.steps;
    double total = windowed ? s.traced_step_time_us : s.step_time_us;
    auto share = [&](double us) { return total > 0 ? 100.0 * us / total : 0.0; };
    double busy_us = s.gpu_busy_share * total;
    fmt::format_to(out,
                   "\nBreakdown over {} ms of {}steps: GPU busy {} ms ({:.1f}%), GPU idle waiting for data "
                   "{} ms ({:.1f}%), "
                   "after syncs {} ms ({:.1f}%), in launch calls {} ms ({:.1f}%), host code between launches "
                   "{} ms ({:.1f}%), "
                   "other {} ms ({:.1f}%), profiler's own cost {} ms ({:.1f}%)\n",
                   ms(total),
                   windowed ? fmt::format("the {} GPU-traced ", s.gpu_traced_steps) : std::string(),
                   ms(busy_us), share(busy_us), ms(s.data_wait_idle_us), share(s.data_wait_idle_us),
                   ms(s.sync_idle_us), share(s.sync_idle_us), ms(s.launch_idle_us), share(s.launch_idle_us),
                   ms(s.host_idle_us), share(s.host_idle_us), ms(s.other_idle_us), share(s.other_idle_us),
                   ms(s.profiler_us), share(s.profiler_us));
  }
  if (auto cp = analyzer::critical_path_sentence(a.critical_path); !cp.empty())
    fmt::format_to(out, "\n{}\n", cp);
  if (auto wi = analyzer::what_if_sentence(a.what_if); !wi.empty()) fmt::format_to(out, "{}\n", wi);
  if (auto note = analyzer::estimate_replay_note(a); !note.empty()) fmt::format_to(out, "{}\n", note);
  fmt::format_to(out, "{}", analyzer::render_slow_steps_text(a));
  fmt::format_to(out, "{}", analyzer::render_graphs_text(a.graphs, 8));
  fmt::format_to(out, "{}", analyzer::render_host_activity_text(a.host_activity, 5));
  if (a.findings.empty()) {
    fmt::format_to(out, "\nNo findings.\n");
    return o;
  }
  fmt::format_to(out, "\nFindings, largest estimated saving first:\n");
  if (auto note = analyzer::warmup_share_note(a); !note.empty()) fmt::format_to(out, "{}\n", note);
  int n = 0;
  for (const auto& f : a.findings) {
    fmt::format_to(out, "\n{}. [{}] {}: {}\n", ++n, store::to_string(f.severity), f.rule, f.summary);
    // Per step it affects: the saving of 13 scattered steps of 39 read as the whole run's per step.
    std::string steps;
    if (!f.steps.empty())
      steps = f.steps.size() == 1
                  ? fmt::format("step {}", f.steps.front())
                  : fmt::format("{} steps: {}", f.steps.size(), analyzer::compact_step_list(f.steps));
    fmt::format_to(out, "   est. saving {} ms per affected step ({:.1f}% of step time){}\n",
                   ms(f.est_savings_us_per_step), 100.0 * f.share, steps.empty() ? "" : ", " + steps);
    // Its paragraphs wrapped as paragraphs, its code two columns in.
    fmt::format_to(out, "{}\n",
                   indent(terminal > 0 ? wrapped_to(reflowed(f.suggestion), std::max(20, terminal - 3), 0)
                                       : f.suggestion,
                          "   "));
  }
  return o;
}

void print_text(const analyzer::Analysis& a) {
  const int terminal = terminal_columns();
  fmt::print("{}", wrapped_to(text_of(a, terminal), terminal));
}

// One input's own analysis: the single-file path, and each of several inputs that are not one job's ranks.
analyzer::Analysis analyze_one(const std::string& file, const store::Trace& trace, const AnalyzeArgs& args) {
  analyzer::AnalyzeOptions options;
  options.step_regex = args.step_regex;
  options.what_if_loader_workers = args.what_if_workers;
  analyzer::Analysis a;
  try {
    a = analyzer::analyze(trace, options);
  } catch (const std::invalid_argument& e) {  // a bad --step-regex
    throw store::StoreError(file, e.what());
  }
  if (a.source_file.empty()) a.source_file = file;
  return a;
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
  return out;
}

// Inputs that are not the ranks of one job (flight saves of one process, unrelated programs): one line saying
// why, then each input's own analysis, in order (docs/multi-rank.md). --json: an array of
// stepscope.analysis/1 objects, the line on stderr.
int run_analyze_one_by_one(const std::vector<std::string>& files, const std::string& why,
                           const AnalyzeArgs& args) {
  if (!args.rank_csv.empty())
    throw store::StoreError(joined(args.files),
                            "not the ranks of one job (" + why + "): no --rank-csv tables");
  const std::string line = "Not the ranks of one job: " + why + "; each is analyzed on its own.";
  if (args.json)
    fmt::print(stderr, "stepscope: {}\n", line);
  else
    fmt::print("{}\n", line);
  if (args.json) fmt::print("[");
  for (size_t i = 0; i < files.size(); ++i) {
    const store::Trace trace = analyzer::load_trace(files[i]);  // the analysis points into its strings
    const analyzer::Analysis a = analyze_one(files[i], trace, args);
    if (args.json) {
      fmt::print("{}{}", i ? "," : "", analyzer::to_json(a));
    } else {
      fmt::print("\n");
      print_text(a);
    }
    std::fflush(stdout);  // each analysis as soon as it is done: a folder of big recordings takes a while
  }
  if (args.json) fmt::print("]\n");
  return 0;
}

// --rank-csv DIR: an existing folder, or one this run makes (0700, as stores' folders) in a folder that
// exists; a mistyped parent is refused, not created.
void require_rank_csv_folder(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // `out/new/` names the folder `new`
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return;
  if (std::filesystem::exists(dir, ec))
    throw store::StoreError(dir, "is not a folder (--rank-csv names one)");
  store::require_output_folder(dir);
}

int run_analyze_ranks(const AnalyzeArgs& args) {
  analyzer::MultiRankOptions options;
  options.analyze.step_regex = args.step_regex;
  if (args.write_findings) throw CLI::ValidationError("--write-findings", "takes one store, not several ranks");
  if (!args.rank_csv.empty())
    require_rank_csv_folder(args.rank_csv);  // before the ranks: 10,000 take a while
  const auto files = analyzer::expand_rank_inputs(args.files);
  auto m = analyzer::analyze_ranks(files, options);
  if (!m.not_one_job.empty()) return run_analyze_one_by_one(files, m.not_one_job, args);
  if (!args.rank_csv.empty()) {
    if (::mkdir(args.rank_csv.c_str(), S_IRWXU) != 0 && errno != EEXIST)
      throw store::StoreError(args.rank_csv,
                              std::string("cannot create the folder: ") + std::strerror(errno));
    analyzer::write_file_atomically(args.rank_csv + "/rank_steps.csv", analyzer::rank_steps_csv(m.ranks, args.job));
    analyzer::write_file_atomically(args.rank_csv + "/rank_collectives.csv",
                                    analyzer::rank_collectives_csv(m.ranks, args.job));
  }
  fmt::print("{}", analyzer::render_multirank_report(m, args.json ? analyzer::ReportFormat::Json
                                                                   : analyzer::ReportFormat::Text));
  return 0;
}

int run_analyze(AnalyzeArgs& args) {
  std::error_code ec;  // a symlink loop is no folder: its file's error says what it is
  if (args.files.size() > 1 || std::filesystem::is_directory(args.files.front(), ec) || !args.rank_csv.empty())
    return run_analyze_ranks(args);
  args.file = args.files.front();
  store::Trace trace = analyzer::load_trace(args.file);
  analyzer::Analysis a = analyze_one(args.file, trace, args);
  if (args.write_findings) {
    // A store is rewritten whole, atomically (temporary file beside it, renamed over it): a reader never sees
    // a half-updated findings table, and the writer's own schema code stays the only one writing stores.
    if (store::sniff_file(args.file) != store::FileKind::Store)
      throw store::StoreError(args.file, "--write-findings needs a stepscope store (import the trace first)");
    analyzer::store_findings(a, trace);
    // The store keeps its layout: rows stay rows (an `export --format sqlite` copy stays readable by plain
    // SQL).
    const bool packed = store::StoreReader(args.file).schema_version() >= 5;
    store::write_store_atomically(trace, args.file, packed);
  }
  if (args.json) fmt::print("{}", analyzer::to_json(a));
  else print_text(a);
  // The replay runs on GPU-traced steps only: say so rather than let the option pass as if it did something.
  if (args.what_if_workers_given && a.what_if.empty())
    fmt::print(stderr,
               "stepscope: --what-if-workers changes nothing here: the what-if replay needs GPU activity{}\n",
               a.summary.has_gpu ? " in steady traced steps" : " and this run has none (CPU-only)");
  if (args.write_findings && !args.json) fmt::print("\nwrote {} finding(s) into {}\n", a.findings.size(), args.file);
  return 0;
}

CommandRegistration analyze_command(30, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("analyze", "Find the steps, break each one down (GPU busy, data wait, sync, launch, "
                                            "host) and report bottlenecks with fixes and estimated savings");
  auto args = std::make_shared<AnalyzeArgs>();
  sub->add_option("FILE", args->files, "A stepscope store, Kineto/Chrome trace JSON (.json, .gz, .zst) or Nsight "
                                       "Systems SQLite export; several files or a directory: the ranks of one job")
      ->required();
  sub->add_flag("--json", args->json, "Print the stepscope.analysis/1 JSON (docs/analysis-json.md)");
  sub->add_option("--step-regex", args->step_regex,
                  "Ranges (NVTX/annotations) whose names match this regex are the steps")
      ->check(regex_option());
  auto* workers = sub->add_option("--what-if-workers", args->what_if_workers,
                                  "Loader workers the what-if replay gives a prefetching input pipeline "
                                  "(docs/critical-path.md); a CPU-only run has no replay")
                      ->check(CLI::Range(1, 1024))
                      ->capture_default_str();
  sub->add_option("--rank-csv", args->rank_csv, "Also write the per-rank tables rank_steps.csv and "
                                                "rank_collectives.csv into this directory (docs/scale.md)");
  sub->add_option("--job", args->job, "Job name written in the --rank-csv rows")->capture_default_str();
  sub->add_flag("--write-findings", args->write_findings,
                "Replace the findings table of FILE (a store) with these findings; the store is rewritten atomically");
  sub->callback([&exit_code, args, workers] {
    args->what_if_workers_given = workers->count() > 0;
    exit_code = run_analyze(*args);
  });
});

}  // namespace
}  // namespace stepscope::cli
