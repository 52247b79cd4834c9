// Steps every importer runs after filling a Trace: order rows by time, nest ranges, link GPU work to the
// process that launched it, and make sure every process, thread and device seen has its row.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer::import {

struct NameHints {
  std::map<int64_t, std::string> process_names;                      // pid → name
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;  // (pid, tid) → name
};

void finalize_trace(store::Trace& t, const NameHints& names);

// Correlation id → the first API call row with it. Open addressing over the rows: 8 bytes a slot, at
// least 1.5 slots an id (a trace has an API call a kernel: a node-based map's allocation and free a call were
// a third of finalize_trace's time). `calls` must outlive the index unchanged.
class CorrelationIndex {
 public:
  explicit CorrelationIndex(const std::vector<store::ApiCall>& calls);
  explicit CorrelationIndex(std::vector<store::ApiCall>&&) = delete;  // it keeps a pointer to them
  // The row, or -1 (also for correlation 0, which links nothing).
  int64_t find(int64_t correlation) const {
    if (!correlation || slots_.empty()) return -1;
    const uint64_t h = hash(correlation);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.row) return -1;
      if (s.tag == uint32_t(h >> 32) && (*calls_)[s.row - 1].correlation == correlation) return s.row - 1;
    }
  }
  // The most slots in a row that are taken (a probe's worst walk): how well the ids spread.
  size_t longest_cluster() const;

 private:
  struct Slot {
    uint32_t row = 0;  // the row + 1; 0: empty
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
};

// Every table in time order; rows with equal times keep their order (finalize_trace's first step, and a
// Kineto chunk's before it is merged with the others).
void sort_rows_by_start(store::Trace& t);

// Range depth per (pid, tid) by nesting (depth 0 = outermost); ranges that only partly overlap their
// enclosing range are placed one level below it.
void compute_range_depths(store::Trace& t);

// "cudaLaunchKernel_v7000" → "cudaLaunchKernel" (nsys appends the API version).
std::string_view strip_api_version(std::string_view name);

// Memcpy kind and memory kinds from names like "Memcpy HtoD (Pageable -> Device)".
void parse_memcpy_name(std::string_view name, store::CopyKind& kind, store::MemoryKind& src,
                       store::MemoryKind& dst);
store::MemoryKind parse_memory_kind(std::string_view word);

}  // namespace stepscope::analyzer::import
