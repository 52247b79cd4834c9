#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope::store;

TEST_CASE("a writer killed mid-write leaves a store holding every committed row") {
  stepscope::test::ScratchDir dir("store_crash");
  const std::string db = dir.file("crash.db");
  int out[2];
  REQUIRE(pipe(out) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execl(STORE_CRASH_WRITER, STORE_CRASH_WRITER, db.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  long long committed = 0;
  char line[128];
  while (committed < 50000 && std::fgets(line, sizeof line, f)) std::sscanf(line, "committed %lld", &committed);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // Drain what the child reported before it died: those commits happened too.
  while (std::fgets(line, sizeof line, f)) std::sscanf(line, "committed %lld", &committed);
  std::fclose(f);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(committed >= 50000);

  StoreReader r(db);
  Trace t = r.load();
  CHECK(static_cast<long long>(t.kernels.size()) >= committed);
  CHECK(t.kernels.size() % 1000 == 0);  // whole transactions only
  CHECK(t.str(t.kernels.front().name) == "crash_kernel");
}
