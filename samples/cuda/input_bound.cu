// input_bound: the GPU waits for the next batch. A host producer thread "decodes" each batch (real CPU work
// of configurable cost) into pageable memory; the training loop waits for it and copies it with a
// synchronous cudaMemcpy from pageable memory, then runs the step's kernels. Decode is slower than the
// step's GPU work, so the GPU idles while the loop waits for data.
//   --prefetch K  K pinned buffers, a pool of decode workers (--workers) and asynchronous copies on a side
//                 stream: decode overlaps compute and copies, the GPU no longer waits.
// Sized to the machine at start (lines "sizing:"): the decode is calibrated on one core, the throughput of the
// cure's worker pool and the time of one GPU pass are measured, and the step's GPU work (passes of the same
// kernel) is set to 1.5x the pool's period per batch. So the cure keeps up on any GPU and CPU, while the
// baseline's single producer, several times slower than the pool, still leaves the GPU waiting.
#include "sample_common.cuh"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

namespace {

constexpr float kDecay = 0.999f;

// The step's GPU work per element: v <- fmaf(v, 0.999, 0.001 x), `iters` times from v = 0. Only correctly
// rounded operations, so the CPU reference reproduces it bit for bit; the result still depends on x.
__host__ __device__ inline float train_op(float x, int iters) {
  float b = x * (1.f - kDecay);
  float v = 0.f;
  for (int k = 0; k < iters; ++k) v = fmaf(v, kDecay, b);
  return v;
}

__global__ void train_kernel(const float* __restrict__ x, float* __restrict__ y, int n, int iters) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = train_op(x[i], iters);
}

// Which elements of step `step`'s output are kept for verification (spread over the batch, moving per step).
__host__ __device__ inline int sample_index(int j, int step, int n, int per_step) {
  return static_cast<int>((static_cast<long long>(j) * (n / per_step) + static_cast<long long>(step) * 7919) % n);
}

__global__ void gather_kernel(const float* __restrict__ y, float* __restrict__ samples, int n, int step, int per_step) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j < per_step) samples[static_cast<size_t>(step) * per_step + j] = y[sample_index(j, step, n, per_step)];
}

// "Decoded pixel" i of batch b, in [0, 1): a deterministic function of (b, i).
inline float decode_element(uint64_t b, uint32_t i) {
  uint64_t h = (b + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(i) * 0xC2B2AE3D27D4EB4Full);
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  return static_cast<float>(h >> 40) * (1.f / 16777216.f);
}

// The decode: `rounds` full passes over the batch (each pass rewrites the same values), standing in for
// JPEG decode and augmentation. The barrier keeps the compiler from dropping the repeated passes.
void decode_batch(uint64_t b, float* dst, int n, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) dst[i] = decode_element(b, static_cast<uint32_t>(i));
    asm volatile("" : : "r"(dst) : "memory");
  }
}

// Rounds of decode_batch that cost about `target_us` on this CPU (at least one).
int calibrate_decode_rounds(int n, double target_us, double* round_us_out) {
  std::vector<float> tmp(n);
  double best = 1e30;
  for (int t = 0; t < 3; ++t) {
    auto t0 = sample::Clock::now();
    decode_batch(static_cast<uint64_t>(t), tmp.data(), n, 1);
    best = std::min(best, sample::us_since(t0));
  }
  *round_us_out = best;
  return std::max(1, static_cast<int>(target_us / best + 0.5));
}

struct Config {
  int steps = 60, n = 1 << 20, iters = 16384, samples = 32, prefetch = 0, workers = 0, rounds = 1;
  int passes = 1;  // train_kernel launches per step: each rewrites the same outputs, so results do not depend on it
};

// The cure must keep up with the GPU with this much room: the step's GPU work is sized to kCureMargin times
// the period at which the worker pool delivers a batch (jitter is absorbed by the K buffers).
constexpr double kCureMargin = 1.5;
// Below this expected baseline wait share the contrast is too weak to show (the input-bound rule's "high" is 20%).
constexpr double kMinBaselineWaitShare = 0.3;

struct Run {
  std::vector<double> data_wait_us;  // host time blocked waiting for each batch
  std::vector<double> step_us;       // GPU-timeline step period
  std::vector<float> samples;        // gathered outputs, steps × per_step
};

// Step-boundary events on the compute stream: the period between consecutive ones is the step time as the
// GPU experiences it (it includes the time the GPU sat idle waiting for the host).
struct StepEvents {
  explicit StepEvents(int steps) : ev(steps + 1) {
    // Blocking sync: the prefetch loop waits on these, and a spinning wait would take a core from the decoders.
    for (auto& e : ev) SAMPLE_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventBlockingSync));
  }
  ~StepEvents() {
    for (auto& e : ev) cudaEventDestroy(e);
  }
  std::vector<double> periods_us() const {
    std::vector<double> out;
    for (size_t i = 1; i < ev.size(); ++i) {
      float ms = 0;
      SAMPLE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[i - 1], ev[i]));
      out.push_back(ms * 1000.0);
    }
    return out;
  }
  std::vector<cudaEvent_t> ev;
};

void launch_step_kernels(const Config& c, cudaStream_t s, const float* d_x, float* d_y, float* d_samples, int step) {
  for (int p = 0; p < c.passes; ++p) {
    train_kernel<<<1024, 256, 0, s>>>(d_x, d_y, c.n, c.iters);
    SAMPLE_CUDA_CHECK_LAUNCH();
  }
  gather_kernel<<<(c.samples + 127) / 128, 128, 0, s>>>(d_y, d_samples, c.n, step, c.samples);
  SAMPLE_CUDA_CHECK_LAUNCH();
}

// Baseline: one producer thread, two pageable buffers, synchronous copies on the legacy default stream.
Run run_baseline(const Config& c, float* d_x, float* d_y, float* d_samples) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<float>> free_bufs, ready;
  free_bufs.emplace_back(c.n);
  free_bufs.emplace_back(c.n);

  std::thread producer([&] {
    for (int b = 0; b < c.steps; ++b) {
      std::vector<float> buf;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !free_bufs.empty(); });
        buf = std::move(free_bufs.front());
        free_bufs.pop_front();
      }
      decode_batch(static_cast<uint64_t>(b), buf.data(), c.n, c.rounds);
      {
        std::lock_guard<std::mutex> lock(mu);
        ready.push_back(std::move(buf));
      }
      cv.notify_all();
    }
  });

  Run r;
  StepEvents events(c.steps);
  for (int step = 0; step < c.steps; ++step) {
    SAMPLE_CUDA_CHECK(cudaEventRecord(events.ev[step], 0));
    stepscope_step();
    sample::NvtxRange range("step");
    std::vector<float> buf;
    {
      sample::DataWait wait;
      auto t0 = sample::Clock::now();
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return !ready.empty(); });
      buf = std::move(ready.front());
      ready.pop_front();
      r.data_wait_us.push_back(sample::us_since(t0));
    }
    // Pageable source: the copy is staged through a driver buffer and blocks this thread until it is done.
    SAMPLE_CUDA_CHECK(cudaMemcpy(d_x, buf.data(), c.n * sizeof(float), cudaMemcpyHostToDevice));
    {
      std::lock_guard<std::mutex> lock(mu);
      free_bufs.push_back(std::move(buf));
    }
    cv.notify_all();
    launch_step_kernels(c, 0, d_x, d_y, d_samples, step);
  }
  SAMPLE_CUDA_CHECK(cudaEventRecord(events.ev[c.steps], 0));
  stepscope_step();
  producer.join();
  SAMPLE_CUDA_CHECK(cudaDeviceSynchronize());
  r.step_us = events.periods_us();
  return r;
}

// The cure: K pinned buffers filled by a worker pool, copied asynchronously on a side stream, in batch order.
struct PrefetchState {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> writable_batch;  // per slot: the batch a worker may decode into it next
  std::vector<int> ready_batch;     // per slot: the batch decoded into it and not yet copied (-1: none)
};

// Runs on a CUDA driver thread once the copy out of a pinned slot has completed: the slot may be refilled.
void CUDART_CB release_slot(void* arg);
struct ReleaseArg {
  PrefetchState* st;
  int slot, next_batch;
};
void CUDART_CB release_slot(void* arg) {
  auto* a = static_cast<ReleaseArg*>(arg);
  {
    std::lock_guard<std::mutex> lock(a->st->mu);
    a->st->writable_batch[a->slot] = a->next_batch;
  }
  a->st->cv.notify_all();
}

Run run_prefetch(const Config& c, float* d_y, float* d_samples) {
  const int K = c.prefetch;
  std::vector<float*> pinned(K), d_x(K);
  std::vector<cudaEvent_t> copied(K), consumed(K);
  for (int s = 0; s < K; ++s) {
    SAMPLE_CUDA_CHECK(cudaHostAlloc(&pinned[s], c.n * sizeof(float), cudaHostAllocDefault));
    SAMPLE_CUDA_CHECK(cudaMalloc(&d_x[s], c.n * sizeof(float)));
    SAMPLE_CUDA_CHECK(cudaEventCreateWithFlags(&copied[s], cudaEventDisableTiming));
    SAMPLE_CUDA_CHECK(cudaEventCreateWithFlags(&consumed[s], cudaEventDisableTiming));
  }
  cudaStream_t copy_stream, compute_stream;
  SAMPLE_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  SAMPLE_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_stream, cudaStreamNonBlocking));

  PrefetchState st;
  st.writable_batch.resize(K);
  st.ready_batch.assign(K, -1);
  for (int s = 0; s < K; ++s) st.writable_batch[s] = s;
  std::vector<ReleaseArg> release_args(c.steps);

  std::atomic<int> next_batch{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < c.workers; ++w) {
    workers.emplace_back([&] {
      for (int b = next_batch++; b < c.steps; b = next_batch++) {
        const int s = b % K;
        {
          std::unique_lock<std::mutex> lock(st.mu);
          st.cv.wait(lock, [&] { return st.writable_batch[s] == b; });
        }
        decode_batch(static_cast<uint64_t>(b), pinned[s], c.n, c.rounds);
        {
          std::lock_guard<std::mutex> lock(st.mu);
          st.ready_batch[s] = b;
        }
        st.cv.notify_all();
      }
    });
  }

  Run r;
  StepEvents events(c.steps);
  for (int step = 0; step < c.steps; ++step) {
    const int s = step % K;
    SAMPLE_CUDA_CHECK(cudaEventRecord(events.ev[step], compute_stream));
    stepscope_step();
    sample::NvtxRange range("step");
    // Run at most two steps ahead of the GPU, as a trainer that reads its loss does. Without it the loop runs
    // ahead until the slots run out and then waits for batches whose slots the GPU has not yet freed: a
    // GPU-bound run would look input-bound.
    if (step >= 2) SAMPLE_CUDA_CHECK(cudaEventSynchronize(events.ev[step - 1]));
    {
      sample::DataWait wait;
      auto t0 = sample::Clock::now();
      std::unique_lock<std::mutex> lock(st.mu);
      st.cv.wait(lock, [&] { return st.ready_batch[s] == step; });
      st.ready_batch[s] = -1;
      r.data_wait_us.push_back(sample::us_since(t0));
    }
    // d_x[s] is free once the kernels of batch step-K have read it.
    SAMPLE_CUDA_CHECK(cudaStreamWaitEvent(copy_stream, consumed[s], 0));
    SAMPLE_CUDA_CHECK(cudaMemcpyAsync(d_x[s], pinned[s], c.n * sizeof(float), cudaMemcpyHostToDevice, copy_stream));
    SAMPLE_CUDA_CHECK(cudaEventRecord(copied[s], copy_stream));
    release_args[step] = ReleaseArg{&st, s, step + K};
    SAMPLE_CUDA_CHECK(cudaLaunchHostFunc(copy_stream, release_slot, &release_args[step]));
    SAMPLE_CUDA_CHECK(cudaStreamWaitEvent(compute_stream, copied[s], 0));
    launch_step_kernels(c, compute_stream, d_x[s], d_y, d_samples, step);
    SAMPLE_CUDA_CHECK(cudaEventRecord(consumed[s], compute_stream));
  }
  SAMPLE_CUDA_CHECK(cudaEventRecord(events.ev[c.steps], compute_stream));
  stepscope_step();
  for (auto& t : workers) t.join();
  SAMPLE_CUDA_CHECK(cudaDeviceSynchronize());
  r.step_us = events.periods_us();

  for (int s = 0; s < K; ++s) {
    SAMPLE_CUDA_CHECK(cudaFreeHost(pinned[s]));
    SAMPLE_CUDA_CHECK(cudaFree(d_x[s]));
    SAMPLE_CUDA_CHECK(cudaEventDestroy(copied[s]));
    SAMPLE_CUDA_CHECK(cudaEventDestroy(consumed[s]));
  }
  SAMPLE_CUDA_CHECK(cudaStreamDestroy(copy_stream));
  SAMPLE_CUDA_CHECK(cudaStreamDestroy(compute_stream));
  return r;
}

// Microseconds per batch at which `workers` threads decoding at once deliver batches (memory bandwidth and
// shared cores make this more than round_us / workers).
double measure_pool_period_us(const Config& c, int workers) {
  constexpr int kBatchesEach = 2;
  std::vector<std::vector<float>> bufs(workers, std::vector<float>(c.n));
  std::vector<std::thread> pool;
  auto t0 = sample::Clock::now();
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&, w] {
      for (int b = 0; b < kBatchesEach; ++b) decode_batch(static_cast<uint64_t>(w * kBatchesEach + b), bufs[w].data(), c.n, c.rounds);
    });
  for (auto& t : pool) t.join();
  return sample::us_since(t0) / (workers * kBatchesEach);
}

// Median GPU time of one train_kernel pass (kernels already loaded).
double measure_pass_us(const Config& c, const float* d_x, float* d_y) {
  cudaEvent_t a, b;
  SAMPLE_CUDA_CHECK(cudaEventCreate(&a));
  SAMPLE_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> us;
  for (int t = 0; t < 5; ++t) {
    SAMPLE_CUDA_CHECK(cudaEventRecord(a, 0));
    train_kernel<<<1024, 256>>>(d_x, d_y, c.n, c.iters);
    SAMPLE_CUDA_CHECK_LAUNCH();
    SAMPLE_CUDA_CHECK(cudaEventRecord(b, 0));
    SAMPLE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SAMPLE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(ms * 1000.0);
  }
  SAMPLE_CUDA_CHECK(cudaEventDestroy(a));
  SAMPLE_CUDA_CHECK(cudaEventDestroy(b));
  return sample::summarize(us).median_us;
}

// The decode workers the cure uses by default: up to 8, leaving two hardware threads to the training loop and
// the CUDA driver. Both modes size the GPU work for this pool, so baseline and cure run the same step.
int default_cure_workers() {
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw - 2, 1, 8);
}

// Sets c.passes (unless --gpu-passes fixed it) so the step's GPU work is kCureMargin x the pool's period, and
// prints what was measured and chosen.
void size_gpu_work(Config& c, double round_us, int fixed_passes, const float* d_x, float* d_y) {
  const int pool = default_cure_workers();
  double decode_us = c.rounds * round_us;
  double period_us = measure_pool_period_us(c, pool);
  const double pass_us = std::max(1.0, measure_pass_us(c, d_x, d_y));  // event resolution is ~0.5 us
  c.passes = fixed_passes > 0 ? fixed_passes
                              : std::max(1, static_cast<int>(std::ceil(kCureMargin * period_us / pass_us)));
  if (fixed_passes == 0 && c.passes == 1 && pass_us > 0.5 * decode_us) {
    // A slow GPU: one pass already outlasts half the decode, so the baseline would hardly wait. Decode longer
    // (more rounds rewrite the same values: the data do not change) until it is twice the pass.
    c.rounds = static_cast<int>(std::ceil(c.rounds * 2.0 * pass_us / decode_us));
    decode_us = c.rounds * round_us;
    period_us = measure_pool_period_us(c, pool);
    std::printf("sizing: one GPU pass (%.0f us) outlasts half the decode: decode raised to %d rounds (~%.0f us per "
                "batch)\n", pass_us, c.rounds, decode_us);
  }
  const double gpu_us = c.passes * pass_us;
  std::printf("sizing: %d decode workers (%u hardware threads) deliver a batch every %.0f us; one GPU pass %.1f us -> "
              "%d passes = ~%.0f us of GPU work per step%s\n",
              pool, std::thread::hardware_concurrency(), period_us, pass_us, c.passes, gpu_us,
              fixed_passes > 0 ? " (--gpu-passes)" : " (1.5x the pool's period)");
  const double baseline_wait = decode_us > gpu_us ? 1.0 - gpu_us / decode_us : 0.0;
  std::printf("sizing: expected: the baseline's one producer (%.0f us per batch) leaves the GPU waiting ~%.0f%% of the "
              "step; --prefetch with %d workers keeps up (%.0f us per batch against %.0f us of GPU work)\n",
              decode_us, 100.0 * baseline_wait, pool, period_us, gpu_us);
  if (baseline_wait < kMinBaselineWaitShare || gpu_us < period_us)
    std::printf("sizing: warning: on this machine baseline and cure will not differ clearly (too few cores for the "
                "decode, or a slow GPU pass): raise --decode-us, lower --compute-iters or set --gpu-passes\n");
}

}  // namespace

int main(int argc, char** argv) {
  sample::program_name() = "input_bound";
  CLI::App app{"input_bound: slow host-side decode into pageable memory + synchronous copies (input bound)"};
  Config c;
  double decode_us = 2000;
  app.add_option("--steps", c.steps, "training steps (one batch each)")->check(CLI::Range(1, 1000000))->capture_default_str();
  app.add_option("--batch-elements", c.n, "floats per batch")->check(CLI::Range(1024, 1 << 28))->capture_default_str();
  app.add_option("--decode-us", decode_us, "CPU cost of decoding one batch on one core, microseconds")->check(CLI::Range(0.0, 1e7))->capture_default_str();
  app.add_option("--compute-iters", c.iters, "GPU work per element per step (dependent FMAs)")->check(CLI::Range(1, 1 << 24))->capture_default_str();
  app.add_option("--prefetch", c.prefetch, "cure: K pinned buffers, a decode worker pool and async copies on a side stream (0: off)")->check(CLI::Range(0, 64))->capture_default_str();
  app.add_option("--workers", c.workers, "decode workers with --prefetch (default: the hardware threads less 2, at most 8)")->check(CLI::Range(1, 256));
  int fixed_passes = 0;
  app.add_option("--gpu-passes", fixed_passes, "GPU passes per step (default 0: sized to this machine, see sizing: lines)")->check(CLI::Range(0, 100000))->capture_default_str();
  sample::parse_or_exit(app, argc, argv);
  if (c.workers > 0 && c.prefetch == 0) {
    std::fprintf(stderr, "input_bound: --workers needs --prefetch K\n");
    return sample::kExitUsage;
  }
  if (c.prefetch > 0 && c.workers == 0) c.workers = default_cure_workers();

  sample::require_cuda_device();
  double round_us = 0;
  c.rounds = calibrate_decode_rounds(c.n, decode_us, &round_us);
  std::printf("input_bound: mode=%s prefetch=%d steps=%d batch_elements=%d compute_iters=%d\n",
              c.prefetch ? "prefetch" : "baseline", c.prefetch, c.steps, c.n, c.iters);

  float *d_x = nullptr, *d_y = nullptr, *d_samples = nullptr;
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_x, c.n * sizeof(float)));
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_y, c.n * sizeof(float)));
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_samples, static_cast<size_t>(c.steps) * c.samples * sizeof(float)));
  // Load the kernels before timing (lazy module loading would otherwise land in step 0).
  SAMPLE_CUDA_CHECK(cudaMemset(d_x, 0, c.n * sizeof(float)));
  launch_step_kernels(c, 0, d_x, d_y, d_samples, 0);
  SAMPLE_CUDA_CHECK(cudaDeviceSynchronize());
  size_gpu_work(c, round_us, fixed_passes, d_x, d_y);
  std::printf("time: decode %d rounds x %.0f us = ~%.0f us per batch on one core\n", c.rounds, round_us,
              c.rounds * round_us);
  const int decoders = c.prefetch ? c.workers : 1;
  std::printf("sizing: %s: %d decode worker%s, %d GPU passes per step\n", c.prefetch ? "prefetch" : "baseline",
              decoders, decoders == 1 ? "" : "s", c.passes);

  Run r = c.prefetch ? run_prefetch(c, d_y, d_samples) : run_baseline(c, d_x, d_y, d_samples);
  r.samples.resize(static_cast<size_t>(c.steps) * c.samples);
  sample::copy_to_host(r.samples, d_samples);
  SAMPLE_CUDA_CHECK(cudaFree(d_x));
  SAMPLE_CUDA_CHECK(cudaFree(d_y));
  SAMPLE_CUDA_CHECK(cudaFree(d_samples));

  sample::StepStats steps = sample::summarize(r.step_us), wait = sample::summarize(r.data_wait_us);
  sample::print_step_time(c.prefetch ? "prefetch" : "baseline", steps);
  std::printf("time: data wait mean %.2f us per step (%.1f%% of the mean step)\n", wait.mean_us,
              steps.mean_us > 0 ? 100.0 * wait.mean_us / steps.mean_us : 0.0);

  // Every step's sampled outputs against the CPU: right batch, in the right order, computed exactly.
  double max_err = 0, sum = 0;
  for (int step = 0; step < c.steps; ++step) {
    for (int j = 0; j < c.samples; ++j) {
      int i = sample_index(j, step, c.n, c.samples);
      float ref = train_op(decode_element(static_cast<uint64_t>(step), static_cast<uint32_t>(i)), c.iters);
      float got = r.samples[static_cast<size_t>(step) * c.samples + j];
      max_err = std::max(max_err, std::fabs(static_cast<double>(ref) - got));
      sum += got;
    }
  }
  std::printf("checksum: %.6f\n", sum);
  bool ok = sample::report_verification("sampled outputs of every step", max_err, 0.0, r.samples.size());
  return ok ? sample::kExitOk : sample::kExitVerifyFailed;
}
