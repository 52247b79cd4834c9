// `stepscope attach PID` / `detach PID` / `start PID` / `stop PID`: recording windows in running processes.
// The collector is loaded into the process with ptrace (once; it stays dormant afterwards) and driven over a
// same-user unix socket; see docs/collector.md, "Attaching to a running process".
#pragma once

#include <sys/types.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "stepscope/collector/launcher.h"

namespace stepscope::collector {

// One-line, user-facing reason why attaching failed; the target is never left stopped when it is thrown.
class AttachError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AttachOptions {
  pid_t pid = 0;
  bool children = false;  // also every descendant process (present at attach, or forked during the window)
  RecordOptions record;   // output, cpu_hz, wall, no_gpu, duration_s (0: until Ctrl-C or `stepscope detach`), regexes
};

struct AttachSummary {
  RecordSummary record;
  std::vector<pid_t> attached;   // processes recorded
  int injected = 0;              // of which the collector had to be loaded into (the others already had it)
  double max_stopped_ms = 0;     // longest time one process had all its threads stopped by the injection
  double max_caller_stopped_ms = 0;  // the thread that ran dlopen: longest time away from its own code
  bool target_exited = false;    // the process ended during the window (its samples up to then are kept)
};

// Records `options.pid` until the duration elapses, SIGINT/SIGTERM reaches stepscope, `stepscope detach PID`
// stops the window, or the process exits; then writes options.record.output atomically. Throws
// AttachError (one line) when the process cannot be attached; the process is never left stopped.
AttachSummary record_attached(const AttachOptions& options);

// `attach -o`'s name with %p (the process's pid), %h (this host), %r (the process's rank, from its
// environment: RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK) and %% replaced, as `record`
// does. Throws AttachError when %r is asked and the process has no rank.
std::string attach_output_name(const std::string& pattern, pid_t pid);

// `stepscope top PID`: a flight window in a running process (the collector loaded when needed) that keeps the
// last `window_s` in memory and fires no trigger; snapshot() turns it into a store. The destructor closes the
// window: the process keeps running, its collector dormant. A process already flight recording (record --flight,
// attach --flight) is read through its own window, which stays open; one recording without a flight window
// (attach, record, start) is refused with AttachError.
class LiveWindow {
 public:
  // Throws AttachError (one line) when the process cannot be attached; `scratch_dir` must exist and be private.
  LiveWindow(pid_t pid, const RecordOptions& options, double window_s, std::string scratch_dir);
  ~LiveWindow();
  LiveWindow(const LiveWindow&) = delete;
  LiveWindow& operator=(const LiveWindow&) = delete;
  // The window now, merged and symbolized into the store `output`; false with `error` when the process is gone or
  // does not answer.
  bool snapshot(const std::string& output, std::string& error);
  const AttachSummary& summary() const { return summary_; }

 private:
  pid_t pid_;
  uid_t uid_ = 0;
  std::string scratch_;
  AttachSummary summary_;
  bool open_ = false;
};

// Sends `start` (record --paused processes: the environment's options) or `stop` to the collector in `pid`.
// Returns the collector's reply ("ok ..."); throws AttachError when no collector listens there.
std::string control_request(pid_t pid, const std::string& command);

}  // namespace stepscope::collector
