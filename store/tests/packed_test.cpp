// Schema v6's packed tables against schema v4's rows: the same trace reads back equal either way, a packed
// store stays a few bytes a row, and a damaged block is an error naming the store.
#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <limits>
#include <random>
#include <tuple>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope::store;

namespace {

auto key(const Kernel& k) {
  return std::tuple(k.start, k.end, k.device, k.context, k.stream, k.correlation, k.grid_x, k.grid_y,
                    k.grid_z, k.block_x, k.block_y, k.block_z, k.registers, k.shared_memory, k.name,
                    k.graph_id, k.pid, k.graph_node_id);
}
auto key(const ApiCall& a) {
  return std::tuple(a.start, a.end, a.pid, a.tid, int(a.kind), a.name, a.correlation, a.return_code, a.stack);
}
auto key(const Sample& s) {
  return std::tuple(s.time, s.pid, s.tid, s.stack, s.on_cpu, s.periods);
}
auto key(const Stack& s) {
  return std::tuple(s.id, s.parent, s.frame);
}
auto key(const Range& r) {
  return std::tuple(r.start, r.end, r.pid, r.tid, r.domain, r.name, r.depth, int(r.source), r.correlation);
}
std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, std::string, std::string, int32_t, int, int64_t>>
named(const Trace& t, const std::vector<Range>& rows) {
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, std::string, std::string, int32_t, int, int64_t>>
      out;
  for (const auto& r : rows)
    out.emplace_back(r.start, r.end, r.pid, r.tid, t.str(r.domain), t.str(r.name), r.depth, int(r.source),
                     r.correlation);
  return out;
}
template <class Row>
std::vector<decltype(key(Row{}))> keys(const std::vector<Row>& rows) {
  std::vector<decltype(key(Row{}))> out;
  for (const auto& r : rows) out.push_back(key(r));
  return out;
}

constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();

// A recording's shape: two threads sampled at ~1 kHz over a trie of stacks, a loop of kernels with their
// launches; and rows at the edges of int64 that no encoding may bend.
Trace busy_trace(int kernels, int samples) {
  Trace t;
  std::mt19937_64 rng(7);
  t.processes.push_back({4242, t.intern("trainer"), 1});
  t.threads.push_back({4242, 4242, t.intern("main")});
  t.threads.push_back({4242, 4250, t.intern("loader")});
  std::vector<StringId> names;
  for (int i = 0; i < 40; ++i) names.push_back(t.intern("kernel_" + std::to_string(i)));
  const StringId launch = t.intern("cudaLaunchKernel");
  const StringId op = t.intern("aten::mm"), line = t.intern("train.py(42): step"), nvtx = t.intern("nvtx");
  for (int64_t id = 1; id <= 3000; ++id)
    t.stacks.push_back({id, id == 1 ? 0 : int64_t(rng() % id), int64_t(rng() % 900 + 1)});
  int64_t now = 1'700'000'000'000'000'000, gpu = now + 50'000;
  for (int i = 0; i < kernels; ++i) {
    const int64_t correlation = 1000 + i;
    const int64_t host = int64_t(2000 + rng() % 3000);
    t.api_calls.push_back(
        {now, now + host, 4242, 4242, ApiKind::Runtime, launch, correlation, 0, int64_t(rng() % 3000 + 1)});
    // The op around its launch, the Python line around the op; the kernel's GPU annotation on its stream.
    t.ranges.push_back({now - 3000, now + host + 100, 4242, 4242, 0, line, 0, RangeSource::Python, 0});
    t.ranges.push_back({now - 500, now + host, 4242, 4242, 0, op, 1, RangeSource::Op, correlation});
    Kernel k;
    gpu = std::max(gpu, now + 4000) + int64_t(rng() % 2000);
    k.start = gpu;
    k.end = gpu + 1500 + int64_t(rng() % 40000);
    k.stream = 7;
    k.context = 1;
    k.correlation = correlation;
    k.grid_x = 1 + i % 64;
    k.block_x = 256;
    k.registers = 32;
    k.name = names[i % names.size()];
    k.pid = 4242;
    gpu = k.end;
    t.kernels.push_back(k);
    if (i % 10 == 0)
      t.ranges.push_back({k.start, k.end, 0, 7, nvtx, op, 0, RangeSource::GpuAnnotation, correlation});
    now += host + int64_t(rng() % 5000);
  }
  int64_t at = 1'700'000'000'000'000'000;
  for (int i = 0; i < samples; ++i) {
    at += 500'000 + int64_t(rng() % 20'000);
    t.samples.push_back(
        {at, 4242, i % 2 ? 4250 : 4242, int64_t(rng() % 200 + 2800), i % 3 != 0, 1 + int64_t(i % 97 == 0)});
  }
  // The edges: extreme values in every packed table, and rows that break the store's invariant.
  Kernel edge;
  edge.start = kMin;
  edge.end = kMax;
  edge.stream = -1;
  edge.correlation = kMax;
  edge.grid_x = std::numeric_limits<int32_t>::max();
  edge.block_z = std::numeric_limits<int32_t>::min();
  edge.shared_memory = kMin;
  edge.graph_node_id = kMax;
  edge.pid = 4242;
  t.kernels.push_back(edge);
  t.api_calls.push_back({kMax - 1, kMax, 4242, 0, ApiKind::Driver, launch, kMin, -1, 0});  // tid 0
  t.samples.push_back({kMin, 777, 1, 0, false, 86'400'000});                               // pid 777 unknown
  t.samples.push_back({kMax, 4242, 9999, 1, true, 1});                                     // thread unknown
  t.stacks.push_back({kMax, kMin, kMax});
  t.ranges.push_back(
      {kMin, kMax, 4242, 4242, nvtx, op, std::numeric_limits<int32_t>::max(), RangeSource::Nvtx, kMin});
  t.ranges.push_back({5, 6, 31337, 1, 0, op, 0, RangeSource::Annotation, 0});  // pid 31337 unknown
  std::stable_sort(t.ranges.begin(), t.ranges.end(),
                   [](const Range& a, const Range& b) { return a.start < b.start; });
  return t;
}

int64_t file_bytes(const std::string& path) {
  return int64_t(std::filesystem::file_size(path));
}

void exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  INFO((err ? err : ""));
  sqlite3_free(err);
  sqlite3_close(db);
  REQUIRE(rc == SQLITE_OK);
}

std::string load_error(const std::string& path) {
  try {
    StoreReader r(path);
    (void)r.load();
  } catch (const StoreError& e) {
    CHECK(e.file() == path);
    return e.reason();
  }
  return "(read)";
}

}  // namespace

TEST_CASE("a packed store and a store of rows read back the same rows, ranges, counts and breaks") {
  stepscope::test::ScratchDir dir("store_packed");
  const Trace in = busy_trace(30'000, 40'000);  // several blocks of each table
  write_store_atomically(in, dir.file("packed.db"), true);
  write_store_atomically(in, dir.file("rows.db"), false);
  StoreReader p(dir.file("packed.db")), r(dir.file("rows.db"));
  REQUIRE(p.schema_version() == 6);
  REQUIRE(r.schema_version() == 4);
  const Trace a = p.load(), b = r.load();
  CHECK(keys(a.kernels) == keys(in.kernels));
  CHECK(keys(a.api_calls) == keys(in.api_calls));
  CHECK(keys(a.samples) == keys(in.samples));
  // A store numbers its strings as its writer met them: ranges compare by their names' text.
  CHECK(named(a, a.ranges) == named(in, in.ranges));
  CHECK(named(b, b.ranges) == named(in, in.ranges));
  CHECK(keys(b.kernels) == keys(in.kernels));
  CHECK(keys(b.samples) == keys(in.samples));
  // Stacks read by id either way (the edge row's id is the largest).
  CHECK(keys(a.stacks) == keys(b.stacks));
  CHECK(a.stacks.back().id == kMax);

  std::mt19937_64 rng(11);
  const int64_t t0 = in.kernels.front().start;
  const int64_t span = in.kernels[in.kernels.size() - 2].end - t0;
  for (int i = 0; i < 200; ++i) {
    const int64_t lo = t0 + int64_t(rng() % uint64_t(span)), hi = lo + int64_t(rng() % 5'000'000);
    INFO("window " << lo << ".." << hi << ": packed " << p.kernels(lo, hi).size() << ", rows "
                   << r.kernels(lo, hi).size());
    REQUIRE(keys(p.kernels(lo, hi)) == keys(r.kernels(lo, hi)));
    REQUIRE(keys(p.api_calls(lo, hi)) == keys(r.api_calls(lo, hi)));
    REQUIRE(keys(p.samples(lo, hi)) == keys(r.samples(lo, hi)));
    REQUIRE(keys(p.ranges(lo, hi)) == keys(r.ranges(lo, hi)));
  }
  CHECK(keys(p.ranges(kMin, kMax)) == keys(r.ranges(kMin, kMax)));
  CHECK(keys(p.ranges(5, 6)) == keys(r.ranges(5, 6)));
  CHECK(p.ranges(5, 6).size() == 2);  // the edge range and the one of an unknown pid
  CHECK(keys(p.kernels(kMin, kMax)) == keys(r.kernels(kMin, kMax)));
  CHECK(keys(p.samples(kMin, kMax)) == keys(r.samples(kMin, kMax)));
  CHECK(p.samples(kMin, kMax).size() == in.samples.size() - 1);  // time kMax is not before kMax
  CHECK(p.kernels(kMin, kMin + 1).size() == 1);                  // the edge kernel, from the very beginning
  CHECK(keys(p.kernels(5, 5)) == keys(r.kernels(5, 5)));         // only the edge kernel spans an empty window
  CHECK(p.kernels(5, 5).size() == 1);

  std::vector<std::pair<std::string, int64_t>> pc, rc;
  for (const auto& c : p.counts()) pc.push_back({c.table, c.rows});
  for (const auto& c : r.counts()) rc.push_back({c.table, c.rows});
  CHECK(pc == rc);
  CHECK(p.time_span() == r.time_span());
  CHECK(p.time_span() == std::pair<int64_t, int64_t>{kMin, kMax});

  auto breaks = [](const StoreReader& s) {
    std::vector<std::tuple<std::string, std::string, int64_t, int64_t, int64_t>> out;
    for (const auto& b : s.invariant_breaks())
      out.push_back({b.table, b.problem, b.rows, b.example_pid, b.example_tid});
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto pb = breaks(p);
  CHECK(pb == breaks(r));
  // The rows planted: a sample of pid 777 (and so of no known thread), one of thread 9999, a call on tid 0.
  using B = std::tuple<std::string, std::string, int64_t, int64_t, int64_t>;
  CHECK(pb == std::vector<B>{{"api_calls", "tid 0", 1, 4242, 0},
                             {"ranges", "(pid, tid) not in threads", 1, 31337, 1},
                             {"ranges", "pid not in processes", 1, 31337, 0},
                             {"samples", "(pid, tid) not in threads", 2, 777, 1},
                             {"samples", "pid not in processes", 1, 777, 0}});
}

TEST_CASE("a packed store holds a 1 kHz recording's sample and a kernel with its launch in a few bytes") {
  stepscope::test::ScratchDir dir("store_packed_size");
  // 60,000 samples (a minute of two threads at 1 kHz... half a minute each) and 60,000 kernels with launches.
  Trace in = busy_trace(60'000, 60'000);
  Trace ranges_only;
  ranges_only.strings = in.strings;
  ranges_only.ranges = std::move(in.ranges);
  in.ranges.clear();
  write_store_atomically(in, dir.file("packed.db"), true);
  write_store_atomically(in, dir.file("rows.db"), false);
  const int64_t packed = file_bytes(dir.file("packed.db")), rows = file_bytes(dir.file("rows.db"));
  INFO("packed " << packed << " B, rows " << rows << " B");
  // Rows: ~46 B a sample with its index, ~150 B a kernel with its launch and their indexes
  // (docs/performance.md).
  CHECK(rows > 60'000 * (40 + 120));
  // Packed, everything counted (strings, frames' and stacks' tries, the store's own pages): under 20 B a
  // pair.
  CHECK(packed < 60'000 * 20);

  // The host ranges of the same run (an op around each launch, the Python line around it, a GPU annotation
  // every tenth kernel): ~63 B a range as rows with their index, under 8 B packed.
  write_store_atomically(ranges_only, dir.file("ranges.db"), true);
  write_store_atomically(ranges_only, dir.file("range_rows.db"), false);
  const int64_t n = int64_t(ranges_only.ranges.size()), packed_ranges = file_bytes(dir.file("ranges.db")),
                range_rows = file_bytes(dir.file("range_rows.db"));
  INFO(n << " ranges: packed " << packed_ranges << " B, rows " << range_rows << " B");
  CHECK(range_rows > n * 40);
  CHECK(packed_ranges < n * 8);
}

TEST_CASE("a damaged block is an error naming the store, never a wrong row") {
  stepscope::test::ScratchDir dir("store_packed_damage");
  write_store_atomically(busy_trace(9'000, 100), dir.file("good.db"), true);
  const struct {
    const char* name;
    const char* sql;
    const char* reason;
  } cases[] = {
      {"garbage.db", "UPDATE packed_kernels SET data = x'0102030405' WHERE rowid = 1",
       "corrupt store: a block of packed_kernels is not a zstd frame of its rows"},
      {"encoding.db",
       "UPDATE packed_kernels SET data = CAST(x'07' || substr(data, 2) AS BLOB) WHERE rowid = 1",
       "corrupt store: a block of packed_kernels has an unknown encoding"},
      {"truncated.db", "UPDATE packed_api_calls SET data = substr(data, 1, length(data) / 2) WHERE rowid = 1",
       "corrupt store: a block of packed_api_calls does not decompress"},
      {"more_rows.db",
       "UPDATE packed_kernels SET rows = rows + 1 WHERE rowid = (SELECT max(rowid) FROM packed_kernels)",
       "corrupt store: a block of packed_kernels ends inside a value"},
      {"fewer_rows.db", "UPDATE packed_samples SET rows = rows - 1",
       "corrupt store: a block of packed_samples has bytes past its rows"},
      {"huge_rows.db", "UPDATE packed_stacks SET rows = 1000000000",
       "corrupt store: a block of packed_stacks claims 1000000000 rows"},
      {"past_a_block.db", "UPDATE packed_kernels SET rows = 8193 WHERE rowid = 1",
       "corrupt store: a block of packed_kernels claims 8193 rows"},
      // A byte flipped inside the compressed values: the frame's checksum catches what the lengths cannot.
      {"flipped.db",
       "UPDATE packed_kernels SET data = CAST(substr(data, 1, length(data) / 2) || x'deadbeef' || "
       "substr(data, length(data) / 2 + 5) AS BLOB) WHERE rowid = 1",
       "corrupt store: a block of packed_kernels does not decompress"},
      {"lo_moved.db", "UPDATE packed_kernels SET lo = lo + 1 WHERE rowid = 1",
       "corrupt store: a block of packed_kernels has bounds that are not its rows'"},
      {"hi_text.db", "UPDATE packed_samples SET hi = 'later'",
       "corrupt store: a block of packed_samples has bounds that are no integers"},
      {"text.db", "UPDATE packed_kernels SET data = 'soon' WHERE rowid = 1",
       "corrupt store: a block of packed_kernels holds no data"},
      {"no_table.db", "DROP TABLE packed_kernels", "SQLite: no such table: packed_kernels"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    const std::string path = dir.file(c.name);
    std::filesystem::copy_file(dir.file("good.db"), path, std::filesystem::copy_options::overwrite_existing);
    exec(path, c.sql);
    CHECK(load_error(path) == c.reason);
  }
}

TEST_CASE(
    "a kernel or API call read alone by its index is load()'s row of that index, packed, as rows, with rowid "
    "gaps") {
  stepscope::test::ScratchDir dir("store_kernel_at");
  const Trace in = busy_trace(30'000, 10);  // 30,001 kernels: three full blocks of 8,192 and a partial one
  write_store_atomically(in, dir.file("packed.db"), true);
  write_store_atomically(in, dir.file("rows.db"), false);
  std::filesystem::copy_file(dir.file("rows.db"), dir.file("gaps.db"));
  exec(dir.file("gaps.db"), "DELETE FROM kernels WHERE rowid IN (1, 8193, 20000)");
  exec(dir.file("gaps.db"), "DELETE FROM api_calls WHERE rowid IN (2, 9000)");
  std::mt19937_64 rng(5);
  for (const char* name : {"packed.db", "rows.db", "gaps.db"}) {
    INFO(name);
    StoreReader r(dir.file(name));
    const Trace all = r.load();
    REQUIRE(r.kernel_count() == all.kernels.size());
    REQUIRE(all.kernels.size() == (std::string(name) == "gaps.db" ? 29'998u : 30'001u));
    std::vector<uint64_t> at = {0, 8191, 8192, 8193, 16383, 16384, 24575, 24576, all.kernels.size() - 1,
                                3, 8192};
    for (int i = 0; i < 300; ++i) at.push_back(rng() % all.kernels.size());
    for (uint64_t i : at) {
      INFO("row " << i);
      REQUIRE(key(r.kernel_at(i)) == key(all.kernels[i]));
    }
    REQUIRE(r.api_call_count() == all.api_calls.size());
    for (uint64_t i :
         {uint64_t(0), uint64_t(8191), uint64_t(8192), uint64_t(all.api_calls.size() - 1), uint64_t(777)})
      REQUIRE(key(r.api_call_at(i)) == key(all.api_calls[i]));
    try {
      (void)r.api_call_at(all.api_calls.size());
      FAIL("an API call past the end was read");
    } catch (const StoreError& e) {
      CHECK(e.reason() == "no API call row " + std::to_string(all.api_calls.size()) + " (the store holds " +
                              std::to_string(all.api_calls.size()) + ")");
    }
    try {
      (void)r.kernel_at(all.kernels.size());
      FAIL("a row past the end was read");
    } catch (const StoreError& e) {
      CHECK(e.reason() == "no kernel row " + std::to_string(all.kernels.size()) + " (the store holds " +
                              std::to_string(all.kernels.size()) + ")");
    }
  }
  // Counts a damaged store claims are refused as decoding refuses them, never summed past 64 bits.
  std::filesystem::copy_file(dir.file("packed.db"), dir.file("claims.db"));
  exec(dir.file("claims.db"), "UPDATE packed_kernels SET rows = 9223372036854775807 WHERE rowid > 1");
  try {
    (void)StoreReader(dir.file("claims.db")).kernel_count();
    FAIL("a count past a block was taken");
  } catch (const StoreError& e) {
    CHECK(e.reason() == "corrupt store: a block of packed_kernels claims 9223372036854775807 rows");
  }
  // A damaged block says so when its row is asked for, as load() does; the blocks before it still read.
  std::filesystem::copy_file(dir.file("packed.db"), dir.file("damaged.db"));
  exec(dir.file("damaged.db"), "UPDATE packed_kernels SET lo = lo + 1 WHERE rowid = 2");
  StoreReader d(dir.file("damaged.db"));
  CHECK(key(d.kernel_at(8191)) == key(in.kernels[8191]));
  try {
    (void)d.kernel_at(8192);
    FAIL("a damaged block was read");
  } catch (const StoreError& e) {
    CHECK(e.file() == dir.file("damaged.db"));
    CHECK(e.reason() == "corrupt store: a block of packed_kernels has bounds that are not its rows'");
  }
}

TEST_CASE(
    "a packed writer refuses a stack id twice, as the rows' key does, and leaves nothing half-written") {
  stepscope::test::ScratchDir dir("store_packed_dup");
  Trace t;
  t.stacks.push_back({5, 0, 1});
  t.stacks.push_back({5, 0, 2});
  for (const bool packed : {true, false}) {
    INFO((packed ? "packed" : "rows"));
    const std::string path = dir.file(packed ? "packed.db" : "rows.db");
    std::string reason;
    try {
      write_store_atomically(t, path, packed);
    } catch (const StoreError& e) {
      reason = e.reason();
    }
    CHECK(reason == (packed ? "stack id 5 written twice"
                            : "SQLite insert failed: UNIQUE constraint failed: stacks.id"));
    CHECK_FALSE(std::filesystem::exists(path));
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(dir.file("")))
      left.push_back(e.path().filename());
    CHECK(left.empty());
  }
}
