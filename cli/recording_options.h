// The recording options `stepscope record` and `stepscope attach` share.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#ifdef HAVE_STEPSCOPE_LAUNCHER
#include "command.h"
#include "stepscope/collector/launcher.h"

namespace stepscope::cli {

inline bool parse_seconds(const std::string& v, double& out);

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
  cmd->add_flag("--wall,!--cpu-time", o.wall,
                "Wall-clock sampling: also sample threads blocked off-CPU (--cpu-time: CPU time only, the default "
                "except with --flight)");
  cmd->add_flag("--no-gpu", o.no_gpu, "Do not record CUDA activity (no CUPTI)");
  // Seconds, or with a unit as `top` and --flight take them: 30, 30s, 500ms, 2m, 1h.
  cmd->add_option("--duration", o.duration_s, duration_help)
      ->transform(CLI::Validator(
          [](std::string& v) -> std::string {
            double s = 0;
            if (!parse_seconds(v, s)) return "expected a duration like 30, 30s, 500ms or 2m, got " + v;
            v = std::to_string(s);
            return {};
          },
          "DURATION"));
  cmd->add_option("--data-wait-regex", o.data_wait_regex,
                  "NVTX ranges matching this (case-insensitive) are data waits")
      ->capture_default_str()
      ->check(regex_option());
  cmd->add_option("--step-regex", o.step_regex, "NVTX ranges matching this are training steps")
      ->check(regex_option());
  cmd->add_option("--data-wait-func", o.data_wait_func,
                  "Python functions matching this are data waits (Python hook)")
      ->check(python_regex_option());
  cmd->add_option("--step-func", o.step_func, "Python functions matching this mark steps (Python hook)")
      ->check(python_regex_option());
  cmd->add_option("--cuda-api", o.cuda_api,
                  "CUDA API calls to record: lean (launches, copies, memsets, syncs, queries, pinned host "
                  "allocations) or all")
      ->capture_default_str()
      ->check(CLI::IsMember({"lean", "all"}));
  cmd->add_option(
         "--cuda-graphs", o.cuda_graphs,
         "CUDA graph replays: nodes (each replay's kernels, copies and memsets, with their graph node and "
         "the stack that captured it) or graph (one interval per replay, cheaper)")
      ->capture_default_str()
      ->check(CLI::IsMember({"nodes", "graph"}));
  cmd->add_option(
         "--gpu-window", o.gpu_window,
         "Trace CUDA activity N steps out of every M (N/M), or all; the off phase lasts longer where "
         "tracing's measured cost would pass 1.5% of the wall time; runs without step markers or with "
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

// Text forms of the flight recorder's settings: "60s", "500ms", "2m", "1h" (plain numbers are seconds);
// "1GiB", "500MiB", "0" (bytes); "slow-step=3x", "slow-step=off", "data-wait=200ms".
// A non-negative number with one of `units` (suffix → scale; the first that ends `v` wins, none: scale 1).
inline bool parse_scaled(std::string v, std::initializer_list<std::pair<const char*, double>> units, double& out) {
  double scale = 1;
  for (const auto& [suffix, f] : units) {
    const std::string sf = suffix;
    if (v.size() > sf.size() && v.compare(v.size() - sf.size(), sf.size(), sf) == 0) {
      v.resize(v.size() - sf.size());
      scale = f;
      break;
    }
  }
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || !end || *end || x < 0) return false;
  out = x * scale;
  return true;
}

inline bool parse_seconds(const std::string& v, double& out) {
  return parse_scaled(v, {{"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}}, out);
}

inline bool parse_bytes(const std::string& v, int64_t& out) {
  double x = 0;
  if (!parse_scaled(v, {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"K", 1024.0}, {"M", 1048576.0},
                        {"G", 1073741824.0}},
                    x))
    return false;
  out = int64_t(x);
  return true;
}

struct FlightArgs {
  std::string window;  // --flight
  std::vector<std::string> triggers;
  std::string quota = "1GiB";
};

inline void add_flight_options(CLI::App* cmd, collector::RecordOptions& o, FlightArgs& a) {
  cmd->add_option("--flight", a.window,
                  "Flight recorder: keep the last DURATION (60s, 2m) in memory, write nothing while all is well, "
                  "and save it as a store when a trigger fires (docs/flight.md)");
  cmd->add_option("--trigger", a.triggers,
                  "Flight trigger: slow-step=Kx[+DURATION] (a step slower than K times the running median and at "
                  "least DURATION over it; default 3x+50ms; slow-step=off), data-wait=DURATION (a data wait "
                  "longer than that). Repeatable");
  cmd->add_option("--flight-warmup", o.flight_warmup_steps, "Steps not judged at the start")
      ->capture_default_str()
      ->check(at_least_zero(true));
  cmd->add_option("--flight-max-per-hour", o.flight_max_per_hour,
                  "Saves by triggers in any hour (stepscope dump and a failing end always save)")
      ->capture_default_str()
      ->check(at_least_zero(true));
  cmd->add_option("--flight-quota", a.quota, "Disk all saves of the run may use together (1GiB, 500MiB; 0: no limit)")
      ->capture_default_str();
  cmd->add_option("--flight-gpu-steps", o.flight_gpu_steps,
                  "Steps traced whole after a trigger when GPU tracing is windowed")
      ->capture_default_str()
      ->check(at_least_zero(true));
}

// Applies the text forms; "" when valid, else the problem. A flight recording samples wall-clock time at 100 Hz
// unless --cpu-hz / --cpu-time say otherwise (its cost goal is 1%: docs/flight.md, "Cost").
inline std::string apply_flight_args(CLI::App* cmd, collector::RecordOptions& o, const FlightArgs& a) {
  if (a.window.empty()) {
    // Given without --flight they would be ignored without a word.
    std::string given;
    for (const char* name :
         {"--trigger", "--flight-warmup", "--flight-max-per-hour", "--flight-quota", "--flight-gpu-steps"})
      if (cmd->get_option(name)->count() > 0) given += (given.empty() ? "" : ", ") + std::string(name);
    if (given.empty()) return "";
    return given + (given.find(',') == std::string::npos ? " needs --flight" : " need --flight");
  }
  if (!parse_seconds(a.window, o.flight_s) || o.flight_s <= 0) return "--flight: expected a duration like 60s, got " + a.window;
  if (!parse_bytes(a.quota, o.flight_quota_bytes)) return "--flight-quota: expected a size like 1GiB, got " + a.quota;
  for (const auto& t : a.triggers) {
    const auto eq = t.find('=');
    const std::string k = t.substr(0, eq), v = eq == std::string::npos ? "" : t.substr(eq + 1);
    if (k == "slow-step") {
      if (v == "off") {
        o.flight_slow_step = 0;
        continue;
      }
      std::string x = v;
      if (const auto plus = x.find('+'); plus != std::string::npos) {
        double excess = 0;
        if (!parse_seconds(x.substr(plus + 1), excess))
          return "--trigger slow-step: expected Kx+DURATION like 3x+50ms, got " + v;
        o.flight_min_excess_ms = excess * 1000;
        x.resize(plus);
      }
      if (!x.empty() && (x.back() == 'x' || x.back() == 'X')) x.pop_back();
      char* end = nullptr;
      const double f = std::strtod(x.c_str(), &end);
      if (x.empty() || *end || f <= 1) return "--trigger slow-step: expected a factor above 1 like 3x, got " + v;
      o.flight_slow_step = f;
    } else if (k == "data-wait") {
      double sec = 0;
      if (v == "off") {
        o.flight_data_wait_ms = 0;
        continue;
      }
      if (!parse_seconds(v, sec) || sec <= 0) return "--trigger data-wait: expected a duration like 200ms, got " + v;
      o.flight_data_wait_ms = sec * 1000;
    } else {
      return "--trigger: unknown trigger " + t + " (slow-step=Kx, data-wait=DURATION)";
    }
  }
  if (cmd->get_option("--cpu-hz")->count() == 0) o.cpu_hz = 100;
  // A slow step is most often a wait (a checkpoint, a read, a straggler): only wall-clock samples say where.
  if (cmd->get_option("--wall")->count() == 0) o.wall = true;
  return "";
}

}  // namespace stepscope::cli
#endif
