// analyze() on the real traces in shared/traces, checked against the trace facts and the independent
// computation in analyzer/tests/reference (independent_figures.py -> expected.json).
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "findings.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/load.h"
#include "test_support.h"

using namespace stepscope;
using test::find_finding;

namespace {

// Each trace is loaded and analysed once per test executable.
const analyzer::Analysis& analysis_of(const std::string& rel) {
  static std::map<std::string, analyzer::Analysis> cache;
  auto it = cache.find(rel);
  if (it == cache.end()) {
    store::Trace t = analyzer::load_trace(test::trace_path(rel));
    it = cache.emplace(rel, analyzer::analyze(t)).first;
    it->second.source_file = rel;
  }
  return it->second;
}

// A figure from the independent computation.
double reference(const std::string& rel, const char* key) {
  static simdjson::dom::parser parser;
  static simdjson::dom::element doc = parser.load(test::source_dir() + "/analyzer/tests/reference/expected.json");
  return double(doc[rel][key]);
}

bool mentions(const analyzer::FindingResult* f, const std::string& what) {
  return f && f->evidence_json.find(what) != std::string::npos;
}

double share(const analyzer::Analysis& a, int64_t analyzer::StepBreakdown::*field) {
  int64_t part = 0, total = 0;
  for (const auto& s : a.steps) part += s.*field, total += s.dur_ns;
  return total ? double(part) / double(total) : 0.0;
}

}  // namespace

TEST_CASE("resnet50 num_workers=0 is input-bound - its data wait share matches the independent computation") {
  STEPSCOPE_REQUIRE_TRACES();
  const std::string rel = "kineto/resnet50_num_workers_0.json.gz";
  const auto& a = analysis_of(rel);
  CHECK(a.summary.step_source == "profiler-step");
  CHECK(a.summary.steps == 6);
  CHECK(std::abs(a.summary.data_wait_share - reference(rel, "data_wait_share")) < 0.005);
  CHECK(std::abs(a.summary.gpu_busy_share - reference(rel, "gpu_busy_share")) < 0.005);
  auto* f = find_finding(a, "input-bound");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::High);
  CHECK(a.findings.front().rule == "input-bound");
  CHECK(mentions(f, "_SingleProcessDataLoaderIter"));
  CHECK(f->suggestion.find("num_workers") != std::string::npos);
  for (const auto& s : a.steps) CHECK(s.bound == analyzer::Bound::Input);
}

TEST_CASE("resnet50 num_workers=4 is not input-bound") {
  STEPSCOPE_REQUIRE_TRACES();
  const std::string rel = "kineto/resnet50_num_workers_4.json.gz";
  const auto& a = analysis_of(rel);
  CHECK(std::abs(a.summary.data_wait_share - reference(rel, "data_wait_share")) < 0.005);
  CHECK_FALSE(find_finding(a, "input-bound"));
}

TEST_CASE("eager B200 and BERT-small inference are launch-overhead bound") {
  STEPSCOPE_REQUIRE_TRACES();
  for (std::string rel : {"tracelens/b200_eager.json.gz", "tracelens/h100_bert_small_inference.json.gz"}) {
    INFO(rel);
    // The premise, from the independent computation: most idle in 10-200 µs gaps, most kernels short.
    REQUIRE(reference(rel, "gap_share_10_200us") > 0.5);
    REQUIRE(reference(rel, "short_kernel_fraction") > 0.5);
    const auto& a = analysis_of(rel);
    auto* f = find_finding(a, "launch-overhead");
    REQUIRE(f);
    CHECK(f->severity == store::Severity::High);
    CHECK(a.findings.front().rule == "launch-overhead");
    CHECK(mentions(f, "fusion_candidates"));
    // The GPU waits for the host issuing work: in the launch calls and in the dispatch code between them.
    CHECK(share(a, &analyzer::StepBreakdown::launch_idle_ns) + share(a, &analyzer::StepBreakdown::host_idle_ns) > 0.5);
    CHECK(f->suggestion.find("torch.compile") != std::string::npos);
  }
  // No ProfilerStep in the B200 trace, and its 36 repeats of 21 kernels are the transformer layers of one
  // forward pass between a one-off prologue and epilogue, not steps: one window.
  CHECK(analysis_of("tracelens/b200_eager.json.gz").summary.step_source == "none");
  CHECK(analysis_of("tracelens/b200_eager.json.gz").summary.steps == 1);
}

TEST_CASE("no step markers: loop iterations that meet the host are steps, one-off work around them or not") {
  STEPSCOPE_REQUIRE_TRACES();
  // vLLM-style inference converted from nsys: a first (prefill) pass with other GEMM variants, then decode
  // iterations of 543 kernels, each ending in a cudaEventSynchronize. The iterations are the steps; the prefill's
  // kernels, foreign to them, no longer hide them, and no window swallows the rest of the run.
  const auto& v = analysis_of("nsys/nsys_chrome_dialect_vllm.json.gz");
  CHECK(v.summary.step_source == "periodic");
  REQUIRE(v.steps.size() == 9);
  for (const auto& s : v.steps) CHECK(s.kernels == 543);
  // CloverLeaf (nsys SQLite): 18 one-off setup kernels, then time steps of 125 kernels; the program synchronizes
  // the device after every kernel and copies back 25 results, so every repeat meets the host.
  const auto& c = analysis_of("nsys/cloverleaf_a100.sqlite.gz");
  CHECK(c.summary.step_source == "periodic");
  REQUIRE(c.steps.size() == 9);
  std::vector<int64_t> d;
  for (const auto& s : c.steps) {
    CHECK(s.kernels == 125);
    d.push_back(s.dur_ns);
  }
  std::sort(d.begin(), d.end());
  CHECK(double(d.back() - d.front()) < 0.03 * double(d[d.size() / 2]));
  // The layers of one eager forward pass never wait for the host between them: still one window (above).
}

TEST_CASE("graph replay (vLLM decode on AMD) is not launch overhead") {
  STEPSCOPE_REQUIRE_TRACES();
  const auto& a = analysis_of("tracelens/amd_vllm_decode_graph.json.gz");
  CHECK(a.summary.kernels == 425);
  CHECK_FALSE(find_finding(a, "launch-overhead"));
}

TEST_CASE("MI300X DDP ResNet-18: its 1 s steps wait for the host's own computation in backward - host-compute") {
  STEPSCOPE_REQUIRE_TRACES();
  const auto& a = analysis_of("tracelens/mi300x_ddp_resnet18.json.gz");
  REQUIRE(a.steps.size() == 5);
  for (size_t i = 2; i < 5; ++i) CHECK(a.steps[i].bound == analyzer::Bound::Host);
  auto* f = find_finding(a, "host-compute");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::High);
  CHECK(f->steps == std::vector<int64_t>{2, 3, 4});  // steps 0-1 (118 ms) wait mostly in dispatch gaps
  CHECK(mentions(f, "run_backward"));
  CHECK(mentions(f, "aten::convolution_backward"));
  CHECK(f->suggestion.find("MIOpen") != std::string::npos);
  CHECK_FALSE(find_finding(a, "launch-overhead"));
  // The saving is the long host-bound idle of those steps, no more than their idle.
  for (int64_t i : f->steps) CHECK(a.steps[size_t(i)].host_idle_ns + a.steps[size_t(i)].launch_idle_ns >= 0.9 * f->est_savings_us_per_step * 1000);
}

TEST_CASE("AlexNet's two steps: the 5 s first is the warm-up, and the steady 27 ms step is host-compute") {
  // Lazy module loading and cuDNN's algorithm search (one 3.06 s cudaLaunchKernel) made host-compute claim
  // 2.51 s "per step"; with the warm-up left out its 21.9 ms in the steady step was "negligible" over 5 s.
  STEPSCOPE_REQUIRE_TRACES();
  const auto& a = analysis_of("hta/alexnet_a100.json.gz");
  REQUIRE(a.steps.size() == 2);
  CHECK(a.steps[0].warmup);
  CHECK_FALSE(a.steps[1].warmup);
  CHECK(a.critical_path.total_ns == 27232000);
  auto* f = find_finding(a, "host-compute");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::High);
  CHECK(f->steps == std::vector<int64_t>{1});
  // The two long gaps of step 1 (14.70 and 7.14 ms between its kernels, counted from the raw trace) and no
  // more.
  CHECK(f->est_savings_us_per_step == Approx(21881.0).margin(50.0));
  CHECK(f->est_savings_us_per_step * 1000 <= double(a.steps[1].host_idle_ns + a.steps[1].launch_idle_ns));
}

TEST_CASE("GPU-bound ResNet on V100: neither launch-overhead nor input-bound, every step gpu") {
  STEPSCOPE_REQUIRE_TRACES();
  const std::string rel = "hta/v100_resnet_gpu_bound_ns.json.gz";
  const auto& a = analysis_of(rel);
  CHECK_FALSE(find_finding(a, "launch-overhead"));
  CHECK_FALSE(find_finding(a, "input-bound"));
  REQUIRE(a.steps.size() == 5);
  for (const auto& s : a.steps) CHECK(s.bound == analyzer::Bound::Gpu);
  CHECK(std::abs(a.summary.gpu_busy_share - reference(rel, "gpu_busy_share")) < 0.005);
  // fp32 convolutions in SIMT kernels; cuDNN's batch norm is not convolution time (it was 86 ms of "387 ms").
  auto* f = find_finding(a, "no-tensor-cores");
  REQUIRE(f);
  simdjson::dom::parser p;
  auto ev = p.parse(f->evidence_json);
  CHECK(double(ev["gemm_conv_us"]) == Approx(300429.39).margin(1.0));
  CHECK(double(ev["simt_share_of_gemm_conv"]) == Approx(0.767).margin(0.001));
  // The what-if replays the pipelined GPU-bound loop at the GPU's period, not 26% over it.
  CHECK(a.what_if.identity_step_us == Approx(96703.1).margin(1.0));
}

TEST_CASE("the many-small-kernels trap: idle is host-side blocking, not launch overhead") {
  STEPSCOPE_REQUIRE_TRACES();
  const std::string rel = "hta/a100_rank0_many_small_kernels.json.gz";
  const auto& a = analysis_of(rel);
  CHECK(std::abs(a.summary.gpu_busy_share - reference(rel, "gpu_busy_share")) < 0.005);
  REQUIRE(!a.findings.empty());
  CHECK(a.findings.front().rule == "sync-stall");
  auto* lo = find_finding(a, "launch-overhead");
  CHECK((lo == nullptr || lo != &a.findings.front()));
  auto* f = find_finding(a, "sync-stall");
  REQUIRE(f);
  CHECK(f->severity == store::Severity::High);
  CHECK(mentions(f, "aten::copy_"));
  CHECK(mentions(f, "## sparse_data_dist ##"));
  CHECK(mentions(f, "cudaDeviceSynchronize"));
  CHECK(mentions(f, "DtoH"));
  // Most of the in-step GPU idle is sync idle; launch idle is small.
  double idle = 1.0 - a.summary.gpu_busy_share;
  CHECK(share(a, &analyzer::StepBreakdown::sync_idle_ns) > 0.6 * idle);
  CHECK(share(a, &analyzer::StepBreakdown::launch_idle_ns) < 0.1 * idle);
  for (const auto& s : a.steps) CHECK(s.bound == analyzer::Bound::Sync);
}

TEST_CASE("cuda_event_sync: the blocking calls are a sync-stall - multi-stream event waits are not") {
  STEPSCOPE_REQUIRE_TRACES();
  const auto& a = analysis_of("hta/cuda_event_sync.json.gz");
  auto* f = find_finding(a, "sync-stall");
  REQUIRE(f);
  for (const char* api : {"cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize", "device -> pageable"}) {
    INFO(api);
    CHECK(mentions(f, api));
  }

  const auto& m = analysis_of("hta/cuda_event_sync_multi_stream.json.gz");
  auto* g = find_finding(m, "sync-stall");
  if (g) {
    simdjson::dom::parser p;
    auto ev = p.parse(g->evidence_json);
    for (auto call : ev["blocking_calls"].get_array()) {
      std::string_view api = call["api"];
      CHECK(api.find("EventQuery") == std::string_view::npos);
      CHECK(api.find("StreamWaitEvent") == std::string_view::npos);
    }
  }
  CHECK(share(m, &analyzer::StepBreakdown::sync_idle_ns) < 0.01);
}

TEST_CASE("every shared trace analyzes - the breakdown partitions each step - no GPU is said plainly") {
  STEPSCOPE_REQUIRE_TRACES();
  const char* all[] = {"hta/a100_rank0_many_small_kernels.json.gz", "hta/alexnet_a100.json.gz", "hta/cpu_only.json.gz",
                       "hta/cuda_event_sync.json.gz", "hta/cuda_event_sync_multi_stream.json.gz",
                       "hta/gpu_user_annotation_steps.json.gz", "hta/legacy_categories_tiny.json.gz",
                       "hta/rank_non_gpu.json.gz", "hta/trace_diff_control_a100.json.gz",
                       "hta/trace_diff_test_v100.json.gz", "hta/triton_driver_launch.json.gz",
                       "hta/v100_resnet_gpu_bound_ns.json.gz", "kineto/resnet50_num_workers_0.json.gz",
                       "kineto/resnet50_num_workers_4.json.gz", "nsys/cloverleaf_a100.sqlite.gz",
                       "nsys/nsys_chrome_dialect_vllm.json.gz", "param/dlrm_8gpu_worker0.json.gz",
                       "tracelens/amd_vllm_decode_graph.json.gz", "tracelens/b200_eager.json.gz",
                       "tracelens/h100_bert_small_inference.json.gz", "tracelens/mi300x_ddp_resnet18.json.gz"};
  for (const char* rel : all) {
    INFO(rel);
    const auto& a = analysis_of(rel);
    CHECK(a.summary.steps >= 1);
    for (const auto& s : a.steps)
      CHECK(s.gpu_busy_ns + s.data_wait_ns + s.launch_idle_ns + s.sync_idle_ns + s.host_idle_ns + s.other_idle_ns +
                s.profiler_ns ==
            s.dur_ns);
    // Savings add up: the findings that explain GPU idle never claim more than the idle there is, and none is
    // reported below 1% of the steady steps' time (AlexNet's 27 ms steady step beside its 5 s warm-up).
    double idle_saved = 0, traced = 0, steady = 0;
    for (const auto& s : a.steps)
      if (s.gpu_traced) traced += double(s.dur_ns), steady += s.warmup ? 0.0 : double(s.dur_ns);
    const double to_steady = steady > 0 && traced > steady ? traced / steady : 1.0;
    for (const auto& f : a.findings) {
      CHECK(f.share * to_steady >= 0.01);
      if (f.rule != "no-tensor-cores" && f.rule != "pageable-memcpy") idle_saved += f.share;
    }
    if (a.summary.has_gpu) CHECK(idle_saved <= 1.0 - a.summary.gpu_busy_share + 1e-9);
    for (size_t i = 1; i < a.findings.size(); ++i)
      CHECK(a.findings[i - 1].est_savings_us_per_step * double(a.findings[i - 1].steps.size()) >=
            a.findings[i].est_savings_us_per_step * double(a.findings[i].steps.size()));
    std::string json = analyzer::to_json(a);
    simdjson::dom::parser p;
    simdjson::dom::element doc;
    REQUIRE(p.parse(json).get(doc) == simdjson::SUCCESS);
    CHECK(bool(doc["summary"]["has_gpu"]) == (a.summary.kernels + a.summary.memcpys + a.summary.memsets > 0));
  }
  for (const char* rel : {"hta/cpu_only.json.gz", "hta/rank_non_gpu.json.gz"}) {
    INFO(rel);
    const auto& a = analysis_of(rel);
    CHECK_FALSE(a.summary.has_gpu);
    CHECK(a.summary.gpu_busy_us == 0);
    for (const auto& s : a.steps) CHECK(s.bound == analyzer::Bound::Host);
  }
}

TEST_CASE("HTA's kernel-type breakdown and launch statistics match the independent computation on real traces") {
  STEPSCOPE_REQUIRE_TRACES();
  static simdjson::dom::parser parser;
  const simdjson::dom::element doc = parser.load(test::source_dir() + "/analyzer/tests/reference/expected.json");
  for (const char* rel : {"kineto/resnet50_num_workers_0.json.gz", "hta/v100_resnet_gpu_bound_ns.json.gz",
                          "hta/a100_rank0_many_small_kernels.json.gz", "tracelens/b200_eager.json.gz",
                          "hta/trace_diff_test_v100.json.gz", "hta/gpu_user_annotation_steps.json.gz"}) {
    INFO(rel);
    const auto& b = analysis_of(rel).gpu_breakdowns;
    const simdjson::dom::object want = doc[rel]["kernel_type_us"];
    std::map<std::string, double> got;
    for (const auto& k : b.kernel_types) got[k.type] = double(k.ns) / 1000.0;
    REQUIRE(got.size() == want.size());
    double percent = 0;
    for (const auto& k : b.kernel_types) percent += k.percent;
    CHECK(std::abs(percent - 100.0) < 1e-9);
    for (auto [type, us] : want) {
      INFO(std::string(type));
      REQUIRE(got.count(std::string(type)));
      CHECK(std::abs(got[std::string(type)] - double(us)) <= std::max(0.002, 1e-9 * double(us)));
    }
    CHECK(b.launch.count == int64_t(reference(rel, "launch_count")));
    if (b.launch.count > 0) {
      CHECK(std::abs(b.launch.cpu_duration.mean_us - reference(rel, "launch_cpu_mean_us")) < 1e-3);
      CHECK(std::abs(b.launch.gpu_duration.mean_us - reference(rel, "launch_gpu_mean_us")) < 1e-3);
      CHECK(std::abs(b.launch.launch_delay.mean_us - reference(rel, "launch_delay_mean_us")) < 1e-3);
    }
  }
  // On the V100 trace: computation, communication and memory overlap in every combination (NCCL on its streams).
  const auto& v100 = analysis_of("hta/trace_diff_test_v100.json.gz").gpu_breakdowns;
  REQUIRE(v100.kernel_types.size() == 7);
  CHECK(v100.kernel_types[0].type == "COMPUTATION");
  CHECK(v100.kernel_types[0].ns == 322785000);
}

TEST_CASE("HTA's queue length and user-annotation breakdown on a trace with GPU annotations") {
  STEPSCOPE_REQUIRE_TRACES();
  // hta/gpu_user_annotation_steps: 140 launches on stream 7, each started before the next was enqueued, so the
  // queue alternates 1, 0 (280 changes, mean 0.5, max 1 — what HTA 0.5 reports too); 10 GPU annotations.
  const auto& b = analysis_of("hta/gpu_user_annotation_steps.json.gz").gpu_breakdowns;
  REQUIRE(b.queues.size() == 1);
  CHECK(b.queues[0].stream == 7);
  CHECK(b.queues[0].events == 280);
  CHECK(b.queues[0].mean == Approx(0.5));
  CHECK(b.queues[0].max == 1);
  CHECK(b.queues[0].min == 0);
  CHECK(b.launch.count == 140);
  int64_t annotations = 0;
  for (const auto& a : b.annotations) annotations += a.count;
  CHECK(annotations == 10);
  for (const auto& a : b.annotations) {
    CHECK(a.min_us <= a.mean_us);
    CHECK(a.mean_us <= a.max_us);
    CHECK(a.sum_us == Approx(a.mean_us * double(a.count)));
  }
  CHECK(analyzer::hta_kernel_type("ncclKernel_AllReduce_RING_LL_Sum_float") == std::string("COMMUNICATION"));
  CHECK(analyzer::hta_kernel_type("Memcpy DtoD (Device -> Device)") == std::string("MEMORY"));
  CHECK(analyzer::hta_kernel_type("cudaStreamSynchronize") == std::string("OTHER"));
  CHECK(analyzer::hta_kernel_type("void cutlass::Kernel<...>") == std::string("COMPUTATION"));
}
