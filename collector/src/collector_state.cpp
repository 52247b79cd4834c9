// The sampler's shared state and the libunwind entry point (see collector_state.h).
#define UNW_LOCAL_ONLY
#include "collector_state.h"

#include <dlfcn.h>
#include <libunwind.h>

#include <cstdlib>

namespace stepscope::collector {

Globals* g = nullptr;
__thread ThreadState* t_state __attribute__((tls_model("initial-exec"))) = nullptr;
pthread_create_fn real_pthread_create = nullptr;
unw_backtrace_fn p_unw_backtrace = nullptr;

bool load_libunwind() {
  if (p_unw_backtrace) return true;
  void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  auto bt = reinterpret_cast<unw_backtrace_fn>(dlsym(h, "unw_backtrace"));
  auto set_policy = reinterpret_cast<int (*)(unw_addr_space_t, unw_caching_policy_t)>(
      dlsym(h, "_ULx86_64_set_caching_policy"));
  auto* space = static_cast<unw_addr_space_t*>(dlsym(h, "_ULx86_64_local_addr_space"));
  if (!bt) return false;
  if (set_policy && space) set_policy(*space, UNW_CACHE_PER_THREAD);
  p_unw_backtrace = bt;
  return true;
}

bool memory_for_first_unwind() {
  void* probe = std::malloc(kUnwinderProbeBytes);
  if (!probe) return false;
  asm volatile("" : : "r"(probe) : "memory");  // a real allocation, not elided with its free
  std::free(probe);
  return true;
}

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
