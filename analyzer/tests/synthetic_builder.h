// Builds traces the way the importers do — ranges, launch calls and the GPU work they issued — for analyzer tests
// whose every figure is known by construction.
#pragma once

#include <string>

#include "stepscope/store/records.h"

namespace stepscope::test {

constexpr int64_t US = 1000;

// Builds a trace the way the importers do: ranges, launch calls and the GPU work they issued.
struct Builder {
  store::Trace t;
  int64_t corr = 1;
  int64_t pid = 100, tid = 101;

  void range(const std::string& name, int64_t s, int64_t e, store::RangeSource src = store::RangeSource::Annotation,
             int depth = 0) {
    store::Range r;
    r.start = s, r.end = e, r.pid = pid, r.tid = tid, r.name = t.intern(name), r.source = src, r.depth = depth;
    t.ranges.push_back(r);
  }
  int64_t api(const std::string& name, int64_t s, int64_t e) {
    store::ApiCall a;
    a.start = s, a.end = e, a.pid = pid, a.tid = tid, a.name = t.intern(name), a.correlation = corr++;
    t.api_calls.push_back(a);
    return a.correlation;
  }
  // A kernel [ks, ke) launched by cudaLaunchKernel [ls, le).
  void kernel(const std::string& name, int64_t ls, int64_t le, int64_t ks, int64_t ke, int grid = 1, int64_t stream = 7) {
    store::Kernel k;
    k.correlation = api("cudaLaunchKernel", ls, le);
    k.start = ks, k.end = ke, k.name = t.intern(name), k.grid_x = grid, k.grid_y = 1, k.grid_z = 1, k.stream = stream;
    k.block_x = 128, k.block_y = 1, k.block_z = 1;
    t.kernels.push_back(k);
  }
  void memcpy(store::CopyKind kind, store::MemoryKind src, store::MemoryKind dst, int64_t ls, int64_t le, int64_t cs,
              int64_t ce, int64_t bytes) {
    store::Memcpy m;
    m.correlation = api("cudaMemcpyAsync", ls, le);
    m.start = cs, m.end = ce, m.kind = kind, m.src_kind = src, m.dst_kind = dst, m.bytes = bytes, m.stream = 7;
    t.memcpys.push_back(m);
  }
};

}  // namespace stepscope::test
