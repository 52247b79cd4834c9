// Internals shared by the collector's pieces (sampler, NVTX injection, CUPTI, the C API). Not installed.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::collector {

struct Config {
  std::string parts_dir;  // where this process writes its partial store; empty = collector inactive
  int cpu_hz = 1000;
  size_t stack_bytes = 32 * 1024;  // the stack window each sample copies (STEPSCOPE_STACK_BYTES)
  bool wall = false;      // wall-clock timers (samples blocked threads too, marked off-CPU)
  bool no_gpu = false;
  std::regex data_wait_regex{"data|load|fetch|next_batch", std::regex::icase | std::regex::optimize};
  std::regex step_regex;  // empty pattern = no NVTX steps
  bool has_step_regex = false;
  // CUDA API records: false = lean (the classes of cupti_api_classes.h), true = every runtime and driver call.
  bool cuda_api_all = false;
  // CUDA graph replays (STEPSCOPE_CUDA_GRAPHS): each node's kernel, copy and memset with its graph node
  // (nodes, true), or one interval per replay (graph: CUPTI's GRAPH_TRACE, false).
  bool cuda_graph_nodes = true;
  // GPU windows: CUDA activity traced for gpu_window_n steps out of every gpu_window_m (0/0 = the whole run).
  int gpu_window_n = 20, gpu_window_m = 200;
  int cuda_stacks_per_s = 200;  // stacks captured at blocking CUDA calls per second and process (0 = none)
  bool calibrate = true;        // measure the per-launch cost of CUPTI tracing at start
  // --data-wait-func / --step-func: regexes over Python qualified names, handed to the Python hooks.
  std::string python_wait_func, python_step_func;
  // The flight recorder (docs/flight.md; STEPSCOPE_FLIGHT_*): with a folder, the last flight_window_ns are kept
  // in memory and nothing is written until a trigger saves them there, one sub-folder per save.
  std::string flight_dir;
  std::string flight_prefix;          // the launcher writes each save as <prefix>-<sub-folder>.db
  int64_t flight_window_ns = 60LL * 1000000000;
  double flight_slow_step = 3.0;      // × the running median (0: off)
  int64_t flight_min_excess_ns = 50LL * 1000000;  // ... and at least this much over it
  int flight_warmup_steps = 20;
  int64_t flight_data_wait_ns = 0;    // 0: off
  int flight_max_per_hour = 10;
  int flight_gpu_steps = 20;          // steps traced whole after a trigger (windowed GPU tracing)
  int flight_root_pid = 0;            // the process whose end with a signal or an error is saved (0: by parent)
  int flight_parent_pid = 0;          // ... or the process whose parent is this one (record's launcher)
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
  // NVTX) and from several threads: each source keeps a sequence per thread, so one source's or one thread's
  // marks never cut another's steps short (three threads each marking their own loop made one sequence whose
  // steps ran to the next mark of any thread: 0.035 ms steps against 3–5 ms iterations).
  struct StepSequence {
    int64_t next_index = 0;
    int64_t last_boundary = -1;
  };
  std::map<std::pair<std::string, int32_t>, StepSequence> step_sequences;  // by (source, tid)
  // Stacks captured at blocking CUDA calls, by correlation id, waiting for the collector thread to unwind them
  // (record: laid out as a sample ring record — header with registers, stack copy, raw Python frames).
  struct CallStack {
    int64_t correlation = 0;
    int32_t tid = 0;
    std::string record;
  };
  std::vector<CallStack> call_stacks;
  std::vector<store::GpuWindow> gpu_windows;
};
PendingRows& pending();

// Captures the calling thread's native + Python stack for the API call `correlation` (rate-limited to
// Config::cuda_stacks_per_s; drops when over). Called from CUPTI's API-enter callback.
void capture_call_stack(int64_t correlation);
// The same capture where a CUDA graph or graph node is made (cupti_graphs.h): not rate-limited (a graph is
// built once), none with cuda_stacks_per_s 0. Returns the key it is queued under, negative (apart from
// correlation ids), for the row's `stack` until the collector thread puts the unwound stack there; 0 when
// none was queued.
int64_t capture_creation_stack();

// Marks `tid` as one of the collector's own threads (its samples are the profiler's work).
void mark_collector_thread(int32_t tid);

// A metadata key for this process's store (e.g. "cupti.status"); written at the next commit.
void set_process_meta(const std::string& key, const std::string& value);

// A step boundary at `t` from `source` (stepscope_step(), step_at, an NVTX step range's start).
void add_step_boundary(int64_t t, int32_t tid, const char* source);

// CUPTI (cupti_recorder.cpp).
namespace cupti {
// Starts CUPTI activity recording when libcuda is present/initialized. Safe to call more than once.
void start_if_possible(const char* why);
void flush(bool final_flush);
// Flushes and disables every activity kind (the end of an attach window); start_if_possible enables them again.
void stop();
void after_fork_child();
// A step of (source, thread) was completed: switches GPU windows when that sequence drives them
// (WindowDriver).
void on_step(const char* source, int32_t tid);
// The flight recorder fired (collector thread): trace the next `steps` steps whole, windowed tracing or not.
void arm_window(int steps);
// The intervals since the last call in which a GPU window's switch (CUPTI detach, re-attach, tracing off) ran
// on a program thread: the flight recorder does not judge the steps that paid for them.
void take_switches(std::vector<std::pair<int64_t, int64_t>>& out);
// On the collector thread, once CUDA is up: measures the per-launch cost of tracing (meta cupti.launch_cost_ns).
void calibrate_if_due();
// On the collector thread: asks CUDA's next call to detach CUPTI once a window has been off its grace period.
void detach_if_due();
// Another profiler of this process is about to trace CUDA (`who`: "torch.profiler"): stepscope's GPU tracing
// steps aside whole — its window closed, its buffers flushed, no CUPTI call of ours — until take_back. True
// when it was tracing (or attached). The first lend says so in one line on stderr; meta cupti.lent counts
// them.
bool lend_to(const char* who);
// The other profiler stopped: our buffer callbacks again, and the window that was open opens again.
void take_back();
}  // namespace cupti

}  // namespace stepscope::collector
