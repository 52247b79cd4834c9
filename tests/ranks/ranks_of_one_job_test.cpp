// Which inputs are the ranks of one job (issue 47): decided by their metadata, never by their names. Two
// flight saves of one real trainer (`run-<time>-stepN.db`, named like rank files) and a folder of unrelated
// real recordings are each analyzed on their own, after one line saying why; the DLRM ranks still combine.
#include <simdjson.h>
#include <catch2/catch.hpp>

#include <filesystem>
#include <regex>
#include <sstream>

#include "stepscope/store/store.h"
#include "test_support.h"

namespace fs = std::filesystem;
namespace test = stepscope::test;

namespace {

const std::string kCli = STEPSCOPE_CLI;

bool have_numpy() {
  return fs::exists(test::venv_python3()) &&
         test::run_shell(test::shell_quote(test::venv_python3()) + " -c 'import numpy' 2>&1").status == 0;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

bool has_line(const std::string& text, const std::string& line) {
  for (const auto& l : lines_of(text))
    if (l == line) return true;
  return false;
}

// Files of `dir` whose names match `pattern`, as paths, sorted (the order a directory is analyzed in).
std::vector<std::string> paths_matching(const fs::path& dir, const std::string& pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (const auto& e : fs::directory_iterator(dir))
    if (std::regex_match(e.path().filename().string(), re)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

test::CommandResult cli(const std::string& args) {
  return test::run_shell(test::shell_quote(kCli) + " " + args);
}

}  // namespace

TEST_CASE("flight saves of one trainer are analyzed one by one, not as ranks") {
  if (!have_numpy()) STEPSCOPE_SKIP("no Python venv with numpy");
  test::ScratchDir dir("ranks_flight_saves");
  // Steps 119 and 239 sleep 400 ms: two saves of one process, run-<time>-step119.db and -step239.db. 600 ms
  // apart and 550 ms before the end: a slow step inside the last save's 0.5 s tail, or at the program's end,
  // is not always saved.
  const auto rec =
      cli("record --flight 5s --step-func train_step --trigger slow-step=3x+150ms -o " +
          test::shell_quote(dir.file("run.db")) + " -- " + test::shell_quote(test::venv_python3()) + " " +
          test::shell_quote(test::source_dir() + "/samples/cpu/python_slow_steps.py") +
          " --steps 350 --step-ms 5 --every 120 --slow-ms 400 2>&1");
  INFO(rec.output);
  REQUIRE(rec.status == 0);
  const auto saves = paths_matching(dir.path(), R"(run-.*-step\d+\.db)");
  REQUIRE(saves.size() >= 2);
  auto meta = stepscope::store::StoreReader(saves[0]).meta();
  for (const auto& save : saves)
    CHECK(stepscope::store::StoreReader(save).meta()["flight.pid"] == meta["flight.pid"]);
  REQUIRE(!meta["flight.pid"].empty());
  REQUIRE(!meta["host"].empty());
  const std::string why = std::to_string(saves.size()) + " flight saves of one process (pid " +
                          meta["flight.pid"] + " on " + meta["host"] + ")";

  // The directory, and the saves named: the reason, then each save's own analysis.
  std::string named;
  for (const auto& save : saves) named += " " + test::shell_quote(save);
  for (const std::string& args : {test::shell_quote(dir.path().string()), named}) {
    const auto a = cli("analyze " + args + " 2>&1");
    INFO(a.output);
    CHECK(a.status == 0);
    const auto lines = lines_of(a.output);
    REQUIRE(lines.size() > 3);
    CHECK(lines[0] == "Not the ranks of one job: " + why + "; each is analyzed on its own.");
    CHECK(lines[1].empty());
    CHECK(lines[2] == saves[0]);
    CHECK(has_line(a.output, saves[1]));
    CHECK(a.output.find("Saved by the flight recorder (slow-step): step 119 took ") != std::string::npos);
    CHECK(a.output.find("Saved by the flight recorder (slow-step): step 239 took ") != std::string::npos);
    CHECK(a.output.find("rank(s)") == std::string::npos);
  }

  // --json: an array of the analyses on stdout, the reason on stderr.
  const auto j = cli("analyze --json " + test::shell_quote(dir.path().string()) + " 2>" +
                     test::shell_quote(dir.file("json.err")));
  REQUIRE(j.status == 0);
  CHECK(test::slurp(dir.file("json.err")) ==
        "stepscope: Not the ranks of one job: " + why + "; each is analyzed on its own.\n");
  simdjson::dom::parser parser;
  simdjson::dom::array analyses;
  REQUIRE(parser.parse(j.output).get_array().get(analyses) == simdjson::SUCCESS);
  REQUIRE(analyses.size() == saves.size());
  for (auto a : analyses) CHECK(std::string_view(a["schema"].get_string()) == "stepscope.analysis/1");

  // One HTML page holds one report: refused, one line naming the directory and why.
  const auto html = cli("report --format html " + test::shell_quote(dir.path().string()) + " 2>&1");
  CHECK(html.status == 2);
  CHECK(html.output == "stepscope: " + dir.path().string() + ": not the ranks of one job (" + why +
                           "): an HTML report holds one; report each file on its own\n");
  const auto md = cli("report --format md " + test::shell_quote(dir.path().string()) + " 2>&1");
  CHECK(md.status == 0);
  CHECK(lines_of(md.output).at(0) == "Not the ranks of one job: " + why + "; each is reported on its own.");
}

TEST_CASE("a folder of unrelated recordings is analyzed one by one, never merged into one finding") {
  test::ScratchDir dir("ranks_unrelated");
  fs::create_directory(dir.file("mixed"));
  const std::string samples = test::binary_dir() + "/samples/cpu/";
  for (const auto& [name, command] : std::vector<std::pair<std::string, std::string>>{
           {"a-hot.db", samples + "hot_loop --iterations 20000000 --steps 3"},
           {"b-blocking.db", samples + "blocking_threads --iterations 20000000"},
           {"c-wide.db", samples + "wide_chain --iterations 20000000"}}) {
    const auto r = cli("record --no-gpu -o " + test::shell_quote(dir.file("mixed/" + name)) + " -- " +
                       command + " 2>&1");
    INFO(r.output);
    REQUIRE(r.status == 0);
  }
  const std::string mixed = dir.file("mixed");
  const auto a = cli("analyze " + test::shell_quote(mixed) + " 2>&1");
  INFO(a.output);
  CHECK(a.status == 0);
  const auto lines = lines_of(a.output);
  REQUIRE(!lines.empty());
  CHECK(lines[0] ==
        "Not the ranks of one job: 3 inputs, none with a rank in its metadata; each is analyzed on "
        "its own.");
  for (const char* name : {"a-hot.db", "b-blocking.db", "c-wide.db"})
    CHECK(has_line(a.output, mixed + "/" + name));
  CHECK(a.output.find("rank(s)") == std::string::npos);

  // diff of two such folders pools their files as runs, with no per-rank section.
  const auto d = cli("diff " + test::shell_quote(mixed) + " " + test::shell_quote(mixed) + " 2>&1");
  INFO(d.output);
  CHECK(d.status == 0);
  CHECK(has_line(d.output, "No per-rank section: " + mixed +
                               ": not the ranks of one job (3 inputs, none with a rank in its metadata)."));
  const auto dj = cli("diff " + test::shell_quote(mixed) + " " + test::shell_quote(mixed) + " --format json");
  REQUIRE(dj.status == 0);
  CHECK(dj.output.find("\"ranks\":{\"compared\":false,\"why\":\"" + mixed +
                       ": not the ranks of one job (3 inputs, none with a rank in its metadata)\"}") !=
        std::string::npos);

  // An imported trace that says `"rank": 0` and nothing else beside them is not a job either.
  if (!test::have_traces()) STEPSCOPE_SKIP("shared traces not present");
  fs::copy_file(test::trace_path("hta/alexnet_a100.json.gz"), dir.file("mixed/d-alexnet.json.gz"));
  const auto k = cli("analyze " + test::shell_quote(mixed) + " 2>&1");
  INFO(k.output);
  CHECK(k.status == 0);
  CHECK(lines_of(k.output).at(0) ==
        "Not the ranks of one job: only 1 of 4 inputs has a rank in its metadata (" + mixed +
            "/d-alexnet.json.gz); each is analyzed on its own.");
  // Two such traces of unrelated programs: both "rank 0".
  const auto two = cli("analyze " + test::shell_quote(test::trace_path("hta/alexnet_a100.json.gz")) + " " +
                       test::shell_quote(test::trace_path("hta/rank_non_gpu.json.gz")) + " 2>&1");
  CHECK(two.status == 0);
  CHECK(lines_of(two.output).at(0) ==
        "Not the ranks of one job: rank 0 in both " + test::trace_path("hta/alexnet_a100.json.gz") + " and " +
            test::trace_path("hta/rank_non_gpu.json.gz") + "; each is analyzed on its own.");
}

TEST_CASE("the 8 DLRM ranks still analyze as one job") {
  if (!test::have_traces()) STEPSCOPE_SKIP("shared traces not present");
  const auto a = cli("analyze " + test::shell_quote(test::trace_path("param")) + " 2>&1");
  INFO(a.output);
  CHECK(a.status == 0);
  CHECK(lines_of(a.output).at(0) == "8 rank(s), 1 step(s) aligned by step index");
  CHECK(a.output.find("rank 7 is the straggler") != std::string::npos);
}
