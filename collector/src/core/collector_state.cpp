// The sampler's shared state (see collector_state.h).
#include "collector_state.h"

namespace stepscope::collector {

Globals* g = nullptr;
__thread ThreadState* t_state __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_create_fn real_pthread_create = nullptr;

ThreadState* lookup(int32_t tid) {
  uint32_t h = tid_hash(tid);
  for (int i = 0; i < kTableSize; ++i) {
    ThreadState* s = g->table[h].load(std::memory_order_acquire);
    if (!s) return nullptr;
    if (s != kTombstone && s->tid.load(std::memory_order_relaxed) == tid) return s;
    h = (h + 1) & (kTableSize - 1);
  }
  return nullptr;
}

}  // namespace stepscope::collector
