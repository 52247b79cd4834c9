// The `stepscope` command as a user runs it: a real child process, its output and exit code.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <string>

#include "stepscope/store/store.h"
#include "test_support.h"

namespace {
// stdout and stderr together, and the exit code.
stepscope::test::CommandResult run(const std::string& args) {
  return stepscope::test::run_shell(std::string(STEPSCOPE_CLI) + " " + args + " 2>&1");
}
}  // namespace

TEST_CASE("the version flag prints the version") {
  auto r = run("--version");
  CHECK(r.status == 0);
  CHECK(r.output.rfind("stepscope 0.", 0) == 0);
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

  auto r = run("info " + dir.file("run.db"));
  CHECK(r.status == 0);
  CHECK(r.output.find("kernels") != std::string::npos);
  CHECK(r.output.find("time span: 2.000001 s") != std::string::npos);
  CHECK(r.output.find("NVIDIA A100-SXM4-80GB (cc 8.0, 108 SMs, 80.0 GiB)") != std::string::npos);
  CHECK(r.output.find("4242 python3") != std::string::npos);
  CHECK(r.output.find("source_format = test") != std::string::npos);

  auto j = run("info --json " + dir.file("run.db"));
  CHECK(j.status == 0);
  CHECK(j.output.find("\"kernels\":3") != std::string::npos);
  CHECK(j.output.find("\"time_span_ns\":[0,2000000500]") != std::string::npos);
  CHECK(j.output.find("\"sm_count\":108") != std::string::npos);
}

TEST_CASE("info on bad input: one line naming the file, exit code 2") {
  stepscope::test::ScratchDir dir("cli_bad");
  std::ofstream(dir.file("notes.txt")) << "not a store\n";
  auto r = run("info " + dir.file("notes.txt"));
  CHECK(r.status == 2);
  CHECK(r.output == "stepscope: " + dir.file("notes.txt") + ": not an SQLite database\n");

  auto m = run("info " + dir.file("absent.db"));
  CHECK(m.status == 2);
  CHECK(m.output == "stepscope: " + dir.file("absent.db") + ": no such file\n");
}

TEST_CASE("help lists only implemented subcommands") {
  auto r = run("--help");
  CHECK(r.status == 0);
  CHECK(r.output.find("info") != std::string::npos);
  CHECK(r.output.find("attach") == std::string::npos);  // not implemented: must not be offered
}
