// `stepscope import FILE... -o run.db`: Kineto/Chrome trace JSON, Nsight Systems SQLite exports (plain, .gz,
// .zst) or stores → one stepscope store. Written to a temporary file and renamed: nothing is left on error.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

constexpr uint64_t kProgressMinBytes = 50ull << 20;

int run_import(const std::vector<std::string>& args, const std::string& out) {
  if (out.empty()) throw store::StoreError("-o", "an output store path is required");
  store::require_output_folder(out);  // before the import: a long one would fail only at its end
  const auto files = analyzer::expand_rank_inputs(args);  // a folder: its traces and stores, as `analyze DIR`
  store::require_not_an_input(out, files);
  analyzer::LoadOptions opts;
  if (::isatty(2)) {
    // A progress line for big inputs, only where someone is watching.
    opts.progress = [](uint64_t done, uint64_t total) {
      if (total < kProgressMinBytes) return;
      std::fprintf(stderr, "\rstepscope: importing %3d%% of %.0f MB", int(100.0 * double(done) / double(total)),
                   double(total) / 1e6);
      std::fflush(stderr);
    };
  }
  store::Trace t = analyzer::load_traces(files, opts);
  if (::isatty(2)) std::fprintf(stderr, "\r\033[K");
  store::write_store_atomically(t, out);
  std::printf("%s: %zu kernels, %zu memcpys, %zu memsets, %zu API calls, %zu syncs, %zu ranges, %zu steps, "
              "%zu data waits, %zu samples (from %s)\n",
              out.c_str(), t.kernels.size(), t.memcpys.size(), t.memsets.size(), t.api_calls.size(),
              t.syncs.size(), t.ranges.size(), t.steps.size(), t.data_waits.size(), t.samples.size(),
              t.meta.count("source_format") ? t.meta.at("source_format").c_str() : "?");
  return 0;
}

CommandRegistration import_command(20, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "import", "Import PyTorch profiler (Kineto) / Chrome trace JSON or Nsight Systems SQLite exports into a store");
  auto files = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  sub->add_option("FILE", *files,
                  "Trace files (.json, .json.gz, .json.zst, .sqlite, .sqlite.gz, .db) or folders of "
                  "them; several files (e.g. ranks) are merged into one store")
      ->required();
  sub->add_option("-o,--output", *out, "The store to write (replaced atomically)")->required();
  sub->callback([&exit_code, files, out] { exit_code = run_import(*files, *out); });
});

}  // namespace
}  // namespace stepscope::cli
