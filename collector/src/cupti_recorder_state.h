// State shared by the CUPTI recorder's rooms: cupti_recorder.cpp (start, buffers, flush), GPU windows and
// launch-cost calibration (cupti_calibration.cpp). Internal.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <cupti.h>

#include "cupti_decode.h"

namespace stepscope::collector::cupti {

struct Recorder {
  std::mutex mu;  // buffers and decode state
  std::vector<uint8_t*> free_buffers;
  int allocated = 0;
  uint64_t buffers_refused = 0;
  uint64_t dropped_records = 0;
  DecodeState state;
  std::atomic<bool> started{false};
  bool failed = false;
  bool callbacks_registered = false;  // once per process: a later attach window reuses them
  bool has_subscriber = false;        // ours, kept for the stack callbacks; released when a window ends
  CUpti_SubscriberHandle subscriber{};

  // What tracing switches on and off (GPU windows, calibration): activity kinds and, in lean mode, API ids.
  std::vector<int> switched_kinds;
  std::vector<uint32_t> lean_runtime_ids, lean_driver_ids;
  bool lean = false;

  std::mutex window_mu;  // switching; never held while taking Recorder::mu or PendingRows::mu
  std::atomic<bool> tracing{false};
  int64_t window_start = 0;
  bool switched = false;  // tracing was off at some point: gpu_windows rows describe what was traced
  std::string window_source;  // the step source that drives the windows (the first one to report a step)

  int64_t next_calibration_check = 0;
  bool calibration_done = false;
};
extern Recorder* rec;

// Switches the activity kinds (and lean API ids) off / on. Off flushes and queues the closed window's
// gpu_windows row. Need window_mu.
void tracing_off_locked(int64_t t);
void tracing_on_locked(int64_t t);

}  // namespace stepscope::collector::cupti
