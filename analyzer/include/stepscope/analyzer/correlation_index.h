// The one join of GPU work to the API call that launched it, used by the importers, the analysis, the graph
// table, the HTA breakdowns and diff alike: by correlation id, and by process where merged processes' ids
// collide (each process counts its own from 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// Correlation id → API call rows. Open addressing over the rows, 1.5 slots an indexed id at 8 bytes a slot
// (12 bytes a call; a node-based map's allocation and free a call were a third of an import's finalize time,
// and a sorted array of (id, row) was 16), and 4 bytes a call more only where an id repeats (merged
// processes). `calls` must outlive the index unchanged.
class CorrelationIndex {
 public:
  explicit CorrelationIndex(const std::vector<store::ApiCall>& calls) : CorrelationIndex(calls, nullptr) {}
  // Only the rows `keep` accepts are indexed (the HTA breakdowns join launch and queue calls only).
  CorrelationIndex(const std::vector<store::ApiCall>& calls, const std::function<bool(uint32_t row)>& keep);
  explicit CorrelationIndex(std::vector<store::ApiCall>&&) = delete;  // it keeps a pointer to them

  // The first indexed row with the id, or -1 (also for correlation 0, which links nothing).
  int64_t find(int64_t correlation) const {
    if (!correlation || slots_.empty()) return -1;
    const uint64_t h = hash(correlation);
    for (size_t i = slot_of(h);; i = i + 1 == slots_.size() ? 0 : i + 1) {
      const Slot& s = slots_[i];
      if (!s.row) return -1;
      if (s.tag == uint32_t(h) && (*calls_)[s.row - 1].correlation == correlation) return s.row - 1;
    }
  }

  // The launch of a GPU record of process `pid`: the first row with the id of that process, else the first of
  // no known process (0); pid 0 (the record's process unknown): the first row. -1 where a known process has
  // no call under the id: another process's call is not its launch (it would put the work in that process's
  // step, at its time).
  int64_t find(int64_t correlation, int64_t pid) const {
    int64_t row = find(correlation), unknown = -1;
    if (row < 0 || !pid) return row;
    for (;;) {
      const int64_t p = (*calls_)[size_t(row)].pid;
      if (p == pid) return row;
      if (p == 0 && unknown < 0) unknown = row;
      if (next_.empty() || !next_[size_t(row)]) return unknown;
      row = int64_t(next_[size_t(row)]) - 1;
    }
  }

  // The most slots in a row that are taken (a probe's worst walk): how well the ids spread.
  size_t longest_cluster() const;

 private:
  struct Slot {
    uint32_t row = 0;  // the id's first row + 1; 0: empty
    uint32_t tag = 0;  // the hash's low half: most other ids are passed over without reading their row
  };
  // Every bit of the id moves the slot (the hash's high bits) and the tag (its low bits): ids file writers
  // choose (multiples of 2^40, say) must not pile into a few slots.
  static uint64_t hash(int64_t correlation) {
    uint64_t h = static_cast<uint64_t>(correlation);
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdull;
    h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
  }
  // The hash's high bits scaled to the table (any size, not a power of two: 1.5 slots an id exactly).
  size_t slot_of(uint64_t h) const {
    return size_t((static_cast<unsigned __int128>(h) * slots_.size()) >> 64);
  }
  const std::vector<store::ApiCall>* calls_;
  std::vector<Slot> slots_;
  // Row → the next indexed row with the same id + 1 (0: none), in row order; empty while no id repeats.
  std::vector<uint32_t> next_;
};

}  // namespace stepscope::analyzer
