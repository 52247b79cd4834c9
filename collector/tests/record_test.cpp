// Issue 5 acceptance: real programs under the built `stepscope record`, their stores read back.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

struct RunResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs argv with stdout/stderr to files. `on_started(pid)` runs in the parent right after the fork.
RunResult run(const std::vector<std::string>& args, const test::ScratchDir& dir,
              const std::function<void(pid_t)>& on_started = {}) {
  const std::string out = dir.file("stdout"), err = dir.file("stderr");
  pid_t pid = fork();
  if (pid == 0) {
    freopen(out.c_str(), "w", stdout);
    freopen(err.c_str(), "w", stderr);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(126);
  }
  if (on_started) on_started(pid);
  int status = 0;
  waitpid(pid, &status, 0);
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string bin(const std::string& rel) { return test::binary_dir() + "/" + rel; }
std::string stepscope_bin() { return bin("cli/stepscope"); }
std::string sample(const std::string& name) { return bin("samples/cpu/" + name); }

std::vector<std::string> record_cmd(const std::string& db, std::vector<std::string> cmd,
                                    std::vector<std::string> opts = {}) {
  std::vector<std::string> a{stepscope_bin(), "record", "-o", db, "--no-gpu"};
  a.insert(a.end(), opts.begin(), opts.end());
  a.push_back("--");
  a.insert(a.end(), cmd.begin(), cmd.end());
  return a;
}

// Leaf frame of every sample, by thread.
struct LeafInfo {
  std::string symbol, file;
  int line = 0;
  size_t depth = 0;
};

std::vector<std::pair<int64_t, LeafInfo>> leaves(const store::Trace& t) {
  std::map<int64_t, const store::Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;
  std::map<int64_t, const store::Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::vector<std::pair<int64_t, LeafInfo>> out;
  for (const auto& s : t.samples) {
    LeafInfo li;
    auto it = stacks.find(s.stack);
    if (it != stacks.end()) {
      const store::Frame* f = frames[it->second->frame];
      li.symbol = t.str(f->symbol);
      li.file = t.str(f->file);
      li.line = f->line;
      for (int64_t id = s.stack; id != 0 && stacks.count(id); id = stacks[id]->parent) ++li.depth;
    }
    out.emplace_back(s.tid, li);
  }
  return out;
}

std::pair<int, int> hot_lines() {
  std::ifstream f(HOT_LOOP_SOURCE);
  std::string line;
  int n = 0, begin = 0, end = 0;
  while (std::getline(f, line)) {
    ++n;
    if (line.find("// HOT BEGIN") != std::string::npos) begin = n;
    if (line.find("// HOT END") != std::string::npos) end = n;
  }
  return {begin, end};
}

}  // namespace

TEST_CASE("one hot function gets most samples, with symbol and file:line; stepscope.h steps and waits") {
  test::ScratchDir dir("collector_hot");
  const std::string db = dir.file("hot.db");
  auto r = run(record_cmd(db, {sample("hot_loop"), "--iterations", "250000000", "--steps", "4"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::StoreReader reader(db);
  store::Trace t = reader.load();
  REQUIRE(t.samples.size() >= 50);
  auto [begin, end] = hot_lines();
  REQUIRE(begin > 0);
  size_t hot = 0, deep = 0;
  for (const auto& [tid, li] : leaves(t)) {
    if (li.symbol.find("hot_function") == std::string::npos) continue;
    ++hot;
    CHECK(li.file.size() >= 12);
    CHECK(li.file.substr(li.file.size() - 12) == "hot_loop.cpp");
    CHECK(li.line > begin);
    CHECK(li.line < end);
    if (li.depth >= 33) ++deep;  // 30 descend() frames + main + libc start + _start
  }
  CHECK(hot >= t.samples.size() * 60 / 100);
  CHECK(deep >= hot * 90 / 100);
  CHECK(t.meta["clock_domain"] == "CLOCK_MONOTONIC");
  // stepscope_step() after each of 4 steps: 3 complete steps; a data wait around each cold part.
  REQUIRE(t.steps.size() == 3);
  for (const auto& s : t.steps) CHECK(t.str(s.source) == "api");
  REQUIRE(t.data_waits.size() == 4);
  for (const auto& w : t.data_waits) {
    CHECK(t.str(w.source) == "api");
    CHECK(w.end > w.start);
  }
  CHECK(t.modules.size() >= 2);
  bool exe_has_build_id = false;
  for (const auto& m : t.modules)
    if (t.str(m.path).find("hot_loop") != std::string::npos) exe_has_build_id = t.str(m.build_id).size() == 40;
  CHECK(exe_has_build_id);
}

TEST_CASE("eight threads each hot in their own function are each attributed") {
  test::ScratchDir dir("collector_threads");
  const std::string db = dir.file("threads.db");
  auto r = run(record_cmd(db, {sample("hot_loop"), "--iterations", "160000000", "--threads", "8"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::Trace t = store::StoreReader(db).load();
  std::map<int64_t, std::map<std::string, int>> by_tid;
  for (const auto& [tid, li] : leaves(t)) ++by_tid[tid][li.symbol];
  std::set<std::string> dominant;
  for (const auto& [tid, counts] : by_tid) {
    auto best = std::max_element(counts.begin(), counts.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best->first.find("worker_") != std::string::npos) dominant.insert(best->first);
  }
  CHECK(dominant.size() == 8);
}

TEST_CASE("1000 short-lived threads run to completion with unchanged output") {
  test::ScratchDir dir("collector_churn");
  auto plain = run({sample("thread_churn")}, dir);
  REQUIRE(plain.exit_code == 0);
  const std::string db = dir.file("churn.db");
  auto r = run(record_cmd(db, {sample("thread_churn")}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == plain.out);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.processes.size() == 1);
  CHECK(t.samples.size() > 0);
  std::set<int64_t> tids;
  for (const auto& s : t.samples) tids.insert(s.tid);
  CHECK(tids.size() > 20);  // many of the short threads were sampled
}

TEST_CASE("50 forked children are all recorded under their own pid") {
  test::ScratchDir dir("collector_fork");
  auto plain = run({sample("fork_children")}, dir);
  REQUIRE(plain.exit_code == 0);
  const std::string db = dir.file("fork.db");
  auto r = run(record_cmd(db, {sample("fork_children")}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == plain.out);
  store::Trace t = store::StoreReader(db).load();
  REQUIRE(t.processes.size() == 51);
  int64_t parent = 0;
  for (const auto& p : t.processes)
    if (t.str(p.name) == "fork_children" && p.parent_pid != 0) parent = parent ? parent : p.pid;
  std::set<int64_t> children;
  for (const auto& p : t.processes)
    if (p.parent_pid != 0 && p.pid != p.parent_pid) children.insert(p.parent_pid);
  // Every child names one common parent, which is itself present.
  std::map<int64_t, int> parents;
  for (const auto& p : t.processes) ++parents[p.parent_pid];
  auto top = std::max_element(parents.begin(), parents.end(), [](auto& a, auto& b) { return a.second < b.second; });
  CHECK(top->second == 50);
  bool parent_present = false;
  for (const auto& p : t.processes) parent_present |= p.pid == top->first;
  CHECK(parent_present);
  std::set<int64_t> sampled_pids;
  for (const auto& s : t.samples) sampled_pids.insert(s.pid);
  CHECK(sampled_pids.count(top->first) == 1);  // the parent's own samples survived the forks
}

TEST_CASE("SIGKILL of the target mid-run leaves a store with samples") {
  test::ScratchDir dir("collector_kill");
  const std::string db = dir.file("kill.db");
  auto r = run(record_cmd(db, {sample("hot_loop"), "--iterations", "300000000", "--steps", "6", "--self-kill"}), dir);
  INFO(r.err);
  CHECK(r.exit_code == 128 + SIGKILL);
  store::StoreReader reader(db);
  store::Trace t = reader.load();
  CHECK(t.samples.size() > 20);
  CHECK(t.meta["exit_code"] == "137");
}

TEST_CASE("SIGTERM sent to stepscope reaches the command and the store stays readable") {
  test::ScratchDir dir("collector_term");
  const std::string db = dir.file("term.db");
  auto r = run(record_cmd(db, {sample("hot_loop"), "--iterations", "3000000000"}), dir, [](pid_t pid) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    kill(pid, SIGTERM);
  });
  INFO(r.err);
  CHECK(r.exit_code == 128 + SIGTERM);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.samples.size() > 0);
}

TEST_CASE("exit() from a non-main thread keeps the status and the data") {
  test::ScratchDir dir("collector_exit_thread");
  const std::string db = dir.file("exit.db");
  auto r = run(record_cmd(db, {sample("hot_loop"), "--iterations", "100000000", "--threads", "2", "--exit-from-thread"}), dir);
  INFO(r.err);
  CHECK(r.exit_code == 3);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.samples.size() > 10);
}

TEST_CASE("the target's stdout is byte-identical with and without the collector") {
  test::ScratchDir dir("collector_stdout");
  std::vector<std::string> cmd{sample("hot_loop"), "--iterations", "60000000", "--threads", "2"};
  auto plain = run(cmd, dir);
  REQUIRE(plain.exit_code == 0);
  auto rec = run(record_cmd(dir.file("out.db"), cmd), dir);
  REQUIRE(rec.exit_code == 0);
  CHECK(rec.out == plain.out);
  CHECK(!rec.out.empty());
}

TEST_CASE("without a CUDA driver: one warning, CPU data, the command's exit status") {
  test::ScratchDir dir("collector_nogpu");
  const std::string db = dir.file("nogpu.db");
  // Without --no-gpu; through /bin/sh so exec keeps the injection.
  auto r = run({stepscope_bin(), "record", "-o", db, "--", "/bin/sh", "-c",
                "\"$0\" --iterations 50000000 >/dev/null; exit 7", sample("hot_loop")},
               dir);
  CHECK(r.exit_code == 7);
  int warnings = 0;
  std::istringstream lines(r.err);
  for (std::string l; std::getline(lines, l);)
    if (l.find("warning") != std::string::npos) ++warnings;
  CHECK(warnings == 1);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.samples.size() > 0);
  CHECK(t.meta["exit_code"] == "7");
  std::set<std::string> names;
  for (const auto& p : t.processes) names.insert(t.str(p.name));
  CHECK(names.count("hot_loop") == 1);  // the exec'd image is recorded under the same pid
}

TEST_CASE("NVTX ranges are captured by the collector's own NVTX injection") {
  test::ScratchDir dir("collector_nvtx");
  const std::string db = dir.file("nvtx.db");
  auto r = run(record_cmd(db, {bin("collector/tests/nvtx_sample")}, {"--step-regex", "^train_step$"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::Trace t = store::StoreReader(db).load();
  std::map<std::string, int> count;
  std::map<std::string, int> depth;
  for (const auto& rg : t.ranges) {
    CHECK(rg.source == store::RangeSource::Nvtx);
    ++count[t.str(rg.domain) + "/" + t.str(rg.name)];
    depth[t.str(rg.name)] = rg.depth;
    CHECK(rg.end > rg.start);
  }
  CHECK(count["/train_step"] == 4);
  CHECK(count["/data_loader_next"] == 4);
  CHECK(count["trainer/forward"] == 4);
  CHECK(depth["train_step"] == 0);
  CHECK(depth["data_loader_next"] == 1);
  REQUIRE(t.data_waits.size() == 4);  // "data_loader_next" matches the default --data-wait-regex
  for (const auto& w : t.data_waits) CHECK(t.str(w.source) == "nvtx");
  REQUIRE(t.steps.size() == 4);
  for (const auto& s : t.steps) CHECK(t.str(s.source) == "nvtx");
}
