// bench_multirank [RANKS] [DIR] — `analyze` of a whole job's rank files: files/s and peak memory against the
// issue-16 limits (1,000 rank files of the size of the param/dlrm ones in minutes on this machine, memory
// bounded by a few rank files, not by their sum). The rank files are synthetic: rank k is the DLRM worker k
// mod 8 of ../shared/traces/param with its distributedInfo rank and world size rewritten (same size, same
// events), written gzip-compressed to DIR (default /tmp/stepscope-bench-multirank). Each measurement runs in
// its own child process, so its peak RSS is its own.
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "stepscope/analyzer/multi_rank.h"

using namespace stepscope;
namespace fs = std::filesystem;

namespace {

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return {};
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  gzclose(f);
  return out;
}

bool generate(const std::string& dir, int ranks) {
  std::vector<std::string> workers;
  for (int i = 0; i < 8; ++i) {
    workers.push_back(gunzip(fmt::format("{}/param/dlrm_8gpu_worker{}.json.gz", STEPSCOPE_TRACES_DIR, i)));
    if (workers.back().empty()) return false;
  }
  fs::create_directories(dir);
  const std::regex info(R"("distributedInfo": \{[^}]*\})");
  for (int r = 0; r < ranks; ++r) {
    const std::string path = fmt::format("{}/rank{:05}.json.gz", dir, r);
    if (fs::exists(path)) continue;
    const std::string json = std::regex_replace(
        workers[size_t(r % 8)], info,
        fmt::format(R"("distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": {}}})", r, ranks),
        std::regex_constants::format_first_only);
    gzFile f = gzopen((path + ".tmp").c_str(), "wb6");
    gzwrite(f, json.data(), unsigned(json.size()));
    gzclose(f);
    fs::rename(path + ".tmp", path);
  }
  return true;
}

struct Result {
  double wall_s = 0, peak_mib = 0;
  int64_t ranks = 0, steps = 0, findings = 0;
};

// analyze_ranks over the first `files` files on `threads` threads, in a child process.
Result measure(const std::vector<std::string>& all, size_t files, unsigned threads) {
  int fd[2];
  if (pipe(fd) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    std::vector<std::string> mine(all.begin(), all.begin() + long(files));
    analyzer::MultiRankOptions o;
    o.threads = threads;
    const auto t0 = std::chrono::steady_clock::now();
    auto m = analyzer::analyze_ranks(mine, o);
    Result r;
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    r.peak_mib = double(u.ru_maxrss) / 1024.0;
    r.ranks = int64_t(m.ranks.size()), r.steps = int64_t(m.steps.size()),
    r.findings = int64_t(m.findings.size());
    (void)!write(fd[1], &r, sizeof r);
    _exit(0);
  }
  close(fd[1]);
  Result r;
  if (read(fd[0], &r, sizeof r) != sizeof r) r = {};
  close(fd[0]);
  waitpid(pid, nullptr, 0);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = argc > 1 ? std::atoi(argv[1]) : 1000;
  const std::string dir = argc > 2 ? argv[2] : "/tmp/stepscope-bench-multirank";
  if (!generate(dir, ranks)) {
    fmt::print("SKIPPED: {}/param/dlrm_8gpu_worker*.json.gz not found\n", STEPSCOPE_TRACES_DIR);
    return 0;
  }
  std::vector<std::string> files;
  for (int r = 0; r < ranks; ++r) files.push_back(fmt::format("{}/rank{:05}.json.gz", dir, r));
  uint64_t bytes = 0;
  for (const auto& f : files) bytes += fs::file_size(f);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  fmt::print(
      "{} rank files in {} ({:.1f} MB gzip, {:.0f} KB each; one DLRM rank is 0.9 MB of JSON), {} cores\n\n",
      ranks, dir, double(bytes) / 1e6, double(bytes) / 1e3 / ranks, cores);

  const Result one = measure(files, 1, 1);
  // "A few rank files": kFewFiles times the peak of analyzing one file alone; "their sum": every file loaded.
  constexpr int kFewFiles = 4;
  const double few = one.peak_mib * kFewFiles;
  fmt::print(
      "| files | threads | wall s | files/s | peak RSS MiB | their sum MiB | limit: {} rank files MiB | time "
      "limit "
      "10 min |\n|---|---|---|---|---|---|---|---|\n",
      kFewFiles);
  Result eight;
  auto row = [&](size_t n, unsigned th) {
    const Result r = measure(files, n, th);
    fmt::print("| {} | {} | {:.2f} | {:.0f} | {:.1f} | {:.0f} | {:.1f}: {} | {} |\n", n, th, r.wall_s,
               double(n) / r.wall_s, r.peak_mib, one.peak_mib * double(n), few,
               r.peak_mib <= few ? "ok" : "OVER", r.wall_s < 600 ? "ok" : "OVER");
    return r;
  };
  row(1, 1);
  eight = row(8, cores);
  row(files.size(), 1);
  const Result all = row(files.size(), cores);
  fmt::print(
      "\n{} ranks aligned, {} step(s), {} finding(s). Kept per rank (its reduced result, growing with the "
      "ranks): {:.1f} KiB = (peak at {} files - peak at 8) / {}.\n",
      all.ranks, all.steps, all.findings, (all.peak_mib - eight.peak_mib) * 1024.0 / double(ranks - 8), ranks,
      ranks - 8);
  return 0;
}
