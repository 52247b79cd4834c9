#include "stepscope/analyzer/correlation_index.h"

#include <algorithm>
#include <stdexcept>

namespace stepscope::analyzer {

CorrelationIndex::CorrelationIndex(const std::vector<store::ApiCall>& calls) : calls_(&calls) {
  if (calls.size() >= UINT32_MAX) throw std::length_error("more than 4,294,967,294 API calls");
  size_t n = 0;
  for (const auto& a : calls) n += a.correlation != 0;
  if (!n) return;
  size_t cap = 16;
  while (cap < n + n / 2) cap *= 2;
  slots_.resize(cap);
  mask_ = cap - 1;
  std::vector<uint32_t> last;  // slot → the last row seen with its id + 1; made at the first repeat
  for (uint32_t row = 0; row < calls.size(); ++row) {
    const int64_t c = calls[row].correlation;
    if (!c) continue;
    const uint64_t h = hash(c);
    size_t i = h & mask_;
    for (; slots_[i].row; i = (i + 1) & mask_)
      if (slots_[i].tag == uint32_t(h >> 32) && calls[slots_[i].row - 1].correlation == c) break;
    if (!slots_[i].row) {
      slots_[i] = {row + 1, uint32_t(h >> 32)};
      continue;
    }
    // An id seen again: chained after its last row, so find(id, pid) walks its rows in row order.
    if (next_.empty()) {
      next_.assign(calls.size(), 0);
      last.assign(cap, 0);
    }
    const uint32_t tail = last[i] ? last[i] - 1 : slots_[i].row - 1;
    next_[tail] = row + 1;
    last[i] = row + 1;
  }
}

size_t CorrelationIndex::longest_cluster() const {
  size_t longest = 0, run = 0;
  // Twice round: a cluster may wrap past the end (one slot is always empty, so it ends).
  for (size_t i = 0; i < 2 * slots_.size(); ++i) {
    run = slots_[i & mask_].row ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

}  // namespace stepscope::analyzer
