// The `stepscope` command as a user runs it: a real child process, its output and exit code.
#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "stepscope/store/store.h"
#include "test_support.h"

namespace {
struct Run {
  int code = -1;
  std::string out;  // stdout and stderr together
};
Run run(const std::string& args) {
  Run r;
  std::string cmd = std::string(STEPSCOPE_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
}  // namespace

TEST_CASE("the version flag prints the version") {
  Run r = run("--version");
  CHECK(r.code == 0);
  CHECK(r.out.rfind("stepscope 0.", 0) == 0);
}

TEST_CASE("info prints counts, span, devices and metadata of a store") {
  using namespace stepscope::store;
  stepscope::test::ScratchDir dir("cli_info");
  Trace t;
  t.meta["source_format"] = "test";
  t.devices.push_back({0, t.intern("NVIDIA A100-SXM4-80GB"), 8, 0, 108, 80LL << 30, t.intern("nvidia")});
  t.processes.push_back({4242, t.intern("python3"), 1});
  for (int i = 0; i < 3; ++i) t.kernels.push_back(Kernel{.start = 1'000'000'000LL * i, .end = 1'000'000'000LL * i + 500, .name = t.intern("k")});
  write_store_atomically(t, dir.file("run.db"));

  Run r = run("info " + dir.file("run.db"));
  CHECK(r.code == 0);
  CHECK(r.out.find("kernels") != std::string::npos);
  CHECK(r.out.find("time span: 2.000001 s") != std::string::npos);
  CHECK(r.out.find("NVIDIA A100-SXM4-80GB (cc 8.0, 108 SMs, 80.0 GiB)") != std::string::npos);
  CHECK(r.out.find("4242 python3") != std::string::npos);
  CHECK(r.out.find("source_format = test") != std::string::npos);

  Run j = run("info --json " + dir.file("run.db"));
  CHECK(j.code == 0);
  CHECK(j.out.find("\"kernels\":3") != std::string::npos);
  CHECK(j.out.find("\"time_span_ns\":[0,2000000500]") != std::string::npos);
  CHECK(j.out.find("\"sm_count\":108") != std::string::npos);
}

TEST_CASE("info on bad input: one line naming the file, exit code 2") {
  stepscope::test::ScratchDir dir("cli_bad");
  std::ofstream(dir.file("notes.txt")) << "not a store\n";
  Run r = run("info " + dir.file("notes.txt"));
  CHECK(r.code == 2);
  CHECK(r.out == "stepscope: " + dir.file("notes.txt") + ": not an SQLite database\n");

  Run m = run("info " + dir.file("absent.db"));
  CHECK(m.code == 2);
  CHECK(m.out == "stepscope: " + dir.file("absent.db") + ": no such file\n");
}

TEST_CASE("help lists only implemented subcommands") {
  Run r = run("--help");
  CHECK(r.code == 0);
  CHECK(r.out.find("info") != std::string::npos);
  CHECK(r.out.find("attach") == std::string::npos);  // not implemented: must not be offered
}
