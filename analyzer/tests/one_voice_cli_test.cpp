// Every view says the same of a run (issue 48, items 3, 4 and 6): the advice on marking steps in text,
// Markdown, HTML and JSON alike, and for a C/C++ program the header first; a run without GPU activity in the
// host's words in every report; input-bound advice sized to the recorded CPUs; a step made slow by sleeping,
// recorded for real, explained as the training thread not running rather than by a contributor that did not
// grow.
#include <catch2/catch.hpp>

#include <filesystem>

#include "host_only_traces.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/report.h"
#include "test_support.h"

using namespace stepscope;

namespace {

constexpr int64_t MS = 1000 * 1000;

using test::c_program_without_steps;
using test::host_only_input_bound;

}  // namespace

TEST_CASE("a C/C++ program without step markers: one advice, leading with stepscope.h, in every view") {
  const auto a = analyzer::analyze(c_program_without_steps());
  const std::string advice = analyzer::steps_advice(a.summary);
  CHECK(advice ==
        "No step markers (no Python in the recorded processes): mark them with stepscope.h, installed as "
        "<prefix>/include/stepscope.h (collector/include/stepscope.h in the source tree): call "
        "stepscope_step() once "
        "per step and wrap the wait for the next batch in stepscope_data_wait_begin() and "
        "stepscope_data_wait_end(); "
        "it needs no library at link time (-ldl on glibc < 2.34). Or NVTX ranges with `--step-regex` "
        "(docs/python.md).");
  CHECK(analyzer::render_text_report(a).find("\n" + advice + "\n") != std::string::npos);
  CHECK(analyzer::render_markdown_report(a).find("> " + analyzer::markdown_escape(advice) + "\n") !=
        std::string::npos);
  CHECK(analyzer::render_html_report(a).find("<p class=\"notice\">" + analyzer::html_escape(advice) +
                                             "</p>") != std::string::npos);
  CHECK(analyzer::to_json(a).find(
            "\"steps_advice\":\"No step markers (no Python in the recorded processes): mark "
            "them with stepscope.h") != std::string::npos);
}

TEST_CASE("without GPU activity every report speaks of the host: its wait for input and its own work") {
  const auto a = analyzer::analyze(host_only_input_bound("2", true));
  REQUIRE_FALSE(a.summary.has_gpu);
  const std::string md = analyzer::render_markdown_report(a), html = analyzer::render_html_report(a);
  for (const char* gpu_words : {"GPU idle waiting for input", "host code between launches", "GPU busy share",
                                "launch idle", "GPU busy / span"}) {
    INFO(gpu_words);
    CHECK(md.find(gpu_words) == std::string::npos);
    CHECK(html.find(gpu_words) == std::string::npos);
  }
  CHECK(md.find("| Training loop waiting for input | 40.0% |\n| The training thread's own work | 60.0% |") !=
        std::string::npos);
  CHECK(md.find("| Step | Duration | Waiting for input | The training thread's own work | Bound |") !=
        std::string::npos);
  CHECK(html.find("waiting for input 40.0%, the training thread&#39;s own work 60.0%.</p>") !=
        std::string::npos);
  CHECK(analyzer::render_text_report(a).find(
            "Steps  (bar: D waiting for input, H the training thread's own work)") != std::string::npos);
}

TEST_CASE("input-bound advice is sized to the recorded CPUs: 2 CPUs, one loader, one training thread") {
  SECTION("PyTorch without a GPU") {
    const auto a = analyzer::analyze(host_only_input_bound("2", true));
    const analyzer::FindingResult* f = nullptr;
    for (const auto& x : a.findings)
      if (x.rule == "input-bound") f = &x;
    REQUIRE(f);
    INFO(f->suggestion);
    CHECK(f->suggestion.find("leave training the rest (2 CPUs recorded):\n") != std::string::npos);
    CHECK(f->suggestion.find("num_workers=1, prefetch_factor=4") != std::string::npos);
    CHECK(f->suggestion.find("  torch.set_num_threads(1)\n") != std::string::npos);
    CHECK(f->suggestion.find("cores - ") == std::string::npos);
    CHECK(f->evidence_json.find("\"cpus\":2,\"suggested_loaders\":1") != std::string::npos);
  }
  SECTION("a Python loop: the thread-pool snippet imports what it uses") {
    const auto a = analyzer::analyze(host_only_input_bound("2", false));
    REQUIRE(!a.findings.empty());
    const std::string& s = a.findings.front().suggestion;
    INFO(s);
    CHECK(s.find("  import collections\n  from concurrent.futures import ThreadPoolExecutor") !=
          std::string::npos);
    CHECK(s.find("ThreadPoolExecutor(max_workers=1)") != std::string::npos);
    CHECK(s.find("for i in range(1))") != std::string::npos);
  }
  SECTION("no CPU count recorded (an imported trace): the snippet computes it, never below one thread") {
    const auto a = analyzer::analyze(host_only_input_bound(nullptr, true));
    REQUIRE(!a.findings.empty());
    const std::string& s = a.findings.front().suggestion;
    INFO(s);
    CHECK(s.find("  import os\n  workers = max(1, min(8, (os.cpu_count() or 2) // 2))\n") !=
          std::string::npos);
    CHECK(s.find("torch.set_num_threads(max(1, (os.cpu_count() or 2) - workers))") != std::string::npos);
  }
}

TEST_CASE("a step made slow by sleeping, recorded for real: the training thread was not running") {
  const std::string python = std::string(STEPSCOPE_PYTHON_VENV) + "/bin/python";
  if (!std::filesystem::exists(python)) STEPSCOPE_SKIP("no test venv (numpy) at STEPSCOPE_PYTHON_VENV");
  test::ScratchDir dir("one_voice_slow_steps");
  const std::string db = dir.file("slow.db");
  // Steps of ~15 ms of numpy work; every 8th sleeps 300 ms more in save_checkpoint (off CPU, no samples):
  // far above the run's noise even on a loaded 2-CPU machine (at 100 ms a parallel ctest once hid it).
  const auto rec =
      test::run_shell(test::shell_quote(test::binary_dir() + "/cli/stepscope") + " record -o " +
                      test::shell_quote(db) + " --step-func train_step -- " + test::shell_quote(python) +
                      " " + test::shell_quote(test::source_dir() + "/samples/cpu/python_slow_steps.py") +
                      " --steps 32 --every 8 --slow-ms 300 --step-ms 15 2>&1");
  INFO(rec.output);
  REQUIRE(rec.status == 0);
  const store::Trace t = analyzer::load_trace(db);
  CHECK(t.meta.count("host.cpus") == 1);
  const auto a = analyzer::analyze(t);
  const auto& o = a.step_outliers;
  std::string all;
  for (const auto& s : o.slow) all += s.explanation + "\n";
  INFO(all);
  // The sleeping steps, by their excess (the step numbers depend on where the first boundary fell): 4 of
  // them.
  int sleeping = 0;
  for (const auto& s : o.slow) {
    if (s.startup || s.excess_ns < 250 * MS) continue;
    ++sleeping;
    CHECK(s.not_running);
    CHECK(s.off_cpu_ns - s.off_cpu_median_ns >= s.excess_ns / 2);
    CHECK(s.explanation.find(
              "; the training thread was not running (preempted or blocked; `record --wall` shows "
              "where): off CPU ") != std::string::npos);
    // The contributor, when one is named, is said to be the on-CPU part, never the cause.
    if (!s.contributor.empty())
      CHECK(s.explanation.find("; on CPU, the biggest contributor: ") != std::string::npos);
  }
  CHECK(sleeping >= 3);
  for (const auto& s : o.slow) CHECK(s.explanation.find("(+0 µs)") == std::string::npos);
  // Markdown and HTML say it in their tables.
  CHECK(analyzer::render_markdown_report(a).find("| not running: +") != std::string::npos);
  CHECK(analyzer::render_html_report(a).find("<td>not running: +") != std::string::npos);
}
