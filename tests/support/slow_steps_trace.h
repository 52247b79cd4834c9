// A synthetic training run whose slow steps have known causes, shared by the analyzer and GUI tests.
#pragma once

#include <string>

#include "stepscope/store/records.h"

namespace stepscope::test {

// Twelve steps: a 1 ms DataLoader wait, then gemm (5 ms) and relu (3 ms) back to back, with a little jitter.
// Step 4 waits 9 ms for its batch; step 8's relu takes 12 ms.
inline store::Trace slow_steps_trace() {
  constexpr int64_t US = 1000, MS = 1000 * US;
  store::Trace t;
  int64_t corr = 1, now = 0;
  auto range = [&](const std::string& name, int64_t s, int64_t e, store::RangeSource src) {
    store::Range r;
    r.start = s, r.end = e, r.pid = 100, r.tid = 101, r.name = t.intern(name), r.source = src;
    t.ranges.push_back(r);
  };
  auto kernel = [&](const std::string& name, int64_t launch, int64_t ks, int64_t ke) {
    store::ApiCall a;
    a.start = launch, a.end = launch + 5 * US, a.pid = 100, a.tid = 101, a.name = t.intern("cudaLaunchKernel");
    a.correlation = corr++;
    t.api_calls.push_back(a);
    store::Kernel k;
    k.correlation = a.correlation, k.start = ks, k.end = ke, k.name = t.intern(name), k.stream = 7;
    k.grid_x = k.grid_y = k.grid_z = 1, k.block_x = 128, k.block_y = k.block_z = 1;
    t.kernels.push_back(k);
  };
  for (int s = 0; s < 12; ++s) {
    const int64_t wait = s == 4 ? 9 * MS : 1 * MS, relu = s == 8 ? 12 * MS : 3 * MS, jitter = (s % 3) * 20 * US;
    const int64_t start = now;
    range("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", start, start + wait, store::RangeSource::Op);
    const int64_t g0 = start + wait + 10 * US, g1 = g0 + 5 * MS + jitter;
    kernel("ampere_sgemm_128x64_nn", start + wait, g0, g1);
    kernel("void at::native::vectorized_elementwise_kernel<4, at::native::relu>(int)", start + wait + 6 * US, g1, g1 + relu);
    now = g1 + relu + 100 * US;
    range("ProfilerStep#" + std::to_string(s), start, now, store::RangeSource::Op);
  }
  return t;
}

}  // namespace stepscope::test
