// The launcher behind `stepscope record`: runs a command under libstepscope_collector.so, then merges the
// per-process partial stores into one store (atomically) and symbolizes it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::collector {

struct RecordOptions {
  std::string output = "run.db";  // %r rank, %p pid, %h host, %% a percent sign (docs/collector.md, "Several ranks")
  int cpu_hz = 1000;
  int stack_bytes = 32 * 1024;  // the stack window each sample copies and the collector thread unwinds
  bool wall = false;
  bool no_gpu = false;
  double duration_s = 0;  // > 0: SIGINT the command after this long (SIGKILL 5 s later)
  std::string data_wait_regex = "data|load|fetch|next_batch";
  std::string step_regex;
  std::string data_wait_func, step_func;  // for the Python hook (STEPSCOPE_DATA_WAIT_FUNC / STEPSCOPE_STEP_FUNC)
  std::string cuda_api = "lean";     // "lean": launches, copies, memsets, syncs, queries, pinned allocs; "all"
  std::string cuda_graphs = "nodes";  // graph replays: "nodes" (every node's records) or "graph"
  std::string gpu_window = "20/200";  // "N/M": CUDA activity traced N steps out of every M; "all": whole run
  int cuda_stacks_per_s = 200;        // stacks captured at blocking CUDA calls per second and process (0: none)
  std::vector<std::string> command;
  bool paused = false;  // record only inside windows opened by `stepscope start PID` (control channel)
  // The flight recorder (docs/flight.md): > 0 keeps the last flight_s seconds in memory, writes nothing while
  // all is well, and saves the window as <output without .db>-<time>-<trigger>.db when a trigger fires.
  double flight_s = 0;
  double flight_slow_step = 3.0;     // × the running median of the steps before (0: off)
  double flight_min_excess_ms = 50;  // ... and at least this many ms over it
  int flight_warmup_steps = 20;
  double flight_data_wait_ms = 0;    // a data wait longer than this (0: off)
  int flight_max_per_hour = 10;      // automatic saves per hour (dump and exit saves are not counted)
  int64_t flight_quota_bytes = int64_t(1) << 30;  // all saves of the run together (0: no limit)
  int flight_gpu_steps = 20;         // steps traced whole after a trigger (windowed GPU tracing)
  bool print_summary = true;
};

struct RecordSummary {
  int exit_code = 0;  // the command's exit status; 128+N when killed by signal N; 127 when it could not start
  // --duration elapsed and ended the command: it exited (any status, after our SIGINT) or died of our SIGINT
  // or SIGKILL. `record` then exits 0, the recording having ended as asked; exit_code (and the store's) stays
  // the command's own.
  bool stopped_by_duration = false;
  int launcher_signal = 0;  // SIGINT, SIGTERM or SIGHUP the launcher itself got while the command ran; 0: none
  int64_t processes = 0, threads = 0, samples = 0, kernels = 0, ranges = 0;
  int64_t steps = 0, data_waits = 0;  // the steps table's rows and the data waits (the hooks', the markers')
  int64_t dropped_samples = 0, dropped_gpu_records = 0, unsampled_threads = 0;
  int64_t parts = 0, unreadable_parts = 0;
  double command_wall_s = 0;  // fork of the command to its exit (start-up and the collector's final flush included)
  double finalize_s = 0;      // after the command ended: merge parts, symbolize, write the store
  std::vector<std::string> warnings;
  std::vector<std::string> outputs;  // the stores written: one, or one per rank (-o with %r); flight: the saves
  std::vector<std::string>
      replaced;                      // those of them that replaced a file already there (said in the summary)
  int64_t flight_skipped = 0;        // flight saves not written (quota, nothing recorded)
};

// Runs the command to completion and writes options.output. Throws store::StoreError when the output cannot
// be written. Never throws for a failing command: its status is in the summary.
RecordSummary record(const RecordOptions& options);

// OUTPUT.parts, where a recording's processes write their parts (record, attach), held for the recording:
// made 0700 when missing and locked (flock on its .lock file, which names the holder's pid). Two shells'
// default run.db removed each other's parts and both wrote a store, one of them empty: now `record` writes to
// another name when the output is busy, `attach` refuses. What a killed recording left there is removed. The
// folder is used through a descriptor opened with O_NOFOLLOW, never through a path that a symbolic link could
// redirect (a planted OUT.parts -> /etc was emptied, made 0700 and, under a root attach, given to the
// target's user). On a file system without locks (Lustre mounted noflock, some NFS) it records unguarded, as
// before. The folder itself is removed by whoever merges it; the lock ends with this object.
class PartsFolderLock {
 public:
  PartsFolderLock() = default;
  ~PartsFolderLock();
  PartsFolderLock(const PartsFolderLock&) = delete;
  PartsFolderLock& operator=(const PartsFolderLock&) = delete;
  // False, with the holder's pid, when another live recording holds it. Throws store::StoreError(output, why)
  // when the folder cannot be made or used (a symbolic link or a file in its place is refused).
  bool take(const std::string& output, const std::string& parts_dir, std::string& holder);
  // The folder and its lock to `uid` (root attaching to another user's process: it writes its parts there).
  void give_to(uid_t uid);

 private:
  void release();
  int dir_fd_ = -1, fd_ = -1;
};

// The STEPSCOPE_FLIGHT_* settings of `options` for a recording whose saves go to `dir`, named <prefix>-*.db.
std::map<std::string, std::string> flight_env(const RecordOptions& options, const std::string& dir,
                                              const std::string& prefix);

// True while the flight save folder `save` (a full path) waits for its merge or is being merged (the launcher
// renames it to a dot-name first, flight_watcher.cpp).
bool flight_save_pending(const std::string& save);

// The stores a path with %r was written as (one per rank, "launcher" included), sorted; none: empty.
std::vector<std::string> rank_stores(const std::string& pattern);

// True when `spec` is a valid --gpu-window value: "all" or "N/M" with 0 < N < M.
bool valid_gpu_window(const std::string& spec);

// Path of libstepscope_collector.so (env STEPSCOPE_COLLECTOR_LIB, beside the binary, or the build tree).
std::string collector_library_path();

class Symbolizer;

// Parts of the summary line `record` and `attach` print: ", 59 steps, 61 data waits" (empty when none), and
// "; replaced the file that was there" when the store written to `output` took the place of one.
std::string steps_and_waits(const RecordSummary& s);
const char* replaced_note(const RecordSummary& s, const std::string& output);

// Merges every partial store in `parts_dir` into `output` (temp file + rename), symbolizing native frames.
// Fills the counts of `summary`. `symbolizer`: one that serves several merges (the stores of several ranks),
// keeping what it resolved for the earlier ones; null: one of its own.
void merge_parts(const std::string& parts_dir, const std::string& output,
                 const std::map<std::string, std::string>& meta, RecordSummary& summary,
                 Symbolizer* symbolizer = nullptr);

// Replaces unsymbolized native frames (symbol 0, module + address) by their function / file:line, expanding
// inlined calls into frames of their own; rewrites stacks and the stack ids of samples, API calls, graphs and
// graph nodes to match, and returns that renumbering (old stack id → new) for rows not in `trace` (a merge
// streams samples and API calls past it). Uses libdw. Each module is
// opened once and each address looked up once per Symbolizer, so one Symbolizer serves all parts of a run;
// results persist per build-id in symbol_cache_dir() (written when the Symbolizer is destroyed), so a later
// run opens a module's debug information only for addresses not resolved before.
class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;
  std::unordered_map<int64_t, int64_t> symbolize(store::Trace& trace);
  int64_t modules_opened() const;
  int64_t addresses_looked_up() const;
  int64_t cache_hits() const;  // addresses answered from the persistent cache

 private:
  struct Impl;
  Impl* impl_;
};
void symbolize(store::Trace& trace);

// Where symbolization results are kept per build-id: $STEPSCOPE_SYMBOL_CACHE ("0" or "off": nowhere), else
// $XDG_CACHE_HOME/stepscope/symbols, else ~/.cache/stepscope/symbols. Empty: no persistent cache.
std::string symbol_cache_dir();

}  // namespace stepscope::collector
