// Text and Markdown reports, escaping helpers and atomic output files.
#include <algorithm>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "report/report_util.h"
#include "report_test_fixtures.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

// Unescaped '|' characters in a GFM table row (cell separators).
size_t table_separators(const std::string& row) {
  size_t n = 0;
  for (size_t i = 0; i < row.size(); ++i)
    if (row[i] == '|' && (i == 0 || row[i - 1] != '\\')) ++n;
  return n;
}

}  // namespace

TEST_CASE("markdown_escape keeps a name in one table cell with no markup") {
  CHECK(analyzer::markdown_escape("a|b") == "a\\|b");
  CHECK(analyzer::markdown_escape("<script>x</script>") == "&lt;script&gt;x&lt;/script&gt;");
  CHECK(analyzer::markdown_escape("line1\nline2") == "line1 line2");
  CHECK(analyzer::markdown_escape("__init__ *x* `y`") == "\\_\\_init\\_\\_ \\*x\\* \\`y\\`");
}

TEST_CASE("an empty name is no code span: Markdown has none, `` reads as two backticks") {
  CHECK(analyzer::markdown_code_span("", true).empty());
  CHECK(analyzer::markdown_code_span("a|b", true) == "`a\\|b`");
  // Evidence with an empty name (a copy's API that the trace did not give): the row is left out, as in the text.
  auto a = test::sample_analysis();
  a.findings[0].evidence_json = R"({"copies":[{"api":"","count":3}],"api":""})";
  const std::string md = analyzer::render_markdown_report(a);
  // Every run of backticks is a code span's single fence or a code block's fence of three or more.
  for (size_t i = md.find('`'); i != std::string::npos; i = md.find('`', i)) {
    size_t run = 0;
    while (i + run < md.size() && md[i + run] == '`') ++run;
    INFO(md.substr(i >= 20 ? i - 20 : 0, 60));
    CHECK(run != 2);
    i += run;
  }
  CHECK(md.find("| `` |") == std::string::npos);
}

TEST_CASE("the profiler's cost, a warm-up in the shares, and an estimate the replay contradicts: said in every view") {
  auto a = test::sample_analysis();
  a.summary.profiler.applied = true;
  a.summary.profiler.cost_ns_per_launch = 3000;
  a.summary.profiler.launches = 6000;
  a.summary.profiler.removed_us = 6;  // capped by the GPU idle the cost caused: the product is 18 ms
  a.summary.profiler.step_median_us = 1200, a.summary.profiler.corrected_step_median_us = 1194;
  a.steps[0].warmup = true;
  a.steps[0].dur_ns = 500'000'000;
  a.findings[0].replayed_cure = "prefetch";
  a.findings[0].replayed_saving_us = 9000;  // the estimate: 0.4 of the 166.7 ms mean step = 66.7 ms
  const std::string profiler =
      "Profiler cost: 3 µs per launch x 6000 launches = 18 ms of host time; 6 µs removed from the steps (where the "
      "GPU waited for it; the rest overlapped GPU work); median step 1.2 ms recorded, ~1.19 ms without the profiler";
  CHECK(analyzer::profiler_cost_note(a.summary) == profiler);
  const std::string warmup = analyzer::warmup_share_note(a);
  CHECK(warmup ==
        "Shares of step time count the warm-up step 0 (500 ms, 50.0% of all step time); severities and the findings' "
        "summaries are judged on the steady steps without it.");
  const std::string replay = analyzer::estimate_replay_note(a);
  CHECK(replay.rfind("input-bound: its estimate, 66.7 ms a step (the idle its cause explains), and the replay of the "
                     "cure, 9 ms a step, differ 7x: ",
                     0) == 0);
  const std::string text = analyzer::render_text_report(a), md = analyzer::render_markdown_report(a),
                    html = analyzer::render_html_report(a);
  for (const std::string& note : {profiler, warmup, replay}) {
    INFO(note);
    CHECK(text.find(note) != std::string::npos);
    CHECK(md.find(analyzer::markdown_escape(note)) != std::string::npos);
    CHECK(html.find(analyzer::html_escape(note)) != std::string::npos);
  }
  // The Python hooks' calls (--step-func) are in it, with or without launches to trace.
  analyzer::AnalysisSummary hooks;
  hooks.profiler.hook_ns_per_step_call = 10'000, hooks.profiler.hook_step_calls = 5;
  hooks.profiler.removed_us = 50;
  CHECK(analyzer::profiler_cost_note(hooks) ==
        "Profiler cost: 5 hooked Python calls = 50 µs of host time; all of it removed from the steps");
  // Agreeing within 2x: nothing said.
  a.findings[0].replayed_saving_us = 40000;
  CHECK(analyzer::estimate_replay_note(a).empty());
}

TEST_CASE("numbers nested under a time key carry its unit in every format") {
  // The straggler's "longer than median: compute -8" had no unit (its key is "longer_than_median_us").
  auto a = test::sample_analysis();
  a.findings[0].evidence_json = R"({"longer_than_median_us":{"compute":-8,"data_wait":56,"host":1263},"count":3})";
  const std::string text = analyzer::render_text_report(a), md = analyzer::render_markdown_report(a),
                    html = analyzer::render_html_report(a);
  for (const std::string* s : {&text, &md, &html}) {
    INFO(*s);
    CHECK(s->find("-8 µs") != std::string::npos);
    CHECK(s->find("1.26 ms") != std::string::npos);
    CHECK(s->find("3 µs") == std::string::npos);  // a count stays a count
  }
}

TEST_CASE("xml_escape drops characters XML 1.0 forbids") {
  CHECK(analyzer::xml_escape("a<b>&\"'") == "a&lt;b&gt;&amp;&quot;&apos;");
  CHECK(analyzer::xml_escape(std::string("\x01\x1f\t\n", 4)) == "\xEF\xBF\xBD\xEF\xBF\xBD\t\n");
  CHECK(analyzer::xml_escape("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/' is invalid UTF-8
}

TEST_CASE("shorten elides the middle on character boundaries") {
  using analyzer::report_util::shorten;
  CHECK(shorten("abcdef", 10) == "abcdef");
  CHECK(shorten("abcdefghijklmnopqrstuvwxyz", 10) == "abcdef…xyz");
  std::string s = shorten("ééééééééééééééééé", 8);
  CHECK(s == "éééé…ééé");
}

TEST_CASE("format helpers") {
  using namespace analyzer::report_util;
  CHECK(format_us(12.34) == "12.3 µs");
  CHECK(format_us(40000) == "40 ms");
  CHECK(format_us(2.5e6) == "2.5 s");
  CHECK(format_share(0.4012) == "40.1%");
  CHECK(format_signed_percent(0.052) == "+5.2%");
  CHECK(format_signed_pp(-0.021) == "-2.1 pp");
  CHECK(pretty_json(R"({"a":[1,2],"b":{"c":"x"}})") == "{\n  \"a\": [1, 2],\n  \"b\": {\n    \"c\": \"x\"\n  }\n}");
  CHECK(pretty_json("not json") == "not json");
  CHECK(code_fence_for("no ticks") == "```");
  CHECK(code_fence_for("has ```` four") == "`````");
}

TEST_CASE("text report: step table with bars, totals, kernels, findings with evidence") {
  std::string t = analyzer::render_text_report(test::sample_analysis());
  CHECK(t.find("Steps: 6 (source: profiler-step); GPU busy 50.0% of step time; GPU idle waiting for input 40.0% (the "
               "training loop waited 40.0%)") != std::string::npos);
  // Bar for a 100 ms step: 20 '#' (50 ms busy), 2 'L' (4 ms → 1.6, rounded to cumulative 21.6→22),
  // 16 'D' (to 37.6→38), 1 'S' (40.6 → 41... capped at 40), '.' for the rest.
  auto lines = lines_of(t);
  bool found = false;
  for (const auto& l : lines)
    if (l.find("input") != std::string::npos && l.find("##########") != std::string::npos) {
      found = true;
      CHECK(l.find(std::string(20, '#') + "LL" + std::string(16, 'D') + "S.") != std::string::npos);
    }
  CHECK(found);
  CHECK(t.find("Breakdown of 600 ms summed time of the steps: GPU busy 50.0%, launch idle 4.0%, host code between launches 0.0%, "
               "data wait 40.0%, sync idle 3.0%, other 3.0%, profiler cost 0.0%") != std::string::npos);
  CHECK(t.find("[HIGH] input-bound:") != std::string::npos);
  CHECK(t.find("est. saving: 40 ms per affected step (40.0% of step time)") != std::string::npos);
  // Evidence reads as labelled lines with units, not JSON.
  CHECK(t.find("  evidence:\n    data wait per step  40 ms\n    source              dataloader\n"
               "    ranges              enumerate(DataLoader)#<x>\n") != std::string::npos);
  CHECK(t.find("\"data_wait_us_per_step\"") == std::string::npos);
  CHECK(t.find("<script>alert(1)</script>") != std::string::npos);  // a terminal shows names as they are
  // ... except control characters: a name cannot send escape sequences to the terminal.
  auto a = test::sample_analysis();
  a.top_kernels[0].name = "evil\x1b[2J\x1b]0;title\x07kernel";
  std::string t2 = analyzer::render_text_report(a);
  CHECK(t2.find('\x1b') == std::string::npos);
  CHECK(t2.find('\x07') == std::string::npos);
  CHECK(t2.find("evil\xEF\xBF\xBD[2J") != std::string::npos);
}

TEST_CASE("a step bar is as wide as the terminal leaves after the figures, none under 10 columns") {
  CHECK(analyzer::step_bar_width(93, 0) == 40);    // no terminal: the fixed layout
  CHECK(analyzer::step_bar_width(93, 200) == 40);  // never wider than 40
  CHECK(analyzer::step_bar_width(93, 120) == 27);
  CHECK(analyzer::step_bar_width(93, 103) == 10);
  CHECK(analyzer::step_bar_width(93, 102) == 0);  // 9 columns left: no bar
  CHECK(analyzer::bound_and_bar("input", "") == "input");
  CHECK(analyzer::bound_and_bar("gpu", "|##|") == "gpu     |##|");
  // The text report's GPU rows: 93 columns of figures before the bar.
  for (int columns : {0, 120, 102}) {
    const std::string t = analyzer::render_text_report(test::sample_analysis(), columns);
    const int bar = analyzer::step_bar_width(93, columns);
    // A bar is as long as its step against the longest: the longest step's fills the width.
    auto width = [](std::string_view text) {  // UTF-8: a column a character ("µs")
      return size_t(
          std::count_if(text.begin(), text.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; }));
    };
    size_t rows = 0, longest = 0;
    for (const auto& l : lines_of(t)) {
      if (l.find("  input") == std::string::npos || l.find(" ms") == std::string::npos) continue;
      ++rows;
      longest = std::max(longest, l.size() - l.find("input"));
      if (columns > 0) CHECK(width(l) <= size_t(columns));
    }
    CHECK(rows > 0);
    CHECK(longest == (bar == 0 ? 5 : 8 + size_t(bar)));
  }
}

TEST_CASE("markdown report: GFM tables whose rows keep their column count") {
  auto a = test::sample_analysis();
  a.top_kernels.push_back({"kernel|with|pipes", 1, 1000, 1000, 1000});
  std::string md = analyzer::render_markdown_report(a);
  CHECK(md.find("<script>") == std::string::npos);
  CHECK(md.find("&lt;script&gt;alert(1)&lt;/script&gt;") != std::string::npos);
  CHECK(md.find("kernel\\|with\\|pipes") != std::string::npos);
  // Every row of the kernel table has exactly 5 separators (4 columns).
  auto lines = lines_of(md);
  size_t in_kernels = 0;
  bool in_table = false;
  for (const auto& l : lines) {
    if (l.rfind("### Top kernels", 0) == 0) in_table = true;
    else if (l.rfind("###", 0) == 0) in_table = false;
    if (in_table && !l.empty() && l[0] == '|') {
      CHECK(table_separators(l) == 5);
      ++in_kernels;
    }
  }
  CHECK(in_kernels == 2 + 3);  // header, rule, 3 kernels
  CHECK(md.find("| high | `input-bound` | 40 ms | 40.0% |") != std::string::npos);
  CHECK(md.find("```\nDataLoader(dataset, num_workers=8, pin_memory=True,") != std::string::npos);
  CHECK(md.find("Evidence:\n\n- data wait per step: 40 ms\n- source: dataloader\n- ranges: enumerate(DataLoader)\\#&lt;x&gt;\n") !=
        std::string::npos);
  CHECK(md.find("\"data_wait_us_per_step\"") == std::string::npos);
}

TEST_CASE("evidence in text and Markdown: aligned tables, names in code spans that GFM shows as they are") {
  const std::string ev =
      R"J({"gpu_idle_share":0.25,"kernels":[{"name":"my_kernel|v2","count":3,"total_us":1500},)J"
      R"J({"name":"void op_kernel<7>(float*)","count":12,"total_us":20}]})J";
  const std::string md = analyzer::render_evidence_markdown(ev);
  CHECK(md.find("- GPU idle share: 25.0%\n") != std::string::npos);
  // Backslashes are literal inside a code span: underscores stay bare, a table cell's pipe is "\|".
  CHECK(md.find("| `my_kernel\\|v2` | 3 | 1.5 ms |") != std::string::npos);
  CHECK(md.find("| `op_kernel<7>(…)` | 12 | 20 µs |") != std::string::npos);
  const std::string text = analyzer::render_evidence_text(ev, "  ");
  CHECK(text ==
        "  GPU idle share  25.0%\n"
        "  kernels:\n"
        "    name             count   total\n"
        "    my_kernel|v2         3  1.5 ms\n"
        "    op_kernel<7>(…)     12   20 µs\n");
}

TEST_CASE("evidence: byte counts in binary units, a column no row fills left out, in every format") {
  // The pageable-memcpy evidence of an H100 input_bound recording read "bytes 251658240"; its copies' "op"
  // and "annotation" columns were empty in every row.
  const std::string ev =
      R"J({"bytes":251658240,"copies":[{"api":"cudaMemcpy","op":"","annotation":null,"copied_bytes":4194304,)J"
      R"J("count":2},{"api":"cudaMemcpyAsync","copied_bytes":512,"count":1}]})J";
  const std::string text = analyzer::render_evidence_text(ev, "  ");
  CHECK(text ==
        "  bytes  240 MiB\n"
        "  copies:\n"
        "    api              copied bytes  count\n"
        "    cudaMemcpy              4 MiB      2\n"
        "    cudaMemcpyAsync         512 B      1\n");
  const std::string md = analyzer::render_evidence_markdown(ev);
  INFO(md);
  CHECK(md.find("| api | copied bytes | count |") != std::string::npos);
  const std::string html = analyzer::render_evidence_html(ev);
  INFO(html);
  CHECK(html.find("<td>240 MiB</td>") != std::string::npos);
  CHECK(html.find("<td align=\"right\">4 MiB</td>") != std::string::npos);
  CHECK(html.find(">op<") == std::string::npos);
  CHECK(html.find(">annotation<") == std::string::npos);
  // The GPU-gap buckets the JSON keeps as tokens read as words.
  const std::string gaps = R"J({"gpu_gaps":[{"bucket":"<10us","count":3},{"bucket":">=1ms","count":1}]})J";
  CHECK(analyzer::render_evidence_text(gaps) ==
        "GPU gaps:\n"
        "  bucket   count\n"
        "  < 10 µs      3\n"
        "  ≥ 1 ms       1\n");
  CHECK(analyzer::render_evidence_html(gaps).find("<td>&lt; 10 µs</td>") != std::string::npos);
  CHECK(analyzer::units::format_bytes(1536) == "1.5 KiB");
  CHECK(analyzer::units::format_bytes(1023) == "1023 B");
  CHECK(analyzer::units::format_bytes(1048000) == "0.999 MiB");  // not "1.02e+03 KiB"
  CHECK(analyzer::units::format_bytes(3.5 * 1024 * 1024 * 1024) == "3.5 GiB");
}

TEST_CASE("a finding's steps as runs, never a range over steps it does not hold") {
  using analyzer::compact_step_list;
  CHECK(compact_step_list({}) == "");
  CHECK(compact_step_list({4}) == "4");
  CHECK(compact_step_list({0, 1, 2, 3}) == "0–3");
  CHECK(compact_step_list({3, 4}) == "3, 4");
  // The CLI audit's input-bound finding: 13 steps of 0..37, which "13 steps (0..37)" read as a range.
  CHECK(compact_step_list({0, 7, 10, 11, 12, 15, 20, 21, 25, 30, 33, 36, 37}) ==
        "0, 7, 10–12, 15, 20, 21, 25, 30, 33, …");
  CHECK(compact_step_list({0, 7, 10, 11, 12}, 2) == "0, 7, …");
}

TEST_CASE("report formats parse") {
  analyzer::ReportFormat f;
  CHECK((analyzer::parse_report_format("md", f) && f == analyzer::ReportFormat::Markdown));
  CHECK((analyzer::parse_report_format("html", f) && f == analyzer::ReportFormat::Html));
  CHECK((analyzer::parse_report_format("json", f) && f == analyzer::ReportFormat::Json));
  CHECK((analyzer::parse_report_format("text", f) && f == analyzer::ReportFormat::Text));
  CHECK_FALSE(analyzer::parse_report_format("pdf", f));
}

TEST_CASE("write_file_atomically replaces the file whole and leaves nothing behind on failure") {
  test::ScratchDir dir("report_atomic");
  std::string path = dir.file("out.md");
  analyzer::write_file_atomically(path, "first");
  analyzer::write_file_atomically(path, "second version");
  std::ifstream f(path);
  std::string content((std::istreambuf_iterator<char>(f)), {});
  CHECK(content == "second version");
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);  // no temporary left
  std::string bad = dir.file("no/such/dir/out.md");
  CHECK_THROWS_AS(analyzer::write_file_atomically(bad, "x"), store::StoreError);
  try {
    analyzer::write_file_atomically(bad, "x");
  } catch (const store::StoreError& e) {
    CHECK(std::string(e.what()).rfind(bad + ": ", 0) == 0);
  }
}

TEST_CASE("reports show C++ kernel names folded, the HTML keeps the full name in the title") {
  const auto a = test::sample_analysis();
  const std::string folded = "at::native::vectorized_elementwise_kernel<…>(…)";
  CHECK(render_text_report(a).find(folded) != std::string::npos);
  const std::string escaped = "at::native::vectorized_elementwise_kernel&lt;…&gt;(…)";
  CHECK(render_markdown_report(a).find(analyzer::markdown_escape(folded)) != std::string::npos);
  const std::string html = render_html_report(a);
  CHECK(html.find(">" + escaped + "<") != std::string::npos);
  CHECK(html.find("title=\"void at::native::vectorized_elementwise_kernel&lt;4, at::native::FillFunctor&lt;float&gt;") !=
        std::string::npos);
}
