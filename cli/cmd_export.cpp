// `stepscope export INPUT --format chrome -o trace.json[.gz]`: a store (or any input load_trace reads) as
// Chrome trace JSON for Perfetto UI / chrome://tracing. Written atomically.
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "stepscope/analyzer/export.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

int run_export(const std::string& in, const std::string& format, const std::string& out) {
  if (format != "chrome") throw store::StoreError(format, "unknown export format (supported: chrome)");
  store::Trace t = analyzer::load_trace(in);
  analyzer::export_chrome_trace(t, out);
  std::printf("%s: Chrome trace with %zu kernels, %zu memcpys, %zu memsets, %zu API calls, %zu ranges "
              "(open in https://ui.perfetto.dev)\n",
              out.c_str(), t.kernels.size(), t.memcpys.size(), t.memsets.size(), t.api_calls.size(),
              t.ranges.size());
  return 0;
}

CommandRegistration export_command(60, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("export", "Export a store or trace as Chrome trace JSON (Perfetto UI, chrome://tracing)");
  auto in = std::make_shared<std::string>();
  auto format = std::make_shared<std::string>("chrome");
  auto out = std::make_shared<std::string>();
  sub->add_option("INPUT", *in, "A stepscope store (or any trace stepscope reads)")->required();
  sub->add_option("--format", *format, "Output format: chrome")->capture_default_str();
  sub->add_option("-o,--output", *out, "Output file; .gz compresses")->required();
  sub->callback([&exit_code, in, format, out] { exit_code = run_export(*in, *format, *out); });
});

}  // namespace
}  // namespace stepscope::cli
