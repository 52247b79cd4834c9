#include <sqlite3.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope::store;

namespace {
std::string open_error(const std::string& path) {
  try {
    StoreReader r(path);
  } catch (const StoreError& e) {
    CHECK(e.file() == path);
    std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);  // one line
    return e.reason();
  }
  return "(opened)";
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}
}  // namespace

TEST_CASE("bad files give one-line errors naming the file and the reason") {
  stepscope::test::ScratchDir dir("store_bad");
  CHECK(open_error(dir.file("missing.db")) == "no such file");

  write_file(dir.file("empty.db"), "");
  CHECK(open_error(dir.file("empty.db")) == "empty file, not a stepscope store");

  write_file(dir.file("text.db"), "hello, this is not a database\n");
  CHECK(open_error(dir.file("text.db")) == "not an SQLite database");

  write_file(dir.file("trace.json"), "{\"traceEvents\": []}");
  CHECK(open_error(dir.file("trace.json")) == "a trace file, not a stepscope store (use `stepscope import`)");

  {
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("other.db").c_str(), &db);
    sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  CHECK(open_error(dir.file("other.db")) == "an SQLite database, but not a stepscope store");

  {
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("nsys.sqlite").c_str(), &db);
    sqlite3_exec(db, "CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT);", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  CHECK(open_error(dir.file("nsys.sqlite")) ==
        "an Nsight Systems SQLite export, not a stepscope store (use `stepscope import`)");
}

TEST_CASE("a store of a newer schema version is refused") {
  stepscope::test::ScratchDir dir("store_newer");
  write_store_atomically(Trace{}, dir.file("new.db"));
  {
    sqlite3* db = nullptr;
    sqlite3_open(dir.file("new.db").c_str(), &db);
    sqlite3_exec(db, ("PRAGMA user_version=" + std::to_string(kSchemaVersion + 1)).c_str(), nullptr, nullptr,
                 nullptr);
    sqlite3_close(db);
  }
  CHECK(open_error(dir.file("new.db")) == "schema version " + std::to_string(kSchemaVersion + 1) +
                                              " is newer than this stepscope reads (" +
                                              std::to_string(kSchemaVersion) + ")");
}

TEST_CASE("a truncated store is reported as corrupt") {
  stepscope::test::ScratchDir dir("store_truncated");
  Trace t;
  for (int i = 0; i < 20000; ++i) t.kernels.push_back(Kernel{.start = i, .end = i + 1, .name = t.intern("k" + std::to_string(i % 500))});
  write_store_atomically(t, dir.file("full.db"));
  std::ifstream in(dir.file("full.db"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(bytes.size() > 8192);
  write_file(dir.file("cut.db"), bytes.substr(0, bytes.size() / 3));
  std::string reason;
  try {
    StoreReader r(dir.file("cut.db"));
    (void)r.load();
    reason = "(read)";
  } catch (const StoreError& e) {
    reason = e.reason();
  }
  INFO(reason);
  CHECK(reason.rfind("corrupt or truncated store", 0) == 0);
}
