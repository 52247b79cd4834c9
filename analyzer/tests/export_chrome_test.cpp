// Round trip: import → export Chrome JSON (plain and .gz) → import holds the same rows with the same times;
// also through a store. Export writes atomically.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "stepscope/analyzer/export.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
namespace fs = std::filesystem;

namespace {

using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, std::string>;

template <class Rows, class F>
std::vector<Key> keys(const store::Trace& t, const Rows& rows, F f) {
  std::vector<Key> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(f(t, r));
  std::sort(out.begin(), out.end());
  return out;
}

std::string show(const Key& k) {
  return std::to_string(std::get<0>(k)) + " " + std::to_string(std::get<1>(k)) + " " +
         std::to_string(std::get<2>(k)) + " " + std::to_string(std::get<3>(k)) + " " + std::get<4>(k);
}

// Equal sorted rows; on a difference, says which table and shows the first differing row of each side.
void same_rows(const char* table, const std::vector<Key>& a, const std::vector<Key>& b) {
  INFO(table << ": " << a.size() << " vs " << b.size() << " rows");
  auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  if (ia != a.end() || ib != b.end()) {
    INFO("first difference: " << (ia != a.end() ? show(*ia) : "(end)") << "  vs  "
                              << (ib != b.end() ? show(*ib) : "(end)"));
    CHECK(false);
  }
}

void check_same(const store::Trace& a, const store::Trace& b) {
  auto kernel = [](const store::Trace& t, const store::Kernel& k) {
    return Key{k.start, k.end, k.device * 1000000 + k.stream, k.correlation,
               t.str(k.name) + "/" + std::to_string(k.grid_x) + "," + std::to_string(k.block_x) + "," +
                   std::to_string(k.registers) + "," + std::to_string(k.shared_memory) + " graph " +
                   std::to_string(k.graph_id) + "." + std::to_string(k.graph_node_id)};
  };
  auto copy = [](const store::Trace&, const store::Memcpy& m) {
    return Key{m.start, m.end, m.stream, m.bytes,
               std::to_string(int(m.kind)) + std::to_string(int(m.src_kind)) + std::to_string(int(m.dst_kind)) +
                   " graph " + std::to_string(m.graph_id) + "." + std::to_string(m.graph_node_id)};
  };
  auto set = [](const store::Trace&, const store::Memset& m) {
    return Key{m.start, m.end, m.stream, m.bytes,
               std::to_string(int(m.mem_kind)) + " graph " + std::to_string(m.graph_id) + "." +
                   std::to_string(m.graph_node_id)};
  };
  auto api = [](const store::Trace& t, const store::ApiCall& x) {
    return Key{x.start, x.end, x.pid * 10000000 + x.tid, x.correlation, t.str(x.name) + std::to_string(int(x.kind))};
  };
  auto sync = [](const store::Trace&, const store::Sync& s) {
    return Key{s.start, s.end, s.stream, s.correlation, std::to_string(int(s.type))};
  };
  auto range = [](const store::Trace& t, const store::Range& r) {
    return Key{r.start, r.end, r.pid * 10000000 + r.tid, r.depth,
               t.str(r.name) + "|" + t.str(r.domain) + "|" + std::to_string(int(r.source))};
  };
  auto step = [](const store::Trace& t, const store::Step& s) {
    return Key{s.start, s.end, s.index, s.pid, t.str(s.source)};
  };
  auto wait = [](const store::Trace& t, const store::DataWait& w) {
    return Key{w.start, w.end, w.pid, w.tid, t.str(w.source)};
  };
  same_rows("kernels", keys(a, a.kernels, kernel), keys(b, b.kernels, kernel));
  same_rows("memcpys", keys(a, a.memcpys, copy), keys(b, b.memcpys, copy));
  same_rows("memsets", keys(a, a.memsets, set), keys(b, b.memsets, set));
  same_rows("api_calls", keys(a, a.api_calls, api), keys(b, b.api_calls, api));
  same_rows("syncs", keys(a, a.syncs, sync), keys(b, b.syncs, sync));
  same_rows("ranges", keys(a, a.ranges, range), keys(b, b.ranges, range));
  same_rows("steps", keys(a, a.steps, step), keys(b, b.steps, step));
  same_rows("data_waits", keys(a, a.data_waits, wait), keys(b, b.data_waits, wait));
  CHECK(a.devices.size() == b.devices.size());
}

}  // namespace

TEST_CASE("export → import round trip holds equal rows and times") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("export_chrome");
  for (const char* rel :
       {"kineto/resnet50_num_workers_0.json.gz", "hta/v100_resnet_gpu_bound_ns.json.gz",
        "hta/cuda_event_sync_multi_stream.json.gz", "tracelens/b200_eager.json.gz",
        "tracelens/mi300x_ddp_resnet18.json.gz", "nsys/nsys_chrome_dialect_vllm.json.gz",
        "nsys/cloverleaf_a100.sqlite.gz", "hta/gpu_user_annotation_steps.json.gz",
        "hta/a100_rank0_many_small_kernels.json.gz"}) {
    INFO(rel);
    store::Trace a = analyzer::load_trace(test::trace_path(rel));
    std::string out = dir.file(fs::path(rel).stem().string() + ".json.gz");
    analyzer::export_chrome_trace(a, out);
    store::Trace b = analyzer::load_trace(out);
    CHECK(b.meta.at("chrome_dialect") == "stepscope");
    CHECK(b.meta.at("clock_domain") == a.meta.at("clock_domain"));
    check_same(a, b);
  }
  // Only the finished outputs are left: no temporaries.
  for (auto& e : fs::directory_iterator(dir.path())) CHECK(e.path().extension() == ".gz");
}

TEST_CASE("a store with collector-style steps and data waits exports and comes back") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("export_store");
  store::Trace a = analyzer::load_trace(test::trace_path("hta/trace_diff_test_v100.json.gz"));
  // Steps and waits that no range stands for (as a detector or the collector would write them).
  store::Step s;
  s.index = 99;
  s.start = a.kernels.front().start;
  s.end = a.kernels.back().end;
  s.source = a.intern("optimizer");
  a.steps.push_back(s);
  store::DataWait w;
  w.start = s.start;
  w.end = s.start + 1000;
  w.source = a.intern("tf.data");
  a.data_waits.push_back(w);
  std::string db = dir.file("run.db");
  store::write_store_atomically(a, db);
  store::Trace from_store = analyzer::load_trace(db);
  std::string json = dir.file("trace.json");
  analyzer::export_chrome_trace(from_store, json);
  store::Trace b = analyzer::load_trace(json);
  check_same(from_store, b);
  CHECK(b.steps.size() == 7);
}

TEST_CASE("export to an unwritable place fails cleanly") {
  store::Trace t;
  store::Kernel k;
  k.start = 1000;
  k.end = 2000;
  k.name = t.intern("k");
  t.kernels.push_back(k);
  std::string bad = "/nonexistent-dir-stepscope/x.json";
  try {
    analyzer::export_chrome_trace(t, bad);
    FAIL("no error");
  } catch (const store::StoreError& e) {
    CHECK(std::string(e.what()).find("/nonexistent-dir-stepscope/x.json") != std::string::npos);
  }
  // Tiny traces export too, and the JSON text is what Perfetto reads (traceEvents of X events).
  std::string json = analyzer::to_chrome_json(t);
  CHECK(json.find("\"traceEvents\":[") != std::string::npos);
  CHECK(json.find("\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\"") != std::string::npos);
}
