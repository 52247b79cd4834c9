// `stepscope analyze` end to end: the real binary on real files.
#include <simdjson.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

struct Run {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string stepscope_bin() { return test::binary_dir() + "/cli/stepscope"; }

Run run(const test::ScratchDir& dir, const std::string& args) {
  std::string cmd = "'" + stepscope_bin() + "' analyze " + args + " >'" + dir.file("out") + "' 2>'" + dir.file("err") + "'";
  int status = std::system(cmd.c_str());
  Run r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(dir.file("out"));
  r.err = slurp(dir.file("err"));
  return r;
}

// A store with one input-bound step.
void write_input_bound_store(const std::string& path) {
  store::Trace t;
  store::Range step{0, 1'000'000, 1, 1, 0, t.intern("ProfilerStep#1"), 0, store::RangeSource::Annotation, 0};
  store::Range dl{0, 500'000, 1, 1, 0, t.intern("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"), 1,
                  store::RangeSource::Op, 0};
  t.ranges = {step, dl};
  t.api_calls.push_back({500'000, 505'000, 1, 1, store::ApiKind::Runtime, t.intern("cudaLaunchKernel"), 7, 0});
  store::Kernel k;
  k.start = 510'000, k.end = 1'000'000, k.correlation = 7, k.name = t.intern("k"), k.pid = 1;
  t.kernels.push_back(k);
  store::write_store_atomically(t, path);
}

}  // namespace

TEST_CASE("analyze: bad input exits 2 with one line naming the file") {
  if (!std::filesystem::exists(stepscope_bin())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("analyze_cli_bad");
  auto r = run(dir, "'" + dir.file("missing.json") + "'");
  CHECK(r.rc == 2);
  CHECK(r.err.find("missing.json") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());

  std::ofstream(dir.file("junk.txt")) << "this is not a trace\n";
  r = run(dir, "'" + dir.file("junk.txt") + "'");
  CHECK(r.rc == 2);
  CHECK(r.err.find("junk.txt") != std::string::npos);

  write_input_bound_store(dir.file("s.stepscope"));
  r = run(dir, "--step-regex '([' '" + dir.file("s.stepscope") + "'");
  CHECK(r.rc == 2);
  CHECK(r.err.find("--step-regex") != std::string::npos);
}

TEST_CASE("analyze: --json on a store, --write-findings updates its findings table") {
  if (!std::filesystem::exists(stepscope_bin())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("analyze_cli_store");
  std::string store_path = dir.file("s.stepscope");
  write_input_bound_store(store_path);
  auto r = run(dir, "--json '" + store_path + "'");
  REQUIRE(r.rc == 0);
  simdjson::dom::parser p;
  simdjson::dom::element doc = p.parse(r.out);
  CHECK(std::string_view(doc["schema"]) == "stepscope.analysis/1");
  CHECK(std::string_view(doc["findings"].at(0)["rule"]) == "input-bound");
  CHECK(store::StoreReader(store_path).findings().empty());  // read-only without --write-findings

  r = run(dir, "--write-findings '" + store_path + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("input-bound") != std::string::npos);
  store::StoreReader reader(store_path);
  auto fs = reader.findings();
  REQUIRE(fs.size() >= 1);
  CHECK(reader.strings().get(fs[0].rule) == "input-bound");
  CHECK(reader.kernels(0, 2'000'000).size() == 1);  // the rest of the store is intact
  // Nothing left beside it.
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.path().filename().string().rfind("s.stepscope", 0) == 0;
  CHECK(files == 1);
}

TEST_CASE("analyze: real traces, terminal report and the plain no-GPU message") {
  STEPSCOPE_REQUIRE_TRACES();
  if (!std::filesystem::exists(stepscope_bin())) STEPSCOPE_SKIP("stepscope binary not built");
  test::ScratchDir dir("analyze_cli_traces");
  auto r = run(dir, "'" + test::trace_path("kineto/resnet50_num_workers_0.json.gz") + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("input-bound") != std::string::npos);
  CHECK(r.out.find("|####") != std::string::npos);  // stacked bars
  CHECK(r.out.find("num_workers") != std::string::npos);
  // The steps are held against their median, as in every report.
  CHECK(r.out.find("\nSlow steps: 0 of 6 steps exceed the median step (176 ms)") != std::string::npos);

  r = run(dir, "'" + test::trace_path("hta/cpu_only.json.gz") + "'");
  REQUIRE(r.rc == 0);
  CHECK(r.out.find("No GPU activity") != std::string::npos);

  r = run(dir, "--write-findings '" + test::trace_path("hta/cpu_only.json.gz") + "'");
  CHECK(r.rc == 2);
  CHECK(r.err.find("needs a stepscope store") != std::string::npos);
}
