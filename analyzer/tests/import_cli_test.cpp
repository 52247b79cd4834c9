// `stepscope import` / `stepscope export` as a user runs them: exit codes, one-line errors, atomic output.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
namespace fs = std::filesystem;

namespace {

std::string cli() { return test::binary_dir() + "/cli/stepscope"; }

struct Run {
  int code = -1;
  std::string err;
};

Run run(const std::string& args, const test::ScratchDir& dir) {
  std::string err_file = dir.file("stderr.txt");
  int status = std::system((cli() + " " + args + " >/dev/null 2>" + err_file).c_str());
  Run r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  fs::remove(err_file);
  return r;
}

size_t files_in(const fs::path& dir) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

}  // namespace

TEST_CASE("stepscope import: bad input exits 2 with one line naming the file, leaves nothing") {
  if (!fs::exists(cli())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("import_cli_bad");
  std::ofstream(dir.file("bad.json")) << "{\"traceEvents\": [ {\"ph\": ";
  std::ofstream(dir.file("notrace.json")) << "{\"x\": 1}";
  for (const char* name : {"bad.json", "notrace.json", "missing.json"}) {
    std::string in = dir.file(name);
    Run r = run("import " + in + " -o " + dir.file("out.db"), dir);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.err.rfind("stepscope: " + in + ": ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!fs::exists(dir.file("out.db")));
  }
  CHECK(files_in(dir.path()) == 2);  // only the two inputs
}

TEST_CASE("a symlink loop, one file given twice and a rank link to nothing: one line naming it, exit 2") {
  if (!fs::exists(cli())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("import_cli_links");
  const std::string a = dir.file("a.json"), b = dir.file("b.json");
  fs::create_symlink(b, a), fs::create_symlink(a, b);
  // The loop: named as what it is, in each command's own form (was "filesystem error: status: …" from analyze and
  // diff, "no such file" from the others).
  for (const std::string& cmd : {"analyze " + a, "diff " + a + " " + b, "info " + a, "import " + a + " -o " +
                                dir.file("o.db"), "report " + a}) {
    Run r = run(cmd, dir);
    INFO(cmd << ": " << r.err);
    CHECK(r.code == 2);
    CHECK(r.err == "stepscope: " + a + ": cannot read: Too many levels of symbolic links\n");
  }
  // One trace twice is every row twice: refused (import merged it, exit 0, 490 kernels for 245).
  const std::string t = dir.file("t.json");
  std::ofstream(t) << R"({"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10,"dur":2,
    "args":{"device":0,"stream":7}}]})";
  fs::create_hard_link(t, dir.file("t_link.json"));
  for (const std::string& again : {t, dir.file("t_link.json")}) {
    Run r = run("import " + t + " " + again + " -o " + dir.file("o.db"), dir);
    INFO(r.err);
    CHECK(r.code == 2);
    CHECK(r.err == "stepscope: " + again + ": given twice (as " + t + "): each file once\n");
    CHECK(!fs::exists(dir.file("o.db")));
  }
  // A folder of ranks with a link named as a rank that leads nowhere: a rank lost, said (it was passed over).
  const std::string ranks = dir.file("ranks");
  fs::create_directories(ranks);
  fs::copy_file(t, ranks + "/rank0.json");
  fs::create_symlink(dir.file("nowhere.json"), ranks + "/rank1.json");
  Run r = run("analyze " + ranks, dir);
  INFO(r.err);
  CHECK(r.code == 2);
  CHECK(r.err == "stepscope: " + ranks + "/rank1.json: a symbolic link to nothing readable (no such file); remove it "
                 "from the folder or name the files to read\n");
}

TEST_CASE("stepscope import then export: counts survive, output written atomically") {
  if (!fs::exists(cli())) STEPSCOPE_SKIP("stepscope binary not built");
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("import_cli_good");
  std::string src = test::trace_path("hta/alexnet_a100.json.gz");
  Run r = run("import " + src + " -o " + dir.file("run.db"), dir);
  INFO(r.err);
  REQUIRE(r.code == 0);
  store::Trace direct = analyzer::load_trace(src);
  store::Trace stored = store::StoreReader(dir.file("run.db")).load();
  CHECK(stored.kernels.size() == direct.kernels.size());
  CHECK(stored.syncs.size() == direct.syncs.size());
  CHECK(stored.meta.at("source_format") == "kineto-json");

  r = run("export " + dir.file("run.db") + " --format chrome -o " + dir.file("trace.json.gz"), dir);
  REQUIRE(r.code == 0);
  store::Trace back = analyzer::load_trace(dir.file("trace.json.gz"));
  CHECK(back.kernels.size() == direct.kernels.size());
  CHECK(back.api_calls.size() == direct.api_calls.size());
  CHECK(files_in(dir.path()) == 2);  // run.db and trace.json.gz, no temporaries

  r = run("export " + dir.file("run.db") + " --format svg -o " + dir.file("x.svg"), dir);
  CHECK(r.code == 2);
  CHECK(!fs::exists(dir.file("x.svg")));
}

TEST_CASE("an output that is one of the inputs is refused: nothing is overwritten") {
  // `report r.db -o r.db`, a diff's --md over its baseline, export or import onto the file read: each replaced the
  // store or trace with its output and exited 0.
  if (!fs::exists(cli())) STEPSCOPE_SKIP("stepscope binary not built");
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("output_is_input");
  const std::string trace = dir.file("t.json.gz");
  fs::copy_file(test::trace_path("hta/cuda_event_sync.json.gz"), trace);
  REQUIRE(run("import " + trace + " -o " + dir.file("s.db"), dir).code == 0);
  const std::string store = dir.file("s.db");
  const auto trace_size = fs::file_size(trace), store_size = fs::file_size(store);
  const std::string rel_store = fs::relative(store).string();  // the same file by another name
  // A folder's file among several inputs, and a diff's config.
  fs::create_directories(dir.file("job"));
  const std::string in_job = dir.file("job/rank.json.gz"), config = dir.file("c.toml");
  fs::copy_file(trace, in_job);
  std::ofstream(config) << "[thresholds]\n";
  for (const std::string& args :
       {"report " + store + " -o " + store, "report " + store + " -f md -o " + rel_store,
        "report " + dir.file("job") + " " + trace + " -f md -o " + in_job,
        "diff " + store + " " + trace + " --config " + config + " --md " + config,
        "diff " + store + " " + trace + " --md " + store, "diff " + store + " " + trace + " --json " + trace,
        "export " + store + " --format svg -o " + store, "export " + store + " --format sqlite -o " + store,
        "import " + trace + " -o " + trace}) {
    Run r = run(args, dir);
    INFO(args << "\n" << r.err);
    CHECK(r.code == 2);
    CHECK(r.err.find(": is an input of this command: name another output (nothing written)\n") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  CHECK(fs::file_size(trace) == trace_size);
  CHECK(fs::file_size(store) == store_size);
  CHECK(fs::file_size(in_job) == trace_size);
  CHECK(fs::file_size(config) == 13);
  CHECK(files_in(dir.path()) == 3);
}

TEST_CASE("events left out as malformed are said by analyze, report and diff alike") {
  if (!fs::exists(cli())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("import_cli_malformed");
  const std::string f = dir.file("m.json");
  std::ofstream(f) << R"({"traceEvents":[
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":10,"dur":2,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":"20","dur":2,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":30,"dur":2,"args":{"device":0,"stream":7}}]})";
  const std::string note =
      "The file held 1 event that could not be read and was left out (1 ts not a time): every figure here is over "
      "the rest.";
  for (const std::string& cmd : {std::string("analyze "), std::string("report "), std::string("report -f md "), "diff " + f + " "}) {
    const auto r = test::run_shell(cli() + " " + cmd + f + " 2>&1");
    INFO(cmd << ": " << r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find(note) != std::string::npos);
  }
}
