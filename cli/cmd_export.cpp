// `stepscope export INPUT --format chrome -o trace.json[.gz]`: a store (or any input load_trace reads) as
// Chrome trace JSON for Perfetto UI / chrome://tracing; `--format folded -o stacks.txt`: its CPU samples as
// collapsed stacks for flame-graph tools; `--format speedscope` / `--format svg`: the same stacks as a
// speedscope profile or a flame graph that needs no other tool; `--format sqlite -o rows.db`: the store with
// every table as rows (schema v4), for SQL without stepscope. Written atomically.
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "stepscope/analyzer/export.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

int run_export(const std::string& in, const std::string& asked, const std::string& out) {
  // "collapsed" is what flamegraph.pl and the help call the folded form: the same output.
  const std::string format = asked == "collapsed" ? "folded" : asked;
  if (format != "chrome" && format != "folded" && format != "speedscope" && format != "svg" &&
      format != "sqlite")
    throw store::StoreError(
        format, "unknown export format (supported: chrome, folded or collapsed, speedscope, svg, sqlite)");
  store::require_not_an_input(out, {in});
  if (format == "sqlite") store::require_output_folder(out);  // before the load: a typo costs nothing
  store::Trace t = analyzer::load_trace(in);
  if (format == "sqlite") {
    store::write_store_atomically(t, out, /*packed=*/false);
    std::printf(
        "%s: a store of rows (schema %d): %zu kernels, %zu API calls, %zu CPU samples, %zu stack nodes\n",
        out.c_str(), store::kRowsSchemaVersion, t.kernels.size(), t.api_calls.size(), t.samples.size(),
        t.stacks.size());
    return 0;
  }
  if (format != "chrome") {
    if (t.samples.empty())
      throw store::StoreError(in,
                              "no CPU samples to fold (a Kineto trace has none; an Nsight Systems export has "
                              "them when nsys sampled the CPU)");
    const char* what = "collapsed stacks (flamegraph.pl, inferno, https://speedscope.app)";
    if (format == "folded") {
      analyzer::export_folded_stacks(t, out);
    } else if (format == "speedscope") {
      analyzer::export_speedscope(t, out, "CPU samples of " + in);
      what = "a speedscope profile (open in https://speedscope.app)";
    } else {
      analyzer::export_flame_graph_svg(t, out, "CPU samples of " + in);
      what = "a flame graph (open in a browser)";
    }
    std::printf("%s: %zu CPU samples as %s\n", out.c_str(), t.samples.size(), what);
    return 0;
  }
  analyzer::export_chrome_trace(t, out);
  std::printf(
      "%s: Chrome trace with %zu kernels, %zu memcpys, %zu memsets, %zu API calls, %zu ranges "
      "(open in https://ui.perfetto.dev)%s\n",
      out.c_str(), t.kernels.size(), t.memcpys.size(), t.memsets.size(), t.api_calls.size(), t.ranges.size(),
      t.samples.empty() ? ""
                        : ("; its " + std::to_string(t.samples.size()) +
                           " CPU samples: --format svg, speedscope or folded (flame graphs)")
                              .c_str());
  return 0;
}

CommandRegistration export_command(60, [](CLI::App& app, int& exit_code) {
  auto* sub =
      app.add_subcommand("export",
                         "Export a store or trace as Chrome trace JSON (Perfetto UI, chrome://tracing) "
                         "or its CPU samples as collapsed stacks, a speedscope profile or an SVG flame "
                         "graph; or a store as rows "
                         "any SQL reads (sqlite)");
  auto in = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("chrome");
  auto out = std::make_shared<std::string>();
  sub->add_option("INPUT", *in, "A stepscope store (or any trace stepscope reads)")->required();
  sub->add_option(
         "--format", *format,
         "Output format: chrome; or the CPU samples as folded (collapsed stacks), speedscope (JSON) or "
         "svg (a flame graph); sqlite: the store with every table as rows (schema 4), readable without "
         "stepscope")
      ->capture_default_str();
  sub->add_option("-o,--output", *out, "Output file; .gz compresses (chrome)")->required();
  sub->callback([&exit_code, in, format, out] { exit_code = run_export(*in, *format, *out); });
});

}  // namespace
}  // namespace stepscope::cli
