// State shared by the CUPTI recorder's rooms: cupti_recorder.cpp (start, buffers, flush), GPU windows and
// launch-cost calibration (cupti_calibration.cpp). Internal.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include <cupti.h>

#include "gpu/cupti_api_classes.h"
#include "gpu/cupti_decode.h"
#include "gpu/cupti_graphs.h"
#include "gpu/gpu_window.h"

namespace stepscope::collector::cupti {

struct Recorder {
  std::mutex mu;  // buffers and decode state
  std::vector<uint8_t*> free_buffers;
  std::unordered_set<uint8_t*> with_cupti;  // handed to CUPTI, not yet back (reclaimed after a detach)
  int allocated = 0;
  uint64_t buffers_refused = 0;
  uint64_t dropped_records = 0;
  uint64_t foreign_buffers = 0;  // completed buffers that were not ours (another profiler's), left alone
  DecodeState state;
  std::atomic<bool> started{false};
  bool failed = false;
  bool attached_once = false;         // the first attach happened (later ones re-attach after a detach)
  bool identity_set = false;          // thread id type and clock: before any kind is enabled, once per attach
  bool has_subscriber = false;        // ours: stack callbacks and the detach callback
  CUpti_SubscriberHandle subscriber{};

  // Detach (gpu_window.h): requested on the collector thread once a window has been off for a grace period,
  // performed by api_callback at a CUDA call's exit on a program thread, undone by the next window.
  std::atomic<int> link{int(Link::Attached)};
  int64_t detach_due = 0;  // when the collector thread asks for the detach (0: not pending); window_mu
  std::atomic<bool> finalize_failed{false};  // cuptiFinalize refused once: windows only disable kinds from then on
  // A CUDA graph was instantiated or launched while CUPTI was attached: CUPTI instruments the executable
  // graph for its node records and a detach then faults its later replays (cudaErrorLaunchFailure; H200
  // proof, 2026-11-30), so it never detaches again in this process. Set by a program thread's callback.
  std::atomic<bool> graphs_pinned{false};  // sequentially consistent with `link` (pin_attached, detach_here)
  std::atomic<int64_t> pinned_at{0};
  bool pin_said = false;                // cupti.detach says so (window_mu)
  std::atomic<bool> domains_on{false};  // every runtime/driver callback enabled, waiting for a detach
  std::atomic<int64_t> last_detach_ns{0};
  // state.correlation_base, for the stack callback (no lock there); changed only while CUPTI is detached.
  std::atomic<int64_t> correlation_base{0};
  int64_t detaches = 0, attaches = 0, detach_ns_max = 0, attach_ns_max = 0;  // window_mu

  // What tracing switches on and off (GPU windows, calibration): activity kinds and, in lean mode, API ids.
  std::vector<int> switched_kinds;
  std::vector<uint32_t> lean_runtime_ids, lean_driver_ids;
  bool lean = false;
  // Attached after CUDA started, lean means the RUNTIME/DRIVER kinds on and every id outside the lean lists
  // switched off (CUPTI records nothing for ids selected one by one then); inside cuInit, the ids selected.
  bool lean_by_deselect = false;

  // CUDA graphs as the program builds them (cupti_graphs.h): callback id → GraphApi of each API domain, made
  // before the first callback is enabled and never changed; the builder of this process (made at its first
  // attach).
  std::vector<GraphApi> graph_api_runtime, graph_api_driver;
  GraphBuilds* graphs = nullptr;

  std::mutex window_mu;  // switching; taken before PendingRows::mu and Recorder::mu, never after them
  std::atomic<bool> tracing{false};
  int64_t window_start = 0;
  bool switched = false;  // tracing was off at some point: gpu_windows rows describe what was traced
  WindowDriver window_driver;  // the step sequence that switches the windows
  WindowSchedule schedule{0, 0};

  int64_t next_calibration_check = 0;
  bool calibration_done = false;
  std::mutex calibration_mu;  // held through a calibration's CUDA calls, cleanup included; before window_mu

  // The program's exit began (before_exit): CUDA and CUPTI may be torn down from here on, so nothing of ours
  // calls them again; a calibration under way stops at its next round.
  std::atomic<bool> exiting{false};
  // The process whose CUPTI this is (set at each attach): a forked child's inherited before_exit leaves it
  // alone.
  std::atomic<int> owner_pid{0};
  bool exit_hook_after_context = false;  // registered again once device 0's context was active

  // CUDA tracing lent to another profiler of this process (torch.profiler, through the Python hook: lend_to
  // and take_back). CUPTI has one set of buffer callbacks and one set of enabled kinds for the whole process:
  // the other registers its own, and a window of ours switching kinds or detaching under it would cut its
  // trace, so nothing of ours calls CUPTI until it is given back. window_mu; `lent` also read without it.
  std::atomic<bool> lent{false};
  std::string lent_to;
  int64_t lent_at = 0;
  bool tracing_at_lend = false;  // a window was open: it opens again at take_back
  bool start_deferred = false;   // CUDA started while lent: the first attach waits for take_back
  int64_t lent_count = 0, lent_ns = 0;
  int64_t lent_held =
      0;  // lends that found our GPU tracing started (the others deferred nothing but a start)
  std::string lent_first;  // who, the first time
};
extern Recorder* rec;

// Switches the activity kinds (and lean API ids) off / on. Off flushes, queues the closed window's gpu_windows
// row and, when `detach_after_ns` >= 0, has CUPTI detached that long after (detach_if_due). On attaches CUPTI
// again when it was detached, and the window opens when it is back; false when it cannot. Need window_mu.
void tracing_off_locked(int64_t t, int64_t detach_after_ns);
bool tracing_on_locked();
// Asks for the detach now (flushes everything first); waits until it happened when `wait_ns` > 0 and a CUDA call
// came (the calibration's launches). Need window_mu.
void request_detach_locked();
// Where windows can no longer detach (a failed finalize, a CUDA graph: Recorder::graphs_pinned): the callback
// domains a detach request switched on go off again and cupti.detach says why. Need window_mu.
void settle_no_detach_locked();
bool wait_detached_locked(int64_t wait_ns);
// Has before_exit run by atexit: registered after CUDA's own exit handlers (at the first attach, and again
// when the calibration starts), it runs before them. Once per call; the handler does its work once.
void register_exit_hook();

}  // namespace stepscope::collector::cupti
