// wide_chain: a hot loop under a call chain of 200 distinct functions (chain<199> .. chain<0>), more distinct
// return addresses than libunwind's default rule cache (128 entries) holds: the collector's unwinder must
// keep them all, or it searches the unwind tables for every frame of every sample.
//   wide_chain [--iterations N]
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int kChain = 200;

__attribute__((noinline)) uint64_t hot_leaf(uint64_t iterations, uint64_t seed) {
  uint64_t x = seed | 1;
  for (uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

// The result is used after each call, so no call becomes a jump and every link keeps its own frame.
template <int N>
__attribute__((noinline)) uint64_t chain(uint64_t iterations, uint64_t seed) {
  if constexpr (N == 0) {
    return hot_leaf(iterations, seed);
  } else {
    return chain<N - 1>(iterations, seed + 1) * 3 + N;
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t iterations = 400000000;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) {
      iterations = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "wide_chain: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  std::printf("wide_chain %d: %llu\n", kChain, (unsigned long long)chain<kChain - 1>(iterations, 1));
  return 0;
}
