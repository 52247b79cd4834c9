// The exported C API of stepscope.h (steps, data waits) and the internal entry points of collector_internal.h
// that NVTX injection and CUPTI use.
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "core/collector_state.h"

namespace stepscope::collector {
namespace {
thread_local std::vector<std::pair<int64_t, std::string>> t_data_waits;
// The Python helper measures what a hooked call costs through the real entry points: while set on a thread, they
// read the clock and the thread id as always and record nothing (stepscope_collector_python_probe).
thread_local bool t_probe = false;
}  // namespace

bool running() { return g && g->state.load(std::memory_order_relaxed) == kRunning; }
const Config& config() { return g->config; }
int64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }
int32_t current_tid() { return sys_gettid(); }
PendingRows& pending() { return g->pending; }

void set_process_meta(const std::string& key, const std::string& value) {
  if (!g) return;
  std::lock_guard<std::mutex> lk(g->meta_mu);
  g->meta[key] = value;
}

void add_step_boundary(int64_t t, int32_t tid, const char* source) {
  if (!running()) return;
  auto& p = g->pending;
  const char* name = source && *source ? source : "api";
  int64_t steps = -1;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    PendingRows::StepSequence& seq = p.step_sequences[{name, tid}];
    if (seq.last_boundary >= 0 && t > seq.last_boundary) {
      store::Step s;
      s.index = seq.next_index++;
      s.start = seq.last_boundary;
      s.end = t;
      s.source = p.rows.intern(name);
      s.pid = getpid();
      s.tid = tid;
      p.rows.steps.push_back(s);
      steps = seq.next_index;
    }
    seq.last_boundary = t;
  }
  // Outside the lock: switching GPU windows flushes CUPTI, whose callback takes it.
  if (steps >= 0) cupti::on_step(name, tid);
}

}  // namespace stepscope::collector

// ---------------------------------------------------------------------------------------------------------
// Exported entry points.

using namespace stepscope::collector;

extern "C" {

__attribute__((visibility("default"))) int stepscope_collector_active(void) { return running() ? 1 : 0; }

__attribute__((visibility("default"))) void stepscope_collector_step(const char* source) {
  const int64_t t = now_ns();
  const int32_t tid = current_tid();
  if (!t_probe) add_step_boundary(t, tid, source);
}

__attribute__((visibility("default"))) void stepscope_collector_step_at(int64_t t_ns, const char* source) {
  add_step_boundary(t_ns, current_tid(), source);
}

__attribute__((visibility("default"))) void stepscope_collector_data_wait(int64_t start_ns, int64_t end_ns,
                                                                          const char* source) {
  if (!running() || end_ns < start_ns) return;
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  stepscope::store::DataWait w;
  w.start = start_ns;
  w.end = end_ns;
  w.pid = getpid();
  w.tid = current_tid();
  w.source = p.rows.intern(source && *source ? source : "api");
  p.rows.data_waits.push_back(w);
}

__attribute__((visibility("default"))) void stepscope_collector_data_wait_begin(const char* source) {
  if (!running()) return;
  t_data_waits.emplace_back(now_ns(), source && *source ? source : "api");
}

__attribute__((visibility("default"))) void stepscope_collector_data_wait_end(void) {
  if (t_data_waits.empty()) return;
  auto [start, source] = t_data_waits.back();
  t_data_waits.pop_back();  // also after the window closed: the next window's waits start from a clean stack
  if (!running()) return;
  const int64_t end = now_ns();
  if (t_probe) {
    current_tid();  // what stepscope_collector_data_wait reads
    return;
  }
  stepscope_collector_data_wait(start, end, source.c_str());
}

__attribute__((visibility("default"))) void stepscope_collector_python_probe(int on) { t_probe = on != 0; }

// Another profiler of this process (the Python hook: torch.profiler with CUDA activity) is about to trace
// CUDA / has stopped (collector_internal.h: cupti::lend_to, cupti::take_back). 1 when stepscope's GPU tracing
// stepped aside, 0 when it held nothing.
__attribute__((visibility("default"))) int stepscope_collector_cuda_lend(const char* who) {
  return cupti::lend_to(who) ? 1 : 0;
}
__attribute__((visibility("default"))) void stepscope_collector_cuda_take_back(void) {
  cupti::take_back();
}

// A range recorded after the fact, on the thread that began it (`tid`; 0: the calling thread): the Python hooks'
// collectives end in a backend thread's completion callback (docs/python.md, "Collectives").
__attribute__((visibility("default"))) void stepscope_collector_range(int64_t start_ns, int64_t end_ns, int64_t tid,
                                                                      const char* domain, const char* name) {
  if (!running() || end_ns < start_ns || !name) return;
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  stepscope::store::Range r;
  r.start = start_ns;
  r.end = end_ns;
  r.pid = getpid();
  r.tid = tid ? tid : current_tid();
  r.domain = p.rows.intern(domain ? domain : "");
  r.name = p.rows.intern(name);
  r.source = stepscope::store::RangeSource::Annotation;
  p.rows.ranges.push_back(r);
}

}  // extern "C"

