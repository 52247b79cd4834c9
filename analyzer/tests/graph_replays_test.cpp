// CUDA/HIP graphs, seen inside (issue 49): the per-graph table of the importers on the shared traces that hold graph
// launches, against an independent count read from the raw files (simdjson's DOM straight over the gunzipped JSON;
// SQL over the H100 recording); the Nsight Systems importer's graph columns and graph-trace rows in real SQLite
// files laid out like an export.
#include <simdjson.h>
#include <sqlite3.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "findings.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/diff.h"
#include "stepscope/analyzer/graph_replays.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/store.h"
#include "synthetic_builder.h"
#include "test_support.h"

using namespace stepscope;

namespace {

std::string gunzip(const std::string& path) {
  gzFile in = gzopen(path.c_str(), "rb");
  REQUIRE(in != nullptr);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(in, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  gzclose(in);
  return out;
}

// The independent count: every graph launch call and the GPU events carrying its correlation, straight from the
// JSON. A replay is one launch's GPU events; a graph, the replays that ran the same sequence of events (names in
// start order; the importer numbers graphs this way when the trace names none).
struct RawReplays {
  std::map<int64_t, int64_t> nodes, kernels;       // correlation → GPU events, kernels
  std::map<int64_t, double> call_us;               // correlation → launch call duration
  std::map<int64_t, double> span_us;               // correlation → last end − first start
  std::map<int64_t, std::vector<std::string>> seq;  // correlation → event names in start order
};

RawReplays count_raw(const std::string& rel) {
  const std::string json = gunzip(test::trace_path(rel));
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.parse(json);
  simdjson::dom::array events = doc.type() == simdjson::dom::element_type::ARRAY ? doc.get_array().value()
                                                                                  : doc["traceEvents"].get_array().value();
  auto corr_of = [](simdjson::dom::element e) -> int64_t {
    simdjson::dom::element args;
    if (e["args"].get(args)) return 0;
    for (const char* k : {"correlation", "correlationId"}) {
      int64_t v;
      if (!args[k].get(v)) return v;
    }
    return 0;
  };
  RawReplays r;
  struct Ev {
    double ts, end;
    int kind;  // 0 kernel first on ties, as the importer orders them
    size_t order;
    std::string name;
  };
  std::map<int64_t, std::vector<Ev>> gpu;
  size_t order = 0;
  for (simdjson::dom::element e : events) {
    std::string_view ph, cat, name;
    if (e["ph"].get(ph) || ph != "X") continue;
    if (e["name"].get(name)) continue;
    if (e["cat"].get(cat)) cat = "";
    double ts = 0, dur = 0;
    if (e["ts"].get(ts)) continue;
    if (e["dur"].get(dur)) dur = 0;
    const int64_t c = corr_of(e);
    if (name.find("GraphLaunch") != std::string_view::npos) {
      r.call_us[c] = dur;
      continue;
    }
    simdjson::dom::element grid;
    const bool has_grid = !e["args"]["grid"].get(grid);
    int kind = -1;
    if (cat == "kernel" || (cat == "cuda" && has_grid)) kind = 0;
    else if (cat == "gpu_memcpy" || (cat == "cuda" && name.substr(0, 6) == "Memcpy")) kind = 1;
    else if (cat == "gpu_memset" || (cat == "cuda" && name.substr(0, 6) == "Memset")) kind = 2;
    if (kind < 0 || !c) continue;
    gpu[c].push_back({ts, ts + dur, kind, order++, kind == 2 ? std::string("memset") : std::string(name)});
  }
  for (auto& [c, evs] : gpu) {
    if (!r.call_us.count(c)) continue;  // not a graph launch's
    std::sort(evs.begin(), evs.end(), [](const Ev& a, const Ev& b) {
      return a.ts != b.ts ? a.ts < b.ts : a.kind != b.kind ? a.kind < b.kind : a.order < b.order;
    });
    double lo = evs.front().ts, hi = evs.front().end;
    for (const auto& e : evs) {
      r.nodes[c] += 1;
      r.kernels[c] += e.kind == 0;
      lo = std::min(lo, e.ts), hi = std::max(hi, e.end);
      r.seq[c].push_back(e.name);
    }
    r.span_us[c] = hi - lo;
  }
  return r;
}

// Each trace is loaded once per test executable.
const store::Trace& loaded(const std::string& rel) {
  static std::map<std::string, store::Trace> cache;
  auto it = cache.find(rel);
  if (it == cache.end()) it = cache.emplace(rel, analyzer::load_trace(test::trace_path(rel))).first;
  return it->second;
}

// What stepscope's importer and graph table make of the same file, held against the raw count.
void check_against_raw(const std::string& rel, size_t graphs, size_t replays) {
  const RawReplays raw = count_raw(rel);
  const store::Trace& t = loaded(rel);
  const analyzer::GraphTable g = analyzer::graph_table(t);
  INFO(rel);
  CHECK(g.records == "nodes");
  CHECK(g.ids == "kernel-sequence");  // none of the three names its graphs
  REQUIRE(raw.nodes.size() == replays);
  REQUIRE(g.replays.size() == raw.nodes.size());
  for (const auto& p : g.replays) {
    INFO("launch " << p.correlation);
    REQUIRE(raw.nodes.count(p.correlation));
    CHECK(p.kernels + p.memcpys + p.memsets == raw.nodes.at(p.correlation));
    CHECK(p.kernels == raw.kernels.at(p.correlation));
    REQUIRE(p.api >= 0);
    CHECK(std::abs(double(t.api_calls[size_t(p.api)].end - t.api_calls[size_t(p.api)].start) / 1e3 -
                   raw.call_us.at(p.correlation)) < 0.0015);
    CHECK(std::abs(double(p.end_ns - p.start_ns) / 1e3 - raw.span_us.at(p.correlation)) < 0.0015);
  }
  // Graphs: replays per distinct sequence, and the records of each replay.
  std::map<std::vector<std::string>, std::vector<int64_t>> by_seq;
  for (const auto& [c, s] : raw.seq) by_seq[s].push_back(c);
  REQUIRE(by_seq.size() == graphs);
  REQUIRE(g.graphs.size() == graphs);
  std::multiset<std::pair<int64_t, int64_t>> raw_shape, shape;  // (replays, nodes per replay)
  for (const auto& [s, cs] : by_seq) raw_shape.insert({int64_t(cs.size()), int64_t(s.size())});
  for (const auto& s : g.graphs) {
    CHECK(s.nodes_min == s.nodes_max);
    shape.insert({s.replays, s.nodes_min});
    CHECK(s.launch_calls == s.replays);
  }
  CHECK(shape == raw_shape);
  // Each graph's mean launch call against the raw calls of the replays that share its sequence.
  for (const auto& s : g.graphs) {
    std::vector<int64_t> corrs;
    for (const auto& p : g.replays)
      if (p.graph_id == s.graph_id) corrs.push_back(p.correlation);
    const auto& members = by_seq.at(raw.seq.at(corrs.front()));
    CHECK(std::set<int64_t>(corrs.begin(), corrs.end()) == std::set<int64_t>(members.begin(), members.end()));
    double sum = 0;
    for (int64_t c : members) sum += raw.call_us.at(c);
    CHECK(std::abs(s.launch_us - sum / double(members.size())) < 0.0015);
  }
}

}  // namespace

TEST_CASE("A100 rank 0 (HTA): 70 cudaGraphLaunch replays of 14 graphs, equal to the raw count") {
  STEPSCOPE_REQUIRE_TRACES();
  // 5 steps × 14 graphs; replays of 1, 2, 3, 9 and 20 records, memsets among them.
  check_against_raw("hta/a100_rank0_many_small_kernels.json.gz", 14, 70);
  const auto g = analyzer::graph_table(loaded("hta/a100_rank0_many_small_kernels.json.gz"));
  int64_t memsets = 0;
  for (const auto& p : g.replays) memsets += p.memsets;
  CHECK(memsets == 210);
  CHECK(g.replayed_records == 345);
}

TEST_CASE("vLLM via nsys's Chrome export: 42 cudaGraphLaunch replays of 4 graphs, equal to the raw count") {
  STEPSCOPE_REQUIRE_TRACES();
  // 31 replays of 12 kernels, 9 of 513, one of 8 and one of 5 (decode batches of different sizes).
  check_against_raw("nsys/nsys_chrome_dialect_vllm.json.gz", 4, 42);
  // Every view shows the table: the text, Markdown and HTML reports, with the 513-node graph first (most GPU time).
  const auto a = analyzer::analyze(loaded("nsys/nsys_chrome_dialect_vllm.json.gz"));
  REQUIRE(a.graphs.graphs.size() == 4);
  CHECK(a.graphs.graphs[0].nodes_max == 513);
  CHECK(a.graphs.graphs[0].replays == 9);
  const std::string text = analyzer::render_graphs_text(a.graphs, 8);
  CHECK(text.find("42 replays of 4 graphs ran 5002 of the 5398 GPU records; 396 kernels ran outside graphs.") !=
        std::string::npos);
  CHECK(analyzer::render_text_report(a).find(text) != std::string::npos);
  const std::string md = analyzer::render_markdown_report(a);
  CHECK(md.find("### CUDA graphs") != std::string::npos);
  CHECK(md.find("| 4 | 9 | 513 |") != std::string::npos);
  const std::string html = analyzer::render_html_report(a);
  CHECK(html.find("<section id=\"graphs\"><h2>CUDA graphs</h2>") != std::string::npos);
  // What is left after the cure: the piecewise layout, the host late at the boundaries.
  const auto* f = test::find_finding(a, "launch-overhead");
  REQUIRE(f);
  CHECK(f->summary.rfind("CUDA graphs already replay", 0) == 0);
  CHECK(f->evidence_json.find("\"piecewise\":true") != std::string::npos);
}

TEST_CASE("vLLM decode on an AMD GPU: one hipGraphLaunch replaying 421 kernels, equal to the raw count") {
  STEPSCOPE_REQUIRE_TRACES();
  check_against_raw("tracelens/amd_vllm_decode_graph.json.gz", 1, 1);
  const auto g = analyzer::graph_table(loaded("tracelens/amd_vllm_decode_graph.json.gz"));
  REQUIRE(g.graphs.size() == 1);
  CHECK(g.graphs[0].kernels_min == 421);
  CHECK(g.replays[0].idle_before_ns == -1);  // nothing before the only replay
}

TEST_CASE("a trace without graph launches has an empty graph table and no graph meta") {
  STEPSCOPE_REQUIRE_TRACES();
  const store::Trace t = analyzer::load_trace(test::trace_path("hta/alexnet_a100.json.gz"));
  CHECK(analyzer::graph_table(t).empty());
  CHECK_FALSE(t.meta.count("gpu.graph_records"));
  CHECK_FALSE(t.meta.count("gpu.graph_ids"));
  for (const auto& k : t.kernels) CHECK(k.graph_id == 0);
}

namespace {

struct Db {
  sqlite3* db = nullptr;
  explicit Db(const std::string& path) {
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    exec("PRAGMA synchronous=OFF; PRAGMA journal_mode=MEMORY");  // scratch files: no fsync per statement
  }
  ~Db() { sqlite3_close(db); }
  void exec(const std::string& sql) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
    INFO((err ? err : ""));
    sqlite3_free(err);
    REQUIRE(rc == SQLITE_OK);
  }
  // Rows of one integer-valued query.
  std::vector<std::vector<int64_t>> rows(const std::string& sql) {
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
    std::vector<std::vector<int64_t>> out;
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<int64_t> r;
      for (int c = 0; c < sqlite3_column_count(st); ++c) r.push_back(sqlite3_column_int64(st, c));
      out.push_back(std::move(r));
    }
    sqlite3_finalize(st);
    return out;
  }
};

// An Nsight Systems export laid out by nsys 2024.5's DDL (shared/traces/nsys/schemas), one process (pid 4242,
// tid 4243), three replays of one graph launched by cudaGraphLaunch (correlations 11, 12, 13), two nodes each,
// and an eager kernel between the second and the third.
std::string nsys_export(const test::ScratchDir& dir, const std::string& name, bool graph_id_column) {
  std::ifstream in(test::trace_path("nsys/schemas/nsys-2024.5-schema-3.13.sql"));
  REQUIRE(in.good());
  const std::string ddl((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = dir.file(name);
  Db db(path);
  db.exec(ddl);
  // Newer exports carry the graph of each node; CUDA_GRAPH_NODE_EVENTS is nsys's record of node creation.
  if (graph_id_column) db.exec("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN graphId INTEGER");
  db.exec("CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT "
          "NULL, globalTid INTEGER, nameId INTEGER NOT NULL, graphNodeId INTEGER NOT NULL, originalGraphNodeId "
          "INTEGER)");
  const std::string gtid = std::to_string((int64_t(4242) << 24) | 4243), gpid = std::to_string(int64_t(4242) << 24);
  std::string sql =
      "INSERT INTO StringIds VALUES (1,'cudaGraphLaunch_v10000'),(2,'gemm_node'),(3,'relu_node'),"
      "(4,'cudaLaunchKernel_v7000'),(5,'eager_kernel'),(6,'cudaStreamBeginCapture_v10000');"
      "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start,end,eventClass,globalTid,correlationId,nameId,returnValue) "
      "VALUES (1000,1040,0," + gtid + ",11,1,0),(2000,2050,0," + gtid + ",12,1,0),(3000,3010,0," + gtid +
      ",20,4,0),(4000,4060,0," + gtid + ",13,1,0);";
  // Nodes 101/102 captured (graph 7), cloned into executable graph 9 as nodes 201/202.
  std::string kernels = "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start,end,deviceId,contextId,streamId,correlationId,"
                        "globalPid,demangledName,shortName,registersPerThread,gridX,gridY,gridZ,blockX,blockY,blockZ,"
                        "staticSharedMemory,dynamicSharedMemory,localMemoryPerThread,localMemoryTotal,gridId,"
                        "graphNodeId" + std::string(graph_id_column ? ",graphId" : "") + ") VALUES ";
  auto k = [&](int s, int e, int corr, int name, int node) {
    return "(" + std::to_string(s) + "," + std::to_string(e) + ",0,1,7," + std::to_string(corr) + "," + gpid + "," +
           std::to_string(name) + "," + std::to_string(name) + ",32,1,1,1,128,1,1,0,0,0,0,1," +
           (node ? std::to_string(node) : "NULL") + (graph_id_column ? (node ? ",9" : ",NULL") : "") + ")";
  };
  sql += kernels + k(1100, 1200, 11, 2, 201) + "," + k(1210, 1300, 11, 3, 202) + "," + k(2100, 2200, 12, 2, 201) + "," +
         k(2230, 2300, 12, 3, 202) + "," + k(3100, 3200, 20, 5, 0) + "," + k(4100, 4200, 13, 2, 201) + "," +
         k(4200, 4300, 13, 3, 202) + ";";
  sql += "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (500,500,0," + gtid + ",6,101,NULL),(510,510,0," + gtid +
         ",6,102,NULL),(600,600,0," + gtid + ",6,201,101),(600,600,0," + gtid + ",6,202,102);";
  db.exec(sql);
  return path;
}

}  // namespace

TEST_CASE("Nsight Systems, --cuda-graph-trace=node: graph and node ids kept apart, clones traced to their node") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("graph_nsys_nodes");
  const std::string path = nsys_export(dir, "nodes.sqlite", true);
  const store::Trace t = analyzer::load_trace(path);
  REQUIRE(t.kernels.size() == 7);
  // The graph is graphId, the node graphNodeId (the importer used to put the node id in graph_id).
  Db raw(path);
  const auto want = raw.rows("SELECT start, coalesce(graphId, 0), coalesce(graphNodeId, 0) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                             "ORDER BY start");
  REQUIRE(want.size() == t.kernels.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CHECK(t.kernels[i].start == want[i][0]);
    CHECK(t.kernels[i].graph_id == want[i][1]);
    CHECK(t.kernels[i].graph_node_id == want[i][2]);
  }
  CHECK(t.meta.at("gpu.graph_records") == "nodes");
  CHECK_FALSE(t.meta.count("gpu.graph_ids"));
  // Nodes as nsys saw them created: the executable graph's nodes point at the captured ones.
  REQUIRE(t.graph_nodes.size() == 4);
  std::map<int64_t, store::GraphNode> nodes;
  for (const auto& n : t.graph_nodes) nodes[n.node_id] = n;
  CHECK(nodes.at(201).source_node_id == 101);
  CHECK(nodes.at(201).graph_id == 9);
  CHECK(nodes.at(201).kind == store::GraphNodeKind::Kernel);
  CHECK(nodes.at(201).pid == 4242);
  CHECK(nodes.at(101).source_node_id == 0);
  CHECK(nodes.at(101).kind == store::GraphNodeKind::Unknown);  // never ran itself: it was cloned
  CHECK(nodes.at(202).created == 600);

  const auto g = analyzer::graph_table(t);
  REQUIRE(g.replays.size() == 3);
  REQUIRE(g.graphs.size() == 1);
  const auto& s = g.graphs[0];
  CHECK(s.graph_id == 9);
  CHECK(s.replays == 3);
  CHECK((s.nodes_min == 2 && s.nodes_max == 2));
  CHECK(s.gpu_us == Approx((190 + 170 + 200) / 3.0 / 1e3));                  // union of each replay's nodes
  CHECK(s.idle_inside_us == Approx((10 + 30 + 0) / 3.0 / 1e3));              // gaps between its nodes
  CHECK(s.launch_us == Approx((40 + 50 + 60) / 3.0 / 1e3));                  // the cudaGraphLaunch calls
  CHECK(s.idle_before_count == 2);
  CHECK(s.idle_before_us == Approx((800 + (1800 - 100)) / 2.0 / 1e3));       // 1300→2100; 2300→4100 less the eager kernel
  CHECK(s.eager_ops_before == 1);
  CHECK(g.eager_kernels == 1);
  CHECK(s.first_kernel == "gemm_node");

  // Written to a store and read back, the analysis sees the same.
  store::write_store_atomically(t, dir.file("nodes.db"));
  const store::Trace back = store::StoreReader(dir.file("nodes.db")).load();
  CHECK(back.graph_nodes.size() == 4);
  const auto a = analyzer::analyze(back);
  REQUIRE(a.graphs.graphs.size() == 1);
  CHECK(a.graphs.graphs[0].replays == 3);
  CHECK(analyzer::to_json(a).find("\"graphs\":{\"records\":\"nodes\"") != std::string::npos);
}

TEST_CASE("Nsight Systems without graphId: the node ids stay node ids, the graph is found from its launches") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("graph_nsys_no_graph_id");
  const store::Trace t = analyzer::load_trace(nsys_export(dir, "old.sqlite", false));
  CHECK(t.meta.at("gpu.graph_ids") == "kernel-sequence");
  std::set<int64_t> graph_ids, node_ids;
  for (const auto& k : t.kernels)
    if (k.correlation != 20) graph_ids.insert(k.graph_id), node_ids.insert(k.graph_node_id);
  CHECK(graph_ids == std::set<int64_t>{1});
  CHECK(node_ids == std::set<int64_t>{201, 202});
  for (const auto& k : t.kernels)
    if (k.correlation == 20) CHECK((k.graph_id == 0 && k.graph_node_id == 0));
  const auto g = analyzer::graph_table(t);
  REQUIRE(g.graphs.size() == 1);
  CHECK(g.graphs[0].replays == 3);
}

TEST_CASE("Nsight Systems, --cuda-graph-trace=graph: one interval per replay, said so") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("graph_nsys_graph");
  const std::string path = nsys_export(dir, "graph.sqlite", true);
  {
    Db db(path);
    // What nsys writes by default instead of the nodes (columns of a real nsys 2024.3 export).
    db.exec("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId IS NOT NULL;"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
            "INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
            "correlationId INTEGER, globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL);"
            "INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES (1100,1300,0,1,NULL,7,11," +
            std::to_string(int64_t(4242) << 24) + ",9,3),(2100,2300,0,1,NULL,7,12," +
            std::to_string(int64_t(4242) << 24) + ",9,3),(4100,4300,0,1,NULL,7,13," +
            std::to_string(int64_t(4242) << 24) + ",9,3);");
  }
  const store::Trace t = analyzer::load_trace(path);
  CHECK(t.meta.at("gpu.graph_records") == "graph");
  REQUIRE(t.kernels.size() == 4);
  int64_t replays = 0;
  for (const auto& k : t.kernels)
    if (k.graph_id == 9) {
      ++replays;
      CHECK(t.str(k.name) == "CUDA graph 9");
      CHECK(k.pid == 4242);
      CHECK(k.graph_node_id == 0);
    }
  CHECK(replays == 3);
  const auto g = analyzer::graph_table(t);
  REQUIRE(g.graphs.size() == 1);
  CHECK(g.graphs[0].whole);
  CHECK(g.graphs[0].replays == 3);
  CHECK(g.graphs[0].gpu_us == Approx(0.2));
  CHECK(g.graphs[0].launch_us == Approx(0.05));
  CHECK(analyzer::graph_table_to_json(g).find("\"nodes_per_replay\":null") != std::string::npos);
}

namespace {

// The H100 recording of `launch_bound --graph` (stepscope 0.1: CUPTI GRAPH_TRACE, one interval per replay).
const std::string& graph_recording() {
  static test::ScratchDir dir("graph_replays_rec_" + std::to_string(::getpid()));
  static std::string path = test::decompressed_recording("h100-2026-11-22/launch_bound_graph.db.xz", dir);
  REQUIRE(!path.empty());
  return path;
}

}  // namespace

TEST_CASE("launch_bound --graph on an H100: 3050 whole replays of one graph, equal to SQL over the store") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  const std::string& path = graph_recording();
  Db raw(path);
  // The independent figures: SQL over the kernels and their cudaGraphLaunch calls, and the GPU idle between
  // consecutive replays (less any other GPU work in between) summed here by hand.
  const auto counts = raw.rows("SELECT count(*), count(DISTINCT graph_id), sum(end_ns - start_ns) FROM kernels WHERE "
                               "graph_id != 0");
  const auto calls = raw.rows("SELECT count(*), sum(a.end_ns - a.start_ns) FROM kernels k JOIN api_calls a ON "
                              "a.correlation = k.correlation JOIN strings s ON s.id = a.name WHERE k.graph_id != 0 "
                              "AND s.value = 'cudaGraphLaunch'");
  const auto replays = raw.rows("SELECT start_ns, end_ns FROM kernels WHERE graph_id != 0 ORDER BY start_ns");
  const auto others = raw.rows("SELECT start_ns, end_ns FROM kernels WHERE graph_id = 0 UNION ALL SELECT start_ns, "
                               "end_ns FROM memcpys UNION ALL SELECT start_ns, end_ns FROM memsets");
  std::vector<int64_t> before;
  for (size_t i = 1; i < replays.size(); ++i) {
    const int64_t a = replays[i - 1][1], b = replays[i][0];
    int64_t busy = 0;
    for (const auto& o : others) busy += std::max<int64_t>(0, std::min(b, o[1]) - std::max(a, o[0]));
    before.push_back(std::max<int64_t>(0, b - a - busy));
  }
  std::sort(before.begin(), before.end());
  REQUIRE(counts[0][0] == 3050);
  REQUIRE(counts[0][1] == 1);

  const store::Trace t = analyzer::load_trace(path);
  CHECK_FALSE(t.meta.count("gpu.graph_records"));  // a 0.1 recording: its collector traced GRAPH_TRACE
  const auto a = analyzer::analyze(t);
  const auto& g = a.graphs;
  CHECK(g.records == "graph");
  REQUIRE(g.graphs.size() == 1);
  const auto& s = g.graphs[0];
  CHECK(s.whole);
  CHECK(s.graph_id == 2);
  CHECK(s.replays == counts[0][0]);
  CHECK(s.gpu_us == Approx(double(counts[0][2]) / double(counts[0][0]) / 1e3).epsilon(1e-12));
  CHECK(s.launch_calls == calls[0][0]);
  CHECK(s.launch_us == Approx(double(calls[0][1]) / double(calls[0][0]) / 1e3).epsilon(1e-12));
  CHECK(s.idle_before_count == int64_t(before.size()));
  CHECK(s.idle_before_median_us == Approx(double(before[before.size() / 2]) / 1e3).epsilon(1e-12));
  // The figures themselves (H100): a replay keeps the GPU busy 52.4 µs; the GPU then idles 2.24 µs (median)
  // before the next; the launch call lasts as long as a replay because it waits for the previous one.
  CHECK(s.gpu_us == Approx(52.40).epsilon(0.001));
  CHECK(s.idle_before_median_us == Approx(2.24).epsilon(0.01));
  CHECK(s.launch_us > 30.0);
  // The cure at work: no finding, and every view says what the graph did.
  CHECK(a.findings.empty());
  const std::string json = analyzer::to_json(a);
  CHECK(json.find("\"records\":\"graph\"") != std::string::npos);
  CHECK(json.find("\"nodes_per_replay\":null") != std::string::npos);
}

namespace {

// A piecewise-graphed step, built like vLLM's layout: graph segment, eager kernel, graph segment, eager kernel,
// graph segment. Each graph segment: `graph_host` of Python then cudaGraphLaunch (10 µs), its replay of 4
// back-to-back 20 µs kernels; each eager one: `eager_host` of Python then cudaLaunchKernel (5 µs), a 30 µs
// kernel. A kernel starts 1 µs after its launch returns, or when the GPU frees up. The step ends when its GPU work
// does (ProfilerStep#N ranges), unless the host runs ahead (`sync` false).
test::Builder piecewise(int64_t graph_host, int64_t eager_host, bool sync = true, int steps = 12) {
  test::Builder b;
  int64_t t = 0, gpu_free = 0;
  for (int s = 0; s < steps; ++s) {
    const int64_t s0 = t;
    for (int seg = 0; seg < 5; ++seg) {
      if (seg % 2 == 0) {
        t += graph_host;
        const int64_t l0 = t, l1 = t + 10 * test::US;
        const int64_t corr = b.api("cudaGraphLaunch", l0, l1);
        int64_t ks = std::max(l1 + test::US, gpu_free);
        for (int n = 0; n < 4; ++n) {
          store::Kernel k;
          k.correlation = corr, k.start = ks, k.end = ks + 20 * test::US, k.stream = 7;
          k.name = b.t.intern("graph_node_" + std::to_string(seg) + "_" + std::to_string(n));
          k.graph_id = 5 + seg / 2, k.graph_node_id = 100 * (seg + 1) + n;
          b.t.kernels.push_back(k);
          ks = k.end;
        }
        gpu_free = ks;
        t = l1;
      } else {
        t += eager_host;
        const int64_t l0 = t, l1 = t + 5 * test::US;
        const int64_t ks = std::max(l1 + test::US, gpu_free);
        b.kernel("attention_kernel", l0, l1, ks, ks + 30 * test::US);
        gpu_free = ks + 30 * test::US;
        t = l1;
      }
    }
    if (sync) t = std::max(t, gpu_free);
    b.range("ProfilerStep#" + std::to_string(s), s0, t);
  }
  return b;
}

}  // namespace

TEST_CASE(
    "launch_bound --graph on an H200, node by node: 192 replays of 31 nodes, equal to SQL over the store") {
  // The fifth GPU proof's graphs phase (2026-11-30, de46faa): `record --gpu-window all -- launch_bound --ops
  // 30
  // --graph`, its first 12 ms of replays kept (tests/gpu_proof/data/h200-2026-11-30/README.md). Its merge
  // lost meta gpu.graph_records, so the analysis must see the nodes from the records themselves: until
  // 2026-11-30 it took each of the 621,550 node records of that run for a replay "recorded as one interval".
  test::ScratchDir dir("graph_replays_h200");
  const std::string path = dir.file("nodes.db");
  REQUIRE(test::run_shell("xz -dc " +
                          test::shell_quote(test::source_dir() + "/tests/gpu_proof/data/h200-2026-11-30/"
                                                                 "launch_bound-graph-nodes-192.db.xz") +
                          " > " + test::shell_quote(path))
              .status == 0);
  Db raw(path);
  const auto per = raw.rows(
      "SELECT count(*), count(DISTINCT graph_node_id), sum(end_ns - start_ns), "
      "max(end_ns) - min(start_ns) FROM kernels WHERE graph_id != 0 GROUP BY correlation");
  const auto graphs = raw.rows("SELECT count(DISTINCT graph_id) FROM kernels WHERE graph_id != 0");
  REQUIRE(per.size() == 192);
  REQUIRE(graphs[0][0] == 1);
  double busy = 0, span = 0;
  for (const auto& r : per) {
    REQUIRE(r[0] == 31);
    REQUIRE(r[1] == 31);
    busy += double(r[2]), span += double(r[3]);
  }

  const store::Trace t = analyzer::load_trace(path);
  CHECK_FALSE(t.meta.count("gpu.graph_records"));
  CHECK(store::graph_records_of(t) == "nodes");
  const auto a = analyzer::analyze(t);
  CHECK(a.graphs.records == "nodes");
  REQUIRE(a.graphs.graphs.size() == 1);
  const auto& s = a.graphs.graphs[0];
  CHECK_FALSE(s.whole);
  CHECK(s.graph_id == 2);
  CHECK(s.replays == 192);
  CHECK(s.nodes_min == 31);
  CHECK(s.nodes_max == 31);
  CHECK(s.kernels_min == 31);
  CHECK(s.gpu_us == Approx(busy / 192 / 1e3).epsilon(1e-9));
  CHECK(s.span_us == Approx(span / 192 / 1e3).epsilon(1e-9));
  // Captured by the program, not by the collector whose stack capture is the leaf of every capture stack (the
  // bundle of that run had stripped launch_bound's line tables: an address).
  CHECK(s.captured_at.rfind("launch_bound+0x", 0) == 0);
  // The H200's figures: a replay spans ~55 µs of the ~60 µs step and keeps the GPU busy ~52 µs of them.
  CHECK(s.gpu_us == Approx(52.0).margin(3.0));
  CHECK(s.span_us == Approx(55.0).margin(2.0));
}

TEST_CASE("launch-overhead after the cure: piecewise graphs, the host late before each segment") {
  // Per step: before the first replay the GPU waits the host's whole 110 µs + 1 µs; before each eager kernel
  // 105 µs of host against the 80 µs replay = 25 µs; before the other replays 110 − 30 = 80 µs. 321 µs of a
  // 621 µs step, of which 2.24 µs before each of the 3 replays is the launch's own.
  auto b = piecewise(100 * test::US, 100 * test::US);
  const auto a = analyzer::analyze(b.t);
  REQUIRE(a.steps.size() == 12);
  CHECK(a.steps[3].dur_ns == 621 * test::US);
  const auto* f = test::find_finding(a, "launch-overhead");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::High);
  CHECK(f->est_savings_us_per_step == Approx(321.0 - 3 * 2.24));
  CHECK(f->summary.find("CUDA graphs already replay 85.7% of the kernels (3.0 replays per step, 2 eager GPU ops "
                        "between them)") != std::string::npos);
  simdjson::dom::parser p;
  auto ev = p.parse(f->evidence_json);
  CHECK(bool(ev["graphed"]));
  CHECK(bool(ev["piecewise"]));
  CHECK(double(ev["idle_before_eager_us"]) == Approx(12 * 50.0));
  CHECK(double(ev["idle_before_replays_us"]) == Approx(12 * (111.0 + 80 + 80 - 3 * 2.24)));
  CHECK(int64_t(ev["replay_gaps"]) == 36);
  CHECK(f->suggestion.find("piecewise") != std::string::npos);
  CHECK(f->suggestion.find("FULL_AND_PIECEWISE") != std::string::npos);
  // The per-graph table: three graphs, 12 replays each, the eager kernels between them counted.
  REQUIRE(a.graphs.graphs.size() == 3);
  for (const auto& s : a.graphs.graphs) {
    CHECK(s.replays == 12);
    CHECK((s.nodes_min == 4 && s.nodes_max == 4));
    CHECK(s.gpu_us == Approx(80.0));
    CHECK(s.idle_inside_us == 0);
    CHECK(s.launch_us == Approx(10.0));
  }
  CHECK(a.graphs.eager_kernels == 24);
}

TEST_CASE("launch-overhead after the cure: a host that keeps ahead of the replays leaves nothing to report") {
  // 15 µs of host per graph segment and 10 µs per eager kernel against 80 and 30 µs of GPU work, and no wait
  // for the GPU at the step's end: the queue never runs dry after the first launch (16 µs into a 60-step run).
  auto b = piecewise(5 * test::US, 5 * test::US, false, 60);
  const auto a = analyzer::analyze(b.t);
  std::string said;
  for (const auto& f : a.findings) said += f.rule + ": " + f.summary + " " + f.evidence_json + "\n";
  INFO(said);
  CHECK_FALSE(test::find_finding(a, "launch-overhead"));
  REQUIRE(a.graphs.graphs.size() == 3);
  CHECK(a.graphs.graphs[0].idle_before_median_us == 0);
}

namespace {

// The same 4 kernels a step, 24 steps, launched one by one (eager) or replayed from one graph whose nodes are
// recorded (node records): 30 µs of host before each launch, kernels of 20 µs — 19 µs inside the graph (as on the
// H100, where launch_bound's kernels run 4% faster replayed).
test::Builder same_work(bool graphed) {
  test::Builder b;
  int64_t t = 0, gpu_free = 0;
  for (int s = 0; s < 24; ++s) {
    const int64_t s0 = t;
    if (graphed) {
      t += 30 * test::US;
      const int64_t corr = b.api("cudaGraphLaunch", t, t + 10 * test::US);
      t += 10 * test::US;
      int64_t ks = std::max(t + test::US, gpu_free);
      for (int n = 0; n < 4; ++n) {
        store::Kernel k;
        k.correlation = corr, k.start = ks, k.end = ks + 19 * test::US, k.stream = 7, k.graph_id = 3;
        k.graph_node_id = 10 + n, k.name = b.t.intern("kernel_" + std::to_string(n));
        b.t.kernels.push_back(k);
        ks = k.end;
      }
      gpu_free = ks;
    } else {
      for (int n = 0; n < 4; ++n) {
        t += 30 * test::US;
        const int64_t ks = std::max(t + 6 * test::US, gpu_free);
        b.kernel("kernel_" + std::to_string(n), t, t + 5 * test::US, ks, ks + 20 * test::US);
        t += 5 * test::US;
        gpu_free = ks + 20 * test::US;
      }
    }
    t = std::max(t, gpu_free);
    b.range("ProfilerStep#" + std::to_string(s), s0, t);
  }
  b.t.meta["gpu.graph_records"] = "nodes";
  return b;
}

}  // namespace

TEST_CASE("diff of an eager run and its graph run: kernel by kernel, and said what the graphs did") {
  const auto eager = same_work(false), graphed = same_work(true);
  std::vector<analyzer::DiffRun> base{analyzer::make_diff_run("eager.db", eager.t)};
  std::vector<analyzer::DiffRun> now{analyzer::make_diff_run("graph.db", graphed.t)};
  const auto d = analyzer::diff_runs(base, now, analyzer::DiffConfig{});
  // The same four kernels on both sides, none added or removed: the graph run's nodes compare by name.
  CHECK(d.kernels_added_total == 0);
  CHECK(d.kernels_removed_total == 0);
  REQUIRE(d.kernel_changes.size() == 4);
  for (const auto& k : d.kernel_changes) {
    CHECK(k.base_count_per_step == Approx(1.0));
    CHECK(k.new_count_per_step == Approx(1.0));
    CHECK(k.delta_us_per_step() == Approx(-1.0));
  }
  std::string notes;
  for (const auto& n : d.notes) notes += n + "\n";
  INFO(notes);
  CHECK(notes.find("base launches its GPU work without CUDA graphs; new replays 1 CUDA graph 24 times: 96 of its 96 "
                   "GPU records ran inside them.") != std::string::npos);
  CHECK(notes.find("kernels are compared by name inside and outside graphs alike") != std::string::npos);
  // The step: 4 × 35 µs of host, the last kernel starting 1 µs after its launch returned, 20 µs; graphed: 40 µs of
  // host, 1 µs, a 76 µs replay.
  const auto& median = d.metrics.front();
  CHECK(median.id == "step_time_median");
  CHECK(median.base == Approx(161.0));
  CHECK(median.now == Approx(117.0));
  CHECK(median.verdict == analyzer::Verdict::Improvement);
}

TEST_CASE("a graph's capture stack names the line that captured it, through the graph it was instantiated from") {
  auto b = same_work(true);
  store::Trace& t = b.t;
  // Frames and stacks as the collector writes them: the capturing thread in cudaStreamBeginCapture, called from
  // capture_step (train.py:42), called from the module (train.py:80).
  t.frames.push_back({1, t.intern("train.py"), t.intern("<module>"), t.intern("/src/train.py"), 80, store::FrameKind::Python, 0});
  t.frames.push_back({2, t.intern("train.py"), t.intern("capture_step"), t.intern("/src/train.py"), 42, store::FrameKind::Python, 0});
  t.frames.push_back({3, t.intern("libcudart.so.12"), t.intern("cudaStreamBeginCapture"), 0, 0, store::FrameKind::Native, 0x1234});
  t.stacks.push_back({1, 0, 1});
  t.stacks.push_back({2, 1, 2});
  t.stacks.push_back({3, 2, 3});
  // Graph 2 captured there; the replays run executable graph 3, instantiated from it (no stack of its own).
  t.graphs.push_back({b.pid, 2, store::GraphKind::Capture, 0, 10, 3});
  t.graphs.push_back({b.pid, 3, store::GraphKind::Instantiated, 2, 20, 0});
  for (auto& k : t.kernels) k.pid = b.pid;
  test::ScratchDir dir("graph_capture_stack");
  store::write_store_atomically(t, dir.file("capture.db"));
  const auto a = analyzer::analyze(store::StoreReader(dir.file("capture.db")).load());
  REQUIRE(a.graphs.graphs.size() == 1);
  const auto& s = a.graphs.graphs[0];
  CHECK(s.graph_id == 3);
  CHECK(s.captured_at == "capture_step (train.py:42)");
  CHECK(s.kind == store::GraphKind::Capture);
  CHECK(analyzer::graph_table_to_json(a.graphs).find("\"captured_at\":\"capture_step (train.py:42)\",\"capture_kind\":\"capture\"") !=
        std::string::npos);
  const std::string text = analyzer::render_graphs_text(a.graphs, 8);
  CHECK(text.find("capture_step (train.py:42) / kernel_0") != std::string::npos);
  CHECK(analyzer::render_markdown_report(a).find("| captured at | first kernel |") != std::string::npos);
  // Without the graphs rows, the first kernel's node says it: node 10 of graph 3, cloned from captured node 1,
  // whose stack is the capture's.
  t.graphs.clear();
  t.graph_nodes.push_back({b.pid, 2, 1, 0, store::GraphNodeKind::Kernel, 11, 3});
  t.graph_nodes.push_back({b.pid, 3, 10, 1, store::GraphNodeKind::Kernel, 20, 0});
  CHECK(analyzer::graph_table(t).graphs[0].captured_at == "capture_step (train.py:42)");
  // Neither (a store before v4): nothing is said.
  t.graph_nodes.clear();
  CHECK(analyzer::graph_table(t).graphs[0].captured_at.empty());
}
