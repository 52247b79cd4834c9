// The collector thread's half of a CUDA graph's or node's creation stack (cupti_graphs.h): rows leave the
// program's threads with the key their stack was queued under (negative, capture_creation_stack); here each
// gets the stack that was interned under its key. No CUDA in here: the output room uses it in every build.
#pragma once

#include <cstdint>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::collector {

// For every graph and node row of `rows` with a key: `stack_of(key)` (0 when none was interned: the row keeps
// none). Rows that got a stack go to `put` (the writer's own stack ids: not renumbered with the other rows)
// and leave `rows`. The keys met are added to `keys` (several rows may share one: forget them after).
template <class StackOf, class Put>
void take_graph_stacks(store::Trace& rows, StackOf&& stack_of, Put&& put, std::vector<int64_t>& keys) {
  auto take = [&](auto& v) {
    auto kept = v.begin();
    for (auto& r : v) {
      if (r.stack < 0) {
        keys.push_back(r.stack);
        r.stack = stack_of(r.stack);
      }
      if (r.stack > 0)
        put(r);
      else
        *kept++ = r;
    }
    v.erase(kept, v.end());
  };
  take(rows.graphs);
  take(rows.graph_nodes);
}

}  // namespace stepscope::collector
