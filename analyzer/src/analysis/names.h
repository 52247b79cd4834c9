// Classifies API, op and kernel names. Name conventions differ by vendor and framework (CUDA runtime/driver,
// HIP, PyTorch, TensorFlow); everything the analyzer decides from a name is decided here.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "stepscope/store/records.h"

namespace stepscope::analyzer::detail {

// cudaDeviceSynchronize, cudaStreamSynchronize, cudaEventSynchronize, cuCtxSynchronize, hip*Synchronize ...
bool is_sync_api(std::string_view api);
// cudaMemcpy / cuMemcpyDtoH_v2 / hipMemcpy without "Async": returns only when the copy is done.
bool is_sync_memcpy_api(std::string_view api);
// Host-side ops that read a device value and therefore wait for the GPU (aten::item, _local_scalar_dense).
bool is_blocking_op(std::string_view op);
// An API call that issues a kernel (cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, cudaGraphLaunch ...).
bool is_kernel_launch_api(std::string_view api);
// A data-loader wait range: enumerate(DataLoader)#...__next__, tf.data IteratorGetNext ...
bool is_data_wait_range(std::string_view name);
// Training-step marker ranges.
bool is_profiler_step_range(std::string_view name);
bool is_optimizer_step_range(std::string_view name);
bool is_optimizer_zero_grad_range(std::string_view name);
bool is_dataloader_next_range(std::string_view name);
// GEMM kernels (cuBLAS, CUTLASS, hipBLASLt, nvjet, Triton matmul) and convolution kernels (cuDNN, MIOpen).
bool is_gemm_kernel(std::string_view kernel);
bool is_conv_kernel(std::string_view kernel);
// A GEMM/conv kernel that runs on tensor cores (by the naming conventions of cuBLAS/cuDNN/CUTLASS).
// Returns false also for kernels whose name does not tell; see is_simt_fp32_kernel.
bool is_tensor_core_kernel(std::string_view kernel);
// A GEMM/conv kernel that certainly runs on the fp32 SIMT path (sgemm, scudnn, cutlass_simt, ...).
bool is_simt_fp32_kernel(std::string_view kernel);
// A kernel a compiler already fused: Inductor/Triton (triton_poi_fused_…), XLA (loop_fusion, input_fusion …),
// TorchScript/nvFuser (kernel_…_fused…). Launch advice for such kernels is CUDA graphs, not compilation.
bool is_compiled_fused_kernel(std::string_view kernel);
// "ProfilerStep#12" -> "ProfilerStep", "enumerate(DataLoader)#_X.__next__" unchanged (suffix is not numeric).
std::string strip_numeric_suffix(std::string_view name);

// The framework whose idioms the suggestions use: "pytorch", "tensorflow", "jax", or "cuda" when the trace shows
// none (a CUDA C++ program). Judged from names in the trace: ops, annotations, Python files, modules, kernels.
std::string detect_framework(const store::Trace& t);

// The processes of PyTorch DataLoader workers: those with a thread torch named "pt_data_worker".
std::set<int64_t> dataloader_worker_pids(const store::Trace& t);

}  // namespace stepscope::analyzer::detail
