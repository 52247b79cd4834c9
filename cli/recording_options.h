// The recording options `stepscope record` and `stepscope attach` share.
#pragma once

#include <CLI/CLI.hpp>

#ifdef HAVE_STEPSCOPE_LAUNCHER
#include "stepscope/collector/launcher.h"

namespace stepscope::cli {

inline void add_recording_options(CLI::App* cmd, collector::RecordOptions& o, const char* duration_help) {
  cmd->add_option("-o,--output", o.output,
                  "Store to write (atomically, when recording ends); %r the rank (one store per rank: "
                  "-o run-%r.db), %p the pid, %h the host, %% a percent sign")
      ->capture_default_str();
  cmd->add_option("--cpu-hz", o.cpu_hz, "CPU samples per second per thread")->capture_default_str()->check(CLI::Range(1, 20000));
  cmd->add_option("--stack-bytes", o.stack_bytes,
                  "bytes of stack each sample copies for unwinding; deeper stacks are cut (counted)")
      ->capture_default_str()
      ->check(CLI::Range(1024, 262144));
  cmd->add_flag("--wall", o.wall, "Wall-clock sampling: also sample threads blocked off-CPU");
  cmd->add_flag("--no-gpu", o.no_gpu, "Do not record CUDA activity (no CUPTI)");
  cmd->add_option("--duration", o.duration_s, duration_help)->check(CLI::NonNegativeNumber);
  cmd->add_option("--data-wait-regex", o.data_wait_regex, "NVTX ranges matching this (case-insensitive) are data waits")
      ->capture_default_str();
  cmd->add_option("--step-regex", o.step_regex, "NVTX ranges matching this are training steps");
  cmd->add_option("--data-wait-func", o.data_wait_func, "Python functions matching this are data waits (Python hook)");
  cmd->add_option("--step-func", o.step_func, "Python functions matching this mark steps (Python hook)");
  cmd->add_option("--cuda-api", o.cuda_api,
                  "CUDA API calls to record: lean (launches, copies, memsets, syncs, queries, pinned host "
                  "allocations) or all")
      ->capture_default_str()
      ->check(CLI::IsMember({"lean", "all"}));
  cmd->add_option("--gpu-window", o.gpu_window,
                  "Trace CUDA activity N steps out of every M (N/M), or all; runs without step markers or with "
                  "fewer than N steps are traced whole")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (!collector::valid_gpu_window(v)) return "expected all or N/M with 0 < N < M, got " + v;
            return {};
          },
          "N/M|all"));
  cmd->add_option("--cuda-stacks-per-s", o.cuda_stacks_per_s,
                  "Stacks captured at blocking CUDA calls per second and process (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
}

}  // namespace stepscope::cli
#endif
