// A buffer of CUPTI activity records laid out as CUPTI lays them out (each record 8-byte aligned), for the
// tests that walk one with libcupti's own cuptiActivityGetNextRecord.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace stepscope::test {

struct ActivityBuffer {
  alignas(8) std::vector<uint8_t> bytes = std::vector<uint8_t>(1 << 16, 0);
  size_t used = 0;
  // A zeroed record of type T at the next aligned place.
  template <class T>
  T& add() {
    used = (used + 7) & ~size_t{7};
    T* p = reinterpret_cast<T*>(bytes.data() + used);
    std::memset(static_cast<void*>(p), 0, sizeof(T));
    used += sizeof(T);
    return *p;
  }
};

}  // namespace stepscope::test
