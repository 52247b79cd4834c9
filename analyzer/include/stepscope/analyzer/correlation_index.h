// The one join of GPU work to the API call that launched it, used by the importers, the analysis, the graph
// table, the HTA breakdowns and diff alike: by correlation id, and by process where merged processes' ids
// collide (each process counts its own from 1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// Correlation id → API call rows. Open addressing over the rows: 8 bytes a slot, at least 1.5 slots an id (a
// trace has an API call a kernel: a node-based map's allocation and free a call were a third of an import's
// finalize time), and 4 bytes a call more only where an id repeats. `calls` must outlive the index unchanged.
class CorrelationIndex {
 public:
  explicit CorrelationIndex(const std::vector<store::ApiCall>& calls);
  explicit CorrelationIndex(std::vector<store::ApiCall>&&) = delete;  // it keeps a pointer to them

  // The first row with the id, or -1 (also for correlation 0, which links nothing).
  int64_t find(int64_t correlation) const {
    if (!correlation || slots_.empty()) return -1;
    const uint64_t h = hash(correlation);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.row) return -1;
      if (s.tag == uint32_t(h >> 32) && (*calls_)[s.row - 1].correlation == correlation) return s.row - 1;
    }
  }

  // The launch of a GPU record of process `pid`: the first row with the id whose process is pid or unknown
  // (0); pid 0 (the record's process unknown): the first row. -1 where a known process has no call under the
  // id: another process's call is not its launch (it would put the work in that process's step, at its time).
  int64_t find(int64_t correlation, int64_t pid) const {
    int64_t row = find(correlation);
    if (row < 0 || !pid) return row;
    for (;;) {
      const int64_t p = (*calls_)[size_t(row)].pid;
      if (p == pid || p == 0) return row;
      if (next_.empty() || !next_[size_t(row)]) return -1;
      row = int64_t(next_[size_t(row)]) - 1;
    }
  }

  // The most slots in a row that are taken (a probe's worst walk): how well the ids spread.
  size_t longest_cluster() const;

 private:
  struct Slot {
    uint32_t row = 0;  // the id's first row + 1; 0: empty
    uint32_t tag = 0;  // the hash's high half: most other ids are passed over without reading their row
  };
  // Every bit of the id moves the slot (low bits) and the tag (high bits): ids file writers choose (multiples
  // of 2^40, say) must not pile into a few slots.
  static uint64_t hash(int64_t correlation) {
    uint64_t h = static_cast<uint64_t>(correlation);
    h = (h ^ (h >> 33)) * 0xff51afd7ed558ccdull;
    h = (h ^ (h >> 33)) * 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
  }
  const std::vector<store::ApiCall>* calls_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  // Row → the next row with the same id + 1 (0: none), in row order; empty while no id repeats.
  std::vector<uint32_t> next_;
};

}  // namespace stepscope::analyzer
