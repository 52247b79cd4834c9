// finalize_trace, which every importer ends with: GPU work and syncs take the process (and thread) of the API
// call with their correlation id — the first such call when an id repeats — and every process, thread and
// device a row names gets its own row. CorrelationIndex, its lookup, against a node-based map's answers.
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "import/trace_finalize.h"

using namespace stepscope;
using namespace stepscope::analyzer::import;
using stepscope::analyzer::CorrelationIndex;

TEST_CASE("CorrelationIndex: the first row with an id, as a map's emplace keeps it") {
  std::mt19937_64 rng(53);
  std::vector<store::ApiCall> calls(200000);
  std::unordered_map<int64_t, uint32_t> expect;
  for (uint32_t i = 0; i < calls.size(); ++i) {
    // Ids repeat (a range of 150,000 for 200,000 calls), some are 0 (links nothing), some are far apart or
    // negative: probing wraps and collides.
    int64_t c = int64_t(rng() % 150000);
    if (i % 97 == 0) c = 0;
    if (i % 89 == 0) c = -c;
    if (i % 83 == 0) c = c * (int64_t{1} << 33);
    calls[i].correlation = c;
    if (c) expect.emplace(c, i);
  }
  const CorrelationIndex index(calls);
  size_t found = 0;
  for (int64_t c = -200000; c <= 200000; ++c) {
    auto it = expect.find(c);
    const int64_t want = c == 0 || it == expect.end() ? -1 : int64_t(it->second);
    REQUIRE(index.find(c) == want);
    found += want >= 0;
  }
  for (const auto& [c, row] : expect) REQUIRE(index.find(c) == int64_t(row));
  CHECK(found > 100000);
  CHECK(index.find(0) == -1);
  CHECK(index.longest_cluster() < 200);

  const std::vector<store::ApiCall> zeros(3), none;  // every id 0; no calls
  const CorrelationIndex empty(zeros), nothing(none);
  CHECK(empty.find(0) == -1);
  CHECK(empty.find(1) == -1);
  CHECK(nothing.find(7) == -1);
  CHECK(nothing.longest_cluster() == 0);
}

TEST_CASE("CorrelationIndex: a record's launch is its own process's first call under the id") {
  // Merged processes count their ids from 1 each: ids 1..3 in processes 10, 20 and 30, rows interleaved, and
  // id 4 with one call whose process is unknown (0). Checked against a scan of the rows in order.
  std::vector<store::ApiCall> calls;
  auto add = [&](int64_t pid, int64_t corr) {
    store::ApiCall a;
    a.pid = pid;
    a.correlation = corr;
    calls.push_back(a);
  };
  for (int64_t corr : {1, 2, 3})
    for (int64_t pid : {20, 10, 30}) add(pid, corr);
  add(10, 2);  // a second call of process 10 under id 2: the first stays its launch
  add(0, 4);
  add(20, 5);
  add(0, 6);  // id 6: a call of no known process, then process 30's own: its own is its launch
  add(30, 6);
  const CorrelationIndex index(calls);
  auto scan = [&](int64_t corr, int64_t pid) -> int64_t {
    int64_t unknown = -1;
    for (size_t r = 0; r < calls.size(); ++r) {
      if (calls[r].correlation != corr) continue;
      if (!pid || calls[r].pid == pid) return int64_t(r);
      if (!calls[r].pid && unknown < 0) unknown = int64_t(r);
    }
    return unknown;
  };
  for (int64_t corr = 0; corr <= 6; ++corr)
    for (int64_t pid : {0, 10, 20, 30, 40}) {
      INFO("id " << corr << ", process " << pid);
      CHECK(index.find(corr, pid) == scan(corr, pid));
    }
  CHECK(index.find(2, 30) == 5);   // the third row of id 2: passed over 20's and 10's
  CHECK(index.find(2, 10) == 4);   // not row 9, its later call
  CHECK(index.find(1, 40) == -1);  // a process with no call under the id has none: not process 20's
  CHECK(index.find(4, 40) == 10);  // a call of no known process may be anyone's
  CHECK(index.find(5, 10) == -1);
  CHECK(index.find(1) == 0);  // without a process: the first row
  CHECK(index.find(6, 30) == 13);  // not row 12, whose process is unknown
  CHECK(index.find(6, 10) == 12);  // for process 10 the unknown one is the only candidate
  // Only the rows a filter keeps: id 2 without process 20's and 10's rows is process 30's alone.
  const CorrelationIndex only_30(calls, [&](uint32_t row) { return calls[row].pid == 30; });
  CHECK(only_30.find(2) == 5);
  CHECK(only_30.find(2, 20) == -1);
  CHECK(only_30.find(4) == -1);

  // Ids that never repeat keep no chain and still answer by process.
  std::vector<store::ApiCall> once(3);
  for (size_t i = 0; i < once.size(); ++i) once[i].correlation = int64_t(i + 1), once[i].pid = 7;
  const CorrelationIndex single(once);
  CHECK(single.find(2, 7) == 1);
  CHECK(single.find(2, 8) == -1);
  CHECK(single.find(2, 0) == 1);
}

TEST_CASE("CorrelationIndex: every id's rows by process, against a scan, with ids repeated many times") {
  std::mt19937_64 rng(49);
  for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(50000)}) {
    std::vector<store::ApiCall> calls(n);
    for (auto& c : calls) {
      c.correlation = int64_t(rng() % (n / 8 + 2));  // ids repeat ~8 times, some 0
      c.pid = int64_t(rng() % 4);                    // processes 1-3 and unknown (0)
    }
    const CorrelationIndex index(calls);
    std::map<std::pair<int64_t, int64_t>, int64_t> exact, unknown, first;
    for (size_t r = 0; r < n; ++r) {
      const auto& c = calls[r];
      if (!c.correlation) continue;
      first.emplace(std::pair<int64_t, int64_t>{c.correlation, 0}, int64_t(r));
      exact.emplace(std::pair<int64_t, int64_t>{c.correlation, c.pid}, int64_t(r));
      if (!c.pid) unknown.emplace(std::pair<int64_t, int64_t>{c.correlation, 0}, int64_t(r));
    }
    for (int64_t corr = 0; corr <= int64_t(n / 8 + 3); ++corr)
      for (int64_t pid = 0; pid <= 4; ++pid) {
        int64_t want = -1;
        if (corr && !pid) {
          auto it = first.find({corr, 0});
          want = it == first.end() ? -1 : it->second;
        } else if (corr) {
          auto it = exact.find({corr, pid});
          auto u = unknown.find({corr, 0});
          want = it != exact.end() ? it->second : u != unknown.end() ? u->second : -1;
        }
        INFO(n << " calls, id " << corr << ", process " << pid);
        REQUIRE(index.find(corr, pid) == want);
      }
  }
}

TEST_CASE("CorrelationIndex: ids a file chose, multiples of a high power of two, still spread") {
  // A slot taken from the low bits of a multiply alone put ids k << 44 into a few clusters: each insert and
  // each missed lookup walked one of ~100,000 slots (seconds for a file of 400,000 calls).
  for (int shift : {0, 32, 40, 44, 47}) {  // 60,000 << 47 is still under 2^63
    std::vector<store::ApiCall> calls(100000);
    for (size_t i = 0; i < calls.size(); ++i)
      calls[i].correlation = int64_t(uint64_t((i % 60000) + 1) << shift);
    const CorrelationIndex index(calls);
    INFO("ids k << " << shift);
    CHECK(index.longest_cluster() < 200);
    for (size_t i = 0; i < 60000; ++i) REQUIRE(index.find(calls[i].correlation) == int64_t(i));
    CHECK(index.find(int64_t(60001) << shift) == -1);
  }
}

TEST_CASE(
    "finalize_trace: owners through the first call of a correlation, every process, thread and device") {
  store::Trace t;
  auto call = [&](int64_t start, int64_t pid, int64_t tid, int64_t corr) {
    store::ApiCall a;
    a.start = start;
    a.end = start + 5;
    a.pid = pid;
    a.tid = tid;
    a.correlation = corr;
    a.name = t.intern("cudaLaunchKernel");
    t.api_calls.push_back(a);
  };
  // Rows in runs of one thread, then another, then the first again (the per-row set inserts skip runs); the
  // first row's process and thread are 0 (a run skipped must not be the first).
  call(90, 0, 0, 0);
  call(100, 10, 11, 1);
  call(110, 10, 11, 2);
  call(120, 20, 21, 3);
  call(130, 20, 22, 2);  // id 2 again, later: the first call (pid 10) owns its kernel
  call(140, 10, 11, 4);
  auto kernel = [&](int64_t start, int64_t device, int64_t corr) {
    store::Kernel k;
    k.start = start;
    k.end = start + 3;
    k.device = device;
    k.correlation = corr;
    t.kernels.push_back(k);
  };
  kernel(300, 0, 1);
  kernel(305, 0, 2);
  kernel(310, 3, 3);
  kernel(315, 0, 99);  // no call has it: no single process to give it either (two pids)
  kernel(320, 3, 4);
  store::Sync s;
  s.start = 400;
  s.end = 410;
  s.correlation = 3;
  t.syncs.push_back(s);
  store::Range r;
  r.start = 50;
  r.end = 60;
  r.pid = 30;
  r.tid = 31;
  t.ranges.push_back(r);

  NameHints names;
  names.process_names[20] = "worker";
  names.thread_names[{20, 22}] = "loader";
  finalize_trace(t, names);

  std::vector<int64_t> owners;
  for (const auto& k : t.kernels) owners.push_back(k.pid);
  CHECK(owners == std::vector<int64_t>{10, 10, 20, 0, 10});
  CHECK(t.syncs[0].pid == 20);
  CHECK(t.syncs[0].tid == 21);

  std::set<int64_t> pids;
  for (const auto& p : t.processes) pids.insert(p.pid);
  CHECK(pids == std::set<int64_t>{0, 10, 20, 30});
  std::set<std::pair<int64_t, int64_t>> tids;
  for (const auto& th : t.threads) {
    tids.insert({th.pid, th.tid});
    if (th.tid == 22) CHECK(t.str(th.name) == "loader");
  }
  CHECK(tids == std::set<std::pair<int64_t, int64_t>>{{0, 0}, {10, 11}, {20, 21}, {20, 22}, {30, 31}});
  for (const auto& p : t.processes)
    if (p.pid == 20) CHECK(t.str(p.name) == "worker");
  std::vector<int64_t> devices;
  for (const auto& d : t.devices) devices.push_back(d.id);
  CHECK(devices == std::vector<int64_t>{0, 3});
}

TEST_CASE(
    "finalize_trace: a process's kernel is not a replay of another process's graph launch under its id") {
  // Two merged processes count their ids from 1 each: id 7 is a cudaGraphLaunch in process 10 (two nodes) and
  // an eager cudaLaunchKernel in process 20, whose call comes later. Process 20's kernel was taken for a
  // third node of process 10's replay when the join took the id's first call whatever its process.
  store::Trace t;
  auto call = [&](int64_t start, int64_t pid, const char* name) {
    store::ApiCall a;
    a.start = start;
    a.end = start + 5;
    a.pid = pid;
    a.tid = pid + 1;
    a.correlation = 7;
    a.name = t.intern(name);
    t.api_calls.push_back(a);
  };
  call(100, 10, "cudaGraphLaunch");
  call(110, 20, "cudaLaunchKernel");
  auto kernel = [&](int64_t start, int64_t pid, const char* name) {
    store::Kernel k;
    k.start = start;
    k.end = start + 3;
    k.pid = pid;
    k.correlation = 7;
    k.name = t.intern(name);
    t.kernels.push_back(k);
  };
  kernel(200, 10, "gemm_node");
  kernel(205, 10, "relu_node");
  kernel(210, 20, "eager_kernel");
  finalize_trace(t, NameHints{});

  std::map<std::string, int64_t> graph_of;
  for (const auto& k : t.kernels) graph_of[t.str(k.name)] = k.graph_id;
  CHECK(graph_of["gemm_node"] == 1);
  CHECK(graph_of["relu_node"] == 1);
  CHECK(graph_of["eager_kernel"] == 0);
  CHECK(t.meta.at("gpu.graph_records") == "nodes");
}

TEST_CASE("finalize_trace: a sync that names its process waits on its own process's call of the id") {
  // nsys gives each sync record its process (globalPid); process 10's id 3 comes first, process 20 waited.
  store::Trace t;
  for (int64_t pid : {10, 20}) {
    store::ApiCall a;
    a.start = 100 * pid;
    a.end = a.start + 50;
    a.pid = pid;
    a.tid = pid + 1;
    a.correlation = 3;
    a.name = t.intern("cudaStreamSynchronize");
    t.api_calls.push_back(a);
  }
  store::Sync s;
  s.start = 2000;
  s.end = 2040;
  s.correlation = 3;
  s.pid = 20;
  t.syncs.push_back(s);
  store::Sync unnamed = s;  // a CUPTI record without its process: the first call of the id
  unnamed.pid = 0;
  t.syncs.push_back(unnamed);
  store::Sync on_gpu1 = s;  // Kineto: the GPU's track (device 1) as pid, no process: the first call of the id
  on_gpu1.pid = 1;
  on_gpu1.tid = 7;
  t.syncs.push_back(on_gpu1);
  finalize_trace(t, NameHints{});
  CHECK(t.syncs[0].pid == 20);
  CHECK(t.syncs[0].tid == 21);  // was process 10's thread 11
  CHECK(t.syncs[1].pid == 10);
  CHECK(t.syncs[1].tid == 11);
  CHECK(t.syncs[2].pid == 10);  // it kept pid 1, tid 7 when joined by its "process"
  CHECK(t.syncs[2].tid == 11);
}
