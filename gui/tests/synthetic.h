// A small, fixed trace for the GUI tests and the golden screenshot: one training process with a main thread
// (steps, ops, launches, data waits, CPU samples), one GPU with a compute and a copy stream, four 10 ms
// steps (two input-bound, two GPU-bound) and two findings. Every time is exact so tests can assert pixels.
#pragma once

#include <memory>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/store/records.h"

namespace stepscope::gui::test {

inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kUs = 1'000;
inline constexpr int64_t kBase = 1'000 * kMs;  // traces rarely start at 0
inline constexpr int kSteps = 4;
inline constexpr int kLaunchesPerStep = 5;
inline constexpr int64_t kKernelDur = 300 * kUs;

// Kernel k of step s starts here (stream 7).
inline int64_t kernel_start(int step, int k) { return kBase + step * 10 * kMs + 5 * kMs + k * 800 * kUs; }

inline std::shared_ptr<store::Trace> synthetic_trace() {
  auto t = std::make_shared<store::Trace>();
  t->meta["clock_domain"] = "synthetic";
  t->processes.push_back({100, t->intern("python train.py"), 1});
  t->threads.push_back({100, 100, t->intern("main")});
  t->devices.push_back({0, t->intern("Test GPU"), 8, 0, 108, 40LL << 30, t->intern("nvidia")});
  // Frames and stacks: main → train → {next_batch, forward}.
  const char* names[] = {"main", "train", "next_batch", "forward"};
  for (int i = 0; i < 4; ++i) {
    store::Frame f;
    f.id = i + 1;
    f.symbol = t->intern(names[i]);
    f.module = t->intern("train.py");
    f.kind = store::FrameKind::Python;
    t->frames.push_back(f);
  }
  t->stacks = {{1, 0, 1}, {2, 1, 2}, {3, 2, 3}, {4, 2, 4}};
  const auto sgemm = t->intern("volta_sgemm_128x64_nn");
  const auto launch = t->intern("cudaLaunchKernel");
  const auto conv = t->intern("aten::conv2d");
  const auto next = t->intern("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
  int64_t corr = 1;
  for (int s = 0; s < kSteps; ++s) {
    const int64_t st = kBase + s * 10 * kMs;
    const bool input_bound = s < 2;
    t->steps.push_back({s, st, st + 10 * kMs, t->intern("profiler-step"), 100, 100});
    store::Range step_range;
    step_range.start = st;
    step_range.end = st + 10 * kMs;
    step_range.pid = step_range.tid = 100;
    step_range.name = t->intern("ProfilerStep#" + std::to_string(s));
    step_range.source = store::RangeSource::Annotation;
    t->ranges.push_back(step_range);
    if (input_bound) {
      store::Range r = step_range;
      r.start = st;
      r.end = st + 4 * kMs;
      r.depth = 1;
      r.name = next;
      r.source = store::RangeSource::Op;
      t->ranges.push_back(r);
      t->data_waits.push_back({st, st + 4 * kMs, 100, 100, t->intern("dataloader")});
    }
    store::Range op = step_range;
    op.start = st + 4500 * kUs;
    op.end = st + 9 * kMs;
    op.depth = 1;
    op.name = conv;
    op.source = store::RangeSource::Op;
    t->ranges.push_back(op);
    for (int k = 0; k < kLaunchesPerStep; ++k) {
      const int64_t ks = kernel_start(s, k);
      store::ApiCall a;
      a.start = ks - 100 * kUs;
      a.end = a.start + 20 * kUs;
      a.pid = a.tid = 100;
      a.name = launch;
      a.correlation = corr;
      t->api_calls.push_back(a);
      store::Kernel kr;
      kr.start = ks;
      kr.end = ks + kKernelDur;
      kr.device = 0;
      kr.stream = 7;
      kr.correlation = corr;
      kr.grid_x = 128;
      kr.grid_y = kr.grid_z = 1;
      kr.block_x = 256;
      kr.block_y = kr.block_z = 1;
      kr.registers = 64;
      kr.name = sgemm;
      kr.pid = 100;
      t->kernels.push_back(kr);
      ++corr;
    }
    store::Memcpy m;
    m.start = st + 4200 * kUs;
    m.end = st + 4400 * kUs;
    m.device = 0;
    m.stream = 13;
    m.bytes = 64 << 20;
    m.kind = store::CopyKind::HtoD;
    m.src_kind = store::MemoryKind::Pinned;
    m.dst_kind = store::MemoryKind::Device;
    m.pid = 100;
    t->memcpys.push_back(m);
    // One CPU sample per ms: in next_batch during the data wait, else in forward.
    for (int ms = 0; ms < 10; ++ms)
      t->samples.push_back({st + ms * kMs + 500 * kUs, 100, 100, (input_bound && ms < 4) ? 3 : 4, true});
  }
  return t;
}

inline std::shared_ptr<analyzer::Analysis> synthetic_analysis() {
  auto a = std::make_shared<analyzer::Analysis>();
  a->source_file = "synthetic";
  for (int s = 0; s < kSteps; ++s) {
    analyzer::StepBreakdown b;
    b.index = s;
    b.start_ns = kBase + s * 10 * kMs;
    b.dur_ns = 10 * kMs;
    b.bound = s < 2 ? analyzer::Bound::Input : analyzer::Bound::Gpu;
    b.kernels = kLaunchesPerStep;
    a->steps.push_back(b);
  }
  analyzer::FindingResult in;
  in.rule = "input-bound";
  in.severity = store::Severity::High;
  in.steps = {0, 1};
  in.est_savings_us_per_step = 4000;
  in.share = 0.2;
  in.summary = "The GPU waits for the next batch 40% of steps 0-1";
  in.suggestion = "DataLoader(num_workers=4, pin_memory=True)";
  a->findings.push_back(in);
  analyzer::FindingResult lo;
  lo.rule = "launch-overhead";
  lo.severity = store::Severity::Medium;
  lo.steps = {2};
  lo.est_savings_us_per_step = 300;
  lo.share = 0.0075;
  lo.summary = "Many small launches in step 2";
  a->findings.push_back(lo);
  a->summary.steps = kSteps;
  a->summary.has_gpu = true;
  return a;
}

}  // namespace stepscope::gui::test
