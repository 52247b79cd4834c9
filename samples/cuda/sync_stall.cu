// sync_stall: the host blocks on the device every step. After launching a step's kernels the loop calls
// cudaDeviceSynchronize and copies the scalar loss to the host (what `loss.item()` does), then does its
// host-side bookkeeping; the GPU sits idle during that bookkeeping and the next step's launches.
//   --async  the loss of every step stays on the device and is copied once at the end: the host runs ahead,
//            its bookkeeping overlaps the GPU's work, and no step blocks.
#include "sample_common.cuh"

namespace {

constexpr float kDecay = 0.999f;
constexpr int kLossElements = 64;  // the loss is the sum over a fixed strided subset of the state
constexpr int kLossThreads = 64;

// One step of the "training" on one element of the state: `iters` dependent, correctly rounded FMAs
// (bit-exact on the CPU), plus a step-dependent shift.
__host__ __device__ inline float train_op(float p, int iters, int step) {
  const float b = p * (1.f - kDecay) + 0.0005f * static_cast<float>(step % 5 + 1);
  float v = p;
  for (int k = 0; k < iters; ++k) v = fmaf(v, kDecay, b);
  return v;
}

__global__ void train_kernel(float* __restrict__ state, int n, int iters, int step) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    state[i] = train_op(state[i], iters, step);
}

__host__ __device__ inline int loss_index(int j, int n) { return static_cast<int>(static_cast<long long>(j) * (n / kLossElements)); }

// Deterministic single-block reduction (fixed order) of the loss subset into loss[step].
__global__ void loss_kernel(const float* __restrict__ state, float* __restrict__ loss, int n, int step) {
  __shared__ float partial[kLossThreads];
  const int t = threadIdx.x;
  float s = 0.f;
  for (int j = t; j < kLossElements; j += kLossThreads) s += state[loss_index(j, n)];
  partial[t] = s;
  __syncthreads();
  for (int width = kLossThreads / 2; width > 0; width /= 2) {
    if (t < width) partial[t] += partial[t + width];
    __syncthreads();
  }
  if (t == 0) loss[step] = partial[0];
}

// The same reduction order on the CPU.
float reference_loss(const std::vector<float>& subset) {
  std::vector<float> partial(kLossThreads, 0.f);
  for (int j = 0; j < kLossElements; ++j) partial[j % kLossThreads] += subset[j];
  for (int width = kLossThreads / 2; width > 0; width /= 2)
    for (int t = 0; t < width; ++t) partial[t] += partial[t + width];
  return partial[0];
}

float initial_state(int i) { return static_cast<float>(i % 1000) * 0.001f; }

// Host-side bookkeeping of about `us` microseconds (what a trainer does between steps: logging, metrics).
uint64_t host_bookkeeping(double us, uint64_t acc) {
  auto t0 = sample::Clock::now();
  do {
    for (int i = 0; i < 256; ++i) acc = acc * 6364136223846793005ull + 1442695040888963407ull;
  } while (sample::us_since(t0) < us);
  return acc;
}

}  // namespace

int main(int argc, char** argv) {
  sample::program_name() = "sync_stall";
  CLI::App app{"sync_stall: a per-step cudaDeviceSynchronize and scalar device-to-host copy (host blocks on the GPU)"};
  int steps = 200, n = 1 << 20, iters = 8192;
  double host_us = 100;
  bool async = false;
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--elements", n, "state size (floats)")->check(CLI::Range(kLossElements, 1 << 28))->capture_default_str();
  app.add_option("--compute-iters", iters, "GPU work per element per step (dependent FMAs)")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--host-us", host_us, "host bookkeeping per step, microseconds")->check(CLI::Range(0.0, 1e7))->capture_default_str();
  app.add_flag("--async", async, "cure: keep losses on the device, no per-step synchronization");
  sample::parse_or_exit(app, argc, argv);

  sample::require_cuda_device();
  std::printf("sync_stall: mode=%s steps=%d elements=%d compute_iters=%d\n", async ? "async" : "sync", steps, n, iters);

  std::vector<float> state(n);
  for (int i = 0; i < n; ++i) state[i] = initial_state(i);
  float *d_state = nullptr, *d_loss = nullptr;
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_state, n * sizeof(float)));
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_loss, steps * sizeof(float)));
  sample::copy_to_device(d_state, state);
  cudaStream_t stream;
  SAMPLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // Load both kernels before timing: a zero-iteration step changes nothing (fmaf loop runs 0 times, b ignored).
  train_kernel<<<1, 32, 0, stream>>>(d_state, 0, 0, 0);
  SAMPLE_CUDA_CHECK_LAUNCH();
  loss_kernel<<<1, kLossThreads, 0, stream>>>(d_state, d_loss, n, 0);
  SAMPLE_CUDA_CHECK_LAUNCH();
  SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));

  // Pinned, so the per-step scalar copy is a pure synchronization cost, not also a pageable copy.
  float* losses = nullptr;
  SAMPLE_CUDA_CHECK(cudaMallocHost(&losses, steps * sizeof(float)));
  std::vector<cudaEvent_t> ev(steps + 1);
  for (auto& e : ev) SAMPLE_CUDA_CHECK(cudaEventCreate(&e));
  uint64_t acc = 1;
  auto t0 = sample::Clock::now();
  for (int step = 0; step < steps; ++step) {
    SAMPLE_CUDA_CHECK(cudaEventRecord(ev[step], stream));
    stepscope_step();
    sample::NvtxRange range("step");
    train_kernel<<<1024, 256, 0, stream>>>(d_state, n, iters, step);
    SAMPLE_CUDA_CHECK_LAUNCH();
    loss_kernel<<<1, kLossThreads, 0, stream>>>(d_state, d_loss, n, step);
    SAMPLE_CUDA_CHECK_LAUNCH();
    if (!async) {
      // The stall: wait for the whole device, then fetch one float (as `loss.item()` would).
      SAMPLE_CUDA_CHECK(cudaDeviceSynchronize());
      SAMPLE_CUDA_CHECK(cudaMemcpy(&losses[step], d_loss + step, sizeof(float), cudaMemcpyDeviceToHost));
    }
    acc = host_bookkeeping(host_us, acc);
  }
  SAMPLE_CUDA_CHECK(cudaEventRecord(ev[steps], stream));
  stepscope_step();
  SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const double wall_us = sample::us_since(t0) / steps;
  if (async) SAMPLE_CUDA_CHECK(cudaMemcpy(losses, d_loss, steps * sizeof(float), cudaMemcpyDeviceToHost));

  std::vector<double> period;
  for (int i = 1; i <= steps; ++i) {
    float ms = 0;
    SAMPLE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]));
    period.push_back(ms * 1000.0);
  }
  for (auto& e : ev) SAMPLE_CUDA_CHECK(cudaEventDestroy(e));
  sample::print_step_time(async ? "async" : "sync", sample::summarize(period));
  std::printf("time: wall %.2f us per step (bookkeeping token %llu)\n", wall_us,
              static_cast<unsigned long long>(acc & 0xffff));

  // CPU reference: evolve the loss subset through every step (elementwise, so the subset suffices).
  std::vector<float> subset(kLossElements);
  for (int j = 0; j < kLossElements; ++j) subset[j] = initial_state(loss_index(j, n));
  double max_err = 0, sum = 0;
  for (int step = 0; step < steps; ++step) {
    for (auto& p : subset) p = train_op(p, iters, step);
    const float ref = reference_loss(subset);
    max_err = std::max(max_err, std::fabs(static_cast<double>(ref) - losses[step]));
    sum += losses[step];
  }
  std::printf("final loss: %.6f\nchecksum: %.6f\n", losses[steps - 1], sum);
  bool ok = sample::report_verification("loss of every step", max_err, 0.0, static_cast<size_t>(steps));
  SAMPLE_CUDA_CHECK(cudaFreeHost(losses));

  SAMPLE_CUDA_CHECK(cudaStreamDestroy(stream));
  SAMPLE_CUDA_CHECK(cudaFree(d_state));
  SAMPLE_CUDA_CHECK(cudaFree(d_loss));
  return ok ? sample::kExitOk : sample::kExitVerifyFailed;
}
