// Issue 5 acceptance: real programs under the built `stepscope record`, their stores read back.
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <tuple>
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

#include "stepscope/collector/launcher.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;

namespace {

using test::RunResult;
using test::slurp;

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

// docs/schema.md "Invariant": every pid / thread a row names is in processes / threads.
void check_invariant(const store::StoreReader& reader) {
  for (const auto& b : reader.invariant_breaks())
    FAIL_CHECK(b.table << ": " << b.rows << " rows, " << b.problem << " (pid " << b.example_pid << " tid "
                       << b.example_tid << ")");
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

// Hot code without unwind tables (MKL's kernels, JIT code) under callers that have them: the unwind goes on
// from return addresses found by scanning the stack copy, and names exactly the callers the program has —
// never a function whose stale return address lies in the frame without tables
// (samples/cpu/no_unwind_tables.c).
TEST_CASE(
    "callers of code without unwind tables are recovered exactly, and a stale return address is not one") {
  test::ScratchDir dir("collector_no_tables");
  const std::string db = dir.file("no_tables.db");
  auto r = test::run_argv(record_cmd(db, {sample("no_unwind_tables"), "--iterations", "300000000"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::Trace t = store::StoreReader(db).load();
  std::map<int64_t, const store::Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;
  std::map<int64_t, const store::Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  // The thread's entry below chain_main / trap_main: start_thread, then clone3 (glibc's name varies).
  auto thread_entry = [](const std::vector<std::string>& c, size_t at) {
    return c.size() == at + 2 && c[at] == "start_thread" && c[at + 1].find("clone") != std::string::npos;
  };
  const std::vector<std::string> chain{"nt_leaf", "nt_middle", "run_chain", "chain_main"};
  const std::vector<std::string> trap{"nt_trap_leaf", "nt_trap_middle", "trap_main"};
  int64_t chain_samples = 0, chain_exact = 0, trap_samples = 0, trap_exact = 0, trap_leaf_only = 0;
  std::string odd;
  for (const auto& sm : t.samples) {
    std::vector<std::string> c;  // leaf first
    for (int64_t id = sm.stack; id != 0 && stacks.count(id); id = stacks[id]->parent)
      c.push_back(t.str(frames[stacks[id]->frame]->symbol));
    if (c.empty()) continue;
    const bool exact_chain = c.size() > chain.size() && std::equal(chain.begin(), chain.end(), c.begin()) &&
                             thread_entry(c, chain.size());
    const bool exact_trap = c.size() > trap.size() && std::equal(trap.begin(), trap.end(), c.begin()) &&
                            thread_entry(c, trap.size());
    if (c[0] == "nt_leaf") {
      ++chain_samples;
      chain_exact += exact_chain;
    } else if (c[0] == "nt_trap_leaf") {
      ++trap_samples;
      trap_exact += exact_trap;
      trap_leaf_only += c.size() == 1;
    } else {
      continue;  // start-up, thread creation, the hot loops' entry
    }
    // Every hot sample reads its program's real chain, or stops at the leaf: never a frame in between that
    // is not the caller (nt_decoy, whose return address the scan meets first in nt_trap_leaf's frame).
    if (!exact_chain && !exact_trap && c.size() != 1 && odd.empty()) {
      for (const auto& f : c) odd += f + " <- ";
    }
  }
  std::printf(
      "no_unwind_tables: nt_leaf %lld samples, %lld with the whole chain; nt_trap_leaf %lld samples, %lld "
      "leaf only, %lld whole; meta native_scan_samples %s of %s attempts\n",
      (long long)chain_samples, (long long)chain_exact, (long long)trap_samples, (long long)trap_leaf_only,
      (long long)trap_exact, t.meta["collector.native_scan_samples"].c_str(),
      t.meta["collector.native_scan_attempts"].c_str());
  INFO("a stack that is neither: " << odd);
  CHECK(odd.empty());
  REQUIRE(chain_samples >= 100);
  REQUIRE(trap_samples >= 100);
  // nt_leaf's caller is found through a direct call into it, nt_middle's through a call through a pointer,
  // and run_chain's frame (addressed through rbp, which nt_leaf changed) with the rbp nt_leaf pushed.
  CHECK(chain_exact >= chain_samples * 95 / 100);
  // nt_decoy's stale return address calls nt_decoy_inner, not nt_trap_leaf: the scan stops there.
  CHECK(trap_leaf_only + trap_exact == trap_samples);
  const int64_t scanned = std::atoll(t.meta["collector.native_scan_samples"].c_str());
  CHECK(scanned >= chain_exact + trap_exact);
  CHECK(std::atoll(t.meta["collector.native_scan_attempts"].c_str()) >= scanned + trap_leaf_only);
}

TEST_CASE("one hot function gets most samples, with symbol and file:line, stepscope.h steps and waits") {
  test::ScratchDir dir("collector_hot");
  const std::string db = dir.file("hot.db");
  auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "250000000", "--steps", "4"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::StoreReader reader(db);
  check_invariant(reader);
  store::Trace t = reader.load();
  REQUIRE(t.samples.size() >= 50);
  // The collector's own thread is marked, and its CPU time is in meta.
  int collector_threads = 0;
  for (const auto& th : t.threads) {
    if (!th.collector) continue;
    ++collector_threads;
    CHECK(t.str(th.name) == "stepscope");
  }
  CHECK(collector_threads == 1);
  for (const auto& sm : t.samples)
    for (const auto& th : t.threads)
      if (th.tid == sm.tid) CHECK_FALSE(th.collector);  // the collector thread takes no sampling signals
  REQUIRE(t.meta.count("collector.cpu_s"));
  CHECK(std::atof(t.meta["collector.cpu_s"].c_str()) > 0);
  CHECK(std::atof(t.meta["collector.handler_cpu_s_estimate"].c_str()) > 0);
  CHECK(std::atof(t.meta["collector.own_threads_cpu_s"].c_str()) > 0);
  // Every sample's stack copy was unwound on the collector thread, none cut by the window (hot_loop's stack is
  // about 2 KiB deep) and none left at its leaf.
  CHECK(t.meta["collector.unwound_samples"] == t.meta["collector.captured_samples"]);
  CHECK(t.meta["collector.stack_truncated_samples"] == "0");
  CHECK(t.meta["collector.stack_unreadable_samples"] == "0");
  CHECK(std::atoll(t.meta["collector.leaf_only_samples"].c_str()) == 0);
  CHECK(t.meta["collector.stack_window_bytes"] == "32768");
  CHECK(t.meta["collector.out_of_memory_passes"] == "0");
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

TEST_CASE(
    "a 200-function call chain: every frame unwound, each return address's unwind rule looked up once") {
  test::ScratchDir dir("collector_wide");
  const std::string db = dir.file("wide.db");
  auto r = test::run_argv(record_cmd(db, {sample("wide_chain"), "--iterations", "400000000"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::Trace t = store::StoreReader(db).load();
  REQUIRE(t.samples.size() >= 200);
  size_t hot = 0, whole = 0;
  for (const auto& [tid, li] : leaves(t)) {
    if (li.symbol.find("hot_leaf") == std::string::npos) continue;
    ++hot;
    if (li.depth >= 203) ++whole;  // hot_leaf + 200 links + main + libc start (+ _start)
  }
  CHECK(hot >= t.samples.size() * 80 / 100);
  CHECK(whole >= hot * 95 / 100);
  // ~205 distinct return addresses and a few leaf PCs: with libunwind's cache at its default 128 entries
  // (what a single unw_set_cache_size call leaves) each sample searched the tables for ~200 frames.
  const long long searches = std::atoll(t.meta["collector.unwind_table_searches"].c_str());
  INFO("table searches " << searches << " for " << t.samples.size() << " samples");
  CHECK(searches > 0);
  CHECK(searches < 1000);
}

TEST_CASE(
    "wall-clock sampling of more busy threads than cores: each sample carries the periods its timer merged") {
  test::ScratchDir dir("collector_wall_overruns");
  // Four busy threads a core: each waits for one most of the time, and a POSIX timer queues one signal at a
  // time, so the expiries while it waits arrive merged (si_overrun). Unweighted, the samples covered a
  // quarter of each thread's time.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = std::to_string(std::min(64u, 4 * cores));
  const std::string db = dir.file("wall.db");
  auto r = test::run_argv(
      record_cmd(db, {sample("hot_loop"), "--iterations", "400000000", "--threads", threads}, {"--wall"}),
      dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  store::Trace t = store::StoreReader(db).load();
  REQUIRE(t.meta["collector.mode"] == "wall");
  const int64_t overruns = std::atoll(t.meta["collector.timer_overruns"].c_str());
  const int64_t period = int64_t(1e9 / std::atof(t.meta["collector.cpu_hz"].c_str()));
  CHECK(overruns > 0);
  // What is dropped is counted. None is, alone on the machine; in the CI's sanitized suite, beside the TSan
  // build, one run dropped 114 samples and kept 3,505 (the collector thread held up longer than its rings'
  // two drain periods).
  const int64_t stored = std::atoll(t.meta["collector.samples"].c_str());
  REQUIRE(t.meta.count("collector.dropped_samples"));
  CHECK(std::atoll(t.meta["collector.dropped_samples"].c_str()) * 20 <= stored);
  int64_t periods = 0;
  struct Span {
    int64_t first = INT64_MAX, last = INT64_MIN, periods = 0, first_periods = 0;
  };
  std::map<int64_t, Span> by_tid;
  std::set<int64_t> worker_tids;
  for (const auto& [tid, li] : leaves(t))
    if (li.symbol.find("worker_") != std::string::npos) worker_tids.insert(tid);
  for (const auto& s : t.samples) {
    periods += s.periods;
    Span& sp = by_tid[s.tid];
    if (s.time < sp.first) sp.first = s.time, sp.first_periods = s.periods;
    sp.last = std::max(sp.last, s.time);
    sp.periods += s.periods;
  }
  // Every expiry is in the store: the samples, and the periods merged into them.
  CHECK(periods == stored + overruns);
  int workers = 0;
  for (const auto& [tid, sp] : by_tid) {
    if (!worker_tids.count(tid) || sp.periods < 100) continue;
    ++workers;
    // A thread's periods add up to its sampled span (from the start of its first sample's periods to its
    // last).
    const double span = double(sp.last - sp.first + sp.first_periods * period);
    INFO("tid " << tid << ": " << sp.periods << " periods over " << span / 1e6 << " ms");
    CHECK(double(sp.periods * period) == Approx(span).epsilon(0.05));
  }
  CHECK(workers == std::stoi(threads));
}

TEST_CASE("eight threads each hot in their own function are each attributed") {
  test::ScratchDir dir("collector_threads");
  const std::string db = dir.file("threads.db");
  auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "160000000", "--threads", "8"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  check_invariant(store::StoreReader(db));
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
  auto plain = test::run_argv({sample("thread_churn")}, dir);
  REQUIRE(plain.exit_code == 0);
  const std::string db = dir.file("churn.db");
  auto r = test::run_argv(record_cmd(db, {sample("thread_churn")}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == plain.out);
  check_invariant(store::StoreReader(db));
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.processes.size() == 1);
  CHECK(t.samples.size() > 0);
  std::set<int64_t> tids;
  for (const auto& s : t.samples) tids.insert(s.tid);
  CHECK(tids.size() > 20);  // many of the short threads were sampled
}

TEST_CASE("50 forked children are all recorded under their own pid") {
  test::ScratchDir dir("collector_fork");
  auto plain = test::run_argv({sample("fork_children")}, dir);
  REQUIRE(plain.exit_code == 0);
  const std::string db = dir.file("fork.db");
  auto r = test::run_argv(record_cmd(db, {sample("fork_children")}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out == plain.out);
  check_invariant(store::StoreReader(db));
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
  auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "300000000", "--steps", "6", "--self-kill"}), dir);
  INFO(r.err);
  CHECK(r.exit_code == 128 + SIGKILL);
  store::StoreReader reader(db);
  store::Trace t = reader.load();
  CHECK(t.samples.size() > 20);
  CHECK(t.meta["exit_code"] == "137");
}

TEST_CASE("a second recording to the same output writes a name of its own, the first's parts untouched") {
  // Two shells' default run.db: the second removed the first's parts, and both wrote a store, one empty.
  // Every rank of `srun stepscope record` has the same default run.db: the second must not stop the command
  // either.
  test::ScratchDir dir("collector_same_output");
  const std::string db = dir.file("same.db"), parts = db + ".parts";
  std::filesystem::create_directory(parts);  // left by a recording that was killed: a part never merged
  { std::ofstream(parts + "/4242-1.db") << "stale"; }
  { std::ofstream(parts + "/.lock") << "4241"; }
  test::Spawned first = test::spawn_shell(
      "exec " + test::shell_quote(stepscope_bin()) + " record --no-gpu -o " + test::shell_quote(db) + " -- " +
      test::shell_quote(sample("hot_loop")) + " --iterations 2500000000 2>/dev/null >/dev/null");
  REQUIRE(first.pid > 0);
  for (int i = 0; i < 100 && std::filesystem::exists(parts + "/4242-1.db"); ++i)  // cleared under the lock
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(std::filesystem::exists(parts + "/4242-1.db"));  // the killed recording's part is gone
  const auto second = test::run_shell("echo pid $$; exec " + test::shell_quote(stepscope_bin()) +
                                      " record --no-gpu -o " + test::shell_quote(db) + " -- " +
                                      test::shell_quote(sample("hot_loop")) + " --iterations 100 2>&1");
  INFO(second.output);
  CHECK(second.status == 0);  // the command ran
  const std::string second_pid = second.output.substr(4, second.output.find('\n') - 4);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string other = dir.file(std::string("same-") + host + "-" + second_pid + ".db");
  CHECK(second.output.find("stepscope: " + db + " is being recorded by pid " + std::to_string(first.pid) +
                           ": this recording writes " + other + "\n") != std::string::npos);
  CHECK(store::StoreReader(other).load().processes.size() == 1);
  CHECK(second.output.find("replaced the file") == std::string::npos);  // a new name: nothing replaced
  CHECK(first.wait() == 0);
  const store::Trace t = store::StoreReader(db).load();
  CHECK(t.samples.size() > 100);  // the first recording's, whole
  CHECK_FALSE(std::filesystem::exists(parts));
  // Once it has ended the output is free again.
  const auto third =
      test::run_shell(test::shell_quote(stepscope_bin()) + " record --no-gpu -o " + test::shell_quote(db) +
                      " -- " + test::shell_quote(sample("hot_loop")) + " --iterations 100 2>&1");
  CHECK(third.status == 0);
  CHECK(third.output.find("is being recorded") == std::string::npos);
  // The first recording's store is replaced, and the summary says so.
  CHECK(third.output.find(" -> " + db + " (finalized in ") != std::string::npos);
  CHECK(third.output.find(" s; replaced the file that was there)\n") != std::string::npos);
}

TEST_CASE("a symbolic link in the place of the parts folder is refused, and where it points is left alone") {
  // A planted OUT.parts -> a folder of someone's files: it was emptied and made 0700.
  test::ScratchDir dir("collector_parts_symlink");
  const std::string db = dir.file("x.db"), victim = dir.file("victim");
  std::filesystem::create_directory(victim);
  { std::ofstream(victim + "/important.txt") << "keep"; }
  std::filesystem::create_directory_symlink(victim, db + ".parts");
  const auto r = test::run_shell(test::shell_quote(stepscope_bin()) + " record --no-gpu -o " +
                                 test::shell_quote(db) + " -- /bin/true 2>&1");
  CHECK(r.status == 2);
  CHECK(r.output ==
        "stepscope: " + db + ": " + db +
            ".parts is in the way: a symbolic link or a file, not a folder of parts (remove it)\n");
  CHECK(std::filesystem::exists(victim + "/important.txt"));
  CHECK((std::filesystem::status(victim).permissions() & std::filesystem::perms::all) !=
        std::filesystem::perms::owner_all);
  CHECK_FALSE(std::filesystem::exists(db));
}

TEST_CASE("a store that cannot be written at the end is named, and the recording's parts are kept and said") {
  // The folder turns read-only during the run (as nobody: root writes anywhere). The message named the hidden
  // temporary file and said nothing of the parts left behind.
  test::ScratchDir dir("collector_unwritable_end");
  const std::string out_dir = dir.file("out"), db = out_dir + "/x.db", err = dir.file("err");
  std::filesystem::create_directory(out_dir);
  REQUIRE(::chown(out_dir.c_str(), 65534, 65534) == 0);
  ::chmod(dir.path().c_str(), 0755);
  test::Spawned rec = test::spawn_shell(
      "exec setpriv --reuid=65534 --regid=65534 --clear-groups " + test::shell_quote(stepscope_bin()) +
      " record --no-gpu -o " + test::shell_quote(db) + " -- " + test::shell_quote(sample("hot_loop")) +
      " --iterations 1500000000 >/dev/null 2>" + test::shell_quote(err));
  for (int i = 0; i < 100 && !std::filesystem::exists(db + ".parts/.lock"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  REQUIRE(::chmod(out_dir.c_str(), 0555) == 0);
  const int status = rec.wait();
  ::chmod(out_dir.c_str(), 0755);
  std::ifstream in(err);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  INFO(text);
  CHECK(status == 2);
  CHECK(text == "stepscope: " + db +
                    ": cannot create store: Permission denied; the recording's parts (a store per "
                    "process, not symbolized) stay in " +
                    db + ".parts\n");
  std::vector<std::string> parts;
  for (const auto& e : std::filesystem::directory_iterator(db + ".parts"))
    if (e.path().extension() == ".db") parts.push_back(e.path().string());
  REQUIRE(parts.size() == 1);
  CHECK(store::StoreReader(parts[0]).sample_count() > 100);  // the recording is there to analyze
}

TEST_CASE("a command killed before the collector's first commit: nothing recorded, and said") {
  test::ScratchDir dir("collector_kill_early");
  const std::string db = dir.file("early.db");
  auto r =
      test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "3000000", "--self-kill"}), dir);
  CHECK(r.exit_code == 128 + SIGKILL);
  INFO(r.err);
  // It printed "0 samples (0 threads, 0 processes)" and nothing else.
  CHECK(r.err.find("stepscope: warning: nothing was recorded: the command ended before the collector's first "
                   "commit (250 ms) without running its exit (killed by a signal?)\n") != std::string::npos);
}

TEST_CASE("SIGTERM sent to stepscope reaches the command, which flushes its last samples and dies of it") {
  test::ScratchDir dir("collector_term");
  const std::string db = dir.file("term.db");
  auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "3000000000"}), dir, [](pid_t pid) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    kill(pid, SIGTERM);
  });
  INFO(r.err);
  CHECK(r.exit_code == 128 + SIGTERM);
  store::Trace t = store::StoreReader(db).load();
  REQUIRE(t.samples.size() > 0);
  // The stand-in handler ran the final pass: every captured sample is stored (without it the samples of the
  // last commit period are lost and the process's last counter write is up to a second old).
  CHECK(t.meta["collector.end"] == "signal 15");
  CHECK(t.meta["collector.captured_samples"] == std::to_string(t.samples.size()));
}

// The last sample's distance from the command's end, as the launcher saw it (same clock).
int64_t gap_to_end_ns(store::Trace& t) {
  int64_t last = 0;
  for (const auto& s : t.samples) last = std::max(last, s.time);
  return std::atoll(t.meta["record.command_end_ns"].c_str()) - last;
}

TEST_CASE("record with a duration stops the command after S seconds and the store is complete") {
  test::ScratchDir dir("collector_duration");
  const std::string db = dir.file("duration.db");
  const auto t0 = std::chrono::steady_clock::now();
  // Far more work than 1 s: only --duration ends it.
  auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "50000000000"}, {"--duration", "1"}), dir);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.err);
  CHECK(r.exit_code == 0);  // stopped as asked; the program's own 130 is in the store
  CHECK(elapsed < 8);       // SIGINT at 1 s (SIGKILL would come at 6 s)
  CHECK(r.err.find("stepscope: --duration 1 s reached: SIGINT to " + sample("hot_loop") +
                   " (a Python program prints a KeyboardInterrupt traceback: expected)\n") != std::string::npos);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.meta["exit_code"] == "130");
  const double command_s = std::atof(t.meta["record.command_wall_s"].c_str());
  CHECK(command_s >= 1.0);
  CHECK(command_s < 3.0);
  REQUIRE(t.samples.size() > 0);
  CHECK(t.meta["collector.end"] == "signal 2");
  CHECK(t.meta["collector.captured_samples"] == std::to_string(t.samples.size()));
  // Sampled up to the end: the last sample precedes the end by the final pass (one drain period and a commit),
  // far less than the 250 ms commit period whose samples a default-action SIGINT used to lose.
  CHECK(gap_to_end_ns(t) < 200000000);
  std::set<std::string> symbols;
  for (const auto& [tid, li] : leaves(t)) symbols.insert(li.symbol);
  CHECK(symbols.count("(anonymous namespace)::hot_function(unsigned long, unsigned long)") +
            symbols.count("(anonymous namespace)::cold_function(unsigned long, unsigned long)") >= 1);
}

TEST_CASE("a program sees SIG_DFL for SIGINT/SIGTERM and its own handlers work (CPython)") {
  test::ScratchDir dir("collector_python_signals");
  // CPython installs its KeyboardInterrupt handler only over SIG_DFL; SIGTERM keeps the default action.
  const std::string script =
      "import os, signal, time\n"
      "print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
      " signal.getsignal(signal.SIGTERM) == signal.SIG_DFL, flush=True)\n"
      "try:\n"
      "    os.kill(os.getpid(), signal.SIGINT)\n"
      "    time.sleep(2)\n"
      "except KeyboardInterrupt:\n"
      "    print('KeyboardInterrupt', flush=True)\n"
      "t = time.time()\n"
      "while time.time() - t < 0.3:\n"
      "    pass\n"
      "os.kill(os.getpid(), signal.SIGTERM)\n"
      "time.sleep(5)\n"
      "print('not reached', flush=True)\n";
  const std::vector<std::string> cmd{"/usr/bin/python3", "-c", script};
  if (access(cmd[0].c_str(), X_OK) != 0) STEPSCOPE_SKIP("no /usr/bin/python3");
  auto plain = test::run_argv(cmd, dir);
  CHECK(plain.exit_code == 128 + SIGTERM);
  const std::string db = dir.file("py.db");
  auto r = test::run_argv(record_cmd(db, cmd), dir);
  INFO(r.err);
  CHECK(r.out == "True True\nKeyboardInterrupt\n");
  CHECK(r.out == plain.out);
  CHECK(r.exit_code == 128 + SIGTERM);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.meta["collector.end"] == "signal 15");
  CHECK(t.samples.size() > 50);
  CHECK(t.meta["collector.captured_samples"] == std::to_string(t.samples.size()));
}

TEST_CASE("wall-clock sampling samples blocked threads off-CPU, CPU-time sampling does not sample them") {
  test::ScratchDir dir("collector_wall");
  // Per thread: samples, off-CPU samples, and whether its stacks pass through a function of interest.
  struct PerThread {
    int samples = 0, off_cpu = 0;
    std::string role;
  };
  auto per_thread = [](const store::Trace& t) {
    std::map<int64_t, const store::Stack*> stacks;
    for (const auto& s : t.stacks) stacks[s.id] = &s;
    std::map<int64_t, const store::Frame*> frames;
    for (const auto& f : t.frames) frames[f.id] = &f;
    std::map<int64_t, PerThread> out;
    for (const auto& s : t.samples) {
      PerThread& p = out[s.tid];
      ++p.samples;
      if (!s.on_cpu) ++p.off_cpu;
      for (int64_t id = s.stack; id != 0 && stacks.count(id); id = stacks[id]->parent) {
        const std::string sym = t.str(frames[stacks[id]->frame]->symbol);
        for (const char* role : {"blocked_reader", "sleeping_waiter", "spin_function"})
          if (sym.find(role) != std::string::npos) p.role = role;
      }
    }
    std::map<std::string, PerThread> by_role;
    for (const auto& [tid, p] : out) {
      auto& q = by_role[p.role];
      q.samples += p.samples;
      q.off_cpu += p.off_cpu;
    }
    return by_role;
  };

  const std::string wall_db = dir.file("wall.db");
  auto r = test::run_argv(record_cmd(wall_db, {sample("blocking_threads"), "--iterations", "300000000"}, {"--wall"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("reader: k sleeper: 1") != std::string::npos);  // read() was never cut short
  store::Trace t = store::StoreReader(wall_db).load();
  CHECK(t.meta["collector.mode"] == "wall");
  CHECK(t.meta["collector.timer"] == "timer_create CLOCK_MONOTONIC (wall)");
  auto roles = per_thread(t);
  // Both waiting threads are sampled for the whole run (~1 kHz of wall time), and off-CPU.
  for (const char* role : {"blocked_reader", "sleeping_waiter"}) {
    INFO(role);
    CHECK(roles[role].samples >= 100);
    CHECK(roles[role].off_cpu >= roles[role].samples * 95 / 100);
  }
  // The computing thread is on-CPU (running, or waiting for a CPU on this shared machine).
  CHECK(roles["spin_function"].samples >= 100);
  CHECK(roles["spin_function"].off_cpu <= roles["spin_function"].samples * 5 / 100);

  const std::string cpu_db = dir.file("cpu.db");
  auto c = test::run_argv(record_cmd(cpu_db, {sample("blocking_threads"), "--iterations", "100000000"}), dir);
  REQUIRE(c.exit_code == 0);
  store::Trace tc = store::StoreReader(cpu_db).load();
  auto cpu_roles = per_thread(tc);
  CHECK(cpu_roles["spin_function"].samples > 20);
  CHECK(cpu_roles["blocked_reader"].samples == 0);
  CHECK(cpu_roles["spin_function"].off_cpu == 0);
}

TEST_CASE("symbolization results are reused from the per-build-id cache with identical frames") {
  test::ScratchDir dir("collector_symcache");
  const std::string cache = dir.file("symbols");
  setenv("STEPSCOPE_SYMBOL_CACHE", cache.c_str(), 1);
  std::vector<store::Trace> traces;
  for (int i = 0; i < 2; ++i) {
    const std::string db = dir.file("sym" + std::to_string(i) + ".db");
    auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "60000000", "--threads", "2"}), dir);
    REQUIRE(r.exit_code == 0);
    traces.push_back(store::StoreReader(db).load());
  }
  unsetenv("STEPSCOPE_SYMBOL_CACHE");
  // First run: modules opened with libdw, nothing from the cache; second: the addresses both runs sampled
  // (nearly all: the same program) are answered from the cache.
  CHECK(std::atoi(traces[0].meta["record.symbolized_modules"].c_str()) >= 1);
  CHECK(traces[0].meta["record.symbol_cache_hits"] == "0");
  const int addresses = std::atoi(traces[1].meta["record.symbolized_addresses"].c_str());
  CHECK(addresses > 0);
  CHECK(std::atoi(traces[1].meta["record.symbol_cache_hits"].c_str()) >= addresses * 3 / 4);
  size_t cache_files = 0;
  // One file per build-id (40 hex digits) with the lookup rules' suffix ".3".
  for (const auto& e : std::filesystem::directory_iterator(cache)) {
    const std::string name = e.path().filename().string();
    cache_files += name.size() == 42 && name.compare(40, 2, ".3") == 0;
  }
  CHECK(cache_files >= 2);  // hot_loop and libc at least
  auto frame_set = [](const store::Trace& t) {
    std::set<std::tuple<std::string, std::string, int, int64_t>> out;
    for (const auto& f : t.frames) out.insert({t.str(f.symbol), t.str(f.file), f.line, f.address});
    return out;
  };
  // Same program, same addresses mostly; every frame the second run shares with the first is identical.
  auto a = frame_set(traces[0]), b = frame_set(traces[1]);
  std::map<int64_t, std::tuple<std::string, std::string, int, int64_t>> first_by_addr;
  for (const auto& f : a) first_by_addr[std::get<3>(f)] = f;
  size_t shared = 0;
  for (const auto& f : b)
    if (auto it = first_by_addr.find(std::get<3>(f)); it != first_by_addr.end() && std::get<0>(it->second) == std::get<0>(f)) {
      ++shared;
      CHECK(it->second == f);
    }
  CHECK(shared >= 5);
  // No frame claims a file:line it does not have: _start (crt1.o, no debug info) has none.
  for (const auto& f : b)
    if (std::get<0>(f) == "_start") CHECK(std::get<1>(f).empty());
}

TEST_CASE("exit() from a non-main thread keeps the status and the data") {
  test::ScratchDir dir("collector_exit_thread");
  const std::string db = dir.file("exit.db");
  auto r = test::run_argv(record_cmd(db, {sample("hot_loop"), "--iterations", "100000000", "--threads", "2", "--exit-from-thread"}), dir);
  INFO(r.err);
  CHECK(r.exit_code == 3);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.samples.size() > 10);
}

TEST_CASE("a program that ends with _exit (dash, os._exit) keeps its last samples and its status") {
  // dash ends every script with _exit: no atexit, no destructors. The loop is ~0.3 s of CPU after the last
  // periodic commit could have caught much of it; before the _exit stand-in this store held 0 samples.
  test::ScratchDir dir("collector_underscore_exit");
  const std::string db = dir.file("exit.db");
  auto r = test::run_argv(record_cmd(db, {"/bin/sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; exit 5"},
                          {"--cpu-hz", "1000"}),
               dir);
  INFO(r.err);
  CHECK(r.exit_code == 5);
  store::Trace t = store::StoreReader(db).load();
  CHECK(t.samples.size() > 100);
  CHECK(t.meta["collector.end"] == "_exit");
}

TEST_CASE("the target's stdout is byte-identical with and without the collector") {
  test::ScratchDir dir("collector_stdout");
  std::vector<std::string> cmd{sample("hot_loop"), "--iterations", "60000000", "--threads", "2"};
  auto plain = test::run_argv(cmd, dir);
  REQUIRE(plain.exit_code == 0);
  auto rec = test::run_argv(record_cmd(dir.file("out.db"), cmd), dir);
  REQUIRE(rec.exit_code == 0);
  CHECK(rec.out == plain.out);
  CHECK(!rec.out.empty());
}

TEST_CASE("without a CUDA driver: one warning, CPU data, the command's exit status") {
  test::ScratchDir dir("collector_nogpu");
  const std::string db = dir.file("nogpu.db");
  // Without --no-gpu; through /bin/sh so exec keeps the injection.
  auto r = test::run_argv({stepscope_bin(), "record", "-o", db, "--", "/bin/sh", "-c",
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
  auto r = test::run_argv(record_cmd(db, {bin("collector/tests/nvtx_sample")}, {"--step-regex", "^train_step$"}), dir);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  check_invariant(store::StoreReader(db));
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

TEST_CASE(
    "merging keeps what each process said of its CUDA graphs and windows, and says once that CUPTI stayed "
    "attached") {
  // Two processes' parts with the meta the CUPTI recorder writes (which no GPU-less run can produce): until
  // 2026-11-30 the merge dropped gpu.graph_records, and the GUI then read a per-node recording as one
  // interval a replay.
  test::ScratchDir dir("collector_merge_graph_meta");
  const std::string parts = dir.file("parts");
  std::filesystem::create_directories(parts);
  for (int64_t pid : {900, 901}) {
    store::Trace t;
    t.processes.push_back({pid, t.intern("trainer"), 1});
    t.threads.push_back({pid, pid, t.intern("trainer")});
    t.samples.push_back({100, pid, pid, 0, true});
    t.meta["gpu.graph_records"] = "nodes";
    t.meta["gpu.window"] = "20/200";
    t.meta["gpu.window_budget"] = "off phase 2.50 s";
    t.meta["cupti.graph_callbacks"] = "5 resource + 36 API callback ids";
    t.meta["cupti.graph_stacks"] = "31";
    t.meta["cupti.records"] = pid == 900 ? "1000" : "24";
    t.meta["cupti.untraced_replay_records"] = pid == 900 ? "59515" : "0";
    // The pinned process first, another's detach count after it: the line still comes.
    t.meta["cupti.detach"] =
        pid == 900
            ? "kept attached from 114.385 s (CLOCK_MONOTONIC) after 0 detaches: a CUDA graph was instantiated"
            : "3 detaches, longest 2.7 ms; 3 re-attaches, longest 14.1 ms";
    store::write_store_atomically(t, parts + "/" + std::to_string(pid) + (pid == 900 ? "-1.db" : "-2.db"));
  }
  collector::RecordSummary summary;
  collector::merge_parts(parts, dir.file("merged.db"), {}, summary);
  const store::Trace m = store::StoreReader(dir.file("merged.db")).load();
  CHECK(m.meta.at("gpu.graph_records") == "nodes");
  CHECK(m.meta.at("gpu.window_budget") == "off phase 2.50 s");
  CHECK(m.meta.at("cupti.graph_callbacks") == "5 resource + 36 API callback ids");
  CHECK(m.meta.at("cupti.graph_stacks") == "62");
  CHECK(m.meta.at("cupti.records") == "1024");
  CHECK(m.meta.at("cupti.untraced_replay_records") == "59515");
  int said = 0;
  for (const auto& w : summary.warnings)
    said += w.rfind("CUPTI stayed attached after the program's first CUDA graph", 0) == 0;
  CHECK(said == 1);
}

TEST_CASE("merging parts gives each sync its API call's thread, a threads row to every tid, and marks the collector's") {
  test::ScratchDir dir("collector_merge_threads");
  const std::string parts = dir.file("parts");
  std::filesystem::create_directories(parts);
  {
    // One process's part as the collector leaves it when CUPTI delivered the sync in an earlier buffer than its
    // API call, and the API call's thread had ended before the collector could name it.
    store::Trace t;
    t.processes.push_back({900, t.intern("trainer"), 1});
    t.threads.push_back({900, 900, t.intern("trainer")});
    t.threads.push_back({900, 903, t.intern("cupti-worker")});
    t.samples.push_back({100, 900, 900, 0, true});
    t.samples.push_back({110, 900, 903, 0, true});
    t.api_calls.push_back({200, 900, 900, 901, store::ApiKind::Runtime, t.intern("cudaDeviceSynchronize"), 55, 0});
    t.syncs.push_back({210, 890, 900, 0, store::SyncType::Context, 0, -1, 55});
    t.meta["collector.own_tids"] = "902,903";
    store::write_store_atomically(t, parts + "/900-1.db");
  }
  collector::RecordSummary summary;
  collector::merge_parts(parts, dir.file("merged.db"), {}, summary);
  store::StoreReader reader(dir.file("merged.db"));
  check_invariant(reader);
  store::Trace m = reader.load();
  REQUIRE(m.syncs.size() == 1);
  CHECK(m.syncs[0].tid == 901);
  std::map<int64_t, bool> collector_of;
  for (const auto& th : m.threads) collector_of[th.tid] = th.collector;
  CHECK(collector_of.size() == 3);
  CHECK(collector_of.at(901) == false);  // added for the API call's thread
  CHECK(collector_of.at(903) == true);   // one of the collector's own threads
  CHECK(collector_of.at(900) == false);
}

TEST_CASE(
    "a part whose samples are damaged is left out with one line, the other parts merged and nothing left "
    "over") {
  // The merge reads a part's samples only as it streams them into the store: a damaged row there must cost
  // that part, not the recording (before the merge streamed, a part was read whole first and skipped the same
  // way).
  test::ScratchDir dir("collector_merge_damaged");
  const std::string parts = dir.file("parts");
  std::filesystem::create_directories(parts);
  for (int64_t pid : {900, 901, 902}) {
    store::Trace t;
    t.processes.push_back({pid, t.intern("trainer"), 1});
    t.threads.push_back({pid, pid, t.intern("trainer")});
    for (int i = 0; i < 3; ++i) t.samples.push_back({100 + i, pid, pid, 0, true});
    store::write_store_atomically(t, parts + "/" + std::to_string(pid) + "-" + std::to_string(pid) + ".db",
                                  /*packed=*/false);  // as the collector writes its parts
  }
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open((parts + "/901-901.db").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE samples SET time_ns = 'soon' WHERE rowid = 2", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  collector::RecordSummary summary;
  collector::merge_parts(parts, dir.file("merged.db"), {}, summary);
  const store::Trace m = store::StoreReader(dir.file("merged.db")).load();
  std::set<int64_t> pids;
  for (const auto& s : m.samples) pids.insert(s.pid);
  CHECK(pids == std::set<int64_t>{900, 902});
  CHECK(m.samples.size() == 6);
  CHECK(summary.unreadable_parts == 1);
  REQUIRE(summary.warnings.size() == 1);
  CHECK(summary.warnings[0] ==
        "part 901-901.db not merged: corrupt store: column time_ns holds text where a number belongs");
  std::vector<std::string> beside;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("")))
    if (e.path().filename() != "parts") beside.push_back(e.path().filename());
  CHECK(beside == std::vector<std::string>{"merged.db"});
}
