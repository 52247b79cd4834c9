// The sample ring between a producer (the signal handler) and the collector thread's drain, run concurrently;
// `scripts/test.sh --sanitize` runs this under ThreadSanitizer. A full ring refuses a record (the caller counts
// the drop) and never corrupts one.
#include <catch2/catch.hpp>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "sampling/ring.h"

using stepscope::collector::SampleRing;

namespace {
// A record: its sequence number, then `len` bytes each equal to (seq + i) & 0xff.
size_t payload_len(uint64_t seq) { return (seq * 7919) % 200; }
}  // namespace

TEST_CASE("a producer and a concurrent drain move 200k records of mixed size intact and in order — drops are counted") {
  constexpr uint64_t kRecords = 200000;
  std::vector<uint64_t> memory(4096 / 8);  // a small ring, so it wraps and fills many times
  SampleRing ring;
  ring.init(memory.data(), 4096);
  std::atomic<bool> done{false};
  uint64_t dropped = 0;
  std::thread producer([&] {
    uint8_t buf[256];
    for (uint64_t seq = 0; seq < kRecords; ++seq) {
      const size_t len = payload_len(seq);
      for (size_t i = 0; i < len; ++i) buf[i] = uint8_t(seq + i);
      // Header split like the collector's (fixed part, then two variable parts).
      const size_t half = len / 2;
      // Every 16th record waits for room (so the drain must run concurrently); the others are dropped
      // when the ring is full, as the signal handler does.
      while (!ring.push(&seq, sizeof seq, buf, half, buf + half, len - half)) {
        if (seq % 16 != 0) {
          ++dropped;
          break;
        }
        std::this_thread::yield();
      }
    }
    done.store(true, std::memory_order_release);
  });
  uint64_t received = 0, last = 0, bad = 0;
  bool first = true;
  auto check = [&](const uint8_t* rec, size_t len) {
    uint64_t seq;
    std::memcpy(&seq, rec, sizeof seq);
    const size_t n = payload_len(seq);
    bool ok = len == sizeof seq + n && (first || seq > last);
    for (size_t i = 0; ok && i < n; ++i) ok = rec[sizeof seq + i] == uint8_t(seq + i);
    bad += !ok;
    first = false;
    last = seq;
    ++received;
  };
  while (!done.load(std::memory_order_acquire)) ring.drain(check);
  producer.join();
  ring.drain(check);
  CHECK(bad == 0);
  CHECK(received + dropped == kRecords);
  CHECK(received >= kRecords / 16);  // at least every 16th record went through the concurrent drain
}

TEST_CASE("a full ring refuses records without touching the ones it holds, and takes them again once drained") {
  std::vector<uint64_t> memory(1024 / 8);
  SampleRing ring;
  ring.init(memory.data(), 1024);
  const uint64_t payload[7] = {1, 2, 3, 4, 5, 6, 7};  // 56 bytes + 8 header = 64 per record
  int accepted = 0;
  while (ring.push(payload, sizeof payload, nullptr, 0, nullptr, 0)) ++accepted;
  CHECK(accepted == 1024 / 64);
  CHECK_FALSE(ring.push(payload, 8, nullptr, 0, nullptr, 0));
  int drained = 0;
  ring.drain([&](const uint8_t* rec, size_t len) {
    CHECK(len == sizeof payload);
    CHECK(std::memcmp(rec, payload, sizeof payload) == 0);
    ++drained;
  });
  CHECK(drained == accepted);
  CHECK(ring.push(payload, sizeof payload, nullptr, 0, nullptr, 0));
  // A record bigger than the ring never fits.
  std::vector<uint8_t> huge(2048);
  CHECK_FALSE(ring.push(huge.data(), huge.size(), nullptr, 0, nullptr, 0));
}

TEST_CASE("a drain whose consumer runs out of memory frees what it took and gives the rest to the next drain") {
  std::vector<uint64_t> memory(1024 / 8);
  SampleRing ring;
  ring.init(memory.data(), 1024);
  for (uint64_t seq = 0; seq < 10; ++seq) REQUIRE(ring.push(&seq, sizeof seq, nullptr, 0, nullptr, 0));
  std::vector<uint64_t> got;
  bool thrown = false;
  const auto take = [&](const uint8_t* rec, size_t) {
    uint64_t seq;
    std::memcpy(&seq, rec, sizeof seq);
    if (seq == 4 && !thrown) {  // the collector's drain, out of memory once
      thrown = true;
      throw std::bad_alloc();
    }
    got.push_back(seq);
  };
  CHECK_THROWS_AS(ring.drain(take), std::bad_alloc);
  CHECK(got == std::vector<uint64_t>{0, 1, 2, 3});
  CHECK(ring.drain(take) == 6);  // from the record it threw on, each exactly once
  CHECK(got == std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(ring.drain(take) == 0);
}
