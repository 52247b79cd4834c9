// bench/store_write: rows/s of StoreWriter beside a bare SQLite prepared-insert loop of the same rows,
// same pragmas and transaction size (the limit the writer can approach). Goal: >= 1M rows/s, >= 50% of bare.
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

template <class Row>
double writer(const std::string& path, const std::vector<Row>& rows) {
  StoreWriter w(path);
  for (int i = 1; i <= 200; ++i) w.intern("kernel_" + std::to_string(i));
  w.flush();
  auto t0 = Clock::now();
  for (const Row& r : rows) w.add(r);
  w.flush();
  double t = secs(t0);
  w.close();
  return t;
}

void report(const char* what, size_t n, double tw, double tb) {
  double rw = double(n) / tw, rb = double(n) / tb;
  fmt::print("{:<10} {:>10} {:>14.0f} {:>14.0f} {:>9.0f}%   {}\n", what, n, rw, rb, 100.0 * rw / rb,
             (rw >= 1e6 && rw >= 0.5 * rb) ? "goal met" : "below goal (>= 1M rows/s and >= 50% of bare)");
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
  double tw_k = writer(dir + "/writer_k.db", kernels);
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
  double tw_s = writer(dir + "/writer_s.db", samples);

  fmt::print("bench/store_write: {} rows per table, 64k-row transactions, WAL, synchronous=NORMAL\n", n);
  fmt::print("{:<10} {:>10} {:>14} {:>14} {:>10}\n", "table", "rows", "writer rows/s", "bare rows/s", "of bare");
  report("kernels", n, tw_k, tb_k);
  report("samples", n, tw_s, tb_s);
  std::filesystem::remove_all(dir);
  return 0;
}
