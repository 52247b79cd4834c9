// `stepscope info FILE [--json]`: what a store holds.
#include <fmt/format.h>

#include "command.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

int run_info(const std::string& file, bool json) {
  store::StoreReader r(file);
  auto counts = r.counts();
  auto meta = r.meta();
  auto [t0, t1] = r.time_span();
  store::Trace small;  // devices and processes only
  small.strings = r.strings();
  small.devices = r.devices();
  small.processes = r.processes();
  const auto breaks = r.invariant_breaks();
  // The findings `stepscope analyze` reports; the findings table holds only what `analyze --write-findings` stored.
  // A store info can describe may still be one the analyzer cannot load: say why instead of failing the listing.
  int64_t analyzed = -1;
  std::string unavailable;
  try {
    analyzed = int64_t(analyzer::analyze(analyzer::load_trace(file)).findings.size());
  } catch (const std::exception& e) {
    unavailable = e.what();
  }
  int64_t stored = 0;
  for (const auto& c : counts)
    if (c.table == "findings") stored = c.rows;
  if (json) {
    std::string out;
    analyzer::JsonWriter w(out);
    w.begin_object().kv("file", file).kv("schema_version", r.schema_version());
    w.key("counts").begin_object();
    for (const auto& c : counts) w.kv(c.table, c.rows);
    w.end_object();
    w.key("time_span_ns").begin_array().value(t0).value(t1).end_array();
    w.kv("duration_s", double(t1 - t0) / 1e9);
    if (analyzed >= 0) w.kv("findings", analyzed);
    else w.kv("findings_unavailable", unavailable);
    w.kv("findings_stored", stored);
    w.key("devices").begin_array();
    for (const auto& d : small.devices)
      w.begin_object().kv("id", d.id).kv("name", small.str(d.name)).kv("cc", fmt::format("{}.{}", d.cc_major, d.cc_minor))
          .kv("sm_count", int64_t(d.sm_count)).kv("memory_bytes", d.memory_bytes).end_object();
    w.end_array();
    w.key("processes").begin_array();
    for (const auto& p : small.processes) w.begin_object().kv("pid", p.pid).kv("name", small.str(p.name)).end_object();
    w.end_array();
    w.key("invariant_breaks").begin_array();
    for (const auto& b : breaks)
      w.begin_object().kv("table", b.table).kv("problem", b.problem).kv("rows", b.rows)
          .kv("example_pid", b.example_pid).kv("example_tid", b.example_tid).end_object();
    w.end_array();
    w.key("meta").begin_object();
    for (const auto& [k, v] : meta) w.kv(k, v);
    w.end_object().end_object();
    fmt::print("{}\n", out);
    return 0;
  }
  fmt::print("{}  (stepscope store, schema v{})\n", file, r.schema_version());
  fmt::print("time span: {:.6f} s\n", double(t1 - t0) / 1e9);
  fmt::print("\n{:<12} {:>12}\n", "table", "rows");
  for (const auto& c : counts) fmt::print("{:<12} {:>12}\n", c.table, c.rows);
  if (analyzed >= 0)
    fmt::print("\nfindings: {} (what `stepscope analyze` reports; {} stored by `analyze --write-findings`)\n", analyzed,
               stored);
  else
    fmt::print("\nfindings: unavailable ({}); {} stored\n", unavailable, stored);
  if (!small.devices.empty()) {
    fmt::print("\ndevices:\n");
    for (const auto& d : small.devices)
      fmt::print("  {}: {} (cc {}.{}, {} SMs, {:.1f} GiB)\n", d.id, small.str(d.name), d.cc_major, d.cc_minor,
                 d.sm_count, double(d.memory_bytes) / double(1LL << 30));
  }
  if (!small.processes.empty()) {
    fmt::print("\nprocesses:\n");
    for (const auto& p : small.processes) fmt::print("  {} {}\n", p.pid, small.str(p.name));
  }
  // docs/schema.md "Invariant": older stores (schema v1 recordings) break it.
  if (breaks.empty()) {
    fmt::print("\ninvariant: every pid and thread in processes / threads: ok\n");
  } else {
    fmt::print("\ninvariant broken: rows naming a pid or thread that processes / threads lack\n");
    for (const auto& b : breaks)
      fmt::print("  {}: {} rows, {} (e.g. pid {} tid {})\n", b.table, b.rows, b.problem, b.example_pid,
                 b.example_tid);
  }
  fmt::print("\nmeta:\n");
  for (const auto& [k, v] : meta) fmt::print("  {} = {}\n", k, v);
  return 0;
}

CommandRegistration info_command(70, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand("info", "Print what a store holds: row counts, time span, devices, processes, metadata");
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  sub->add_option("FILE", *file, "A stepscope store (.db)")->required();
  sub->add_flag("--json", *json, "Machine-readable output");
  sub->callback([&exit_code, file, json] { exit_code = run_info(*file, *json); });
});

}  // namespace
}  // namespace stepscope::cli
