// Hostile inputs, one line each: every real trace truncated at 16 points (compressed and decompressed), random
// bit flips, numbers out of range, nesting 10k deep, a 100 MB name, control characters and invalid UTF-8,
// duplicate and backward timestamps, stores with a table missing or a column of the wrong type. Each case runs
// the real `stepscope import CASE -o out/x.db`: it exits 2 with one line "stepscope: CASE: reason" and leaves
// nothing in out/, or (valid but odd input) exits 0 and `stepscope analyze` works on it; never a crash, and
// never more than kMemoryBoundMb of resident memory.
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace fs = std::filesystem;
using namespace stepscope;

namespace {

// Peak resident memory allowed for one `stepscope` run on any case. The largest real trace imports in ~100 MB
// and the 100 MB name case needs a few copies of the name; a sanitized build (ASan's shadow memory and
// quarantine) is allowed three times as much.
#ifdef STEPSCOPE_TEST_ASAN
constexpr long kMemoryBoundMb = 3 * 1024;
#else
constexpr long kMemoryBoundMb = 1024;
#endif
constexpr int kCpuLimitS = 120;  // a hang is a failure, not a stuck suite

struct Outcome {
  int exit_code = -1;
  std::string out, err;
  long max_rss_mb = 0;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(f.good());
}

std::string gunzip(const std::string& path) {
  gzFile g = gzopen(path.c_str(), "rb");
  REQUIRE(g);
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(g, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  gzclose(g);
  return out;
}

Outcome run_cli(const std::vector<std::string>& args, const test::ScratchDir& dir) {
  const std::string out = dir.file("cli.stdout"), err = dir.file("cli.stderr");
  std::fflush(stdout);  // or the child's freopen writes the parent's pending output again
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(126);
    rlimit cpu{kCpuLimitS, kCpuLimitS};
    setrlimit(RLIMIT_CPU, &cpu);
#ifndef STEPSCOPE_TEST_ASAN
    // A runaway allocation fails here instead of swapping the machine (ASan reserves terabytes of address
    // space, so a sanitized build relies on ru_maxrss alone).
    rlimit as{rlim_t(4) << 30, rlim_t(4) << 30};
    setrlimit(RLIMIT_AS, &as);
#endif
    std::vector<char*> argv{const_cast<char*>(STEPSCOPE_CLI)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(STEPSCOPE_CLI, argv.data());
    _exit(127);
  }
  int status = 0;
  rusage ru{};
  REQUIRE(wait4(pid, &status, 0, &ru) == pid);
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  o.out = slurp(out);
  o.err = slurp(err);
  o.max_rss_mb = ru.ru_maxrss / 1024;
  return o;
}

enum class Expect { Error, ErrorOrAnalyzes, Analyzes };

struct Tally {
  int cases = 0, errors = 0, analyzed = 0;
  long max_rss_mb = 0;
};

// Runs one case file through import (and analyze when it imports) and checks the promise.
void check_case(const std::string& input, Expect expect, const test::ScratchDir& dir, Tally& tally) {
  const fs::path out_dir = dir.path() / "out";
  fs::remove_all(out_dir);
  fs::create_directories(out_dir);
  const std::string out_db = (out_dir / "x.db").string();
  Outcome o = run_cli({"import", input, "-o", out_db}, dir);
  INFO("case " << input << "\nexit " << o.exit_code << "\nstderr: " << o.err.substr(0, 2000));
  ++tally.cases;
  tally.max_rss_mb = std::max(tally.max_rss_mb, o.max_rss_mb);
  CHECK(o.max_rss_mb <= kMemoryBoundMb);
  REQUIRE((o.exit_code == 0 || o.exit_code == 2));
  if (o.exit_code == 2) {
    ++tally.errors;
    CHECK(expect != Expect::Analyzes);
    // One line: "stepscope: CASE: reason", the reason non-empty and free of control characters.
    const std::string prefix = "stepscope: " + input + ": ";
    CHECK(o.err.rfind(prefix, 0) == 0);
    CHECK(o.err.size() > prefix.size() + 1);
    CHECK(o.err.back() == '\n');
    CHECK(std::count(o.err.begin(), o.err.end(), '\n') == 1);
    CHECK(o.out.empty());
    size_t left = 0;
    for (auto it = fs::directory_iterator(out_dir); it != fs::directory_iterator(); ++it) {
      INFO("left behind: " << it->path());
      ++left;
    }
    CHECK(left == 0);  // nothing half-written
    return;
  }
  CHECK(expect != Expect::Error);
  ++tally.analyzed;
  CHECK(fs::exists(out_db));
  Outcome a = run_cli({"analyze", out_db}, dir);
  INFO("analyze stderr: " << a.err.substr(0, 2000));
  CHECK(a.exit_code == 0);
  CHECK(a.max_rss_mb <= kMemoryBoundMb);
}

std::vector<fs::path> real_traces() {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(test::traces_dir()))
    if (e.is_regular_file() && e.path().extension() == ".gz") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// A Kineto trace with the given events (JSON text, comma-separated) and a ProfilerStep around them.
std::string kineto(const std::string& events) {
  return R"({"schemaVersion":1,"traceEvents":[)"
         R"({"ph":"X","cat":"user_annotation","name":"ProfilerStep#1","pid":1,"tid":1,"ts":0,"dur":1000},)" +
         events + "]}";
}
std::string kernel(const std::string& name, const std::string& ts, const std::string& dur) {
  return R"({"ph":"X","cat":"kernel","name":")" + name + R"(","pid":0,"tid":7,"ts":)" + ts + R"(,"dur":)" + dur +
         R"(,"args":{"device":0,"stream":7,"correlation":1}})";
}

void exec_sql(const std::string& db, const std::string& sql) {
  sqlite3* h = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &h) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  INFO((err ? err : ""));
  sqlite3_free(err);
  sqlite3_close(h);
  REQUIRE(rc == SQLITE_OK);
}

}  // namespace

TEST_CASE("every real trace truncated at 16 points, compressed and decompressed: exit 2, one line, nothing left") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("hostile_truncated");
  Tally tally;
  for (const auto& trace : real_traces()) {
    const std::string gz = slurp(trace.string());
    const std::string plain = gunzip(trace.string());
    const std::string stem = trace.parent_path().filename().string() + "_" + trace.stem().string();  // x.json / x.sqlite
    for (int k = 1; k <= 16; ++k) {
      const std::string cut_gz = dir.file("cut" + std::to_string(k) + "_" + stem + ".gz");
      spit(cut_gz, gz.substr(0, gz.size() * k / 17));
      check_case(cut_gz, Expect::Error, dir, tally);
      const std::string cut_plain = dir.file("cut" + std::to_string(k) + "_" + stem);
      spit(cut_plain, plain.substr(0, plain.size() * k / 17));
      // A Kineto file cut after a complete event is still no JSON document; an SQLite file cut short may still
      // open (its tables in the first pages) and then import what it holds.
      check_case(cut_plain, stem.ends_with(".sqlite") ? Expect::ErrorOrAnalyzes : Expect::Error, dir, tally);
      fs::remove(cut_gz);
      fs::remove(cut_plain);
    }
  }
  std::printf("truncated: %d cases, %d errors, %d analyzed, peak RSS %ld MB\n", tally.cases, tally.errors,
              tally.analyzed, tally.max_rss_mb);
  CHECK(tally.cases == int(real_traces().size()) * 32);
}

TEST_CASE("random bit flips in small real traces and a store: exit 0 or 2, never a crash") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("hostile_bitflips");
  Tally tally;
  std::mt19937_64 rng(17);
  std::vector<std::pair<std::string, std::string>> seeds;  // name, bytes
  for (const char* rel : {"hta/legacy_categories_tiny.json.gz", "hta/triton_driver_launch.json.gz",
                          "hta/cuda_event_sync.json.gz"}) {
    seeds.emplace_back(fs::path(rel).stem().string(), gunzip(test::trace_path(rel)));  // plain JSON
    seeds.emplace_back(fs::path(rel).filename().string(), slurp(test::trace_path(rel)));  // gzip
  }
  const std::string store = dir.file("seed.db");
  REQUIRE(run_cli({"import", test::trace_path("hta/legacy_categories_tiny.json.gz"), "-o", store}, dir).exit_code == 0);
  seeds.emplace_back("seed.db", slurp(store));
  for (const auto& [name, bytes] : seeds) {
    for (int variant = 0; variant < 8; ++variant) {
      std::string b = bytes;
      const int flips = 1 << (variant % 4);  // 1, 2, 4, 8 bits
      for (int i = 0; i < flips; ++i) b[rng() % b.size()] ^= char(1u << (rng() % 8));
      const std::string path = dir.file("flip" + std::to_string(variant) + "_" + name);
      spit(path, b);
      check_case(path, Expect::ErrorOrAnalyzes, dir, tally);
      fs::remove(path);
    }
  }
  std::printf("bit flips: %d cases, %d errors, %d analyzed\n", tally.cases, tally.errors, tally.analyzed);
  CHECK(tally.cases == int(seeds.size()) * 8);
}

TEST_CASE("numbers out of range, deep nesting, a 100 MB name, control characters, invalid UTF-8, odd timestamps") {
  test::ScratchDir dir("hostile_synthetic");
  Tally tally;
  struct Case {
    std::string name, bytes;
    Expect expect;
  };
  std::vector<Case> cases{
      {"ts_1e308.json", kineto(kernel("k", "1e308", "5")), Expect::ErrorOrAnalyzes},
      {"ts_minus_1e308.json", kineto(kernel("k", "-1e308", "5")), Expect::ErrorOrAnalyzes},
      {"ts_2e19.json", kineto(kernel("k", "18446744073709551616", "5")), Expect::ErrorOrAnalyzes},
      {"ts_int64_max.json", kineto(kernel("k", "9223372036854775807", "9223372036854775807")), Expect::ErrorOrAnalyzes},
      {"dur_negative.json", kineto(kernel("k", "10", "-20")), Expect::ErrorOrAnalyzes},
      {"dur_1e300.json", kineto(kernel("k", "10", "1e300")), Expect::ErrorOrAnalyzes},
      {"ts_string.json", kineto(kernel("k", "\"soon\"", "5")), Expect::ErrorOrAnalyzes},
      {"ts_nan_token.json", kineto(kernel("k", "NaN", "5")), Expect::ErrorOrAnalyzes},
      {"pid_huge.json", kineto(R"({"ph":"X","cat":"cpu_op","name":"op","pid":1e30,"tid":-1e30,"ts":1,"dur":2})"),
       Expect::ErrorOrAnalyzes},
      {"grid_huge.json",
       kineto(R"({"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2,"args":{"grid":[1e20,-5,3],)"
              R"("block":[99999999999,1,1],"device":1e40,"stream":-1e40,"correlation":1.5}})"),
       Expect::ErrorOrAnalyzes},
      {"duplicate_timestamps.json",
       kineto(kernel("a", "100", "50") + "," + kernel("a", "100", "50") + "," + kernel("b", "100", "50")),
       Expect::Analyzes},
      {"backward_timestamps.json",
       kineto(kernel("late", "900", "50") + "," + kernel("early", "10", "50") + "," + kernel("mid", "400", "-1")),
       Expect::Analyzes},
      {"control_chars.json", kineto(kernel("a\\u0000b\\u0001\\u001b[31m\\r\\nc", "10", "5")), Expect::Analyzes},
      {"raw_control_chars.json", kineto(kernel(std::string("a\x01\x1f") + "b", "10", "5")), Expect::Error},
      {"invalid_utf8.json", kineto(kernel("\xff\xfe\xc3\x28", "10", "5")), Expect::ErrorOrAnalyzes},
      {"lone_surrogate.json", kineto(kernel("\\ud800x", "10", "5")), Expect::ErrorOrAnalyzes},
      {"empty.json", "", Expect::Error},
      {"not_a_trace.json", "{\"hello\": [1,2,3]}", Expect::ErrorOrAnalyzes},
      {"array_of_numbers.json", "[1,2,3]", Expect::ErrorOrAnalyzes},
  };
  {
    std::string deep_args = R"({"ph":"X","cat":"cpu_op","name":"op","pid":1,"tid":1,"ts":1,"dur":2,"args":{"a":)";
    deep_args += std::string(10000, '[') + std::string(10000, ']') + "}}";
    cases.push_back({"nesting_10k_in_args.json", kineto(deep_args), Expect::ErrorOrAnalyzes});
    cases.push_back({"nesting_10k_top.json", std::string(10000, '[') + std::string(10000, ']'), Expect::Error});
    std::string objects;
    for (int i = 0; i < 10000; ++i) objects += "{\"a\":";
    objects += "1" + std::string(10000, '}');
    cases.push_back({"nesting_10k_objects.json", kineto(objects), Expect::ErrorOrAnalyzes});
  }
  for (const auto& c : cases) {
    const std::string path = dir.file(c.name);
    spit(path, c.bytes);
    check_case(path, c.expect, dir, tally);
  }
  {
    // 100 MB kernel name: imports (a name is a name) or says why, within the memory bound.
    const std::string path = dir.file("name_100mb.json");
    spit(path, kineto(kernel(std::string(100 << 20, 'N'), "10", "5")));
    check_case(path, Expect::ErrorOrAnalyzes, dir, tally);
    fs::remove(path);
  }
  std::printf("synthetic: %d cases, %d errors, %d analyzed, peak RSS %ld MB\n", tally.cases, tally.errors,
              tally.analyzed, tally.max_rss_mb);
}

TEST_CASE("a store with a table missing, a column of the wrong type or garbage rows: exit 2 naming the store") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("hostile_stores");
  Tally tally;
  const std::string good = dir.file("good.db"), rows = dir.file("rows.db");
  REQUIRE(run_cli({"import", test::trace_path("hta/cuda_event_sync.json.gz"), "-o", good}, dir).exit_code == 0);
  // The same store as rows (schema 4), as older stepscopes wrote it: its tables damaged by plain SQL.
  REQUIRE(run_cli({"export", good, "--format", "sqlite", "-o", rows}, dir).exit_code == 0);
  struct Case {
    std::string name, base, sql;
    Expect expect;
  };
  const std::vector<Case> cases{
      {"no_kernels_table.db", rows, "DROP TABLE kernels", Expect::Error},
      {"no_strings_table.db", rows, "DROP TABLE strings", Expect::Error},
      {"no_meta_table.db", rows, "DROP TABLE meta", Expect::Error},
      {"kernels_text_columns.db", rows,
       "DROP TABLE kernels; CREATE TABLE kernels(start_ns TEXT, end_ns TEXT, device TEXT); "
       "INSERT INTO kernels VALUES ('soon', 'later', 'gpu')",
       Expect::Error},
      {"kernels_text_values.db", rows,
       "UPDATE kernels SET start_ns = 'soon', name = 'x' WHERE rowid IN (SELECT rowid FROM kernels LIMIT 3)",
       Expect::Error},
      {"string_ids_dangling.db", rows, "UPDATE kernels SET name = 999999999", Expect::ErrorOrAnalyzes},
      {"string_id_huge.db", rows, "INSERT INTO strings(id, value) VALUES (4000000000000, 'far')",
       Expect::Error},
      {"schema_version_99.db", rows, "PRAGMA user_version = 99", Expect::Error},
      {"backward_steps.db", rows, "UPDATE steps SET end_ns = start_ns - 1000", Expect::ErrorOrAnalyzes},
      // Packed (schema 6): a block's table gone, its data garbage, text, or claiming rows it does not hold.
      {"no_packed_kernels.db", good, "DROP TABLE packed_kernels", Expect::Error},
      {"packed_garbage.db", good, "UPDATE packed_kernels SET data = randomblob(length(data))", Expect::Error},
      {"packed_text.db", good, "UPDATE packed_api_calls SET data = 'soon'", Expect::Error},
      {"packed_rows_huge.db", good, "UPDATE packed_kernels SET rows = 9223372036854775807", Expect::Error},
      {"packed_bounds_wrong.db", good, "UPDATE packed_kernels SET lo = hi + 1", Expect::Error},
      {"packed_bounds_text.db", good, "UPDATE packed_api_calls SET hi = 'later'", Expect::Error},
      {"packed_version_4.db", good, "PRAGMA user_version = 4", Expect::Error},
      {"no_packed_ranges.db", good, "DROP TABLE packed_ranges", Expect::Error},
      {"packed_ranges_garbage.db", good, "UPDATE packed_ranges SET data = randomblob(length(data))",
       Expect::Error},
      {"packed_ranges_bounds.db", good, "UPDATE packed_ranges SET lo = hi + 1", Expect::Error},
      {"packed_version_5.db", good, "PRAGMA user_version = 5", Expect::Error},  // v5 kept ranges as rows
  };
  for (const auto& c : cases) {
    const std::string path = dir.file(c.name);
    fs::copy_file(c.base, path, fs::copy_options::overwrite_existing);
    exec_sql(path, c.sql);
    check_case(path, c.expect, dir, tally);
  }
  {
    // An Nsight Systems export missing its string table.
    const std::string path = dir.file("nsys_no_stringids.sqlite");
    spit(path, gunzip(test::trace_path("nsys/cloverleaf_a100.sqlite.gz")));
    exec_sql(path, "DROP TABLE StringIds");
    check_case(path, Expect::ErrorOrAnalyzes, dir, tally);
  }
  std::printf("stores: %d cases, %d errors, %d analyzed\n", tally.cases, tally.errors, tally.analyzed);
}

TEST_CASE("a recording whose samples, stacks, steps or data waits point nowhere or run backward: exit 2 naming it") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  test::ScratchDir dir("hostile_references");
  Tally tally;
  // The H100 DataLoader recording as rows (schema 4): its references damaged by plain SQL. Each was read as data:
  // a function "[unknown]" in the slow steps, 61 periodic steps and "No step markers in this trace" for the 60
  // recorded, the GPU's 68.3% input wait as 0.0%.
  const std::string packed = test::decompressed_recording("h100-2026-11-22/input_bound.db.xz", dir);
  REQUIRE(!packed.empty());
  const std::string rows = dir.file("rows.db");
  REQUIRE(run_cli({"export", packed, "--format", "sqlite", "-o", rows}, dir).exit_code == 0);
  const std::vector<std::pair<std::string, std::string>> cases{
      {"sample_stack.db", "UPDATE samples SET stack = 999999 WHERE rowid = 7"},
      {"stack_frame.db", "UPDATE stacks SET frame = -5 WHERE id = 3"},
      {"stack_parent.db", "UPDATE stacks SET parent = 999999 WHERE id = 4"},
      {"steps_backward.db", "UPDATE steps SET end_ns = start_ns - 1000"},
      {"waits_backward.db", "UPDATE data_waits SET end_ns = start_ns - 100000000"},
  };
  for (const auto& [name, sql] : cases) {
    const std::string path = dir.file(name);
    fs::copy_file(rows, path, fs::copy_options::overwrite_existing);
    exec_sql(path, sql);
    const auto r = run_cli({"analyze", path}, dir);
    INFO(name << ": " << r.err);
    CHECK(r.exit_code == 2);
    CHECK(r.err.rfind("stepscope: " + path + ": corrupt store: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    ++tally.cases, ++tally.errors;
  }
  // The undamaged rows analyze as the packed store does.
  CHECK(run_cli({"analyze", rows}, dir).exit_code == 0);
}
