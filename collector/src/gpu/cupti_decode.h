// Decoding of CUPTI activity buffers into store rows. The collector's buffer-completed callback calls
// decode_activity_buffer(); tests call the very same function with hand-built records of cupti_activity.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::collector::cupti {

// Loads libcupti (dlopen; the collector does not link it so processes that never touch CUDA never load it).
// False with `error` set when it cannot be loaded.
bool load_library(std::string* error = nullptr);

struct DecodeState {
  int64_t pid = 0;           // process the records belong to
  int64_t clock_offset = 0;  // added to every CUPTI timestamp (0 when CUPTI already reports CLOCK_MONOTONIC)
  // Added to every non-zero correlation id a row gets: CUPTI numbers its ids from 1 again after each
  // re-attach, and the store's must stay unique per process (docs/schema.md). A multiple of 2^32, so the
  // uint32 id that keys the maps below is the row's low half. The maps are per attach (cleared at a
  // re-attach).
  int64_t correlation_base = 0;
  // NVTX marker ranges seen starting but not yet ending, by marker id.
  struct OpenMarker {
    int64_t start = 0;
    int64_t tid = 0;
    std::string name, domain;
  };
  std::unordered_map<uint32_t, OpenMarker> open_markers;
  // Correlation id → thread of the API call, so synchronization rows get the waiting thread.
  std::unordered_map<uint32_t, int64_t> correlation_tid;
  // Rows of the collector's own launch-cost calibration are not the program's: kernels of this name, API
  // records of this thread and the synchronizations of those API calls (by correlation id) are dropped.
  std::string skip_kernel;
  int64_t skip_tid = 0;
  std::unordered_set<uint32_t> skipped_correlations;
  // Syncs whose API record has not come yet (it may be in a later buffer): held, not written with thread 0.
  // Given up after kSyncHoldBuffers more buffers (its API call was outside a window) and counted.
  struct HeldSync {
    store::Sync row;
    int buffers = 0;
  };
  std::vector<HeldSync> held_syncs;
  uint64_t syncs_without_thread = 0;
  // No API record will come for the held syncs (the run ends, or CUPTI restarts its ids): counted, dropped.
  void give_up_held_syncs() {
    syncs_without_thread += held_syncs.size();
    held_syncs.clear();
  }
  // Graph replays no window traced (docs/collector.md, "CUDA graphs keep CUPTI attached"): CUPTI keeps
  // recording the nodes of a graph instrumented while it traced after the kinds went off, all under the last
  // traced launch's id (the H200 proof of 2026-11-30: 59,515 records of ~1,920 untraced replays under one
  // launch). A record that starts in the latest gap between windows [untraced_from, untraced_to) and repeats
  // a node already seen under its launch id is one of them. Inside windows only the highest launch id's nodes
  // are noted (the id the untraced replays will carry): a node may run more than once in one launch
  // (conditional WHILE bodies).
  static constexpr size_t kReplaysKept = 64;
  int64_t untraced_from = INT64_MAX, untraced_to = INT64_MAX;
  uint32_t window_top = 0;                // the highest launch id with graph records inside a window
  std::vector<int64_t> window_top_nodes;  // its nodes (graph trace records: -graph id)
  std::map<uint32_t, std::unordered_set<int64_t>> replay_nodes;  // in the gap, by launch id: the 64 highest
  uint64_t untraced_replay_records = 0;
  // True (and counted) when a graph record (launch `correlation`, `node`, starting at `start`) is such a
  // replay's: the caller drops it. Ids and nodes of 0 are never dropped.
  bool untraced_replay(uint32_t correlation, int64_t node, int64_t start);
  void forget_replays() {  // a re-attach: CUPTI numbers its ids from 1 again
    window_top = 0;
    window_top_nodes.clear();
    replay_nodes.clear();
  }
  uint64_t incomplete_records = 0;     // GPU work without an end (flushed while running): left out, counted
  std::unordered_set<uint32_t> devices_seen;  // CUPTI sends the device records again after each re-attach
  uint64_t records = 0;
  uint64_t unknown_records = 0;
};

// Walks `valid_size` bytes of `buffer` with cuptiActivityGetNextRecord and appends one row per record to `out`
// (string ids of out.strings). Returns the number of records decoded. Requires load_library().
size_t decode_activity_buffer(uint8_t* buffer, size_t valid_size, store::Trace& out, DecodeState& state);

// The name of a runtime (kind Runtime) or driver API callback id, e.g. "cudaLaunchKernel".
std::string api_name(store::ApiKind kind, uint32_t cbid);

}  // namespace stepscope::collector::cupti
