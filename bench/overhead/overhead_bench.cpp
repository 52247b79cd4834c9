// Collector overhead: hot_loop (2 CPU-bound threads, ~36-deep stacks) run plain, under `stepscope record
// --cpu-hz 1000`, under another stepscope build (--baseline PATH: an older `stepscope` binary, e.g. the commit
// before a collector change), under `perf record -F 1000 -g` (frame pointers), `perf record -F 1000
// --call-graph dwarf` (copied stacks unwound afterwards, as stepscope's collector thread does) and under
// gperftools' CPU profiler (CPUPROFILE_FREQUENCY=1000), alternated round by round. For each mode it separates
//   (a) the workload's own compute time, measured by the workload itself (hot_loop --time: first to last
//       instruction of its work), i.e. what the profiler costs the program while it runs;
//   (b) for stepscope, the post-run finalize time (merge the parts, symbolize, write the store): total wall
//       time of `stepscope record` minus the command's lifetime measured by the launcher (meta
//       record.command_wall_s), and the symbolization part of it (meta record.symbolize_s);
// plus the CPU time of everything the mode ran (wait4 rusage), samples per CPU-second and stepscope's median
// signal-handler cost and the collector thread's unwind CPU per sample. Prints the load average before and
// after: numbers from a busy machine are not overhead.
//   overhead_bench [--rounds R] [--iterations N] [--baseline /path/to/older/stepscope]
//
// --python: the Python workloads of python_workloads.py (a pure-Python loop, recursion, dicts and strings, a NumPy
// loop, a PyTorch CPU training loop with a DataLoader), each run plain, under `stepscope record --cpu-hz 1000`
// (the Python hooks in), the same with STEPSCOPE_PYTHON_HOOKS=0 (what the hooks themselves cost), `py-spy record
// --rate 1000` and `py-spy record --rate 1000 --nonblocking`, alternated round by round; per workload and mode
// the median of the workload's own compute time and CPU time, their overhead against plain, and the spread
// (lowest and highest round against plain's median).
// The paired column compares each round with the same round's plain run, so a drifting machine moves both.
//   overhead_bench --python [--rounds R] [--python-bin PY] [--py-spy PATH] [--workloads a,b,...] [--scale F]
//                           [--modes stepscope,hooks-off,py-spy,py-spy-nonblocking]   (plain always runs)
//                           [--stepscope PATH] [--script python_workloads.py]   (a bundle on another machine:
//                           scripts/gpu-proof.sh with STEPSCOPE_PROOF_PYTHON_ROUNDS)
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "stepscope/store/store.h"

extern char** environ;

namespace {

struct Run {
  double wall = 0, cpu = 0;
  double compute = -1, compute_cpu = -1;  // the workload's own compute wall and process CPU time (--time)
  double command = -1, symbolize = -1;  // stepscope: the command's lifetime and symbolization, from meta
  long long samples = -1;
  int status = 0;
};

double now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

Run spawn(const std::vector<std::string>& args, const std::vector<std::string>& extra_env, const std::string& err_file) {
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
  posix_spawn_file_actions_addopen(&fa, 2, err_file.empty() ? "/dev/null" : err_file.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  Run r;
  double t0 = now();
  pid_t pid;
  if (posix_spawnp(&pid, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) {
    r.status = -1;
    return r;
  }
  rusage ru{};
  wait4(pid, &r.status, 0, &ru);  // children the spawned process waited for are included
  r.wall = now() - t0;
  r.cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
  posix_spawn_file_actions_destroy(&fa);
  return r;
}

void read_compute(const std::string& err_file, Run& r) {
  std::ifstream f(err_file);
  std::string line;
  while (std::getline(f, line)) {
    auto p = line.find("compute_wall_s="), c = line.find("compute_cpu_s=");
    if (p != std::string::npos) r.compute = std::atof(line.c_str() + p + 15);
    if (c != std::string::npos) r.compute_cpu = std::atof(line.c_str() + c + 14);
  }
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
  return v.empty() ? -1 : v[v.size() / 2];
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::string fmt(double v, const char* f = "%.3f") {
  if (v < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string pct(double v, double base) {
  if (v < 0 || base <= 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f", 100.0 * (v - base) / base);
  return buf;
}

}  // namespace

// The --python mode (see the top of this file).
int python_main(int rounds, const std::string& python, const std::string& pyspy,
                std::vector<std::string> workloads, const std::vector<std::string>& modes,
                const std::string& scale, const std::string& stepscope, const std::string& script) {
  const std::string dir = std::filesystem::temp_directory_path() / ("stepscope-pyoverhead-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string err = dir + "/stderr";
  const bool have_pyspy = spawn({pyspy, "--version"}, {}, "").status == 0;
  const std::string load_before = loadavg();
  enum Kind { kPlain, kStepscope, kNoHooks, kPySpy, kPySpyNonblocking };
  const std::vector<std::tuple<Kind, std::string, std::string>> all_kinds{
      {kPlain, "plain", "plain"},
      {kStepscope, "stepscope", "stepscope --cpu-hz 1000"},
      {kNoHooks, "hooks-off", "stepscope, hooks off"},
      {kPySpy, "py-spy", "py-spy --rate 1000"},
      {kPySpyNonblocking, "py-spy-nonblocking", "py-spy --nonblocking"}};
  std::vector<std::pair<Kind, std::string>> kinds;
  for (const auto& [kind, key, label] : all_kinds)
    if (kind == kPlain || modes.empty() || std::find(modes.begin(), modes.end(), key) != modes.end())
      kinds.emplace_back(kind, label);
  struct Cell {
    std::vector<double> compute, compute_cpu;
    std::vector<double> by_round;  // compute time of each round (-1: none), for the paired ratios
    std::vector<double> handler_ns, unwind_ns;  // stepscope: the sample handler's median, unwind CPU per sample
    int timeouts = 0;
  };
  std::vector<std::vector<Cell>> cells(workloads.size(), std::vector<Cell>(kinds.size()));
  for (auto& row : cells)
    for (auto& c : row) c.by_round.assign(rounds, -1);
  for (int r = 0; r < rounds; ++r) {
    for (size_t w = 0; w < workloads.size(); ++w) {
      for (size_t k = 0; k < kinds.size(); ++k) {
        const Kind kind = kinds[k].first;
        if (cells[w][k].timeouts > 0) continue;  // once stopped, not again: each try costs the full 60 s
        const std::vector<std::string> cmd{python, script, workloads[w], "--scale", scale};
        std::vector<std::string> args, env;
        if (kind == kPlain) {
          args = cmd;
        } else if (kind == kStepscope || kind == kNoHooks) {
          args = {stepscope, "record", "--no-gpu", "--cpu-hz", "1000", "-o", dir + "/run.db", "--"};
          if (kind == kNoHooks) env.push_back("STEPSCOPE_PYTHON_HOOKS=0");
        } else {
          if (!have_pyspy) continue;
          args = {pyspy, "record", "--rate", "1000", "--format", "raw", "-o", dir + "/pyspy.txt"};
          if (kind == kPySpyNonblocking) args.push_back("--nonblocking");
          args.push_back("--");
        }
        if (kind != kPlain) args.insert(args.end(), cmd.begin(), cmd.end());
        // A run over 60 s (a few seconds of work) is stopped: py-spy's default mode pauses the whole process for
        // every sample and made the PyTorch loop 30x slower here.
        args.insert(args.begin(), {"timeout", "-s", "KILL", "60"});
        Run run = spawn(args, env, err);
        // timeout -s KILL signals its whole process group, itself included.
        if ((WIFEXITED(run.status) && WEXITSTATUS(run.status) == 137) ||
            (WIFSIGNALED(run.status) && WTERMSIG(run.status) == SIGKILL)) {
          ++cells[w][k].timeouts;
          continue;
        }
        if (run.status != 0) {
          std::fprintf(stderr, "overhead_bench: %s %s failed (status %d)\n", workloads[w].c_str(),
                       kinds[k].second.c_str(), run.status);
          continue;
        }
        read_compute(err, run);
        if (kind == kStepscope || kind == kNoHooks) {
          try {
            stepscope::store::StoreReader rd(dir + "/run.db");
            auto meta = rd.meta();
            const std::string hooks = meta["python.hooks"];
            if (!meta["collector.handler_ns_median"].empty())
              cells[w][k].handler_ns.push_back(std::atof(meta["collector.handler_ns_median"].c_str()));
            if (!meta["collector.unwind_cpu_ns_per_sample"].empty())
              cells[w][k].unwind_ns.push_back(std::atof(meta["collector.unwind_cpu_ns_per_sample"].c_str()));
            if ((kind == kStepscope) != (hooks.rfind("installed in 1 of 1", 0) == 0))
              std::fprintf(stderr, "overhead_bench: %s %s: python.hooks is \"%s\"\n", workloads[w].c_str(),
                           kinds[k].second.c_str(), hooks.c_str());
          } catch (const std::exception& e) {
            std::fprintf(stderr, "overhead_bench: %s\n", e.what());
          }
        }
        if (run.compute > 0) cells[w][k].compute.push_back(run.compute), cells[w][k].by_round[r] = run.compute;
        if (run.compute_cpu > 0) cells[w][k].compute_cpu.push_back(run.compute_cpu);
      }
    }
  }
  std::printf("Python workloads (bench/overhead/python_workloads.py, %s), %d alternated rounds; medians, and the "
              "lowest..highest round against plain's median; %ld CPUs; load average before: %s, after: %s\n",
              python.c_str(), rounds, sysconf(_SC_NPROCESSORS_ONLN), load_before.c_str(), loadavg().c_str());
  std::printf("%-10s %-24s %10s %8s %17s %10s %8s %17s %8s %15s\n", "workload", "mode", "compute s", "ovh %",
              "spread %", "cpu s", "ovh %", "spread %", "paired %", "q1..q3 %");
  auto spread = [](const std::vector<double>& v, double base) {
    if (v.empty() || base <= 0) return std::string("-");
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return pct(*lo, base) + ".." + pct(*hi, base);
  };
  for (size_t w = 0; w < workloads.size(); ++w) {
    const double base = median(cells[w][0].compute), base_cpu = median(cells[w][0].compute_cpu);
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Cell& c = cells[w][k];
      if (c.compute.empty()) {
        std::printf("%-10s %-24s %10s\n", workloads[w].c_str(), kinds[k].second.c_str(),
                    c.timeouts ? "> 60 s (stopped)" : "n/a");
        continue;
      }
      // Paired: each round's run against the plain run of the same round (minutes apart at most), so a machine
      // that drifts over the whole bench moves both; the median of those ratios and their quartiles.
      std::vector<double> ratios;
      for (int r = 0; r < rounds; ++r)
        if (c.by_round[r] > 0 && cells[w][0].by_round[r] > 0) ratios.push_back(c.by_round[r] / cells[w][0].by_round[r]);
      std::sort(ratios.begin(), ratios.end());
      const auto quantile = [&](double q) { return ratios[std::min(ratios.size() - 1, size_t(q * ratios.size()))]; };
      const std::string paired = ratios.empty() ? "-" : pct(median(ratios), 1.0);
      const std::string quartiles = ratios.empty() ? "-" : pct(quantile(0.25), 1.0) + ".." + pct(quantile(0.75), 1.0);
      std::printf("%-10s %-24s %10s %8s %17s %10s %8s %17s %8s %15s\n", workloads[w].c_str(), kinds[k].second.c_str(),
                  fmt(median(c.compute)).c_str(), pct(median(c.compute), base).c_str(), spread(c.compute, base).c_str(),
                  fmt(median(c.compute_cpu)).c_str(), pct(median(c.compute_cpu), base_cpu).c_str(),
                  spread(c.compute_cpu, base_cpu).c_str(), paired.c_str(), quartiles.c_str());
      if (!c.handler_ns.empty())
        std::printf("%-10s %-24s handler %.1f us a sample (median), collector thread's unwind %.1f us a sample\n", "",
                    "", median(c.handler_ns) / 1000, c.unwind_ns.empty() ? -1.0 : median(c.unwind_ns) / 1000);
    }
  }
  std::printf("compute: the workload's own time around its work (imports and start-up excluded); cpu: the process's "
              "CPU time over it (the collector's thread included; py-spy samples from its own process, not counted); "
              "paired: the median over rounds of compute time against the same round's plain run, q1..q3 its "
              "quartiles\n");
  std::printf("goal: stepscope <= 2%% compute overhead at 1 kHz on every workload, hooks in; hooks off vs on: their "
              "own cost\n");
  std::filesystem::remove_all(dir);
  return 0;
}

int main(int argc, char** argv) {
  int rounds = 5;
  std::string iterations = "2000000000", baseline;
  bool python = false;
  std::string python_bin = PYTHON_VENV "/bin/python", pyspy = PYTHON_VENV "/bin/py-spy";
  std::vector<std::string> workloads{"loop", "recursion", "dicts", "numpy", "torch"}, python_modes;
  std::string scale = "1", stepscope = STEPSCOPE_BIN, script = PYTHON_WORKLOADS;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--python")) python = true;
    else if (!std::strcmp(argv[i], "--rounds") && has_value) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--iterations") && has_value) iterations = argv[++i];
    else if (!std::strcmp(argv[i], "--baseline") && has_value) baseline = argv[++i];
    else if (!std::strcmp(argv[i], "--python-bin") && has_value) python_bin = argv[++i];
    else if (!std::strcmp(argv[i], "--py-spy") && has_value) pyspy = argv[++i];
    else if (!std::strcmp(argv[i], "--scale") && has_value) scale = argv[++i];
    else if (!std::strcmp(argv[i], "--stepscope") && has_value)
      stepscope = argv[++i];
    else if (!std::strcmp(argv[i], "--script") && has_value)
      script = argv[++i];
    else if (!std::strcmp(argv[i], "--modes") && has_value) {
      std::stringstream ss(argv[++i]);
      for (std::string m; std::getline(ss, m, ',');) python_modes.push_back(m);
    } else if (!std::strcmp(argv[i], "--workloads") && has_value) {
      workloads.clear();
      std::stringstream ss(argv[++i]);
      for (std::string w; std::getline(ss, w, ',');) workloads.push_back(w);
    } else {
      std::fprintf(stderr, "overhead_bench: unknown or incomplete option %s\n", argv[i]);
      return 2;
    }
  }
  if (python)
    return python_main(rounds, python_bin, pyspy, workloads, python_modes, scale, stepscope, script);
  const std::string dir = std::filesystem::temp_directory_path() / ("stepscope-overhead-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string err = dir + "/stderr";
  const std::vector<std::string> workload{HOT_LOOP_BIN, "--threads", "2", "--iterations", iterations, "--time"};
  const bool have_perf = spawn({"perf", "--version"}, {}, "").status == 0;
  const char* libprofiler = "/usr/lib/x86_64-linux-gnu/libprofiler.so.0";
  const bool have_gperf = std::filesystem::exists(libprofiler);
  const std::string load_before = loadavg();

  struct Mode {
    explicit Mode(std::string n) : name(std::move(n)) {}
    std::string name;
    std::vector<double> wall, cpu, compute, compute_cpu, command, finalize, symbolize, rate_cpu;
    std::vector<double> handler, unwind;
  };
  enum Kind { kPlain, kStepscope, kBaseline, kPerfFp, kPerfDwarf, kGperf };
  const std::vector<Kind> kinds{kPlain, kStepscope, kBaseline, kPerfFp, kPerfDwarf, kGperf};
  std::vector<Mode> modes{Mode("plain"), Mode("stepscope --cpu-hz 1000"), Mode("stepscope (--baseline)"),
                          Mode("perf -F 1000 -g"), Mode("perf --call-graph dwarf"), Mode("gperftools 1000 Hz")};
  for (int r = 0; r < rounds; ++r) {
    for (size_t m = 0; m < modes.size(); ++m) {
      Run run;
      const Kind kind = kinds[m];
      if (kind == kPlain) {
        run = spawn(workload, {}, err);
      } else if (kind == kStepscope || kind == kBaseline) {
        if (kind == kBaseline && baseline.empty()) continue;
        std::vector<std::string> a{kind == kBaseline ? baseline : std::string(STEPSCOPE_BIN), "record", "--no-gpu",
                                   "--cpu-hz", "1000", "-o", dir + "/run.db", "--"};
        a.insert(a.end(), workload.begin(), workload.end());
        run = spawn(a, {}, err);
        try {
          stepscope::store::StoreReader rd(dir + "/run.db");
          auto meta = rd.meta();
          run.samples = std::atoll(meta["collector.samples"].c_str());
          run.command = std::atof(meta["record.command_wall_s"].c_str());
          run.symbolize = std::atof(meta["record.symbolize_s"].c_str());
          if (!meta["collector.handler_ns_median"].empty())
            modes[m].handler.push_back(std::atof(meta["collector.handler_ns_median"].c_str()));
          if (!meta["collector.unwind_cpu_ns_per_sample"].empty())
            modes[m].unwind.push_back(std::atof(meta["collector.unwind_cpu_ns_per_sample"].c_str()));
        } catch (const std::exception& e) {
          std::fprintf(stderr, "overhead_bench: %s\n", e.what());
        }
      } else if (kind == kPerfFp || kind == kPerfDwarf) {
        if (!have_perf) continue;
        std::vector<std::string> a{"perf", "record", "-q", "-F", "1000", "-g", "-o", dir + "/perf.data", "--"};
        if (kind == kPerfDwarf) a = {"perf", "record", "-q", "-F", "1000", "--call-graph", "dwarf", "-o", dir + "/perf.data", "--"};
        a.insert(a.end(), workload.begin(), workload.end());
        run = spawn(a, {}, err);
        run.samples = perf_samples(dir + "/perf.data");
      } else {
        if (!have_gperf) continue;
        run = spawn(workload,
                    {std::string("LD_PRELOAD=") + libprofiler, "CPUPROFILE=" + dir + "/gperf.prof",
                     "CPUPROFILE_FREQUENCY=1000"},
                    err);
        run.samples = gperf_samples(dir + "/gperf.prof");
      }
      if (run.status != 0) {
        std::fprintf(stderr, "overhead_bench: %s failed (status %d)\n", modes[m].name.c_str(), run.status);
        continue;
      }
      read_compute(err, run);
      Mode& md = modes[m];
      md.wall.push_back(run.wall);
      md.cpu.push_back(run.cpu);
      if (run.compute > 0) md.compute.push_back(run.compute);
      if (run.compute_cpu > 0) md.compute_cpu.push_back(run.compute_cpu);
      if (run.command > 0) {
        md.command.push_back(run.command);
        md.finalize.push_back(run.wall - run.command);
      }
      if (run.symbolize >= 0) md.symbolize.push_back(run.symbolize);
      if (run.samples >= 0) md.rate_cpu.push_back(run.samples / std::max(run.cpu, 1e-9));
    }
  }
  const double base_compute = median(modes[0].compute), base_ccpu = median(modes[0].compute_cpu), base_wall = median(modes[0].wall),
               base_cpu = median(modes[0].cpu);
  std::printf("workload: hot_loop --threads 2 --iterations %s --time (~36-deep stacks), %d alternated rounds, "
              "medians; %ld CPUs; load average before: %s, after: %s\n",
              iterations.c_str(), rounds, sysconf(_SC_NPROCESSORS_ONLN), load_before.c_str(), loadavg().c_str());
  std::printf("%-24s %9s %7s %9s %7s %9s %9s %9s %9s %8s %9s %8s %9s %8s %9s\n", "mode", "compute s", "ovh %",
              "comp cpu", "ovh %", "process s",
              "finalize", "symbolize", "total s", "ovh %", "cpu s", "ovh %", "smp/cpu-s", "handler", "unwind");
  for (const auto& m : modes) {
    if (m.wall.empty()) {
      std::printf("%-24s %9s\n", m.name.c_str(), "n/a");
      continue;
    }
    const double compute = median(m.compute), wall = median(m.wall), cpu = median(m.cpu);
    const double ccpu = median(m.compute_cpu);
    std::printf("%-24s %9s %7s %9s %7s %9s %9s %9s %9s %8s %9s %8s %9s %8s %9s\n", m.name.c_str(), fmt(compute).c_str(),
                pct(compute, base_compute).c_str(), fmt(ccpu).c_str(), pct(ccpu, base_ccpu).c_str(),
                fmt(median(m.command)).c_str(), fmt(median(m.finalize)).c_str(),
                fmt(median(m.symbolize)).c_str(), fmt(wall).c_str(), pct(wall, base_wall).c_str(),
                fmt(cpu).c_str(), pct(cpu, base_cpu).c_str(), fmt(median(m.rate_cpu), "%.0f").c_str(),
                m.handler.empty() ? "-" : (fmt(median(m.handler), "%.0f") + " ns").c_str(),
                m.unwind.empty() ? "-" : (fmt(median(m.unwind), "%.0f") + " ns").c_str());
  }
  std::printf("compute: the workload's own compute time (what the profiler costs while the program runs); comp cpu: "
              "the process's CPU time over that window (all its threads, the collector's included); "
              "process: the command's lifetime under `stepscope record`; finalize: after it exited (merge, "
              "symbolize, write); total: the whole mode's wall time; cpu: all processes of the mode; handler: "
              "median signal-handler time; unwind: the collector thread's CPU per sample to unwind its stack copy\n");
  std::printf("goal: stepscope compute overhead <= 2%% and no worse than perf; median handler cost <= 2000 ns\n");
  std::filesystem::remove_all(dir);
  return 0;
}
