// bench_attach: what `stepscope attach` costs a running process (issue 14's goals: stopped <= 50 ms at attach
// and at detach; a dormant collector <= 0.1%).
//   1. Stops. stall_probe (1 and 8 threads) is attached with `--duration 0.5`, five times each, a fresh process
//      each time (so every attach injects). Columns: the injector's own measure (meta attach.max_stopped_ms:
//      every thread stopped; attach.max_caller_stopped_ms: the thread that ran dlopen), and the longest gap the
//      probe's threads saw in their own progress during the attach, during the detach, and in the same length
//      of time before the attach (the machine's own scheduling noise).
//   2. Dormant cost. Two probes run side by side; B is attached for 0.2 s early, then carries the dormant
//      collector. Columns: CPU time per round of fixed work of A and of B afterwards, and the CPU time and
//      context switches of B's collector threads while dormant (the direct cost).
//   bench_attach [--repeats N]
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stepscope/store/store.h"

namespace fs = std::filesystem;
using namespace stepscope;

namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

pid_t spawn(const std::vector<std::string>& args, const std::string& out) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 2);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(126);
  }
  return pid;
}

int wait_for(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct ProbeOutput {
  std::vector<std::pair<int64_t, int64_t>> gaps;  // start, length
  std::vector<double> round_cpu;
  std::vector<int64_t> round_start;
};

ProbeOutput read_probe(const std::string& path) {
  ProbeOutput o;
  std::ifstream f(path);
  std::string kind;
  while (f >> kind) {
    if (kind == "gap") {
      int th;
      long long s, l;
      f >> th >> s >> l;
      o.gaps.push_back({s, l});
    } else if (kind == "round") {
      int r;
      double wall, cpu;
      long long start;
      f >> r >> wall >> cpu >> start;
      o.round_cpu.push_back(cpu);
      o.round_start.push_back(start);
    }
  }
  return o;
}

double max_gap_ms(const ProbeOutput& p, int64_t from, int64_t to) {
  int64_t best = 0;
  for (auto [s, l] : p.gaps)
    if (s + l > from && s < to) best = std::max(best, l);
  return best / 1e6;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double maximum(const std::vector<double>& v) { return v.empty() ? 0 : *std::max_element(v.begin(), v.end()); }

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// CPU ticks and context switches of the process's stepscope threads (control thread; collector thread if any).
std::pair<long long, long long> collector_threads_cost(pid_t pid) {
  long long ticks = 0, switches = 0;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("stepscope", 0) != 0) continue;
    std::ifstream stat(e.path() / "stat");
    std::string s;
    std::getline(stat, s);
    std::istringstream rest(s.substr(s.rfind(')') + 2));
    std::string field;
    for (int i = 3; i <= 15 && rest >> field; ++i)
      if (i == 14 || i == 15) ticks += std::atoll(field.c_str());
    std::ifstream status(e.path() / "status");
    std::string line;
    while (std::getline(status, line))
      if (line.find("ctxt_switches:") != std::string::npos) switches += std::atoll(line.c_str() + line.find(':') + 1);
  }
  return {ticks, switches};
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2)
    if (!std::strcmp(argv[i], "--repeats")) repeats = std::atoi(argv[i + 1]);
  const std::string dir = fs::temp_directory_path() / ("bench_attach." + std::to_string(getpid()));
  fs::create_directories(dir);
  std::printf("load average before: %s\n\n", loadavg().c_str());

  std::printf("1. Time the target is stopped (ms; goal <= 50 at attach and at detach), %d fresh processes each\n", repeats);
  std::printf("%-9s | %-22s | %-22s | %-22s | %-22s | %-22s\n", "threads", "all stopped (injector)",
              "dlopen thread away", "probe gap: attach", "probe gap: detach", "probe gap: before");
  std::printf("%-9s | %-22s | %-22s | %-22s | %-22s | %-22s\n", "", "median / max", "median / max", "median / max",
              "median / max", "median / max");
  for (int threads : {1, 8}) {
    std::vector<double> all, caller, g_attach, g_detach, g_before;
    for (int r = 0; r < repeats; ++r) {
      const std::string out = dir + "/probe.out", db = dir + "/a.db";
      pid_t probe = spawn({STALL_PROBE, "--threads", std::to_string(threads), "--rounds", "6"}, out);
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      const int64_t t0 = now_ns();
      pid_t a = spawn({STEPSCOPE_CLI, "attach", std::to_string(probe), "--no-gpu", "--duration", "0.5", "-o", db},
                      dir + "/attach.out");
      const int rc = wait_for(a);
      wait_for(probe);
      if (rc != 0) {
        std::printf("attach failed (exit %d)\n", rc);
        continue;
      }
      store::Trace t = store::StoreReader(db).load();
      const int64_t start = std::atoll(t.meta["attach.start_ns"].c_str());
      const int64_t stop = std::atoll(t.meta["attach.stop_ns"].c_str());
      const int64_t end = std::atoll(t.meta["attach.end_ns"].c_str());
      const ProbeOutput p = read_probe(out);
      all.push_back(std::atof(t.meta["attach.max_stopped_ms"].c_str()));
      caller.push_back(std::atof(t.meta["attach.max_caller_stopped_ms"].c_str()));
      g_attach.push_back(max_gap_ms(p, t0, start));
      g_detach.push_back(max_gap_ms(p, stop, end));
      g_before.push_back(max_gap_ms(p, t0 - (start - t0), t0));
    }
    auto cell = [](const std::vector<double>& v) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%8.2f / %8.2f", median(v), maximum(v));
      return std::string(buf);
    };
    std::printf("%-9d | %-22s | %-22s | %-22s | %-22s | %-22s\n", threads, cell(all).c_str(), cell(caller).c_str(),
                cell(g_attach).c_str(), cell(g_detach).c_str(), cell(g_before).c_str());
  }

  std::printf("\n2. Dormant collector (goal <= 0.1%%): CPU s per round of fixed work, rounds 4-11\n");
  std::printf("%-6s | %-14s | %-14s | %-10s | %-28s\n", "pair", "A (never)", "B (dormant)", "B / A - 1",
              "B's stepscope threads (dormant)");
  std::vector<double> ratios;
  for (int r = 0; r < repeats; ++r) {
    const std::string out_a = dir + "/a.out", out_b = dir + "/b.out", db = dir + "/d.db";
    pid_t pa = spawn({STALL_PROBE, "--rounds", "12"}, out_a);
    pid_t pb = spawn({STALL_PROBE, "--rounds", "12"}, out_b);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    pid_t at = spawn({STEPSCOPE_CLI, "attach", std::to_string(pb), "--no-gpu", "--duration", "0.2", "-o", db},
                     dir + "/attach.out");
    wait_for(at);
    const auto before = collector_threads_cost(pb);
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    const auto after = collector_threads_cost(pb);
    wait_for(pa);
    wait_for(pb);
    const ProbeOutput a = read_probe(out_a), b = read_probe(out_b);
    double ca = 0, cb = 0;
    for (int i = 4; i < 12 && i < int(a.round_cpu.size()) && i < int(b.round_cpu.size()); ++i) {
      ca += a.round_cpu[i];
      cb += b.round_cpu[i];
    }
    ca /= 8;
    cb /= 8;
    ratios.push_back(cb / ca - 1);
    std::printf("%-6d | %14.6f | %14.6f | %+9.3f%% | %lld CPU ticks, %lld switches in 2 s\n", r, ca, cb,
                100 * (cb / ca - 1), after.first - before.first, after.second - before.second);
  }
  std::printf("median B / A - 1: %+.3f%% (two processes side by side on a shared machine: noise, not cost, at this "
              "scale)\n",
              100 * median(ratios));
  std::printf("\nload average after: %s\n", loadavg().c_str());
  fs::remove_all(dir);
  return 0;
}
