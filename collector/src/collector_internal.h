// Internals shared by the collector's pieces (sampler, NVTX injection, CUPTI, the C API). Not installed.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <regex>
#include <string>

#include "stepscope/store/records.h"

namespace stepscope::collector {

struct Config {
  std::string parts_dir;  // where this process writes its partial store; empty = collector inactive
  int cpu_hz = 1000;
  bool wall = false;      // wall-clock timers (samples blocked threads too, marked off-CPU)
  bool no_gpu = false;
  std::regex data_wait_regex{"data|load|fetch|next_batch", std::regex::icase | std::regex::optimize};
  std::regex step_regex;  // empty pattern = no NVTX steps
  bool has_step_regex = false;
};

// True once the collector is recording in this process.
bool running();
const Config& config();
// CLOCK_MONOTONIC in ns: the clock of every row the collector writes (meta clock_domain).
int64_t now_ns();
int32_t current_tid();

// Rows produced outside the signal handler (NVTX, CUPTI, stepscope.h calls) wait here until the collector
// thread appends them to the store. Hold the lock only briefly.
struct PendingRows {
  std::mutex mu;
  store::Trace rows;
  // Step boundaries come from several sources at once (stepscope.step(), the DataLoader and optimizer hooks,
  // NVTX): each source keeps its own sequence, so one source's marks never cut another's steps short.
  struct StepSequence {
    int64_t next_index = 0;
    int64_t last_boundary = -1;
  };
  std::map<std::string, StepSequence> step_sequences;
};
PendingRows& pending();

// A metadata key for this process's store (e.g. "cupti.status"); written at the next commit.
void set_process_meta(const std::string& key, const std::string& value);

// A step boundary at `t` from `source` (stepscope_step(), step_at, an NVTX step range's start).
void add_step_boundary(int64_t t, int32_t tid, const char* source);

// CUPTI (cupti_recorder.cpp).
namespace cupti {
// Starts CUPTI activity recording when libcuda is present/initialized. Safe to call more than once.
void start_if_possible(const char* why);
void flush(bool final_flush);
void after_fork_child();
}  // namespace cupti

}  // namespace stepscope::collector
