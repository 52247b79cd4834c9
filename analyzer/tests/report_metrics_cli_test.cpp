// `stepscope report --format metrics` (issue 52): the flat per-run summary experiment trackers log, held
// against the same run's `stepscope analyze --json`, recomputed here from its steps and findings. Real H100
// recordings.
#include <simdjson.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>

#include "test_support.h"

using namespace stepscope;
using namespace stepscope::test;

namespace {

const std::string kCli = STEPSCOPE_BINARY_DIR "/cli/stepscope";

double nearest_rank_ms(std::vector<double> us, double p) {
  std::sort(us.begin(), us.end());
  const size_t rank = std::clamp<size_t>(size_t(std::ceil(p * double(us.size()))), 1, us.size());
  return us[rank - 1] / 1e3;
}

// The median as every view shows it: the middle step, the mean of the two middle ones for an even count.
double middle_ms(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  return (n % 2 ? us[n / 2] : (us[n / 2 - 1] + us[n / 2]) / 2) / 1e3;
}

void check_metrics_of(const std::string& rel) {
  ScratchDir dir("report_metrics_" + std::filesystem::path(rel).stem().string());
  const std::string db = decompressed_recording(rel, dir);
  REQUIRE(!db.empty());
  const std::string out = dir.file("metrics.json");
  const auto m = run_shell(shell_quote(kCli) + " report --format metrics -o " + shell_quote(out) + " " +
                           shell_quote(db) + " 2>&1");
  INFO(m.output);
  REQUIRE(m.status == 0);
  const auto a = run_shell(shell_quote(kCli) + " analyze --json " + shell_quote(db));
  REQUIRE(a.status == 0);
  simdjson::dom::parser mp, ap;
  const std::string metrics_text = slurp(out);
  simdjson::dom::object metrics = mp.parse(metrics_text).get_object();
  simdjson::dom::element analysis = ap.parse(a.output);

  // Flat: every value a number, every name one MLflow accepts (alphanumerics, _ - . / and space).
  const std::regex name_ok("^[A-Za-z0-9_\\-. /]+$");
  std::map<std::string, double> got;
  for (auto field : metrics) {
    const std::string name(field.key);
    INFO(name);
    CHECK(std::regex_match(name, name_ok));
    REQUIRE(field.value.is_number());
    got[name] = double(field.value);
  }

  std::vector<double> durs;
  std::map<std::string, double> bound_us;
  double total_us = 0;
  for (auto st : analysis["steps"].get_array()) {
    const double d = double(st["dur_us"]);
    durs.push_back(d);
    total_us += d;
    bound_us[std::string(std::string_view(st["bound"]))] += d;
  }
  REQUIRE(!durs.empty());
  CHECK(got.at("stepscope/steps") == double(durs.size()));
  // Within a nanosecond (the steps' durations are whole nanoseconds; the mean of two may fall between), and the
  // very figure the slow-step list shows.
  CHECK(got.at("stepscope/step_median_ms") == Approx(middle_ms(durs)).margin(1e-6));
  CHECK(got.at("stepscope/step_median_ms") == Approx(double(analysis["step_outliers"]["median_us"]) / 1e3).margin(1e-6));
  CHECK(got.at("stepscope/step_p95_ms") == Approx(nearest_rank_ms(durs, 0.95)).epsilon(1e-9));
  CHECK(got.at("stepscope/step_time_s") == Approx(total_us / 1e6).epsilon(1e-9));
  CHECK(got.at("stepscope/data_wait_share") == double(analysis["summary"]["data_wait_share"]));
  CHECK(got.at("stepscope/gpu_busy_share") == double(analysis["summary"]["gpu_busy_share"]));
  double shares = 0;
  for (const char* b : {"input", "launch", "sync", "host", "gpu", "other", "untraced"}) {
    const double s = got.at(std::string("stepscope/bound/") + b + "_share");
    CHECK(s == Approx(bound_us[b] / total_us).margin(1e-9));
    shares += s;
  }
  CHECK(shares == Approx(1.0).epsilon(1e-9));
  auto findings = analysis["findings"].get_array();
  CHECK(got.at("stepscope/findings") == double(findings.size()));
  std::map<std::string, int> seen;
  size_t finding_keys = 0;
  for (auto f : findings) {
    const std::string rule{std::string_view(f["rule"])};
    const int n = ++seen[rule];
    const std::string base = "stepscope/finding/" + rule + (n > 1 ? "-" + std::to_string(n) : "");
    const std::string sev{std::string_view(f["severity"])};
    CHECK(got.at(base + "/saving_ms_per_step") ==
          Approx(double(f["est_savings_us_per_step"]) / 1e3).epsilon(1e-9));
    CHECK(got.at(base + "/share") == double(f["share"]));
    CHECK(got.at(base + "/steps") == double(f["steps"].get_array().size()));
    CHECK(got.at(base + "/severity") == (sev == "high" ? 3.0 : sev == "medium" ? 2.0 : 1.0));
    finding_keys += 4;
  }
  CHECK(got.size() == 6 + 7 + 1 + finding_keys);  // nothing else
  std::printf("%s: %zu metrics, %zu steps, median %.3f ms, p95 %.3f ms, %zu finding(s)\n", rel.c_str(),
              got.size(), durs.size(), got.at("stepscope/step_median_ms"), got.at("stepscope/step_p95_ms"),
              findings.size());
}

}  // namespace

TEST_CASE("report --format metrics: input_bound on an H100, every number as the analysis has it") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  check_metrics_of("h100-2026-11-22/input_bound.db.xz");
}

TEST_CASE("report --format metrics: launch_bound on an H100, every number as the analysis has it") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  check_metrics_of("h100-2026-11-22/launch_bound.db.xz");
}

TEST_CASE("report --format metrics summarizes one run: several files are refused with one line, exit 2") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  ScratchDir dir("report_metrics_two");
  const std::string a = decompressed_recording("h100-2026-11-22/input_bound.db.xz", dir);
  const std::string b = decompressed_recording("h100-2026-11-22/input_bound_prefetch.db.xz", dir);
  REQUIRE((!a.empty() && !b.empty()));
  const auto r = run_shell(shell_quote(kCli) + " report --format metrics " + shell_quote(a) + " " +
                           shell_quote(b) + " -o " + shell_quote(dir.file("m.json")) + " 2>&1");
  CHECK(r.status == 2);
  CHECK(r.output ==
        "stepscope: --format: metrics summarizes one run: give one store or trace (usage: stepscope "
        "report --help)\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("m.json")));
}
