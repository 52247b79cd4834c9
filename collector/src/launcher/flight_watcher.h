// The launcher's side of the flight recorder (docs/flight.md): the processes write each save as a folder of
// parts under the flight folder; this turns every folder, once its processes had time to add their parts,
// into one symbolized store <prefix>-<folder>.db, within a disk quota. Used by `record --flight` and `attach
// --flight`, polled from their wait loops.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace stepscope::collector {

// The processes of a recording answer another's save within a few scan periods (250 ms): a folder is merged
// this long after it was first seen.
inline constexpr int64_t kFlightGatherNs = 2000LL * 1000000;

class FlightWatcher {
 public:
  // `meta`: the recording's own (command, host, recorder); `quota_bytes`: all saves together (0: none).
  FlightWatcher(std::string dir, std::string prefix, std::map<std::string, std::string> meta,
                int64_t quota_bytes, bool print);
  // Merges the folders that are ready. Never throws: a save that cannot be written is reported and skipped.
  void poll();
  // After the program ended: every folder left, and the root process's last window when the program failed
  // (`failure`: "exit status 1", "signal 11"; empty: it succeeded, and that window is dropped). Removes the
  // flight folder.
  void finish(const std::string& failure);
  // "signal N" or "exit status N" when the root process's last window says it failed (attach cannot wait for
  // the status: the collector kept it, flight_recorder.h).
  std::string exit_failure() const;
  const std::vector<std::string>& saved() const { return saved_; }
  int64_t skipped() const { return over_quota_ + empty_ + failed_ + unsaved_; }
  int64_t saved_bytes() const { return saved_bytes_; }
  // The run's last line after finish(): what was saved, what was not and why, and the triggers the hourly
  // limit held back or that found no save folder; "no trigger fired" only when none did. "flight recorder: 2
  // windows saved (1.3 MiB), ..."
  std::string summary() const;

 private:
  void merge(const std::string& name, std::map<std::string, std::string> trigger);
  void not_saved(const std::string& name, const std::string& why);
  std::string dir_, prefix_;
  std::map<std::string, std::string> meta_;
  int64_t quota_ = 0, saved_bytes_ = 0;
  int64_t merged_ = 0, over_quota_ = 0, empty_ = 0, failed_ = 0, held_back_ = 0, unsaved_ = 0;
  std::string unwritable_;  // why the flight folder could not be written, when nothing was saved or counted
  bool print_ = true;
  std::map<std::string, int64_t> first_seen_;
  std::vector<std::string> saved_;
};

// Where a recording's flight saves go: "<output without .db>" as the prefix, "<output>.flight" as the folder.
std::string flight_prefix(const std::string& output);

}  // namespace stepscope::collector
