// The small library storm_target loads and unloads in a loop: thread-local data, so every dlopen grows the
// loading thread's TLS (its next __tls_get_addr must resize the DTV with malloc).
#include <cstddef>

namespace {
thread_local char t_scratch[4096];
thread_local int t_calls = 0;
}  // namespace

extern "C" __attribute__((visibility("default"))) int storm_touch(int seed) {
  ++t_calls;
  for (size_t i = 0; i < sizeof t_scratch; i += 64) t_scratch[i] = static_cast<char>(seed + int(i));
  return t_calls + t_scratch[seed & 4095];
}
