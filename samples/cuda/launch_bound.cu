// launch_bound: the classic eager-mode experiment. Each step applies a chain of N lightweight elementwise
// ops (add, sin, mul, cos, relu, exp, sigmoid…) to a small tensor, one kernel per op, so the host's launch
// cost — not the GPU — sets the pace and the step time grows linearly with N.
//   --fused  one kernel applies the whole chain (what torch.compile/XLA fusion produces)
//   --graph  the N-kernel chain is captured once into a CUDA graph and replayed with one launch per step
//   --sweep  prints the whole curve: N = 1,5,10,…,30 for all three modes
//   --duration S       ends the timed loop once S seconds of wall time passed (checked every --window steps;
//                      --steps stays the cap) and prints `steps: timed N total M`
//   --report-every N   prints `window: end_ns=T steps=N mean_us=X` every N steps (T on CLOCK_MONOTONIC, X the
//                      host wall clock per step; the stream is synchronized at each report), as
//                      bench/gpu_overhead/torch_workloads.py does, for scripts/gpu_proof.py's attach check
// Each step starts with one "dense" kernel (--dense-iters dependent FMAs per element, ~15 us on an H100),
// the rest of the model: with the chain fused or graphed, the GPU work per step then outlasts the one
// launch, so the cured step is GPU-bound rather than bound by its single launch. --dense-iters 0 drops it
// (the seed's bare chain).
#include "sample_common.cuh"

#include <time.h>

namespace {

constexpr int kMaxOps = 30;
constexpr int kPoolSize = 20;  // the op pool of the seed article's benchmark, cycled

// Op `op` of the pool. Shared by the per-op kernels, the fused kernel and the CPU reference, so all
// three apply exactly the same arithmetic.
__host__ __device__ inline float apply_op(int op, float x) {
  switch (op % kPoolSize) {
    case 0: return x + 0.1f;
    case 1: return sinf(x);
    case 2: return x * 1.1f;
    case 3: return cosf(x);
    case 4: return x + 0.2f;
    case 5: return x > 0.f ? x : 0.f;
    case 6: return x - 0.1f;
    case 7: return expf(x * 0.5f);
    case 8: return x + 0.3f;
    case 9: return 1.f / (1.f + expf(-x));
    case 10: return x * 1.2f;
    case 11: return sinf(x);
    case 12: return x + 0.4f;
    case 13: return cosf(x);
    case 14: return x - 0.2f;
    case 15: return x > 0.f ? x : 0.f;
    case 16: return x + 0.5f;
    case 17: return expf(x * 0.4f);
    case 18: return x * 1.3f;
    default: return 1.f / (1.f + expf(-x));
  }
}

// One kernel per op, each its own instantiation so a profiler sees distinct kernel names per op
// (as eager PyTorch does: add, sin, mul…). `in` may alias `out` (the chain runs in place): no __restrict__.
template <int Op>
__global__ void op_kernel(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = apply_op(Op, in[i]);
}

__global__ void fused_chain_kernel(const float* in, float* out, int n, int ops) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = in[i];
  for (int op = 0; op < ops; ++op) x = apply_op(op, x);
  out[i] = x;
}

// The dense part: v <- fmaf(v, 0.999, 0.001 x), `iters` times (correctly rounded only: bit-exact on the CPU).
__host__ __device__ inline float dense_op(float x, int iters) {
  const float b = x * 0.001f;
  float v = 0.f;
  for (int k = 0; k < iters; ++k) v = fmaf(v, 0.999f, b);
  return iters > 0 ? v : x;
}

__global__ void dense_kernel(const float* __restrict__ in, float* __restrict__ out, int n, int iters) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = dense_op(in[i], iters);
}

template <int... Ops>
void launch_op_impl(int op, dim3 grid, dim3 block, cudaStream_t s, const float* in, float* out, int n,
                    std::integer_sequence<int, Ops...>) {
  ((op == Ops ? (op_kernel<Ops><<<grid, block, 0, s>>>(in, out, n), 0) : 0), ...);
}

void launch_op(int op, cudaStream_t s, const float* in, float* out, int n) {
  constexpr int kBlock = 256;
  dim3 grid((n + kBlock - 1) / kBlock);
  launch_op_impl(op % kPoolSize, grid, dim3(kBlock), s, in, out, n, std::make_integer_sequence<int, kPoolSize>{});
  SAMPLE_CUDA_CHECK_LAUNCH();
}

enum class Mode { kEager, kFused, kGraph };
const char* mode_name(Mode m) { return m == Mode::kEager ? "eager" : m == Mode::kFused ? "fused" : "graph"; }

// The work of one step: out = chain(dense(in)), all in place on `out` after the dense kernel.
void enqueue_step(Mode mode, int ops, int dense_iters, cudaStream_t s, const float* in, float* out, int n) {
  constexpr int kDenseBlock = 128;
  if (dense_iters > 0) {
    dense_kernel<<<(n + kDenseBlock - 1) / kDenseBlock, kDenseBlock, 0, s>>>(in, out, n, dense_iters);
    SAMPLE_CUDA_CHECK_LAUNCH();
    in = out;
  }
  if (mode == Mode::kFused) {
    constexpr int kBlock = 256;
    fused_chain_kernel<<<(n + kBlock - 1) / kBlock, kBlock, 0, s>>>(in, out, n, ops);
    SAMPLE_CUDA_CHECK_LAUNCH();
    return;
  }
  for (int op = 0; op < ops; ++op) launch_op(op, s, op == 0 ? in : out, out, n);
}

struct RunResult {
  sample::StepStats gpu;   // step time on the GPU timeline (events every window)
  double host_us_per_step;  // wall time of the whole loop / steps
  int steps;                // timed steps done (fewer than asked when the duration ran out)
  std::vector<float> out;
};

// Nanoseconds on CLOCK_MONOTONIC, the clock of stepscope's stores and of Python's time.monotonic_ns().
int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Runs `steps` timed steps, or fewer when `duration_s` > 0 and that much wall time passed (checked before each
// window of `window` steps, so the timing windows stay whole). `report_every` > 0: a `window:` line every that
// many steps.
RunResult run(Mode mode, int ops, int dense_iters, int n, int steps, int warmup, int window,
              const std::vector<float>& input, double duration_s = 0, int report_every = 0) {
  float *d_in = nullptr, *d_out = nullptr;
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_in, n * sizeof(float)));
  SAMPLE_CUDA_CHECK(cudaMalloc(&d_out, n * sizeof(float)));
  sample::copy_to_device(d_in, input);
  cudaStream_t stream;
  SAMPLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  cudaGraphExec_t graph_exec = nullptr;
  if (mode == Mode::kGraph) {
    cudaGraph_t graph;
    SAMPLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue_step(Mode::kEager, ops, dense_iters, stream, d_in, d_out, n);
    SAMPLE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    SAMPLE_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, graph, 0));
    SAMPLE_CUDA_CHECK(cudaGraphDestroy(graph));
  }
  auto step = [&] {
    if (mode == Mode::kGraph)
      SAMPLE_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
    else
      enqueue_step(mode, ops, dense_iters, stream, d_in, d_out, n);
  };

  for (int i = 0; i < warmup; ++i) step();
  SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));

  sample::WindowTimer timer(stream, steps, window);
  auto t0 = sample::Clock::now();
  const auto deadline = t0 + std::chrono::duration_cast<sample::Clock::duration>(
                                 std::chrono::duration<double>(duration_s));
  auto report_start = t0;
  int done = 0, report_steps = 0;
  for (; done < steps; ++done) {
    if (duration_s > 0 && done > 0 && done % window == 0 && sample::Clock::now() >= deadline) break;
    timer.before_step(done);
    stepscope_step();
    {
      sample::NvtxRange range("step");
      step();
    }
    if (report_every > 0 && ++report_steps == report_every) {
      SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));
      const auto now = sample::Clock::now();
      std::printf("window: end_ns=%lld steps=%d mean_us=%.2f\n", static_cast<long long>(monotonic_ns()),
                  report_steps, std::chrono::duration<double, std::micro>(now - report_start).count() / report_steps);
      std::fflush(stdout);
      report_start = now;
      report_steps = 0;
    }
  }
  timer.before_step(done);
  stepscope_step();  // closes the last step
  SAMPLE_CUDA_CHECK(cudaStreamSynchronize(stream));
  RunResult r;
  r.steps = done;
  r.host_us_per_step = sample::us_since(t0) / done;
  r.gpu = sample::summarize(timer.per_step_us());
  r.out.resize(n);
  sample::copy_to_host(r.out, d_out);

  if (graph_exec) SAMPLE_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
  SAMPLE_CUDA_CHECK(cudaStreamDestroy(stream));
  SAMPLE_CUDA_CHECK(cudaFree(d_in));
  SAMPLE_CUDA_CHECK(cudaFree(d_out));
  return r;
}

// Deterministic input in [-1, 1).
std::vector<float> make_input(int n) {
  std::vector<float> v(n);
  uint32_t s = 12345u;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) / static_cast<float>(1u << 24) * 2.f - 1.f;
  }
  return v;
}

// Checks `out` against the chain computed on the CPU; GPU and glibc sinf/cosf/expf differ by a few ulp.
bool verify(const std::vector<float>& input, const std::vector<float>& out, int ops, int dense_iters,
            const char* what) {
  double max_err = 0;
  for (size_t i = 0; i < input.size(); ++i) {
    float x = dense_op(input[i], dense_iters);
    for (int op = 0; op < ops; ++op) x = apply_op(op, x);
    double ref = x;
    max_err = std::max(max_err, std::fabs(ref - out[i]) / std::max(1.0, std::fabs(ref)));
  }
  return sample::report_verification(what, max_err, 1e-4, input.size());
}

double checksum(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  sample::program_name() = "launch_bound";
  CLI::App app{"launch_bound: a chain of N tiny elementwise kernels per step (launch-overhead bound)"};
  int ops = 30, elements = 8192, steps = 2000, warmup = 50, window = 100, dense_iters = 8000, report_every = 0;
  double duration = 0;
  bool fused = false, graph = false, sweep = false;
  app.add_option("--ops", ops, "number of elementwise ops in the chain")->check(CLI::Range(1, kMaxOps))->capture_default_str();
  app.add_option("--elements", elements, "tensor size (floats)")->check(CLI::Range(1, 1 << 26))->capture_default_str();
  app.add_option("--dense-iters", dense_iters, "per-step dense kernel: dependent FMAs per element (0: none)")->check(CLI::Range(0, 1 << 24))->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(CLI::Range(1, 10000000))->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::Range(0, 1000000))->capture_default_str();
  app.add_option("--window", window, "steps per timing window (one cudaEvent each)")->check(CLI::Range(1, 100000))->capture_default_str();
  auto* f = app.add_flag("--fused", fused, "cure: one kernel applies the whole chain");
  auto* g = app.add_flag("--graph", graph, "cure: capture the chain once in a CUDA graph, replay it each step");
  auto* sw = app.add_flag("--sweep", sweep, "print the curve: N = 1,5,…,30 in eager, fused and graph mode");
  auto* d = app.add_option("--duration", duration, "end the timed loop after SECONDS of wall time (checked every "
                           "--window steps; --steps stays the cap; 0: no limit)")
                ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  auto* re = app.add_option("--report-every", report_every, "print `window: end_ns=T steps=N mean_us=X` every N "
                            "steps (host wall clock, the stream synchronized; 0: none)")
                 ->check(CLI::Range(0, 10000000))->capture_default_str();
  f->excludes(g);
  sw->excludes(f)->excludes(g)->excludes(d)->excludes(re);
  sample::parse_or_exit(app, argc, argv);
  window = std::min(window, steps);

  sample::require_cuda_device();
  const std::vector<float> input = make_input(elements);
  bool ok = true;

  if (sweep) {
    std::printf("launch_bound: sweep elements=%d dense_iters=%d steps=%d window=%d\n", elements, dense_iters, steps, window);
    std::printf("time: %5s %12s %12s %12s %9s %9s\n", "ops", "eager_us", "fused_us", "graph_us", "fused_x", "graph_x");
    for (int n_ops : {1, 5, 10, 15, 20, 25, 30}) {
      RunResult e = run(Mode::kEager, n_ops, dense_iters, elements, steps, warmup, window, input);
      RunResult fr = run(Mode::kFused, n_ops, dense_iters, elements, steps, warmup, window, input);
      RunResult gr = run(Mode::kGraph, n_ops, dense_iters, elements, steps, warmup, window, input);
      std::printf("time: %5d %12.2f %12.2f %12.2f %8.2fx %8.2fx\n", n_ops, e.gpu.median_us, fr.gpu.median_us,
                  gr.gpu.median_us, e.gpu.median_us / fr.gpu.median_us, e.gpu.median_us / gr.gpu.median_us);
      std::string tag = "ops=" + std::to_string(n_ops);
      ok &= verify(input, e.out, n_ops, dense_iters, (tag + " eager").c_str());
      ok &= verify(input, fr.out, n_ops, dense_iters, (tag + " fused").c_str());
      ok &= verify(input, gr.out, n_ops, dense_iters, (tag + " graph").c_str());
    }
    return ok ? sample::kExitOk : sample::kExitVerifyFailed;
  }

  Mode mode = fused ? Mode::kFused : graph ? Mode::kGraph : Mode::kEager;
  const int kernels = (mode == Mode::kFused ? 1 : ops) + (dense_iters > 0 ? 1 : 0);
  std::printf("launch_bound: mode=%s ops=%d dense_iters=%d elements=%d steps=%d kernels_per_step=%d\n", mode_name(mode),
              ops, dense_iters, elements, steps, kernels);
  RunResult r = run(mode, ops, dense_iters, elements, steps, warmup, window, input, duration, report_every);
  sample::print_step_time(mode_name(mode), r.gpu);
  std::printf("time: host loop %.2f us per step\n", r.host_us_per_step);
  // The steps a --duration run did (they vary from run to run, like `time:`); torch_workloads.py's line.
  if (duration > 0) std::printf("steps: timed %d total %d\n", r.steps, r.steps + warmup);
  std::printf("checksum: %.6f\n", checksum(r.out));
  ok = verify(input, r.out, ops, dense_iters, mode_name(mode));
  return ok ? sample::kExitOk : sample::kExitVerifyFailed;
}
