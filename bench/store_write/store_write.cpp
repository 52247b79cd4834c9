// bench/store_write: rows/s of StoreWriter, packed (schema 5, the default) and as rows (schema 4), beside a
// bare SQLite prepared-insert loop of the same rows, same pragmas and transaction size (the limit a writer of
// rows can approach); and each store's bytes a row and the time StoreReader::load takes to read it back.
// Goals: packed >= 1M rows/s, rows >= 50% of bare. These rows are regular (constant steps): their packed
// bytes say nothing of a recording's — bench/store_size measures those on real ones.
#include <fmt/format.h>
#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "stepscope/store/store.h"

using namespace stepscope::store;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kBatch = 65536;

std::vector<Kernel> make_kernels(size_t n) {
  std::vector<Kernel> v(n);
  for (size_t i = 0; i < n; ++i) {
    Kernel& k = v[i];
    k.start = int64_t(i) * 1000;
    k.end = k.start + 700;
    k.stream = int64_t(i % 8);
    k.correlation = int64_t(i + 1);
    k.grid_x = 80;
    k.block_x = 256;
    k.registers = 64;
    k.name = int64_t(i % 200) + 1;
  }
  return v;
}

std::vector<Sample> make_samples(size_t n) {
  std::vector<Sample> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = Sample{int64_t(i) * 1000, 100, int64_t(100 + i % 4), int64_t(i % 5000 + 1), true};
  return v;
}

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

void must(int rc, sqlite3* db) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE) {
    fmt::print(stderr, "sqlite: {}\n", sqlite3_errmsg(db));
    std::exit(1);
  }
}

// The bare loop: one table with the same columns, prepared insert, 64k-row transactions, WAL, sync NORMAL.
template <class Row, class Bind>
double bare(const std::string& path, const char* ddl, const char* insert, const std::vector<Row>& rows, Bind bind) {
  std::filesystem::remove(path);
  std::filesystem::remove(path + "-wal");
  sqlite3* db = nullptr;
  sqlite3_open(path.c_str(), &db);
  must(sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;", nullptr,
                    nullptr, nullptr), db);
  must(sqlite3_exec(db, ddl, nullptr, nullptr, nullptr), db);
  sqlite3_stmt* s = nullptr;
  must(sqlite3_prepare_v2(db, insert, -1, &s, nullptr), db);
  auto t0 = Clock::now();
  size_t in_txn = 0;
  sqlite3_exec(db, "BEGIN", nullptr, nullptr, nullptr);
  for (const Row& r : rows) {
    bind(s, r);
    must(sqlite3_step(s), db);
    sqlite3_reset(s);
    if (++in_txn == kBatch) {
      sqlite3_exec(db, "COMMIT; BEGIN", nullptr, nullptr, nullptr);
      in_txn = 0;
    }
  }
  sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
  double t = secs(t0);
  sqlite3_finalize(s);
  sqlite3_close(db);
  return t;
}

struct Written {
  double seconds = 0, load_seconds = 0;
  int64_t bytes = 0;
};

template <class Row>
Written writer(const std::string& path, const std::vector<Row>& rows, bool packed) {
  WriterOptions options;
  options.packed = packed;
  Written out;
  {
    StoreWriter w(path, options);
    for (int i = 1; i <= 200; ++i) w.intern("kernel_" + std::to_string(i));
    w.flush();
    auto t0 = Clock::now();
    for (const Row& r : rows) w.add(r);
    w.flush();
    out.seconds = secs(t0);
    w.close();
  }
  out.bytes = int64_t(std::filesystem::file_size(path));
  auto t0 = Clock::now();
  Trace t = StoreReader(path).load();
  out.load_seconds = secs(t0);
  return out;
}

void report(const char* what, size_t n, const Written& packed, const Written& rows, double tb) {
  const double rp = double(n) / packed.seconds, rr = double(n) / rows.seconds, rb = double(n) / tb;
  fmt::print(
      "{:<8} {:>9} {:>12.0f} {:>12.0f} {:>12.0f} {:>6.0f}% {:>9.1f} {:>9.1f} {:>8.2f} {:>8.2f}   {}\n", what,
      n, rp, rr, rb, 100.0 * rr / rb, double(packed.bytes) / double(n), double(rows.bytes) / double(n),
      packed.load_seconds, rows.load_seconds,
      (rp >= 1e6 && rr >= 0.5 * rb) ? "goal met" : "below goal (packed >= 1M rows/s, rows >= 50% of bare)");
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2'000'000;
  std::string dir = std::filesystem::temp_directory_path() / "stepscope_bench_store";
  std::filesystem::create_directories(dir);
  auto kernels = make_kernels(n);
  auto samples = make_samples(n);

  double tb_k = bare(dir + "/bare_k.db",
                     "CREATE TABLE kernels(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, device INTEGER NOT NULL,"
                     " context INTEGER NOT NULL, stream INTEGER NOT NULL, correlation INTEGER NOT NULL, grid_x INTEGER"
                     " NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL, block_x INTEGER NOT NULL, block_y"
                     " INTEGER NOT NULL, block_z INTEGER NOT NULL, registers INTEGER NOT NULL, shared_memory INTEGER"
                     " NOT NULL, name INTEGER NOT NULL, graph_id INTEGER NOT NULL, pid INTEGER NOT NULL,"
                     " graph_node_id INTEGER NOT NULL DEFAULT 0)",
                     "INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", kernels,
                     [](sqlite3_stmt* s, const Kernel& k) {
                       int64_t v[] = {k.start, k.end, k.device, k.context, k.stream, k.correlation, k.grid_x,
                                      k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers,
                                      k.shared_memory, k.name, k.graph_id, k.pid, k.graph_node_id};
                       for (int i = 0; i < 18; ++i) sqlite3_bind_int64(s, i + 1, v[i]);
                     });
  const Written packed_k = writer(dir + "/packed_k.db", kernels, true),
                rows_k = writer(dir + "/rows_k.db", kernels, false);
  double tb_s = bare(dir + "/bare_s.db",
                     "CREATE TABLE samples(time_ns INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,"
                     " stack INTEGER NOT NULL, on_cpu INTEGER NOT NULL)",
                     "INSERT INTO samples VALUES (?,?,?,?,?)", samples, [](sqlite3_stmt* s, const Sample& r) {
                       sqlite3_bind_int64(s, 1, r.time);
                       sqlite3_bind_int64(s, 2, r.pid);
                       sqlite3_bind_int64(s, 3, r.tid);
                       sqlite3_bind_int64(s, 4, r.stack);
                       sqlite3_bind_int64(s, 5, r.on_cpu);
                     });
  const Written packed_s = writer(dir + "/packed_s.db", samples, true),
                rows_s = writer(dir + "/rows_s.db", samples, false);

  fmt::print("bench/store_write: {} rows per table, 64k-row transactions, WAL, synchronous=NORMAL\n", n);
  fmt::print("{:<8} {:>9} {:>12} {:>12} {:>12} {:>7} {:>9} {:>9} {:>8} {:>8}\n", "table", "rows",
             "packed r/s", "rows r/s", "bare r/s", "of bare", "packed B", "rows B", "load p s", "load r s");
  report("kernels", n, packed_k, rows_k, tb_k);
  report("samples", n, packed_s, rows_s, tb_s);
  std::filesystem::remove_all(dir);
  return 0;
}
