// bench_analyze [MAX_KERNELS] — analyze() time and peak memory on the shared traces and on synthetic traces
// of growing size (up to MAX_KERNELS kernels, default 10M), each size in its own child process so peak RSS is
// its own. Goal (issue 4): 216k events in <= 0.5 s, cost linear in events.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"

using namespace stepscope;
using Clock = std::chrono::steady_clock;

namespace {

size_t events(const store::Trace& t) {
  return t.kernels.size() + t.memcpys.size() + t.memsets.size() + t.syncs.size() + t.api_calls.size() +
         t.ranges.size() + t.samples.size() + t.data_waits.size();
}

double rss_mib() {  // current resident set
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return double(resident) * double(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double peak_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

// A training run: steps of 1000 kernels launched by cudaLaunchKernel from ops, a DataLoader wait and a
// .item() sync per step, a pageable H2D copy per step; GEMM loops and short kernels mixed in.
store::Trace synthetic(size_t kernels) {
  store::Trace t;
  const size_t per_step = 1000;
  t.kernels.reserve(kernels);
  t.api_calls.reserve(kernels + kernels / per_step * 3);
  t.ranges.reserve(kernels / 4 + kernels / per_step * 3);
  auto launch = t.intern("cudaLaunchKernel"), copy = t.intern("cudaMemcpyAsync"), sync = t.intern("cudaStreamSynchronize");
  auto step_name = t.intern("ProfilerStep#"), dl = t.intern("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__");
  auto item = t.intern("aten::item"), op = t.intern("aten::linear");
  std::vector<store::StringId> names;
  for (int i = 0; i < 64; ++i) names.push_back(t.intern(fmt::format("void kernel_{}<float>(float*, int)", i)));
  auto gemm = t.intern("ampere_sgemm_32x32_sliced1x4_nn");
  int64_t now = 1'000'000, corr = 1;
  for (size_t k = 0; k < kernels;) {
    int64_t step_start = now;
    store::Range dlr{now, now + 2'000'000, 1, 1, 0, dl, 1, store::RangeSource::Op, 0};
    t.ranges.push_back(dlr);
    now += 2'000'000;
    store::ApiCall c{now, now + 50'000, 1, 1, store::ApiKind::Runtime, copy, corr, 0};
    t.api_calls.push_back(c);
    t.memcpys.push_back({now + 5'000, now + 45'000, 0, 7, corr++, 1 << 20, store::CopyKind::HtoD, store::MemoryKind::Pageable,
                         store::MemoryKind::Device, 1});
    now += 50'000;
    int64_t gpu = now;
    for (size_t i = 0; i < per_step && k < kernels; ++i, ++k) {
      bool in_loop = i >= 100 && i < 132;
      int64_t dur = in_loop ? 5'000 : (i % 7 == 0 ? 40'000 : 3'000);
      if (i % 4 == 0) t.ranges.push_back({now, now + 30'000, 1, 1, 0, op, 1, store::RangeSource::Op, 0});
      t.api_calls.push_back({now + 1'000, now + 5'000, 1, 1, store::ApiKind::Runtime, launch, corr, 0});
      gpu = std::max(gpu, now + 6'000);
      store::Kernel kr;
      kr.start = gpu, kr.end = gpu + dur, kr.stream = 7, kr.correlation = corr++, kr.grid_x = in_loop ? 4 : 80;
      kr.grid_y = kr.grid_z = 1, kr.block_x = 128, kr.block_y = kr.block_z = 1;
      kr.name = in_loop ? gemm : names[i % names.size()];
      t.kernels.push_back(kr);
      gpu = kr.end;
      now += 8'000;
    }
    t.ranges.push_back({now, now + 300'000, 1, 1, 0, item, 1, store::RangeSource::Op, 0});
    t.api_calls.push_back({now + 10'000, std::max(gpu, now + 20'000) + 5'000, 1, 1, store::ApiKind::Runtime, sync, 0, 0});
    now = std::max(gpu, now + 300'000) + 10'000;
    t.ranges.push_back({step_start, now, 1, 1, 0, step_name, 0, store::RangeSource::Annotation, 0});
  }
  return t;
}

void run_synthetic(size_t kernels) {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    store::Trace t = synthetic(kernels);
    double before = rss_mib();
    auto t0 = Clock::now();
    auto a = analyzer::analyze(t);
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    size_t ev = events(t);
    fmt::print("| synthetic {:>6.1f}M kernels | {:>11} | {:>8.3f} | {:>9.0f} | {:>8.3f} | {:>8.0f} | {:>8.0f} | {} steps, {} findings |\n",
               double(kernels) / 1e6, ev, s, s / double(ev) * 1e9, s / double(ev) * 216000.0, before, peak_mib(),
               a.steps.size(), a.findings.size());
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_kernels = argc > 1 ? std::stoul(argv[1]) : 10'000'000;
  fmt::print("analyze() cost; goal: 216k events in <= 0.5 s (column '216k ev s'), linear in events (ns/event flat)\n\n");
  fmt::print("| input | events | analyze s | ns/event | 216k ev s | RSS before MiB | peak RSS MiB | result |\n");
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  // Shared traces, largest files first.
  std::vector<std::pair<uintmax_t, std::string>> files;
  std::error_code ec;
  for (auto& e : std::filesystem::recursive_directory_iterator(STEPSCOPE_TRACES_DIR, ec))
    if (e.is_regular_file() && e.path().extension() == ".gz") files.push_back({e.file_size(), e.path().string()});
  std::sort(files.rbegin(), files.rend());
  if (files.size() > 3) files.resize(3);
  for (auto& [size, path] : files) {
    std::fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      auto l0 = Clock::now();
      store::Trace t = analyzer::load_trace(path);
      double load_s = std::chrono::duration<double>(Clock::now() - l0).count();
      double before = rss_mib();
      auto t0 = Clock::now();
      auto a = analyzer::analyze(t);
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      size_t ev = events(t);
      fmt::print("| {} | {:>11} | {:>8.3f} | {:>9.0f} | {:>8.3f} | {:>8.0f} | {:>8.0f} | load {:.2f} s; {} steps, {} findings |\n",
                 std::filesystem::path(path).filename().string(), ev, s, s / double(ev) * 1e9, s / double(ev) * 216000.0,
                 before, peak_mib(), load_s, a.steps.size(), a.findings.size());
      std::fflush(stdout);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
  }
  std::vector<size_t> sizes;
  for (size_t n : {1'000'000, 2'000'000, 5'000'000, 10'000'000})
    if (n < max_kernels) sizes.push_back(n);
  sizes.push_back(max_kernels);
  for (size_t n : sizes) run_synthetic(n);
  return 0;
}
