// small_gemm_loop: the seed article's "loop of matmuls vs einsum('ijk,kl->ijl')". Each step multiplies B
// small matrices A_i (m×k) by one shared W (k×n), one cublasSgemm call per matrix, so B tiny GEMM kernels
// of identical name and grid run back to back, each shorter than its launch.
//   --batched  one cublasSgemmStridedBatched call per step (W broadcast with stride 0) does the same work.
#include "sample_common.cuh"

#include <cublas_v2.h>

#define SAMPLE_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                             \
    cublasStatus_t sample_st_ = (call);                                                            \
    if (sample_st_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::sample::fail_cuda(#call, cublasGetStatusName(sample_st_), cublasGetStatusString(sample_st_), \
                          __FILE__, __LINE__);                                                     \
  } while (0)

namespace {

// Values in {-1, -7/8, …, 1}: every product and partial sum is exact in fp32 (and in TF32), so the GPU
// result equals the CPU reference exactly whatever the summation order or kernel cuBLAS picks.
std::vector<float> make_matrix(size_t count, uint32_t seed) {
  std::vector<float> v(count);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(static_cast<int>((s >> 16) % 17u) - 8) / 8.f;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  sample::program_name() = "small_gemm_loop";
  CLI::App app{"small_gemm_loop: B small cuBLAS GEMMs per step in a loop (vs one strided-batched GEMM)"};
  int batch = 256, m = 128, n = 128, k = 128, steps = 300, warmup = 20, window = 50;
  bool batched = false;
  app.add_option("--batch", batch, "GEMMs per step (B)")->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--m", m, "rows of each A_i and C_i")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--n", n, "columns of W and C_i")->check(CLI::Range(1, 8192))->capture_default_str();
  app.add_option("--k", k, "columns of A_i, rows of W (at most 1024 keeps the check exact)")->check(CLI::Range(1, 1024))->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 10000000))->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--window", window, "steps per timing window (one cudaEvent each)")->check(CLI::Range(1, 100000))->capture_default_str();
  app.add_flag("--batched", batched, "cure: one cublasSgemmStridedBatched per step");
  sample::parse_or_exit(app, argc, argv);
  window = std::min(window, steps);

  sample::require_cuda_device();
  std::printf("small_gemm_loop: mode=%s batch=%d m=%d n=%d k=%d steps=%d gemm_calls_per_step=%d\n",
              batched ? "batched" : "loop", batch, m, n, k, steps, batched ? 1 : batch);

  const size_t a_elems = static_cast<size_t>(batch) * m * k, w_elems = static_cast<size_t>(k) * n,
               c_elems = static_cast<size_t>(batch) * m * n;
  const std::vector<float> A = make_matrix(a_elems, 1u), W = make_matrix(w_elems, 2u);
  float *d_a = nullptr, *d_w = nullptr, *d_c = nullptr;
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_a, a_elems * sizeof(float)));
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_w, w_elems * sizeof(float)));
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_c, c_elems * sizeof(float)));
  sample::copy_to_device(d_a, A);
  sample::copy_to_device(d_w, W);

  cudaStream_t stream;
  SAMPLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // On `stream`: a non-blocking stream does not wait for work on the legacy default stream.
  SAMPLE_CUDA_CHECK(cudaMemsetAsync(d_c, 0, c_elems * sizeof(float), stream));
  cublasHandle_t handle;
  SAMPLE_CUBLAS_CHECK(cublasCreate(&handle));
  SAMPLE_CUBLAS_CHECK(cublasSetStream(handle, stream));

  // Row-major C_i = A_i·W is column-major C_iᵀ = Wᵀ·A_iᵀ: pass W first, with the row-major leading dims.
  const float one = 1.f, zero = 0.f;
  auto step = [&] {
    if (batched) {
      SAMPLE_CUBLAS_CHECK(cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, d_w, n, 0, d_a,
                                                    k, static_cast<long long>(m) * k, &zero, d_c, n,
                                                    static_cast<long long>(m) * n, batch));
    } else {
      for (int i = 0; i < batch; ++i)
        SAMPLE_CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, d_w, n,
                                        d_a + static_cast<size_t>(i) * m * k, k, &zero,
                                        d_c + static_cast<size_t>(i) * m * n, n));
    }
  };

  for (int i = 0; i < warmup; ++i) step();
  SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));
  SAMPLE_CUDA_CHECK(cudaMemsetAsync(d_c, 0, c_elems * sizeof(float), stream));  // the check sees the timed steps' result

  sample::WindowTimer timer(stream, steps, window);
  auto t0 = sample::Clock::now();
  for (int i = 0; i < steps; ++i) {
    timer.before_step(i);
    stepscope_step();
    sample::NvtxRange range("step");
    step();
  }
  timer.before_step(steps);
  stepscope_step();
  SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double host_us = sample::us_since(t0) / steps;
  sample::print_step_time(batched ? "batched" : "loop", sample::summarize(timer.per_step_us()));
  std::printf("time: host loop %.2f us per step\n", host_us);

  std::vector<float> C(c_elems);
  sample::copy_to_host(C, d_c);
  double max_err = 0, sum = 0;
  for (int b = 0; b < batch; ++b)
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < n; ++c) {
        double ref = 0;
        for (int j = 0; j < k; ++j)
          ref += static_cast<double>(A[(static_cast<size_t>(b) * m + r) * k + j]) * W[static_cast<size_t>(j) * n + c];
        const float got = C[(static_cast<size_t>(b) * m + r) * n + c];
        max_err = std::max(max_err, std::fabs(ref - got));
        sum += got;
      }
  std::printf("checksum: %.6f\n", sum);
  bool ok = sample::report_verification("every element of C", max_err, 0.0, C.size());

  SAMPLE_CUBLAS_CHECK(cublasDestroy(handle));
  SAMPLE_CUDA_CHECK(cudaStreamDestroy(stream));
  SAMPLE_CUDA_CHECK(cudaFree(d_a));
  SAMPLE_CUDA_CHECK(cudaFree(d_w));
  SAMPLE_CUDA_CHECK(cudaFree(d_c));
  return ok ? sample::kExitOk : sample::kExitVerifyFailed;
}
