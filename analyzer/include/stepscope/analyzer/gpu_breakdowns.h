// The GPU breakdowns Holistic Trace Analysis users rely on, with HTA's definitions (docs/analysis-json.md,
// "gpu_breakdowns"; bench/hta_compare puts them beside HTA 0.5 itself): the kernel-type breakdown, CUDA kernel
// launch statistics, the queue length of each stream and the GPU user-annotation breakdown.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// GPU time of one kernel type or overlap of types: "COMPUTATION", "COMMUNICATION", "MEMORY" and, where they ran
// at once, "COMPUTATION overlapping COMMUNICATION" and the like (HTA's get_gpu_kernel_breakdown with memory
// kernels, its default). Each type's kernels are merged into a union first; percent is of the sum of all rows.
struct KernelTypeTime {
  std::string type;
  int64_t ns = 0;
  double percent = 0;
};

// Percentiles are nearest-rank over the values; all in µs.
struct Distribution {
  double mean_us = 0, p50_us = 0, p90_us = 0, p99_us = 0, max_us = 0;
};

// Each launch call (cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync, cudaMemsetAsync) joined with the GPU
// work it launched by correlation id (HTA's get_cuda_kernel_launch_stats): the call's duration, the GPU work's,
// and the launch delay = GPU start − call end, 0 when negative.
struct LaunchStats {
  static constexpr double kRuntimeCutoffUs = 50;       // HTA's runtime_cutoff: a launch call this long is an outlier
  static constexpr double kLaunchDelayCutoffUs = 100;  // HTA's launch_delay_cutoff
  int64_t count = 0;
  Distribution cpu_duration, gpu_duration, launch_delay;
  int64_t gpu_shorter_than_cpu = 0;  // GPU work shorter than the call that launched it
  int64_t cpu_over_cutoff = 0, delay_over_cutoff = 0;
  struct Outlier {
    std::string api;  // the launch call
    std::string name;  // the kernel, or "Memcpy"/"Memset"
    int64_t correlation = 0;
    int64_t call_start_ns = 0;
    double delay_us = 0;
  };
  std::vector<Outlier> longest_delays;  // at most 5, longest first
};

// Outstanding operations on one stream (HTA's get_queue_length_summary): +1 when a launch call (the ones above
// and cuLaunchKernel) enqueues work, −1 when that work starts on the GPU. Statistics over the values after each
// change, as HTA's pandas describe() (std with n−1, quartiles by linear interpolation); ns_at_max is the time the
// queue spent at its maximum (HTA's get_time_spent_blocked_on_full_queue with that maximum).
struct StreamQueue {
  int64_t device = 0, stream = 0;
  int64_t events = 0;
  double mean = 0, std = 0, min = 0, p25 = 0, p50 = 0, p75 = 0, max = 0;
  int64_t ns_at_max = 0;
};

// GPU user annotations (Kineto's gpu_user_annotation) by name: HTA's get_gpu_user_annotation_breakdown.
struct AnnotationTime {
  std::string name;
  int64_t count = 0;
  double sum_us = 0, mean_us = 0, min_us = 0, max_us = 0, std_us = 0;
};

struct GpuBreakdowns {
  std::vector<KernelTypeTime> kernel_types;  // largest first
  LaunchStats launch;
  std::vector<StreamQueue> queues;           // by device, stream
  std::vector<AnnotationTime> annotations;   // largest sum first
  bool empty() const { return kernel_types.empty() && launch.count == 0 && queues.empty() && annotations.empty(); }
};

GpuBreakdowns gpu_breakdowns(const store::Trace& t);

// HTA's kernel type of a kernel name: "COMMUNICATION" (^nccl.*Kernel), "MEMORY" (^Memcpy|^Memset|^dma),
// "COMPUTATION" (none of nccl…Kernel, …Memcpy, Memset…, …Sync), else "OTHER".
const char* hta_kernel_type(const std::string& name);

}  // namespace stepscope::analyzer
