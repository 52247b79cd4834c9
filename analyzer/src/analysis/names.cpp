#include "analysis/names.h"

#include <algorithm>
#include <cctype>

namespace stepscope::analyzer::detail {
namespace {

bool contains(std::string_view s, std::string_view needle) { return s.find(needle) != std::string_view::npos; }
bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

bool is_sync_api(std::string_view api) {
  // cudaStreamWaitEvent / cudaEventQuery / cudaStreamQuery never block the host.
  return contains(api, "Synchronize");
}

bool is_sync_memcpy_api(std::string_view api) {
  if (contains(api, "Async") || contains(api, "Peer") || contains(api, "ToSymbol") || contains(api, "FromSymbol"))
    return false;
  return starts_with(api, "cudaMemcpy") || starts_with(api, "cuMemcpy") || starts_with(api, "hipMemcpy");
}

bool is_blocking_op(std::string_view op) {
  return op == "aten::item" || op == "aten::_local_scalar_dense" || op == "aten::nonzero" ||
         op == "aten::equal" || op == "aten::is_nonzero";
}

bool is_kernel_launch_api(std::string_view api) {
  return contains(api, "LaunchKernel") || contains(api, "LaunchCooperativeKernel") || contains(api, "GraphLaunch") ||
         contains(api, "ModuleLaunch");
}

bool is_data_wait_range(std::string_view name) {
  return is_dataloader_next_range(name) || contains(name, "IteratorGetNext") || starts_with(name, "tf.data");
}

bool is_profiler_step_range(std::string_view name) { return starts_with(name, "ProfilerStep#"); }
bool is_optimizer_step_range(std::string_view name) {
  return starts_with(name, "Optimizer.step#") || starts_with(name, "Optimizer.step");
}
bool is_optimizer_zero_grad_range(std::string_view name) { return starts_with(name, "Optimizer.zero_grad"); }
bool is_dataloader_next_range(std::string_view name) {
  return starts_with(name, "enumerate(DataLoader)") && contains(name, "__next__");
}

bool is_gemm_kernel(std::string_view kernel) {
  std::string k = lower(kernel);
  return contains(k, "gemm") || contains(k, "matmul") || contains(k, "nvjet") || contains(k, "gemv") ||
         (contains(k, "cutlass") && !contains(k, "conv")) || contains(k, "cublas") || starts_with(k, "cijk_");
}

bool is_conv_kernel(std::string_view kernel) {
  std::string k = lower(kernel);
  if (contains(k, "conv") || contains(k, "wgrad") || contains(k, "dgrad") || contains(k, "fprop") ||
      contains(k, "winograd"))
    return true;
  if (!contains(k, "cudnn") && !contains(k, "miopen")) return false;
  // The libraries' other kernels are no convolution: batch norm (cudnn::bn_fw_tr_1C11_kernel_NCHW — 86 ms of
  // the V100 ResNet trace's 387 ms counted as convolution), pooling, softmax, LRN, dropout, activations,
  // elementwise tensor ops and layout transforms.
  static const char* other[] = {"bn_",        "batchnorm",  "batch_norm", "pooling",    "pool_",
                                "softmax",    "lrn",        "dropout",    "activation", "op_generic_tensor",
                                "nchwtonhwc", "nhwctonchw", "transform",  "reduce"};
  for (const char* m : other)
    if (contains(k, m)) return false;
  return true;
}

bool is_tensor_core_kernel(std::string_view kernel) {
  std::string k = lower(kernel);
  // cuBLAS/cuDNN encode the MMA shape (884, 1688, 16816) or say tensorop/xmma/hmma/gmma; Hopper/Blackwell
  // cuBLAS kernels are nvjet_*; half/bfloat/tf32 kernels use tensor cores on Volta+.
  static const char* markers[] = {"884",   "1688",  "16816", "tensorop", "xmma", "hmma", "gmma", "wmma", "mma_",
                                  "nvjet", "bf16",  "fp16",  "f16f16",   "tf32", "h1688", "s1688", "sm90", "sm100",
                                  "_h884", "hgemm", "bgemm", "mfma",   "_mi16", "_mi32", "xdl"};
  for (const char* m : markers)
    if (contains(k, m)) return true;
  return false;
}

bool is_simt_fp32_kernel(std::string_view kernel) {
  if (is_tensor_core_kernel(kernel)) return false;
  std::string k = lower(kernel);
  return contains(k, "sgemm") || contains(k, "scudnn") || contains(k, "cutlass_simt") || contains(k, "simt_") ||
         contains(k, "implicit_convolve_sgemm") || contains(k, "sgemv") || contains(k, "gemmsn") ||
         contains(k, "gemv2t") || contains(k, "gemv2n") || contains(k, "_fp32_");
}

bool is_compiled_fused_kernel(std::string_view kernel) {
  return starts_with(kernel, "triton_") || starts_with(kernel, "triton__") || contains(kernel, "_fused_") ||
         starts_with(kernel, "fused_") || starts_with(kernel, "loop_fusion") || starts_with(kernel, "input_fusion") ||
         starts_with(kernel, "fusion") || contains(kernel, "CudaCodeGen") || starts_with(kernel, "nvfuser");
}

std::string detect_framework(const store::Trace& t) {
  // Every name the trace holds is in its string table once: count distinct names that only a framework makes.
  int64_t torch = 0, tf = 0, jax = 0;
  for (size_t i = 1; i < t.strings.size(); ++i) {
    std::string_view v = t.strings.get(int64_t(i));
    if (starts_with(v, "aten::") || starts_with(v, "ProfilerStep#") || starts_with(v, "enumerate(DataLoader)") ||
        starts_with(v, "Optimizer.step#") || contains(v, "/torch/") || contains(v, "libtorch") || starts_with(v, "at::native") ||
        contains(v, "at::native::") || starts_with(v, "triton_") || starts_with(v, "autograd::"))
      ++torch;
    else if (contains(v, "tensorflow") || starts_with(v, "IteratorGetNext") || contains(v, "tf.data") ||
             contains(v, "Eigen::TensorExecutor") || starts_with(v, "__inference_") || starts_with(v, "TF_"))
      ++tf;
    else if (contains(v, "/jax/") || contains(v, "jaxlib") || starts_with(v, "jit_") || contains(v, "pjit"))
      ++jax;
  }
  if (torch == 0 && tf == 0 && jax == 0) return "cuda";
  if (torch >= tf && torch >= jax) return "pytorch";
  return tf >= jax ? "tensorflow" : "jax";
}

std::string strip_numeric_suffix(std::string_view name) {
  auto hash = name.rfind('#');
  if (hash == std::string_view::npos || hash + 1 >= name.size()) return std::string(name);
  for (size_t i = hash + 1; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return std::string(name);
  return std::string(name.substr(0, hash));
}

std::set<int64_t> dataloader_worker_pids(const store::Trace& t) {
  std::set<int64_t> pids;
  for (const auto& th : t.threads)
    if (t.str(th.name) == "pt_data_worker") pids.insert(th.pid);
  return pids;
}

}  // namespace stepscope::analyzer::detail
