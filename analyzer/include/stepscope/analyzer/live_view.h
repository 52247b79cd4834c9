// What `stepscope top PID` shows of a running trainer, from the analysis of its last window (docs/flight.md,
// "stepscope top"): the pace, the GPU and data-wait shares, where the training thread is, and the findings as
// the analyzer names them now. Built fresh from each window: nothing is carried between refreshes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer {

struct LiveLine {
  std::string name;
  double share = 0;    // of the training thread's samples in the window
  bool on_cpu = true;  // false: the thread was blocked there (wall-clock samples)
};

struct LiveView {
  double window_s = 0;  // the span of the window's samples and steps
  int64_t steps = 0;    // steps that ended in the window
  double steps_per_s = 0;
  double step_p50_ms = 0, step_p95_ms = 0;
  std::string step_source;  // "optimizer", "step-func", ... ("none": no steps found)
  bool has_gpu = false;
  double gpu_busy_share = 0;           // of the GPU-traced steps' time
  double data_wait_share = 0;          // of the steps' time, the training loop waiting for its next batch
  std::string thread;                  // the training thread: "python (pid 12, tid 12)"
  std::vector<LiveLine> functions;     // the training thread's functions, largest first
  std::vector<LiveLine> python_lines;  // its innermost Python line per sample, largest first
  std::vector<std::string> findings;   // "[high] summary (≈ 2.1 ms per step)"
  std::string note;                    // why a part is empty ("no steps: ..."), or ""
};

// `max_rows`: functions and Python lines kept.
LiveView live_view(const store::Trace& trace, const Analysis& analysis, size_t max_rows = 8);

// The view as plain text lines no wider than `width` (a terminal's columns; no escape sequences).
std::string render_live_view(const LiveView& view, const std::string& title, int width = 100);

}  // namespace stepscope::analyzer
