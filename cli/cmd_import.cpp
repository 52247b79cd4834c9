// `stepscope import FILE... -o run.db`: Kineto/Chrome trace JSON, Nsight Systems SQLite exports (plain, .gz,
// .zst) or stores → one stepscope store. Written to a temporary file and renamed: nothing is left on error.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "command.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

constexpr uint64_t kProgressMinBytes = 50ull << 20;

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec);
}

// The files to import: those named, and for a folder its traces and stores as `analyze DIR` finds them, less
// the output when it lies there (an earlier `import DIR -o DIR/all.db` is not an input of the next). A store
// in the folder imported from files of the same names beside it is refused: it would count their rows twice.
std::vector<std::string> import_inputs(const std::vector<std::string>& args, const std::string& out) {
  std::vector<std::string> files;
  for (const auto& arg : args) {
    std::error_code ec;
    if (!std::filesystem::is_directory(arg, ec)) {
      files.push_back(arg);
      continue;
    }
    std::vector<std::string> found;
    for (auto& f : analyzer::expand_rank_inputs({arg}))
      if (!same_file(f, out)) found.push_back(std::move(f));
    if (found.empty())
      throw store::StoreError(arg, "no stores or traces in this directory besides the output");
    std::set<std::string> names;
    for (const auto& f : found) names.insert(std::filesystem::path(f).filename().string());
    for (const auto& f : found) {
      if (store::sniff_file(f) != store::FileKind::Store) continue;
      const auto meta = store::StoreReader(f).meta();
      const auto it = meta.find("source_file");
      if (it == meta.end()) continue;
      std::string from = it->second;
      for (size_t start = 0; start <= from.size();) {
        const size_t end = std::min(from.find(';', start), from.size());
        const std::string name = std::filesystem::path(from.substr(start, end - start)).filename().string();
        if (!name.empty() && name != std::filesystem::path(f).filename().string() && names.count(name))
          throw store::StoreError(f,
                                  "a store imported from " + name +
                                      ", which is in this folder too: its rows would count twice (name the "
                                      "files to import, or move it out)");
        start = end + 1;
      }
    }
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

int run_import(const std::vector<std::string>& args, const std::string& out) {
  if (out.empty()) throw store::StoreError("-o", "an output store path is required");
  store::require_output_folder(out);  // before the import: a long one would fail only at its end
  const auto files = import_inputs(args, out);
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
