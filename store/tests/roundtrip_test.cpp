#include <catch2/catch.hpp>
#include <sqlite3.h>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope::store;

namespace {
// One row of every kind, with distinct non-default values in every column.
Trace sample_trace() {
  Trace t;
  t.meta["source_format"] = "test";
  t.processes.push_back({100, t.intern("trainer"), 1});
  t.threads.push_back({100, 101, t.intern("main")});
  t.threads.push_back({100, 102, t.intern("stepscope-drain"), true});
  t.devices.push_back({0, t.intern("NVIDIA H100"), 9, 0, 132, 80LL << 30, t.intern("nvidia")});
  Kernel k;
  k.start = 1000; k.end = 1500; k.device = 0; k.context = 1; k.stream = 7; k.correlation = 42;
  k.grid_x = 2; k.grid_y = 3; k.grid_z = 4; k.block_x = 128; k.block_y = 2; k.block_z = 1;
  k.registers = 32; k.shared_memory = 4096; k.name = t.intern("ampere_sgemm_<128>"); k.graph_id = 9; k.pid = 100;
  k.graph_node_id = 0x7f00000011;
  t.kernels.push_back(k);
  t.memcpys.push_back(
      {2000, 2600, 0, 7, 43, 1 << 20, CopyKind::HtoD, MemoryKind::Pageable, MemoryKind::Device, 100, 9, 0x7f00000012});
  t.memsets.push_back({3000, 3100, 0, 8, 44, 512, MemoryKind::Device, 100, 9, 0x7f00000013});
  t.syncs.push_back({4000, 4500, 100, 101, SyncType::Context, 0, -1, 45});
  t.api_calls.push_back({900, 1200, 100, 101, ApiKind::Runtime, t.intern("cudaLaunchKernel"), 42, 0});
  t.api_calls.push_back({4000, 4500, 100, 101, ApiKind::Runtime, t.intern("cudaDeviceSynchronize"), 45, 0, 2});
  t.ranges.push_back({800, 5000, 100, 101, t.intern("nvtx"), t.intern("forward"), 1, RangeSource::Nvtx, 0});
  t.frames.push_back({1, t.intern("libfoo.so"), t.intern("hot()"), t.intern("foo.cc"), 12, FrameKind::Native, 0x1234});
  t.frames.push_back({2, t.intern("python"), t.intern("train_step"), t.intern("train.py"), 40, FrameKind::Python, 0});
  t.stacks.push_back({1, 0, 2});
  t.stacks.push_back({2, 1, 1});
  t.samples.push_back({1100, 100, 101, 2, true});
  t.samples.push_back({1200, 100, 101, 1, false, 3});  // 2 timer expiries merged into its signal
  t.data_waits.push_back({500, 800, 100, 101, t.intern("dataloader")});
  t.steps.push_back({3, 500, 5000, t.intern("profiler-step"), 100, 101});
  t.findings.push_back({t.intern("input-bound"), Severity::High, 3, 3, 250.5, t.intern("waits"), "{\"a\":1}"});
  t.modules.push_back({100, t.intern("/usr/lib/libfoo.so"), t.intern("abcdef"), 0x400000, 0x500000, 0x1000});
  t.gpu_windows.push_back({600, 2700, 100});
  t.meta["gpu.window"] = "20/200";
  // Graph 5 captured on the main thread (stack 2), instantiated as executable graph 9; one of its kernel nodes.
  t.graphs.push_back({100, 5, GraphKind::Capture, 0, 700, 2});
  t.graphs.push_back({100, 9, GraphKind::Instantiated, 5, 750, 1});
  t.graph_nodes.push_back({100, 5, 0x7f00000001, 0, GraphNodeKind::Kernel, 710, 2});
  t.graph_nodes.push_back({100, 9, 0x7f00000011, 0x7f00000001, GraphNodeKind::Kernel, 750, 0});
  t.meta["gpu.graph_records"] = "nodes";
  return t;
}
// Turns a store this writer made into what an older writer left, by the SQL given.
void rewrite_as_older(const std::string& path, const char* sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  INFO((err ? err : ""));
  sqlite3_free(err);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}
}  // namespace

TEST_CASE("every table round-trips through a store file, packed (v6) and as rows (v4)") {
  const bool packed = GENERATE(true, false);
  INFO((packed ? "packed" : "rows"));
  stepscope::test::ScratchDir dir("store_roundtrip");
  Trace in = sample_trace();
  write_store_atomically(in, dir.file("run.db"), packed);
  StoreReader r(dir.file("run.db"));
  CHECK(r.schema_version() == (packed ? 6 : 4));
  Trace out = r.load();
  CHECK(out.meta.at("source_format") == "test");
  CHECK(out.meta.at("schema_version") == (packed ? "6" : "4"));
  CHECK(out.meta.at("clock_domain") == "CLOCK_MONOTONIC");

  REQUIRE(out.processes.size() == 1);
  CHECK(out.processes[0].pid == 100);
  CHECK(out.str(out.processes[0].name) == "trainer");
  CHECK(out.processes[0].parent_pid == 1);
  REQUIRE(out.threads.size() == 2);
  CHECK(out.str(out.threads[0].name) == "main");
  CHECK_FALSE(out.threads[0].collector);
  CHECK(out.threads[1].tid == 102);
  CHECK(out.threads[1].collector);
  REQUIRE(out.devices.size() == 1);
  CHECK(out.str(out.devices[0].name) == "NVIDIA H100");
  CHECK(out.devices[0].sm_count == 132);
  CHECK(out.devices[0].memory_bytes == (80LL << 30));
  CHECK(out.str(out.devices[0].vendor) == "nvidia");

  REQUIRE(out.kernels.size() == 1);
  const Kernel& k = out.kernels[0];
  CHECK(k.start == 1000);
  CHECK(k.end == 1500);
  CHECK(k.context == 1);
  CHECK(k.stream == 7);
  CHECK(k.correlation == 42);
  CHECK((k.grid_x == 2 && k.grid_y == 3 && k.grid_z == 4));
  CHECK((k.block_x == 128 && k.block_y == 2 && k.block_z == 1));
  CHECK(k.registers == 32);
  CHECK(k.shared_memory == 4096);
  CHECK(out.str(k.name) == "ampere_sgemm_<128>");
  CHECK(k.graph_id == 9);
  CHECK(k.pid == 100);
  CHECK(k.graph_node_id == 0x7f00000011);
  CHECK(r.kernels(1200, 1300).at(0).graph_node_id == 0x7f00000011);

  REQUIRE(out.memcpys.size() == 1);
  CHECK(out.memcpys[0].bytes == (1 << 20));
  CHECK(out.memcpys[0].kind == CopyKind::HtoD);
  CHECK(out.memcpys[0].src_kind == MemoryKind::Pageable);
  CHECK(out.memcpys[0].dst_kind == MemoryKind::Device);
  CHECK(out.memcpys[0].pid == 100);
  CHECK(out.memcpys[0].graph_id == 9);
  CHECK(out.memcpys[0].graph_node_id == 0x7f00000012);
  CHECK(r.memcpys(2100, 2200).at(0).graph_node_id == 0x7f00000012);
  REQUIRE(out.memsets.size() == 1);
  CHECK(out.memsets[0].stream == 8);
  CHECK(out.memsets[0].mem_kind == MemoryKind::Device);
  CHECK(out.memsets[0].pid == 100);
  CHECK(out.memsets[0].graph_id == 9);
  CHECK(out.memsets[0].graph_node_id == 0x7f00000013);
  CHECK(r.memsets(3000, 3050).at(0).graph_id == 9);
  REQUIRE(out.syncs.size() == 1);
  CHECK(out.syncs[0].type == SyncType::Context);
  CHECK(out.syncs[0].stream == -1);
  REQUIRE(out.api_calls.size() == 2);
  CHECK(out.str(out.api_calls[0].name) == "cudaLaunchKernel");
  CHECK(out.api_calls[0].correlation == 42);
  CHECK(out.api_calls[0].stack == 0);
  CHECK(out.api_calls[1].stack == 2);
  CHECK(r.api_calls(4100, 4200).at(0).stack == 2);
  REQUIRE(out.ranges.size() == 1);
  CHECK(out.str(out.ranges[0].name) == "forward");
  CHECK(out.str(out.ranges[0].domain) == "nvtx");
  CHECK(out.ranges[0].depth == 1);
  CHECK(out.ranges[0].source == RangeSource::Nvtx);

  REQUIRE(out.frames.size() == 2);
  CHECK(out.str(out.frames[0].symbol) == "hot()");
  CHECK(out.frames[0].line == 12);
  CHECK(out.frames[0].address == 0x1234);
  CHECK(out.frames[1].kind == FrameKind::Python);
  REQUIRE(out.stacks.size() == 2);
  CHECK(out.stacks[1].parent == 1);
  CHECK(out.stacks[1].frame == 1);
  REQUIRE(out.samples.size() == 2);
  CHECK(out.samples[0].stack == 2);
  CHECK(out.samples[0].on_cpu);
  CHECK_FALSE(out.samples[1].on_cpu);
  CHECK(out.samples[0].periods == 1);
  CHECK(out.samples[1].periods == 3);
  const auto ranged = r.samples(1150, 1250);
  REQUIRE(ranged.size() == 1);
  CHECK(ranged[0].periods == 3);
  REQUIRE(out.data_waits.size() == 1);
  CHECK(out.str(out.data_waits[0].source) == "dataloader");
  REQUIRE(out.steps.size() == 1);
  CHECK(out.steps[0].index == 3);
  CHECK(out.str(out.steps[0].source) == "profiler-step");
  REQUIRE(out.findings.size() == 1);
  CHECK(out.str(out.findings[0].rule) == "input-bound");
  CHECK(out.findings[0].severity == Severity::High);
  CHECK(out.findings[0].est_savings_ns == 250.5);
  CHECK(out.findings[0].evidence_json == "{\"a\":1}");
  REQUIRE(out.modules.size() == 1);
  CHECK(out.str(out.modules[0].build_id) == "abcdef");
  CHECK(out.modules[0].file_offset == 0x1000);

  REQUIRE(out.gpu_windows.size() == 1);
  CHECK((out.gpu_windows[0].start == 600 && out.gpu_windows[0].end == 2700 && out.gpu_windows[0].pid == 100));
  CHECK(out.meta.at("gpu.window") == "20/200");

  REQUIRE(out.graphs.size() == 2);
  CHECK((out.graphs[0].pid == 100 && out.graphs[0].graph_id == 5 && out.graphs[0].kind == GraphKind::Capture));
  CHECK((out.graphs[0].source_graph_id == 0 && out.graphs[0].created == 700 && out.graphs[0].stack == 2));
  CHECK((out.graphs[1].graph_id == 9 && out.graphs[1].kind == GraphKind::Instantiated));
  CHECK((out.graphs[1].source_graph_id == 5 && out.graphs[1].created == 750 && out.graphs[1].stack == 1));
  REQUIRE(out.graph_nodes.size() == 2);
  const GraphNode& captured = out.graph_nodes[0];
  CHECK((captured.pid == 100 && captured.graph_id == 5 && captured.node_id == 0x7f00000001));
  CHECK((captured.source_node_id == 0 && captured.kind == GraphNodeKind::Kernel));
  CHECK((captured.created == 710 && captured.stack == 2));
  const GraphNode& instantiated = out.graph_nodes[1];
  CHECK((instantiated.graph_id == 9 && instantiated.node_id == 0x7f00000011));
  CHECK(instantiated.source_node_id == 0x7f00000001);
  CHECK(instantiated.stack == 0);
  CHECK(r.graphs().size() == 2);
  CHECK(r.graph_nodes().size() == 2);
  CHECK(out.meta.at("gpu.graph_records") == "nodes");
  int64_t graph_rows = -1, node_rows = -1;
  for (const auto& c : r.counts()) {
    if (c.table == "graphs") graph_rows = c.rows;
    if (c.table == "graph_nodes") node_rows = c.rows;
  }
  CHECK(graph_rows == 2);
  CHECK(node_rows == 2);
  CHECK(r.invariant_breaks().empty());

  CHECK(r.time_span() == std::pair<int64_t, int64_t>{500, 5000});
}

TEST_CASE("a schema v1 store reads back with defaults for the v2 columns") {
  stepscope::test::ScratchDir dir("store_v1");
  write_store_atomically(sample_trace(), dir.file("v1.db"), /*packed=*/false);
  // Exactly what a v1 writer left: no threads.collector, no api_calls.stack, no samples.periods, no
  // gpu_windows.
  rewrite_as_older(dir.file("v1.db"),
                   "DROP VIEW api_calls_v; ALTER TABLE threads DROP COLUMN collector;"
                   "ALTER TABLE api_calls DROP COLUMN stack; ALTER TABLE samples DROP COLUMN periods;"
                   "DROP TABLE gpu_windows; DROP TABLE graphs; DROP TABLE graph_nodes;"
                   "DROP VIEW kernels_v; ALTER TABLE kernels DROP COLUMN graph_node_id;"
                   "ALTER TABLE memcpys DROP COLUMN graph_id; ALTER TABLE memcpys DROP COLUMN graph_node_id;"
                   "ALTER TABLE memsets DROP COLUMN graph_id; ALTER TABLE memsets DROP COLUMN graph_node_id;"
                   "UPDATE meta SET value='1' WHERE key='schema_version';"
                   "PRAGMA user_version=1;");
  StoreReader r(dir.file("v1.db"));
  CHECK(r.schema_version() == 1);
  Trace t = r.load();
  REQUIRE(t.threads.size() == 2);
  CHECK_FALSE(t.threads[1].collector);
  REQUIRE(t.api_calls.size() == 2);
  CHECK(t.api_calls[1].stack == 0);
  CHECK(t.str(t.api_calls[1].name) == "cudaDeviceSynchronize");
  CHECK(r.api_calls(4100, 4200).size() == 1);
  CHECK(t.gpu_windows.empty());
  CHECK(r.gpu_windows().empty());
  bool lists_windows = false;
  for (const auto& c : r.counts()) lists_windows |= c.table == "gpu_windows";
  CHECK_FALSE(lists_windows);
  CHECK(t.kernels.size() == 1);
}

TEST_CASE("a schema v2 store reads back with one period a sample") {
  stepscope::test::ScratchDir dir("store_v2");
  write_store_atomically(sample_trace(), dir.file("v2.db"), /*packed=*/false);
  rewrite_as_older(
      dir.file("v2.db"),
      "ALTER TABLE samples DROP COLUMN periods; DROP TABLE graphs; DROP TABLE graph_nodes;"
      "DROP VIEW kernels_v; ALTER TABLE kernels DROP COLUMN graph_node_id;"
      "ALTER TABLE memcpys DROP COLUMN graph_id; ALTER TABLE memcpys DROP COLUMN graph_node_id;"
      "ALTER TABLE memsets DROP COLUMN graph_id; ALTER TABLE memsets DROP COLUMN graph_node_id;"
      "UPDATE meta SET value='2' WHERE key='schema_version';"
      "PRAGMA user_version=2;");
  StoreReader r(dir.file("v2.db"));
  CHECK(r.schema_version() == 2);
  Trace t = r.load();
  REQUIRE(t.samples.size() == 2);
  CHECK(t.samples[1].periods == 1);
  CHECK_FALSE(t.samples[1].on_cpu);
  CHECK(r.samples(1150, 1250).at(0).periods == 1);
  CHECK(t.gpu_windows.size() == r.gpu_windows().size());
}

TEST_CASE("a schema v3 store reads back with no graphs and graph ids 0 on copies and memsets") {
  stepscope::test::ScratchDir dir("store_v3");
  write_store_atomically(sample_trace(), dir.file("v3.db"), /*packed=*/false);
  // Exactly what a v3 writer left: kernels.graph_id but no node ids, no graph columns on copies and memsets,
  // no graphs or graph_nodes tables.
  rewrite_as_older(
      dir.file("v3.db"),
      "DROP TABLE graphs; DROP TABLE graph_nodes;"
      "DROP VIEW kernels_v; ALTER TABLE kernels DROP COLUMN graph_node_id;"
      "ALTER TABLE memcpys DROP COLUMN graph_id; ALTER TABLE memcpys DROP COLUMN graph_node_id;"
      "ALTER TABLE memsets DROP COLUMN graph_id; ALTER TABLE memsets DROP COLUMN graph_node_id;"
      "UPDATE meta SET value='3' WHERE key='schema_version'; PRAGMA user_version=3;");
  StoreReader r(dir.file("v3.db"));
  CHECK(r.schema_version() == 3);
  Trace t = r.load();
  REQUIRE(t.kernels.size() == 1);
  CHECK(t.kernels[0].graph_id == 9);
  CHECK(t.kernels[0].graph_node_id == 0);
  CHECK(t.str(t.kernels[0].name) == "ampere_sgemm_<128>");
  CHECK(r.kernels(1200, 1300).at(0).graph_node_id == 0);
  REQUIRE(t.memcpys.size() == 1);
  CHECK((t.memcpys[0].graph_id == 0 && t.memcpys[0].graph_node_id == 0 && t.memcpys[0].pid == 100));
  CHECK(r.memcpys(2100, 2200).at(0).bytes == (1 << 20));
  REQUIRE(t.memsets.size() == 1);
  CHECK((t.memsets[0].graph_id == 0 && t.memsets[0].graph_node_id == 0 && t.memsets[0].pid == 100));
  CHECK(t.graphs.empty());
  CHECK(t.graph_nodes.empty());
  CHECK(r.graphs().empty());
  CHECK(r.graph_nodes().empty());
  for (const auto& c : r.counts()) CHECK((c.table != "graphs" && c.table != "graph_nodes"));
  CHECK(r.invariant_breaks().empty());
  REQUIRE(t.samples.size() == 2);
  CHECK(t.samples[1].periods == 3);
}

TEST_CASE("a schema v5 store (ranges as rows, the rest packed) reads back") {
  stepscope::test::ScratchDir dir("store_v5");
  write_store_atomically(sample_trace(), dir.file("v5.db"));
  // Exactly what a v5 writer left: ranges as rows with their view and index, no packed_ranges.
  rewrite_as_older(
      dir.file("v5.db"),
      "DROP TABLE packed_ranges;"
      "CREATE TABLE ranges(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, pid INTEGER NOT NULL,"
      "  tid INTEGER NOT NULL, domain INTEGER NOT NULL, name INTEGER NOT NULL, depth INTEGER NOT NULL,"
      "  source INTEGER NOT NULL, correlation INTEGER NOT NULL);"
      "INSERT INTO ranges VALUES (800, 5000, 100, 101, (SELECT id FROM strings WHERE value = 'nvtx'),"
      "  (SELECT id FROM strings WHERE value = 'forward'), 1, 1, 0);"
      // A GPU annotation: its pid is a device, its tid a stream, and no invariant break for that.
      "INSERT INTO ranges VALUES (1200, 1300, 0, 7, 0, (SELECT id FROM strings WHERE value = 'forward'), 0, "
      "5, 0);"
      "CREATE VIEW ranges_v AS SELECT r.*, s.value AS name_text, d.value AS domain_text"
      "  FROM ranges r JOIN strings s ON s.id = r.name JOIN strings d ON d.id = r.domain;"
      "CREATE INDEX ranges_by_start ON ranges(start_ns);"
      "UPDATE meta SET value='5' WHERE key='schema_version'; PRAGMA user_version=5;");
  StoreReader r(dir.file("v5.db"));
  CHECK(r.schema_version() == 5);
  Trace t = r.load();
  REQUIRE(t.ranges.size() == 2);
  CHECK(t.str(t.ranges[0].name) == "forward");
  CHECK(t.str(t.ranges[0].domain) == "nvtx");
  CHECK(t.ranges[0].depth == 1);
  CHECK(t.ranges[1].source == RangeSource::GpuAnnotation);
  CHECK(r.ranges(4900, 6000).size() == 1);
  CHECK(r.ranges(1250, 1260).size() == 2);
  CHECK(r.ranges(5000, 6000).empty());
  REQUIRE(t.kernels.size() == 1);  // still from its blocks
  CHECK(t.str(t.kernels[0].name) == "ampere_sgemm_<128>");
  int64_t range_rows = -1;
  for (const auto& c : r.counts())
    if (c.table == "ranges") range_rows = c.rows;
  CHECK(range_rows == 2);
  CHECK(r.invariant_breaks().empty());
}

TEST_CASE("range queries return rows overlapping the window") {
  stepscope::test::ScratchDir dir("store_ranges");
  Trace t;
  StringId n = t.intern("k");
  for (int i = 0; i < 1000; ++i) {
    Kernel k;
    k.start = i * 100;
    k.end = i * 100 + (i == 500 ? 5000 : 50);  // one long kernel starting at 50000
    k.name = n;
    t.kernels.push_back(k);
  }
  write_store_atomically(t, dir.file("r.db"));
  StoreReader r(dir.file("r.db"));
  auto ks = r.kernels(52000, 52300);
  // Kernels starting at 52000, 52100, 52200 plus the long one (50000..55000).
  REQUIRE(ks.size() == 4);
  CHECK(ks[0].start == 50000);
  CHECK(ks[1].start == 52000);
  CHECK(ks[3].start == 52200);
  CHECK(r.kernels(-100, 0).empty());
  CHECK(r.kernels(0, 1).size() == 1);
}

TEST_CASE("append merges traces, remapping strings, frames and stacks") {
  stepscope::test::ScratchDir dir("store_append");
  Trace a = sample_trace(), b = sample_trace();
  b.processes[0].pid = 200;
  for (auto& s : b.samples) s.pid = 200;
  {
    StoreWriter w(dir.file("m.db"));
    w.append(a);
    w.append(b);
    w.close();
  }
  Trace m = StoreReader(dir.file("m.db")).load();
  CHECK(m.kernels.size() == 2);
  REQUIRE(m.frames.size() == 4);
  REQUIRE(m.stacks.size() == 4);
  REQUIRE(m.samples.size() == 4);
  // An API call's stack is renumbered like a sample's.
  REQUIRE(m.api_calls.size() == 4);
  CHECK(m.api_calls[3].stack == 4);
  CHECK(m.gpu_windows.size() == 2);
  // Graphs and nodes keep their ids; their stacks are renumbered like a sample's.
  REQUIRE(m.graphs.size() == 4);
  CHECK(m.graphs[2].graph_id == 5);
  CHECK(m.graphs[2].stack == 4);
  CHECK(m.graphs[3].source_graph_id == 5);
  REQUIRE(m.graph_nodes.size() == 4);
  CHECK(m.graph_nodes[2].stack == 4);
  CHECK(m.graph_nodes[3].stack == 0);
  CHECK(m.graph_nodes[3].source_node_id == 0x7f00000001);
  CHECK(m.kernels[1].graph_node_id == 0x7f00000011);
  // The second trace's samples point at its own renumbered stacks, whose frames resolve to the same symbols.
  const Sample& s = m.samples[2];
  CHECK(s.pid == 200);
  CHECK(s.stack == 4);
  const Stack& st = m.stacks[3];
  CHECK(st.parent == 3);
  CHECK(m.str(m.frames[st.frame - 1].symbol) == "hot()");
  // Strings are deduplicated across both.
  CHECK(m.strings.find("cudaLaunchKernel") > 0);
  CHECK(m.str(m.kernels[1].name) == "ampere_sgemm_<128>");
}
