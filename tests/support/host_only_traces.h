// Host-only runs shared by the analyzer's and the GUI's "one voice" tests (issue 48): what every view must
// say of a run without GPU activity, with or without step markers.
#pragma once

#include "stepscope/store/records.h"

namespace stepscope::test {

// A C program's recording without step markers: one busy thread, no GPU, and the launcher's "no Python" line.
inline store::Trace c_program_without_steps() {
  constexpr int64_t kMs = 1000 * 1000;
  store::Trace t;
  t.meta["python.hooks"] = "none: no CPython in the recorded processes";
  store::Range r;
  r.start = 0, r.end = 500 * kMs, r.name = t.intern("compute"), r.pid = 1, r.tid = 1;
  t.ranges.push_back(r);
  return t;
}

// A host-only trainer of 10 steps of 100 ms whose first 40 ms wait for the batch (as analyze_synthetic_test):
// `cpus` the recorded meta host.cpus (nullptr: not recorded); `torch`: a name only PyTorch makes; a Python
// frame.
inline store::Trace host_only_input_bound(const char* cpus = nullptr, bool torch = false) {
  constexpr int64_t kMs = 1000 * 1000;
  store::Trace t;
  if (cpus) t.meta["host.cpus"] = cpus;
  for (int i = 0; i < 10; ++i) {
    const int64_t s0 = 1000 * kMs + i * 100 * kMs;
    store::Step st;
    st.start = s0, st.end = s0 + 100 * kMs, st.source = t.intern("step-func"), st.pid = 7, st.tid = 7;
    t.steps.push_back(st);
    store::DataWait w;
    w.start = s0, w.end = s0 + 40 * kMs, w.source = t.intern("data-wait-func"), w.pid = 7, w.tid = 7;
    t.data_waits.push_back(w);
  }
  if (torch) t.intern("aten::add");
  store::Frame f;
  f.id = 1, f.symbol = t.intern("load_batch"), f.kind = store::FrameKind::Python;
  t.frames.push_back(f);
  return t;
}

}  // namespace stepscope::test
