// Collector overhead: hot_loop (2 threads, ~30-deep stacks) run plain, under `stepscope record --cpu-hz 1000`,
// under `perf record -F 1000 -g` and under gperftools' CPU profiler (CPUPROFILE_FREQUENCY=1000), alternated
// round by round. Prints median wall time, overhead vs plain, achieved samples per second (per wall second
// and per CPU second of the workload) and stepscope's median handler cost.
//   overhead_bench [--rounds R] [--iterations N]
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "stepscope/store/store.h"

extern char** environ;

namespace {

struct Run {
  double wall = 0, cpu = 0;
  long long samples = -1;
  int status = 0;
};

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

Run spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> argv, envp;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  Run r;
  double t0 = now();
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) {
    r.status = -1;
    return r;
  }
  rusage ru{};
  wait4(pid, &r.status, 0, &ru);
  r.wall = now() - t0;
  r.cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  posix_spawn_file_actions_destroy(&fa);
  return r;
}

long long perf_samples(const std::string& data) {
  std::string cmd = "perf report -i " + data + " --stats 2>/dev/null | grep -m1 'SAMPLE events'";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512] = {0};
  long long n = -1;
  if (fgets(line, sizeof line, p)) {
    const char* c = std::strstr(line, "SAMPLE events:");
    if (c) n = std::atoll(c + 14);
  }
  pclose(p);
  return n;
}

// gperftools' legacy CPU profile: a header of 5 words, then (count, depth, pcs...) records, then (0, 1, 0).
long long gperf_samples(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<uintptr_t> w;
  uintptr_t v;
  while (f.read(reinterpret_cast<char*>(&v), sizeof v)) w.push_back(v);
  if (w.size() < 5) return -1;
  long long total = 0;
  size_t i = 5;
  while (i + 2 <= w.size()) {
    uintptr_t count = w[i], depth = w[i + 1];
    if (count == 0 && depth == 1) break;
    total += static_cast<long long>(count);
    i += 2 + depth;
  }
  return total;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3;
  std::string iterations = "600000000";
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds")) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--iterations")) iterations = argv[++i];
  }
  const std::string dir = std::filesystem::temp_directory_path() / ("stepscope-overhead-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::vector<std::string> workload{HOT_LOOP_BIN, "--threads", "2", "--iterations", iterations};
  const bool have_perf = spawn({"perf", "--version"}, {}).status == 0;
  const char* libprofiler = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0";
  const bool have_gperf = std::filesystem::exists(libprofiler);

  struct Mode {
    explicit Mode(std::string n) : name(std::move(n)) {}
    std::string name;
    std::vector<double> wall, cpu, rate_wall, rate_cpu;
    std::string median_handler;
  };
  std::vector<Mode> modes{Mode("plain"), Mode("stepscope --cpu-hz 1000"), Mode("perf -F 1000 -g"), Mode("gperftools 1000 Hz")};
  for (int r = 0; r < rounds; ++r) {
    for (size_t m = 0; m < modes.size(); ++m) {
      Run run;
      if (m == 0) {
        run = spawn(workload, {});
      } else if (m == 1) {
        std::vector<std::string> a{STEPSCOPE_BIN, "record", "--no-gpu", "--cpu-hz", "1000", "-o", dir + "/run.db", "--"};
        a.insert(a.end(), workload.begin(), workload.end());
        run = spawn(a, {});
        try {
          stepscope::store::StoreReader rd(dir + "/run.db");
          auto meta = rd.meta();
          run.samples = std::atoll(meta["collector.samples"].c_str());
          modes[m].median_handler = meta["collector.handler_ns_median"];
        } catch (const std::exception& e) {
          std::fprintf(stderr, "overhead_bench: %s\n", e.what());
        }
      } else if (m == 2) {
        if (!have_perf) continue;
        std::vector<std::string> a{"perf", "record", "-q", "-F", "1000", "-g", "-o", dir + "/perf.data", "--"};
        a.insert(a.end(), workload.begin(), workload.end());
        run = spawn(a, {});
        run.samples = perf_samples(dir + "/perf.data");
      } else {
        if (!have_gperf) continue;
        run = spawn(workload, {std::string("LD_PRELOAD=") + libprofiler, "CPUPROFILE=" + dir + "/gperf.prof",
                               "CPUPROFILE_FREQUENCY=1000"});
        run.samples = gperf_samples(dir + "/gperf.prof");
      }
      if (run.status != 0) {
        std::fprintf(stderr, "overhead_bench: %s failed (status %d)\n", modes[m].name.c_str(), run.status);
        continue;
      }
      modes[m].wall.push_back(run.wall);
      modes[m].cpu.push_back(run.cpu);
      if (run.samples >= 0) {
        modes[m].rate_wall.push_back(run.samples / run.wall);
        modes[m].rate_cpu.push_back(run.samples / std::max(run.cpu, 1e-9));
      }
    }
  }
  const double base = median(modes[0].wall);
  std::printf("workload: hot_loop --threads 2 --iterations %s (~30-deep stacks), %d alternated rounds, medians\n",
              iterations.c_str(), rounds);
  std::printf("%-26s %10s %10s %12s %16s %16s %14s\n", "mode", "wall s", "cpu s", "overhead %", "samples/s wall",
              "samples/cpu-s", "handler ns");
  for (const auto& m : modes) {
    if (m.wall.empty()) {
      std::printf("%-26s %10s\n", m.name.c_str(), "n/a");
      continue;
    }
    const double w = median(m.wall);
    std::printf("%-26s %10.3f %10.3f %12.1f %16.0f %16.0f %14s\n", m.name.c_str(), w, median(m.cpu),
                base > 0 ? 100.0 * (w - base) / base : 0.0, m.rate_wall.empty() ? 0.0 : median(m.rate_wall),
                m.rate_cpu.empty() ? 0.0 : median(m.rate_cpu), m.median_handler.empty() ? "-" : m.median_handler.c_str());
  }
  std::printf("goal: stepscope overhead <= 2%% and no worse than perf; median handler cost <= 2000 ns\n");
  std::filesystem::remove_all(dir);
  return 0;
}
