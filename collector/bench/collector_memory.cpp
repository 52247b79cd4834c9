// bench_collector_memory: does the collector's memory stay flat over a long CPU-only run? Runs
//   stepscope record --cpu-hz HZ --duration S -- hot_loop --threads T (no GPU)
// samples the target's resident memory (VmRSS) every second, and prints it beside the plain program's and the
// growth between the first sampled minute's 10th second and the end. Goal (issue 12): flat — growth well below
// the first figure, whatever the run length.
//   bench_collector_memory [--seconds 65] [--threads 8] [--hz 1000]
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

long rss_kib(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;
}

int ppid_of(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto r = s.rfind(')');
  if (r == std::string::npos) return -1;
  int ppid = -1;
  std::sscanf(s.c_str() + r + 2, "%*c %d", &ppid);
  return ppid;
}

int child_of(int parent) {
  DIR* d = opendir("/proc");
  int found = -1;
  while (dirent* e = d ? readdir(d) : nullptr)
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && ppid_of(std::atoi(e->d_name)) == parent) found = std::atoi(e->d_name);
  if (d) closedir(d);
  return found;
}

int spawn(const std::vector<std::string>& args) {
  int pid = fork();
  if (pid == 0) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// RSS of `target_of(pid)` each second for `seconds`.
template <class Target>
std::vector<long> watch(int pid, int seconds, Target target_of) {
  std::vector<long> kib;
  for (int s = 0; s < seconds; ++s) {
    sleep(1);
    int t = target_of(pid);
    kib.push_back(t > 0 ? rss_kib(t) : -1);
  }
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  int seconds = 65, threads = 8, hz = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--seconds")) seconds = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--hz")) hz = std::atoi(argv[i + 1]);
  }
  const std::string hot = STEPSCOPE_HOT_LOOP, cli = STEPSCOPE_CLI;
  const std::vector<std::string> work = {hot, "--threads", std::to_string(threads), "--iterations", "100000000000000"};
  // Plain: the program alone.
  int plain = spawn(work);
  auto plain_kib = watch(plain, 10, [](int p) { return p; });
  kill(plain, SIGKILL);
  waitpid(plain, nullptr, 0);
  // Recorded: stepscope's child is the target.
  const std::string out = "/tmp/bench_collector_memory." + std::to_string(getpid()) + ".db";
  std::vector<std::string> rec = {cli, "record", "--no-gpu", "--cpu-hz", std::to_string(hz), "--duration",
                                  std::to_string(seconds + 2), "-o", out, "--"};
  rec.insert(rec.end(), work.begin(), work.end());
  int launcher = spawn(rec);
  auto kib = watch(launcher, seconds, child_of);
  int status = 0;
  waitpid(launcher, &status, 0);
  std::remove(out.c_str());
  std::printf("collector memory, CPU-only: %d threads at %d Hz for %d s (target VmRSS, MiB)\n", threads, hz, seconds);
  std::printf("%8s %12s %12s\n", "second", "recorded", "plain");
  for (size_t s = 0; s < kib.size(); ++s)
    if (s < 10 || (s + 1) % 10 == 0 || s + 1 == kib.size())
      std::printf("%8zu %12.1f %12s\n", s + 1, double(kib[s]) / 1024,
                  s < plain_kib.size() ? std::to_string(plain_kib[s] / 1024).c_str() : "");
  if (kib.size() >= 10) {
    double at10 = double(kib[9]) / 1024, last = double(kib.back()) / 1024;
    std::printf("growth from second 10 to %zu: %+.1f MiB (%.1f -> %.1f); goal: flat (a few MiB at most)\n",
                kib.size(), last - at10, at10, last);
  }
  return 0;
}
