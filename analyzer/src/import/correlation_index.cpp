#include "stepscope/analyzer/correlation_index.h"

#include <algorithm>
#include <stdexcept>

namespace stepscope::analyzer {

CorrelationIndex::CorrelationIndex(const std::vector<store::ApiCall>& calls,
                                   const std::function<bool(uint32_t row)>& keep)
    : calls_(&calls) {
  if (calls.size() >= UINT32_MAX) throw std::length_error("more than 4,294,967,294 API calls");
  auto indexed = [&](uint32_t row) { return calls[row].correlation != 0 && (!keep || keep(row)); };
  size_t n = 0;
  for (uint32_t row = 0; row < calls.size(); ++row) n += indexed(row);
  if (!n) return;
  slots_.resize(std::max<size_t>(16, n + n / 2 + 1));  // one slot always empty: every probe ends
  // While building, a slot holds the id's LAST row so far and next_ links each row to the one before it with
  // the same id; the chains are turned round at the end (first row in the slot, next_ forward): no array
  // beside the slots for the chains' tails.
  for (uint32_t row = 0; row < calls.size(); ++row) {
    if (!indexed(row)) continue;
    const int64_t c = calls[row].correlation;
    const uint64_t h = hash(c);
    size_t i = slot_of(h);
    for (; slots_[i].row; i = i + 1 == slots_.size() ? 0 : i + 1)
      if (slots_[i].tag == uint32_t(h) && calls[slots_[i].row - 1].correlation == c) break;
    if (slots_[i].row) {  // an id seen again
      if (next_.empty()) next_.assign(calls.size(), 0);
      next_[row] = slots_[i].row;  // the row before it + 1
    }
    slots_[i] = {row + 1, uint32_t(h)};
  }
  if (next_.empty()) return;
  for (Slot& s : slots_) {
    if (!s.row || !next_[s.row - 1]) continue;
    uint32_t forward = 0, at = s.row;  // rows + 1, walking back from the last
    while (at) {
      const uint32_t before = next_[at - 1];
      next_[at - 1] = forward;
      forward = at;
      at = before;
    }
    s.row = forward;  // the first row
  }
}

size_t CorrelationIndex::longest_cluster() const {
  size_t longest = 0, run = 0;
  // Twice round: a cluster may wrap past the end (one slot is always empty, so it ends).
  for (size_t i = 0; i < 2 * slots_.size(); ++i) {
    run = slots_[i % slots_.size()].row ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return longest;
}

}  // namespace stepscope::analyzer
