// Reports of real traces (../shared/traces): every trace renders in every format, and `stepscope report`
// writes what it is asked for atomically and fails cleanly on bad input.
#include <catch2/catch.hpp>

#include <simdjson.h>

#include <filesystem>
#include <fstream>

#include "report_test_fixtures.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/report.h"
#include "test_support.h"

using namespace stepscope;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::vector<std::string> shared_traces() {
  std::vector<std::string> out;
  for (auto& e : std::filesystem::recursive_directory_iterator(test::traces_dir())) {
    if (!e.is_regular_file()) continue;
    std::string p = e.path().string();
    if (p.find("/schemas/") != std::string::npos || p.find("/licenses/") != std::string::npos) continue;
    if (p.size() > 3 && (p.ends_with(".json.gz") || p.ends_with(".sqlite.gz"))) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("every shared trace renders as text, Markdown, HTML and JSON") {
  STEPSCOPE_REQUIRE_TRACES();
  auto traces = shared_traces();
  REQUIRE(traces.size() >= 20);
  simdjson::dom::parser parser;
  for (const auto& path : traces) {
    INFO(path);
    auto trace = analyzer::load_trace(path);
    auto a = analyzer::analyze(trace);
    a.source_file = path;
    std::string text = analyzer::render_report(a, analyzer::ReportFormat::Text);
    std::string md = analyzer::render_report(a, analyzer::ReportFormat::Markdown);
    std::string html = analyzer::render_report(a, analyzer::ReportFormat::Html);
    std::string json = analyzer::render_report(a, analyzer::ReportFormat::Json);
    CHECK(text.find("stepscope report: " + path) == 0);
    CHECK(md.find("## stepscope report:") == 0);
    CHECK(html.find("</html>") != std::string::npos);
    CHECK(html.find("<script") == std::string::npos);
    simdjson::dom::element root;
    CHECK(parser.parse(json).get(root) == simdjson::SUCCESS);
    if (!a.summary.has_gpu) {
      CHECK(text.find("No GPU activity in this trace") != std::string::npos);
      CHECK(html.find("No GPU activity in this trace:") != std::string::npos);
    }
    // HTA's breakdowns: every kernel type with its time in each human-readable format; none without GPU work.
    for (const auto& k : a.gpu_breakdowns.kernel_types) {
      CHECK(text.find("type " + k.type + ",") != std::string::npos);
      CHECK(md.find("| " + k.type + " |") != std::string::npos);
      CHECK(html.find("title=\"" + k.type + "\">" + k.type + "</td>") != std::string::npos);
    }
    CHECK((md.find("### GPU breakdowns") != std::string::npos) == !a.gpu_breakdowns.empty());
    CHECK((html.find("<section id=\"breakdowns\">") != std::string::npos) == !a.gpu_breakdowns.empty());
    // Every finding shows up in each human-readable format.
    for (const auto& f : a.findings) {
      CHECK(text.find("] " + f.rule + ":") != std::string::npos);
      CHECK(md.find("`" + f.rule + "`") != std::string::npos);
      CHECK(html.find(">" + f.rule + " <span class=\"badge") != std::string::npos);
    }
  }
}

TEST_CASE("HTML report of the input-bound resnet50 trace renders in headless Chromium") {
  STEPSCOPE_REQUIRE_TRACES();
  if (!test::have_program("chromium")) STEPSCOPE_SKIP("chromium not installed");
  auto trace = analyzer::load_trace(test::trace_path("kineto/resnet50_num_workers_0.json.gz"));
  auto a = analyzer::analyze(trace);
  test::ScratchDir dir("report_traces_chromium");
  std::string html_path = std::filesystem::absolute(dir.file("resnet.html")).string();
  std::string html = analyzer::render_html_report(a);
  CHECK(html.find(">input-bound <span class=\"badge high\">high</span>") != std::string::npos);
  CHECK(html.find("id=\"utilization\"") != std::string::npos);
  analyzer::write_file_atomically(html_path, html);
  std::string png = std::filesystem::absolute(dir.file("resnet.png")).string();
  auto r = test::run_command("timeout 90 chromium --headless --no-sandbox --disable-gpu --no-first-run --user-data-dir=" +
                             test::shell_quote(dir.file("profile")) + " --enable-logging=stderr --v=0 --window-size=1280,3000 --screenshot=" +
                             test::shell_quote(png) + " " + test::shell_quote("file://" + html_path));
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("CONSOLE") == std::string::npos);
  CHECK(std::filesystem::file_size(png) > 10000);
}

TEST_CASE("stepscope report: formats, -o written atomically, bad input exits 2") {
  STEPSCOPE_REQUIRE_TRACES();
  std::string bin = test::binary_dir() + "/cli/stepscope";
  if (!std::filesystem::exists(bin)) STEPSCOPE_SKIP("stepscope binary not built");
  bin = test::shell_quote(bin);
  test::ScratchDir dir("report_cli");
  std::string w0 = test::shell_quote(test::trace_path("kineto/resnet50_num_workers_0.json.gz"));
  auto text = test::run_command(bin + " report " + w0);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("[HIGH] input-bound:") != std::string::npos);
  std::string html = dir.file("r.html");
  auto h = test::run_command(bin + " report " + w0 + " -o " + test::shell_quote(html));  // format from extension
  CHECK(h.exit_code == 0);
  CHECK(read_all(html).rfind("<!DOCTYPE html>", 0) == 0);
  auto j = test::run_command(bin + " report " + w0 + " --format json 2>/dev/null");
  CHECK(j.exit_code == 0);
  CHECK(j.output.find("\"schema\":\"stepscope.analysis/1\"") != std::string::npos);
  auto md = test::run_command(bin + " report " + w0 + " --format md");
  CHECK(md.output.rfind("## stepscope report:", 0) == 0);
  CHECK(test::run_command(bin + " report " + w0 + " --format pdf").exit_code == 2);
  std::string bad = dir.file("bad.json.gz");
  std::ofstream(bad) << "not gzip at all";
  std::string out = dir.file("never.html");
  auto b = test::run_command(bin + " report " + test::shell_quote(bad) + " -o " + test::shell_quote(out));
  CHECK(b.exit_code == 2);
  CHECK(b.output.find("stepscope: " + bad + ":") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("reports of H100 recordings: every slow step's link has its row, contributors are raw code spans") {
  STEPSCOPE_REQUIRE_RECORDINGS();
  test::ScratchDir dir("report_recordings_links");
  {
    // 3,000 steps: the table lists the first 500 and each slow step after them (13 of 20 links went nowhere).
    const std::string db = test::decompressed_recording("h100-2026-11-22/launch_bound.db.xz", dir);
    REQUIRE_FALSE(db.empty());
    const auto a = analyzer::analyze(analyzer::load_trace(db));
    REQUIRE(a.steps.size() > 500);
    REQUIRE_FALSE(a.step_outliers.slow.empty());
    const std::string html = analyzer::render_html_report(a);
    size_t links = 0;
    for (size_t at = html.find("href=\"#step-"); at != std::string::npos;
         at = html.find("href=\"#step-", at + 1)) {
      const size_t b = at + 12, e = html.find('"', b);
      const std::string id = "id=\"step-" + html.substr(b, e - b) + "\"";
      INFO(id);
      CHECK(html.find(id) != std::string::npos);
      ++links;
    }
    CHECK(links == a.step_outliers.slow.size());
  }
  {
    // A contributor in a code span is shown as it is: GFM reads backslashes and entities literally there.
    const std::string db = test::decompressed_recording("h100-2026-11-22/input_bound.db.xz", dir);
    REQUIRE_FALSE(db.empty());
    const std::string md = analyzer::render_markdown_report(analyzer::analyze(analyzer::load_trace(db)));
    const size_t slow = md.find("### Slow steps");
    REQUIRE(slow != std::string::npos);
    const std::string table = md.substr(slow, md.find("\n\n", md.find("| Step |", slow)) - slow);
    INFO(table);
    CHECK(table.find("`next_batch`") != std::string::npos);
    CHECK(table.find("\\_") == std::string::npos);
    CHECK(table.find("&lt;") == std::string::npos);
  }
}
