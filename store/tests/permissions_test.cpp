// Stores hold command lines, paths and source lines: they are created 0600 whatever the umask.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope::store;

namespace {
// Permission bits of `path`, or -1 when it does not exist.
int mode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int(st.st_mode & 07777) : -1;
}

// Sets the process umask for one scope.
class Umask {
 public:
  explicit Umask(mode_t m) : old_(::umask(m)) {}
  ~Umask() { ::umask(old_); }

 private:
  mode_t old_;
};
}  // namespace

TEST_CASE("a store, its WAL and shared-memory files are 0600 under umask 000, 022 and 0277") {
  stepscope::test::ScratchDir dir("store_permissions");
  for (mode_t m : {mode_t(0), mode_t(022), mode_t(0277)}) {
    INFO("umask " << m);
    Umask scoped(m);
    const std::string db = dir.file("perm" + std::to_string(m) + ".db");
    StoreWriter w(db);
    w.set_meta("command", "train.py --secret-path /home/u/data");
    w.flush();
    // Open writer in WAL mode: the -wal and -shm files exist now and must be as private as the store.
    CHECK(mode_of(db) == 0600);
    CHECK(mode_of(db + "-wal") == 0600);
    CHECK(mode_of(db + "-shm") == 0600);
    w.close();
    CHECK(mode_of(db) == 0600);
    CHECK(StoreReader(db).meta().at("command") == "train.py --secret-path /home/u/data");
  }
}

TEST_CASE("a store written atomically (import, record) is 0600 and replaces a world-readable file") {
  stepscope::test::ScratchDir dir("store_permissions_atomic");
  Umask scoped(0);
  const std::string db = dir.file("atomic.db");
  {
    FILE* f = std::fopen(db.c_str(), "w");  // an old, world-readable file at the target path
    REQUIRE(f);
    std::fclose(f);
    ::chmod(db.c_str(), 0666);
  }
  Trace t;
  t.meta["command"] = "python train.py";
  write_store_atomically(t, db);
  CHECK(mode_of(db) == 0600);
  CHECK(StoreReader(db).meta().at("command") == "python train.py");
}

TEST_CASE("a store cannot be created in a missing folder: one line naming the file and why") {
  stepscope::test::ScratchDir dir("store_permissions_missing");
  const std::string db = dir.file("no/such/dir/x.db");
  try {
    StoreWriter w(db);
    FAIL("no error");
  } catch (const StoreError& e) {
    CHECK(std::string(e.what()) == db + ": cannot create store: No such file or directory");
  }
  CHECK(mode_of(db) == -1);
}

TEST_CASE("a report or export written atomically is 0600, whole, and says why it could not be written") {
  stepscope::test::ScratchDir dir("store_permissions_file");
  Umask scoped(0);
  const std::string out = dir.file("trace.json");
  {
    FILE* f = std::fopen(out.c_str(), "w");  // an old, world-readable file at the target path
    REQUIRE(f);
    std::fputs("old", f);
    std::fclose(f);
    ::chmod(out.c_str(), 0666);
  }
  write_file_atomically(out, R"({"otherData":{"command":"train.py --token abc"}})");
  CHECK(mode_of(out) == 0600);
  std::ifstream in(out);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) ==
        R"({"otherData":{"command":"train.py --token abc"}})");
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 1);  // no temporary left

  const std::string missing = dir.file("no/such/dir/report.html");
  try {
    write_file_atomically(missing, "x");
    FAIL("no error");
  } catch (const StoreError& e) {
    CHECK(std::string(e.what()) == missing + ": cannot create: No such file or directory");
  }
  // A folder is refused before a temporary is made (it failed at the rename, "cannot replace: Is a
  // directory"), and kept.
  const std::string folder = dir.file("a_folder");
  std::filesystem::create_directory(folder);
  try {
    write_file_atomically(folder, "x");
    FAIL("no error");
  } catch (const StoreError& e) {
    CHECK(std::string(e.what()) == folder + ": is a folder: name a file in it");
  }
  CHECK(std::filesystem::is_directory(folder));
  CHECK(std::distance(std::filesystem::directory_iterator(dir.path()), {}) == 2);
}
