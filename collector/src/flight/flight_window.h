// The flight recorder's window (docs/flight.md): the rows the collector thread drained — samples with their
// stacks, steps, data waits, ranges, CUDA calls and GPU activity — kept in memory for the last N seconds
// instead of being written to a part. Frames, stacks, modules, threads and strings are the window's
// dictionary: kept whole (they grow with the distinct code the program runs, not with time). Only the
// collector thread uses it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "stepscope/store/records.h"

namespace stepscope::collector::flight {

class FlightWindow {
 public:
  store::Trace& rows() { return rows_; }
  const store::Trace& rows() const { return rows_; }
  // Drops the timed rows that ended before `cutoff_ns` (CLOCK_MONOTONIC).
  void prune(int64_t cutoff_ns);
  // Timed rows held now (samples, steps, waits, ranges, CUDA calls, GPU activity).
  int64_t timed_rows() const;
  // Memory the window's vectors hold, in bytes (the dictionary's strings included).
  int64_t memory_bytes() const;
  // Writes the window as a part store in `dir` ("<pid>-<monotonic ns>.db", through a temporary name renamed
  // when complete, so a reader never sees half a part) with `meta` added. Returns the part's path. Throws
  // store::StoreError.
  std::string write_part(const std::string& dir, int32_t pid,
                         const std::map<std::string, std::string>& meta) const;

 private:
  store::Trace rows_;
};

}  // namespace stepscope::collector::flight
