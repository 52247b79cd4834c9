// Private by default: a recording's store, part files and symbol cache are the owner's alone (0600 files in
// 0700 folders, whatever the umask), the collector opens no socket, and `meta` records the command line,
// never the environment.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {
std::string stepscope_bin() { return test::binary_dir() + "/cli/stepscope"; }

int mode_of(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? int(st.st_mode & 07777) : -1;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("under umask 000 the store, part files and symbol cache are 0600 in 0700 folders, no socket opened") {
  test::ScratchDir dir("collector_privacy");
  const std::string db = dir.file("private.db"), cache = dir.file("symbols");
  // The target itself looks, while recorded: the parts folder and its files, and its own and the launcher's
  // open files (a socket shows as "socket:[inode]").
  const std::string script =
      "sleep 0.8; stat -c 'mode %a %F' \"$STEPSCOPE_PARTS_DIR\" \"$STEPSCOPE_PARTS_DIR\"/*.db; "
      "ls -l /proc/$$/fd /proc/$PPID/fd | grep -c socket:; "
      "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done";  // CPU time, so samples get symbolized and cached
  auto r = test::run_shell("umask 000; STEPSCOPE_SYMBOL_CACHE=" + test::shell_quote(cache) + " " +
                           test::shell_quote(stepscope_bin()) + " record --no-gpu -o " + test::shell_quote(db) +
                           " -- sh -c " + test::shell_quote(script) + " 2>" + test::shell_quote(dir.file("err")));
  INFO(r.output << slurp(dir.file("err")));
  REQUIRE(r.status == 0);
  CHECK(r.output.find("mode 700 directory\n") != std::string::npos);
  CHECK(r.output.find("mode 600 regular") != std::string::npos);  // at least the shell's own part
  CHECK(r.output.find("mode 6") != std::string::npos);
  for (const char* bad : {"mode 644", "mode 666", "mode 755", "mode 777"}) CHECK(r.output.find(bad) == std::string::npos);
  CHECK(r.output.substr(r.output.rfind('\n', r.output.size() - 2) + 1) == "0\n");  // no socket in either process
  CHECK(mode_of(db) == 0600);
  CHECK(mode_of(cache) == 0700);
  int cache_files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cache)) {
    INFO(e.path());
    CHECK(mode_of(e.path().string()) == 0600);
    ++cache_files;
  }
  CHECK(cache_files >= 1);
}

TEST_CASE("meta holds the command line, not the environment: an exported secret appears nowhere in the store") {
  test::ScratchDir dir("collector_no_env");
  const std::string db = dir.file("env.db");
  const std::string secret = "s3cr3t-token-4f9a1c";
  auto r = test::run_shell("AWS_SECRET_ACCESS_KEY=" + secret + " WANDB_API_KEY=" + secret + " " +
                           test::shell_quote(stepscope_bin()) + " record --no-gpu -o " + test::shell_quote(db) +
                           " -- sh -c 'echo recorded' 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.meta.at("command") == "sh -c echo recorded");  // argv joined by spaces
  for (const auto& [k, v] : t.meta) {
    INFO(k << " = " << v);
    CHECK(v.find(secret) == std::string::npos);
  }
  // Nowhere else either: not in any string, not in the file's bytes.
  CHECK(t.strings.find(secret) == -1);
  CHECK(slurp(db).find(secret) == std::string::npos);
}
