// Single-producer single-consumer byte ring for raw samples. The producer is a signal handler on the owning
// thread (no allocation, no locks: a few atomic loads/stores, records written in place); the consumer is the
// collector thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace stepscope::collector {

class SampleRing {
 public:
  // `memory` of `capacity` bytes (a power of two, multiple of 8) is owned by the caller.
  void init(void* memory, size_t capacity) {
    data_ = static_cast<uint8_t*>(memory);
    cap_ = capacity;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(0, std::memory_order_relaxed);
  }
  size_t capacity() const { return cap_; }

  // Producer: room for a record of up to `max_len` bytes, written in place and published by commit() with its
  // real length (≤ max_len). Null (nothing reserved) when it does not fit. One reservation at a time.
  uint8_t* reserve(size_t max_len) {
    const size_t need = align8(sizeof(uint64_t) + max_len);
    uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t tail = tail_.load(std::memory_order_acquire);
    size_t pos = head & (cap_ - 1);
    const size_t to_end = cap_ - pos;
    const size_t total = need > to_end ? to_end + need : need;  // skip the tail end with a wrap marker
    if (need > cap_ || head + total - tail > cap_) return nullptr;
    if (need > to_end) {
      const uint64_t wrap = kWrap;
      std::memcpy(data_ + pos, &wrap, sizeof wrap);  // beyond head: the consumer reads it only after commit
      head += to_end;
      pos = 0;
    }
    reserved_head_ = head;
    return data_ + pos + sizeof(uint64_t);
  }
  void commit(size_t len) {
    const uint64_t hdr = len;
    std::memcpy(data_ + (reserved_head_ & (cap_ - 1)), &hdr, sizeof hdr);
    head_.store(reserved_head_ + align8(sizeof hdr + len), std::memory_order_release);
  }

  // Producer: copies `a`, `b` and `c` as one record. False (nothing written) when it does not fit.
  bool push(const void* a, size_t na, const void* b, size_t nb, const void* c, size_t nc) {
    uint8_t* p = reserve(na + nb + nc);
    if (!p) return false;
    if (na) std::memcpy(p, a, na);
    if (nb) std::memcpy(p + na, b, nb);
    if (nc) std::memcpy(p + na + nb, c, nc);
    commit(na + nb + nc);
    return true;
  }

  // Consumer: calls f(const uint8_t* record, size_t len) for every complete record, then frees them. When f
  // throws, the records it took are freed and the one it threw on stays for the next drain.
  template <class F>
  size_t drain(F&& f) {
    uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    struct Release {
      std::atomic<uint64_t>& to;
      const uint64_t& tail;
      ~Release() { to.store(tail, std::memory_order_release); }
    } release{tail_, tail};
    size_t n = 0;
    while (tail < head) {
      size_t pos = tail & (cap_ - 1);
      uint64_t hdr;
      std::memcpy(&hdr, data_ + pos, sizeof hdr);
      if (hdr == kWrap) {
        tail += cap_ - pos;
        continue;
      }
      f(data_ + pos + sizeof hdr, static_cast<size_t>(hdr));
      tail += align8(sizeof hdr + hdr);
      ++n;
    }
    return n;
  }

 private:
  static constexpr uint64_t kWrap = ~uint64_t{0};
  static size_t align8(size_t n) { return (n + 7) & ~size_t{7}; }
  uint8_t* data_ = nullptr;
  size_t cap_ = 0;
  uint64_t reserved_head_ = 0;  // producer only
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
};

}  // namespace stepscope::collector
