// Inclusive time in host activity (issue 48): a real recording of hot_loop, whose hot_function sits under a
// 30-deep recursion of descend(). descend owns nearly all of the thread's time while having none of its own,
// and `analyze` says so in every rendering: self beside total in the text, both in the JSON.
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "test_support.h"

using namespace stepscope;

namespace {

std::string cli() {
  return test::binary_dir() + "/cli/stepscope";
}

}  // namespace

TEST_CASE(
    "hot_loop: descend() calls the hot leaf, owns >= 90% of the on-CPU time inclusive and little itself") {
  const std::string hot_loop = test::binary_dir() + "/samples/cpu/hot_loop";
  if (!std::filesystem::exists(hot_loop)) STEPSCOPE_SKIP("hot_loop is not built");
  test::ScratchDir dir("host_inclusive_" + std::to_string(::getpid()));
  const std::string db = dir.file("hot.db");
  const auto rec =
      test::run_shell(test::shell_quote(cli()) + " record --no-gpu -o " + test::shell_quote(db) + " -- " +
                      test::shell_quote(hot_loop) + " --iterations 200000000 --steps 4 2>&1");
  INFO(rec.output);
  REQUIRE(rec.status == 0);

  const auto json = test::run_shell(test::shell_quote(cli()) + " analyze --json " + test::shell_quote(db));
  REQUIRE(json.status == 0);
  simdjson::dom::parser p;
  auto doc = p.parse(json.output);
  INFO(json.output);
  const double on_cpu = double(doc["host_activity"]["on_cpu_us"]);
  REQUIRE(on_cpu > 0);
  double descend_self = -1, descend_total = -1, hot_self = -1, hot_total = -1;
  for (auto f : doc["idle_host_top"].get_array()) {
    const std::string name{std::string_view(f["name"])};
    const double self = double(f["time_us"]), total = double(f["inclusive_us"]);
    CHECK(total >= self);  // a function's own time is part of its total
    CHECK(total <= on_cpu + double(doc["host_activity"]["off_cpu_us"]) + 1e-6);
    if (name.find("descend(") != std::string::npos) descend_self = self, descend_total = total;
    if (name.find("hot_function(") != std::string::npos) hot_self = self, hot_total = total;
  }
  // Recursion counts each sample once: 30 frames of descend are still at most the thread's time.
  CHECK(descend_total >= 0.9 * on_cpu);
  CHECK(descend_total <= on_cpu + 1e-6);
  CHECK(descend_self >= 0);
  CHECK(descend_self <= 0.05 * on_cpu);
  CHECK(hot_self >= 0.5 * on_cpu);
  CHECK(hot_total == Approx(hot_self));  // a leaf calls nothing

  const auto text = test::run_shell(test::shell_quote(cli()) + " analyze " + test::shell_quote(db));
  REQUIRE(text.status == 0);
  INFO(text.output);
  CHECK(text.output.find("        self       total  function\n") != std::string::npos);
  CHECK(text.output.find("descend(…)") != std::string::npos);
}
