// `stepscope info FILE [--json]`: what a store holds, or a raw trace (imported on the fly, as analyze does).
#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "command.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

// What info says of a file, from a store's tables or from a trace imported in memory.
struct Info {
  std::string kind;        // "store" or "trace"
  int schema_version = 0;  // stores only
  std::vector<store::TableCount> counts;
  std::pair<int64_t, int64_t> span;
  std::map<std::string, std::string> meta;
  store::Trace small;                         // strings, devices and processes only
  std::vector<store::InvariantBreak> breaks;  // stores only: the importer gives every pid and thread a row
  int64_t analyzed = -1, stored = 0;
  std::string unavailable;
};

// The findings `stepscope analyze` reports; the findings table holds only what `analyze --write-findings`
// stored. A file info can describe may still be one the analyzer cannot analyze: say why instead of failing
// the listing.
void count_findings(Info& info, const store::Trace& t) {
  try {
    info.analyzed = int64_t(analyzer::analyze(t).findings.size());
  } catch (const std::exception& e) {
    info.unavailable = e.what();
  }
}

Info store_info(const std::string& file) {
  store::StoreReader r(file);
  Info info;
  info.kind = "store";
  info.schema_version = r.schema_version();
  info.counts = r.counts();
  info.meta = r.meta();
  info.span = r.time_span();
  info.small.strings = r.strings();
  info.small.devices = r.devices();
  info.small.processes = r.processes();
  info.breaks = r.invariant_breaks();
  try {
    count_findings(info, analyzer::load_trace(file));
  } catch (const std::exception& e) {
    info.unavailable = e.what();
  }
  for (const auto& c : info.counts)
    if (c.table == "findings") info.stored = c.rows;
  return info;
}

// A raw trace (Kineto/Chrome JSON, nsys SQLite, compressed or not) imported on the fly, as analyze reads it:
// the rows a store imported from it would hold.
Info trace_info(const std::string& file) {
  store::Trace t = analyzer::load_trace(file);
  Info info;
  info.kind = "trace";
  info.counts = {{"processes", int64_t(t.processes.size())},
                 {"threads", int64_t(t.threads.size())},
                 {"devices", int64_t(t.devices.size())},
                 {"kernels", int64_t(t.kernels.size())},
                 {"memcpys", int64_t(t.memcpys.size())},
                 {"memsets", int64_t(t.memsets.size())},
                 {"syncs", int64_t(t.syncs.size())},
                 {"api_calls", int64_t(t.api_calls.size())},
                 {"ranges", int64_t(t.ranges.size())},
                 {"frames", int64_t(t.frames.size())},
                 {"stacks", int64_t(t.stacks.size())},
                 {"samples", int64_t(t.samples.size())},
                 {"data_waits", int64_t(t.data_waits.size())},
                 {"steps", int64_t(t.steps.size())},
                 {"findings", int64_t(t.findings.size())},
                 {"modules", int64_t(t.modules.size())},
                 {"gpu_windows", int64_t(t.gpu_windows.size())},
                 {"graphs", int64_t(t.graphs.size())},
                 {"graph_nodes", int64_t(t.graph_nodes.size())}};  // strings: a store keeps only those in use
  info.meta = t.meta;
  info.span = t.time_span();
  info.small.strings = t.strings;
  info.small.devices = t.devices;
  info.small.processes = t.processes;
  info.stored = int64_t(t.findings.size());
  count_findings(info, t);
  return info;
}

int run_info(const std::string& file, bool json) {
  // Every command that takes a store takes a raw trace too (README): anything but a store is read as analyze
  // reads it, and refused in its words.
  const bool trace = store::sniff_file(file) != store::FileKind::Store;
  const Info info = trace ? trace_info(file) : store_info(file);
  const auto& [t0, t1] = info.span;
  const auto& small = info.small;
  auto source = info.meta.find("source_format");
  const std::string format = source == info.meta.end() ? "unknown format" : source->second;
  if (json) {
    std::string out;
    analyzer::JsonWriter w(out);
    w.begin_object().kv("file", file).kv("kind", info.kind);
    if (trace)
      w.kv("source_format", format);
    else
      w.kv("schema_version", info.schema_version);
    w.key("counts").begin_object();
    for (const auto& c : info.counts) w.kv(c.table, c.rows);
    w.end_object();
    w.key("time_span_ns").begin_array().value(t0).value(t1).end_array();
    w.kv("duration_s", double(t1 - t0) / 1e9);
    if (info.analyzed >= 0)
      w.kv("findings", info.analyzed);
    else
      w.kv("findings_unavailable", info.unavailable);
    w.kv("findings_stored", info.stored);
    w.key("devices").begin_array();
    for (const auto& d : small.devices)
      w.begin_object().kv("id", d.id).kv("name", small.str(d.name)).kv("cc", fmt::format("{}.{}", d.cc_major, d.cc_minor))
          .kv("sm_count", int64_t(d.sm_count)).kv("memory_bytes", d.memory_bytes).end_object();
    w.end_array();
    w.key("processes").begin_array();
    for (const auto& p : small.processes) w.begin_object().kv("pid", p.pid).kv("name", small.str(p.name)).end_object();
    w.end_array();
    if (!trace) {
      w.key("invariant_breaks").begin_array();
      for (const auto& b : info.breaks)
        w.begin_object()
            .kv("table", b.table)
            .kv("problem", b.problem)
            .kv("rows", b.rows)
            .kv("example_pid", b.example_pid)
            .kv("example_tid", b.example_tid)
            .end_object();
      w.end_array();
    }
    w.key("meta").begin_object();
    for (const auto& [k, v] : info.meta) w.kv(k, v);
    w.end_object().end_object();
    fmt::print("{}\n", out);
    return 0;
  }
  if (trace)
    fmt::print(
        "{}  ({} trace, not a stepscope store: imported on the fly; `stepscope import` saves it as one)\n",
        file, format);
  else
    fmt::print("{}  (stepscope store, schema v{})\n", file, info.schema_version);
  fmt::print("time span: {:.6f} s\n", double(t1 - t0) / 1e9);
  fmt::print("\n{:<12} {:>12}\n", "table", "rows");
  for (const auto& c : info.counts) fmt::print("{:<12} {:>12}\n", c.table, c.rows);
  if (info.analyzed >= 0)
    fmt::print("\nfindings: {} (what `stepscope analyze` reports; {} stored by `analyze --write-findings`)\n",
               info.analyzed, info.stored);
  else
    fmt::print("\nfindings: unavailable ({}); {} stored\n", info.unavailable, info.stored);
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
  // docs/schema.md "Invariant": older stores (schema v1 recordings) break it; an import keeps it.
  if (!trace && info.breaks.empty()) {
    fmt::print("\ninvariant: every pid and thread in processes / threads: ok\n");
  } else if (!trace) {
    fmt::print("\ninvariant broken: rows naming a pid or thread that processes / threads lack\n");
    for (const auto& b : info.breaks)
      fmt::print("  {}: {} rows, {} (e.g. pid {} tid {})\n", b.table, b.rows, b.problem, b.example_pid,
                 b.example_tid);
  }
  fmt::print("\nmeta:\n");
  for (const auto& [k, v] : info.meta) fmt::print("  {} = {}\n", k, v);
  return 0;
}

CommandRegistration info_command(70, [](CLI::App& app, int& exit_code) {
  auto* sub = app.add_subcommand(
      "info",
      "Print what a store (or a raw trace) holds: row counts, time span, devices, processes, "
      "metadata");
  auto file = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  sub->add_option("FILE", *file, "A stepscope store (.db), or a trace stepscope reads (imported on the fly)")
      ->required();
  sub->add_flag("--json", *json, "Machine-readable output");
  sub->callback([&exit_code, file, json] { exit_code = run_info(*file, *json); });
});

}  // namespace
}  // namespace stepscope::cli
