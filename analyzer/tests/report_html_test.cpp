// The HTML report: self-contained, every trace-derived name escaped, and rendered by a real browser.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "report_test_fixtures.h"
#include "stepscope/analyzer/report.h"
#include "test_support.h"

using namespace stepscope;

namespace {

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("html_escape covers markup characters, quotes and invalid UTF-8") {
  CHECK(analyzer::html_escape("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;");
  CHECK(analyzer::html_escape("a&b \"c\" 'd'") == "a&amp;b &quot;c&quot; &#39;d&#39;");
  CHECK(analyzer::html_escape(std::string("x\xff" "y", 3)) == "x\xEF\xBF\xBDy");
  CHECK(analyzer::html_escape("µs ✓") == "µs ✓");
  CHECK(analyzer::html_escape(std::string("a\0b", 3)) == "a\xEF\xBF\xBD" "b");
}

TEST_CASE("HTML report is self-contained and escapes every name from the trace") {
  auto a = test::sample_analysis();
  std::string html = analyzer::render_html_report(a);
  REQUIRE(html.rfind("<!DOCTYPE html>", 0) == 0);
  // The hostile kernel name appears only escaped: once in the cell, once in its tooltip attribute.
  CHECK(count_of(html, "&lt;script&gt;alert(1)&lt;/script&gt;") == 2);
  CHECK(html.find("<script") == std::string::npos);
  CHECK(html.find("alert(1)</script>") == std::string::npos);
  // No network: nothing is fetched.
  CHECK(html.find("src=") == std::string::npos);
  CHECK(html.find("href=") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);
  CHECK(html.find("<link") == std::string::npos);
  CHECK(html.find("<img") == std::string::npos);
  // Source file name and evidence are escaped too.
  CHECK(html.find("runs/&lt;b&gt;resnet&lt;/b&gt; &amp; &quot;friends&quot;.json.gz") != std::string::npos);
  CHECK(html.find("<b>resnet") == std::string::npos);
  CHECK(html.find("enumerate(DataLoader)#&lt;x&gt;") != std::string::npos);
  // Template kernel names keep their angle brackets as entities.
  CHECK(html.find("vectorized_elementwise_kernel&lt;4, at::native::FillFunctor&lt;float&gt;") != std::string::npos);
  // Sections: summary, findings with suggestion and saving, stacked bars, utilization, kernels, host functions.
  for (const char* id : {"id=\"summary\"", "id=\"findings\"", "id=\"steps\"", "id=\"utilization\"", "id=\"kernels\"",
                         "id=\"host\""})
    CHECK(html.find(id) != std::string::npos);
  CHECK(html.find("persistent_workers=True") != std::string::npos);
  CHECK(html.find("40 ms</strong> per affected step") != std::string::npos);
  // Six steps × five components, each a <rect> in the stacked bar chart.
  CHECK(count_of(html, "<rect ") == 30);
  CHECK(count_of(html, "fill=\"#e45756\"/>") == 6);  // data wait segments
  // Kernel table: count and mean (150 ms / 600 = 250 µs).
  CHECK(html.find("<td class=\"n\">600</td><td class=\"n\">250 µs</td>") != std::string::npos);
}

TEST_CASE("HTML report says plainly when a trace has no GPU activity and renders with no steps") {
  analyzer::Analysis a;
  a.source_file = "cpu_only.json.gz";
  std::string html = analyzer::render_html_report(a);
  CHECK(html.find("No GPU activity in this trace:") != std::string::npos);
  CHECK(html.find("id=\"steps\"") == std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
}

TEST_CASE("HTML report with thousands of steps buckets the bars") {
  auto a = test::sample_analysis();
  auto one = a.steps[0];
  a.steps.clear();
  for (int i = 0; i < 5000; ++i) {
    one.index = i;
    a.steps.push_back(one);
  }
  std::string html = analyzer::render_html_report(a);
  // 5000 steps in buckets of 13 → 385 bars × 5 parts; the table stops at 500 rows.
  CHECK(count_of(html, "<rect ") == 385 * 5);
  CHECK(html.find("4500 more steps") != std::string::npos);
}

TEST_CASE("HTML report renders in headless Chromium without errors and the DOM holds no injected script") {
  const char* browser = nullptr;
  for (const char* b : {"chromium", "chromium-browser", "google-chrome"})
    if (test::have_program(b)) {
      browser = b;
      break;
    }
  if (!browser) STEPSCOPE_SKIP("chromium not installed");
  test::ScratchDir dir("report_html_chromium");
  std::string html_path = std::filesystem::absolute(dir.file("report.html")).string();
  std::string png = std::filesystem::absolute(dir.file("report.png")).string();
  analyzer::write_file_atomically(html_path, analyzer::render_html_report(test::sample_analysis()));

  std::string common = std::string("timeout 90 ") + browser +
                       " --headless --no-sandbox --disable-gpu --no-first-run --disable-extensions"
                       " --user-data-dir=" + test::shell_quote(dir.file("profile")) + " --enable-logging=stderr --v=0 ";
  auto shot = test::run_command(common + "--window-size=1280,2400 --screenshot=" + test::shell_quote(png) +
                                " " + test::shell_quote("file://" + html_path));
  INFO(shot.output);
  REQUIRE(shot.exit_code == 0);
  REQUIRE(std::filesystem::exists(png));
  std::string png_bytes = read_all(png);
  REQUIRE(png_bytes.size() > 10000);  // a real page, not a blank one
  CHECK(png_bytes.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
  // Page errors (console, CSP violations) show up as CONSOLE lines in the browser log.
  CHECK(shot.output.find("CONSOLE") == std::string::npos);
  CHECK(shot.output.find("Content Security Policy") == std::string::npos);

  auto dom = test::run_command(common + "--dump-dom " + test::shell_quote("file://" + html_path));
  INFO(dom.output.substr(0, 2000));
  REQUIRE(dom.exit_code == 0);
  // The parsed document has no script element; the kernel name survived as text.
  CHECK(dom.output.find("<script") == std::string::npos);
  CHECK(dom.output.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(dom.output.find("<svg") != std::string::npos);
}
