// Hand-built Analysis objects for the report and diff tests (the renderers need no trace).
#pragma once

#include <string>

#include "stepscope/analyzer/analysis.h"
#include "test_support.h"

namespace stepscope::test {

// Six 100 ms steps: 40 ms data wait, 50 ms busy, 4 ms launch, 3 ms sync, 3 ms other; an input-bound finding
// and kernels whose names need escaping.
inline analyzer::Analysis sample_analysis() {
  analyzer::Analysis a;
  a.source_file = "runs/<b>resnet</b> & \"friends\".json.gz";
  a.summary.kernels = 1200;
  a.summary.memcpys = 30;
  a.summary.memsets = 6;
  a.summary.gpu_busy_us = 300000;
  a.summary.gpu_span_us = 600000;
  a.summary.steps = 6;
  a.summary.step_source = "profiler-step";
  a.summary.data_wait_share = 0.4;
  a.summary.input_idle_share = 0.4;
  a.summary.gpu_busy_share = 0.5;
  a.summary.has_gpu = true;
  for (int i = 0; i < 6; ++i) {
    analyzer::StepBreakdown s;
    s.index = i;
    s.start_ns = int64_t(i) * 100'000'000;
    s.dur_ns = 100'000'000;
    s.gpu_busy_ns = 50'000'000;
    s.data_wait_ns = 40'000'000;
    s.launch_idle_ns = 4'000'000;
    s.sync_idle_ns = 3'000'000;
    s.other_idle_ns = 3'000'000;
    s.bound = analyzer::Bound::Input;
    s.kernels = 200;
    a.steps.push_back(s);
  }
  analyzer::FindingResult f;
  f.rule = "input-bound";
  f.severity = store::Severity::High;
  f.steps = {0, 1, 2, 3, 4, 5};
  f.est_savings_us_per_step = 40000;
  f.share = 0.4;
  f.summary = "GPU idle 40% of each step waiting for the next batch (enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__)";
  f.suggestion = "DataLoader(dataset, num_workers=8, pin_memory=True,\n           prefetch_factor=2, persistent_workers=True)";
  f.evidence_json = R"({"data_wait_us_per_step":40000,"source":"dataloader","ranges":["enumerate(DataLoader)#<x>"]})";
  a.findings.push_back(f);
  analyzer::KernelStat k1{"<script>alert(1)</script>", 600, 150'000'000, 100'000, 400'000};
  analyzer::KernelStat k2{"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                          "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
                          600, 150'000'000, 200'000, 300'000};
  a.top_kernels = {k1, k2};
  a.host_activity.window = "gpu-waited-for-host";
  a.host_activity.source = "samples";
  a.host_activity.window_ns = 400'000'000;
  a.host_activity.pid = 7, a.host_activity.tid = 7, a.host_activity.thread_name = "python";
  a.host_activity.thread_reason = "runs the steps";
  a.host_activity.sample_period_ns = 1'000'000, a.host_activity.period_source = "meta collector.cpu_hz";
  a.host_activity.on_cpu_ns = 300'000'000, a.host_activity.off_cpu_ns = 100'000'000;
  a.host_activity.functions = {{"_SingleProcessDataLoaderIter.__next__ (torch/utils/data/dataloader.py:633)", 240, 240'000'000},
                               {"PIL.Image.decode | resize", 60, 60'000'000}};
  a.utilization_bucket_ns = 20'000'000;
  for (int i = 0; i < 30; ++i) a.utilization.push_back(i % 5 == 0 ? 0.1 : 0.6);
  return a;
}

struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

// Runs a shell command, capturing stdout+stderr.
inline ProcessResult run_command(const std::string& cmd) {
  CommandResult r = run_shell(cmd + " 2>&1");
  return {r.status, std::move(r.output)};
}

inline bool have_program(const std::string& name) {
  return run_command("command -v " + shell_quote(name) + " >/dev/null").exit_code == 0;
}

}  // namespace stepscope::test
