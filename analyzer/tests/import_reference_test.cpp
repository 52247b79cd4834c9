// Every real trace in the shared folder, imported by load_trace(), against values computed independently by
// tests/reference/reference_counts.py (committed as tests/reference/expected.tsv): counts exact, times 0.1%.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "stepscope/analyzer/load.h"
#include "test_support.h"

using namespace stepscope;

namespace {

struct Expected {
  std::string file;
  int64_t kernels = 0, memcpys = 0, memsets = 0, busy_ns = 0, steps = 0;
  std::vector<int64_t> step_wait_ns;
};

std::vector<Expected> read_expected() {
  std::ifstream in(test::source_dir() + "/tests/reference/expected.tsv");
  std::vector<Expected> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    Expected e;
    std::string waits;
    ss >> e.file >> e.kernels >> e.memcpys >> e.memsets >> e.busy_ns >> e.steps >> waits;
    if (waits != "-") {
      std::istringstream ws(waits);
      std::string item;
      while (std::getline(ws, item, ',')) e.step_wait_ns.push_back(std::stoll(item));
    }
    rows.push_back(e);
  }
  return rows;
}

int64_t union_length(std::vector<std::pair<int64_t, int64_t>> v) {
  std::sort(v.begin(), v.end());
  int64_t total = 0, s = 0, e = INT64_MIN;
  for (auto [a, b] : v) {
    if (e == INT64_MIN || a > e) {
      if (e != INT64_MIN) total += e - s;
      s = a;
      e = b;
    } else {
      e = std::max(e, b);
    }
  }
  if (e != INT64_MIN) total += e - s;
  return total;
}

bool close(int64_t got, int64_t want) {
  if (want == 0) return got == 0;
  return std::abs(double(got - want)) <= 0.001 * double(want);
}

}  // namespace

TEST_CASE("every shared trace matches the independent reference values") {
  STEPSCOPE_REQUIRE_TRACES();
  auto expected = read_expected();
  REQUIRE(expected.size() >= 28);
  for (const auto& e : expected) {
    INFO(e.file);
    store::Trace t = analyzer::load_trace(test::trace_path(e.file));
    CHECK(int64_t(t.kernels.size()) == e.kernels);
    CHECK(int64_t(t.memcpys.size()) == e.memcpys);
    CHECK(int64_t(t.memsets.size()) == e.memsets);
    std::vector<std::pair<int64_t, int64_t>> gpu;
    for (const auto& k : t.kernels) gpu.emplace_back(k.start, k.end);
    for (const auto& m : t.memcpys) gpu.emplace_back(m.start, m.end);
    for (const auto& m : t.memsets) gpu.emplace_back(m.start, m.end);
    int64_t busy = union_length(gpu);
    INFO("busy " << busy << " want " << e.busy_ns);
    CHECK(close(busy, e.busy_ns));

    std::vector<store::Step> steps;
    for (const auto& s : t.steps)
      if (t.str(s.source) == "profiler-step") steps.push_back(s);
    REQUIRE(int64_t(steps.size()) == e.steps);
    REQUIRE(e.step_wait_ns.size() == steps.size());
    for (size_t i = 0; i < steps.size(); ++i) {
      std::vector<std::pair<int64_t, int64_t>> w;
      for (const auto& d : t.data_waits)
        if (d.end > steps[i].start && d.start < steps[i].end)
          w.emplace_back(std::max(d.start, steps[i].start), std::min(d.end, steps[i].end));
      int64_t got = union_length(w);
      INFO("step " << i << " data wait " << got << " want " << e.step_wait_ns[i]);
      CHECK(close(got, e.step_wait_ns[i]));
    }
  }
}
