// `stepscope analyze --json` of a store, run with the built CLI (STEPSCOPE_CLI), and the figures the Python
// tests hold against what their trainers measured themselves.
#pragma once

#include <simdjson.h>

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "test_support.h"

namespace stepscope::test {

struct Analyzed {
  std::string json;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string step_source() { return std::string(std::string_view(doc["summary"]["step_source"])); }
  int64_t steps() { return int64_t(doc["summary"]["steps"]); }
  double wait_share() { return double(doc["summary"]["data_wait_share"]); }
  double median_step_ms() { return double(doc["summary"]["host_step_median_us"]) / 1e3; }
  std::string severity(const std::string& rule) {  // "" when absent
    for (auto f : doc["findings"].get_array())
      if (std::string_view(f["rule"]) == rule) return std::string(std::string_view(f["severity"]));
    return "";
  }
};

inline void analyze(const std::string& file, Analyzed& a) {
  const auto r = run_shell(shell_quote(STEPSCOPE_CLI) + " analyze " + shell_quote(file) + " --json 2>&1");
  INFO(r.output);
  REQUIRE(r.status == 0);
  a.json = r.output;
  a.doc = a.parser.parse(a.json);
}

}  // namespace stepscope::test
