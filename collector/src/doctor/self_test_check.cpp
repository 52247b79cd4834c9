#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "stepscope/collector/launcher.h"
#include "stepscope/store/store.h"

namespace fs = std::filesystem;

namespace stepscope::collector::checkup {
namespace {

struct WorkloadReport {
  int64_t pid = 0;
  struct Thread {
    int64_t tid = 0;
    double cpu_s = 0;
    std::string name;
  };
  std::vector<Thread> threads;
  int64_t cuda_tid = 0, launches = 0, syncs = 0;
  std::string cuda = "not reported";  // "ok", "skipped: …", "failed: …"
};

bool read_report(const std::string& path, WorkloadReport& r) {
  std::ifstream f(path);
  if (!f) return false;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "pid") {
      in >> r.pid;
    } else if (key == "thread") {
      WorkloadReport::Thread t;
      in >> t.tid >> t.cpu_s >> t.name;
      r.threads.push_back(t);
    } else if (key == "cuda") {
      in >> r.cuda_tid >> r.launches >> r.syncs;
      std::getline(in >> std::ws, r.cuda);
    }
  }
  return r.pid > 0;
}

// A stepscope built with AddressSanitizer or ThreadSanitizer (scripts/test.sh --sanitize) cannot be the
// self-test's workload: the collector's stack copies read the sanitizer's redzones through its intercepted
// memcpy, and its runtime must come first in the library list. Real builds are never instrumented.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

// Returns false when nothing records at all.
bool self_test(Printer& p, const DoctorOptions& o, const std::string& dir, const GpuState& gpu) {
  if (kSanitizedBuild) {
    p.line(
        Verdict::Skip, "self-test",
        "not run: this stepscope is built with a sanitizer, and the collector cannot record an instrumented "
        "program",
        "use a build without STEPSCOPE_SANITIZE");
    return true;
  }
  const std::string report_path = (fs::path(dir) / "self-test-workload.txt").string();
  RecordOptions ro;
  ro.output = (fs::path(dir) / "self-test.db").string();
  ro.command = {self_exe(),           "doctor",   "--self-test-workload", strf("%g", o.duration_s),
                "--self-test-report", report_path};
  ro.no_gpu = !gpu.usable;  // also keeps record's own "no CUDA driver" warning out of the doctor's output
  ro.gpu_window = "all";
  ro.print_summary = false;
  RecordSummary s;
  store::Trace t;
  try {
    s = record(ro);
    stop_if_asked(s.launcher_signal);
    t = store::StoreReader(ro.output).load();
  } catch (const std::exception& e) {
    p.line(Verdict::Fail, "self-test", std::string("recording failed: ") + e.what(), "see the error",
           "CPU sampling (the self-test did not record)");
    return false;
  }
  WorkloadReport w;
  if (s.exit_code != 0 || !read_report(report_path, w)) {
    p.line(Verdict::Fail, "self-test",
           s.exit_code != 0 ? strf("the workload exited with status %d", s.exit_code)
                            : std::string("the workload left no report"),
           "run it by hand: stepscope doctor --self-test-workload 3",
           "CPU sampling (the self-test workload failed)");
    return false;
  }
  auto meta = [&](const char* k) {
    auto it = t.meta.find(k);
    return it == t.meta.end() ? std::string() : it->second;
  };
  const int cpu_hz = RecordOptions{}.cpu_hz;

  // CPU: samples on each thread that burned CPU, against what its CPU time should have given.
  std::map<int64_t, int64_t> samples_of;
  std::map<int64_t, std::vector<int64_t>> stacks_of;
  for (const auto& sm : t.samples)
    if (sm.pid == w.pid) {
      ++samples_of[sm.tid];
      stacks_of[sm.tid].push_back(sm.stack);
    }
  std::map<int64_t, std::string> stored_name;
  for (const auto& th : t.threads)
    if (th.pid == w.pid) stored_name[th.tid] = t.str(th.name);
  const auto burn = stacks_with(
      t, [&](const store::Frame& f) { return t.str(f.symbol).find("doctor_burn_cpu") != std::string::npos; });
  std::unordered_map<int64_t, int64_t> parent_of;
  for (const auto& st : t.stacks) parent_of[st.id] = st.parent;
  auto depth = [&](int64_t stack) {
    int64_t d = 0;
    for (int64_t c = stack; c > 0 && d < 10000; ++d) c = parent_of.count(c) ? parent_of[c] : 0;
    return d;
  };
  std::vector<std::string> per_thread, misnamed, unsampled, slow;
  int64_t burning = 0, named_burn = 0, leaf_only = 0;
  for (const auto& th : w.threads) {
    const int64_t n = samples_of.count(th.tid) ? samples_of[th.tid] : 0;
    const double expected = double(cpu_hz) * th.cpu_s;
    const double share = expected > 0 ? double(n) / expected : 0;
    per_thread.push_back(
        strf("%s %lld samples / %.2f CPU-s (%.0f%%)", th.name.c_str(), (long long)n, th.cpu_s, share * 100));
    if (n == 0) unsampled.push_back(th.name);
    if (n > 0 && share < 0.5) slow.push_back(th.name);
    if (th.name != "main" && stored_name[th.tid] != th.name)
      misnamed.push_back(th.name + " stored as '" + stored_name[th.tid] + "'");
    for (int64_t st : stacks_of[th.tid]) {
      ++burning;
      named_burn += has(burn, st);
      leaf_only += depth(st) <= 1;
    }
  }
  const std::string timer = meta("collector.timer").empty() ? "timer unknown" : meta("collector.timer");
  const int64_t dropped = std::atoll(meta("collector.dropped_samples").c_str());
  std::string detail = strf("%lld samples in %.1f s (%s, %d Hz asked): ", (long long)s.samples,
                            s.command_wall_s, timer.c_str(), cpu_hz) +
                       join(per_thread, ", ") + strf("; %lld dropped", (long long)dropped);
  if (burning > 0)
    detail += strf("; stacks: %.0f%% reach doctor_burn_cpu, %.0f%% leaf-only",
                   100.0 * double(named_burn) / double(burning), 100.0 * double(leaf_only) / double(burning));
  bool cpu_ok = true;
  if (!unsampled.empty()) {
    p.line(Verdict::Fail, "CPU sampling", detail + "; no samples on " + join(unsampled, ", "),
           "look at collector.threads_unsampled in `stepscope info` of a recording (--keep DIR keeps it)",
           "CPU sampling (threads without samples)");
    cpu_ok = false;
  } else if (!slow.empty()) {
    p.line(
        Verdict::Warn, "CPU sampling", detail + "; below half the asked rate on " + join(slow, ", "),
        timer.find("perf_event") == std::string::npos
            ? "perf events are refused (see perf_event_paranoid above): the fallback timer fires on the tick"
            : "a loaded machine delays the sampling signal; rerun when it is idle");
  } else if (dropped > 0 || burning == 0 || leaf_only * 2 > burning || !misnamed.empty()) {
    p.line(Verdict::Warn, "CPU sampling",
           detail + (misnamed.empty() ? "" : "; thread names: " + join(misnamed, ", ")),
           dropped > 0 ? "samples were dropped (full rings): a loaded machine or a slow disk"
                       : "stacks are not unwound (libunwind above) or threads not named");
  } else {
    p.line(Verdict::Ok, "CPU sampling", detail);
  }

  // GPU: kernels arrive, every API and sync row has its thread, launches and syncs on the thread that made
  // them.
  if (!gpu.usable) {
    p.line(Verdict::Skip, "GPU", "skipped \u2014 " + gpu.why_not);
    return cpu_ok || s.samples > 0;
  }
  if (w.cuda != "ok") {
    p.line(Verdict::Fail, "CUDA activity", "the self-test's CUDA thread " + w.cuda,
           "run it by hand: stepscope doctor --self-test-workload 3",
           "CUDA activity (the self-test's kernel loop failed)");
    return true;
  }
  const std::string cupti_status = meta("cupti.status");
  std::set<std::pair<int64_t, int64_t>> known;
  for (const auto& th : t.threads) known.insert({th.pid, th.tid});
  int64_t kernels = 0, api_rows = 0, orphan_rows = 0, launch_rows = 0, misplaced = 0, sync_rows = 0;
  for (const auto& k : t.kernels)
    if (k.pid == w.pid && t.str(k.name).find(kKernelName) != std::string::npos) ++kernels;
  for (const auto& a : t.api_calls) {
    if (a.pid != w.pid) continue;
    ++api_rows;
    if (!a.tid || !known.count({a.pid, a.tid})) ++orphan_rows;
    const std::string& name = t.str(a.name);
    if (name.find("LaunchKernel") != std::string::npos || name.find("Synchronize") != std::string::npos) {
      ++launch_rows;
      if (a.tid != w.cuda_tid) ++misplaced;
    }
  }
  for (const auto& sy : t.syncs) {
    if (sy.pid != w.pid) continue;
    ++sync_rows;
    if (!sy.tid || !known.count({sy.pid, sy.tid})) ++orphan_rows;
    if (sy.tid != w.cuda_tid) ++misplaced;
  }
  const std::string gpu_detail =
      strf(
          "%lld launches, %lld kernels recorded; %lld API rows (%lld without a thread row), %lld syncs; %lld "
          "launch/sync rows, %lld not on %s",
          (long long)w.launches, (long long)kernels, (long long)api_rows, (long long)orphan_rows,
          (long long)sync_rows, (long long)launch_rows, (long long)misplaced, kCudaThreadName) +
      (cupti_status.empty() ? "" : "; CUPTI: " + cupti_status) +
      (meta("cupti.thread_ids").empty() ? "" : "; thread ids: " + meta("cupti.thread_ids"));
  if (kernels == 0 || launch_rows == 0 || orphan_rows > 0 || misplaced > 0) {
    p.line(Verdict::Fail, "CUDA activity", gpu_detail,
           kernels == 0 || launch_rows == 0
               ? "CUPTI recorded nothing: see the CUPTI lines above and cupti.status"
               : "rows on the wrong thread: please report it with the kept recording "
                 "(--keep DIR)",
           "CUDA activity (self-test)");
  } else if (kernels * 10 < w.launches * 9) {
    p.line(Verdict::Warn, "CUDA activity",
           gpu_detail + "; " + meta("cupti.dropped_records") + " GPU records dropped",
           "fewer kernels than launches: CUPTI dropped records (a loaded machine)");
  } else {
    p.line(Verdict::Ok, "CUDA activity", gpu_detail);
  }
  const std::string cost = meta("cupti.launch_cost_ns");
  if (!cost.empty())
    p.line(Verdict::Ok, "launch cost",
           strf("per-launch cost measured by the collector: %.2f \u00b5s", std::atof(cost.c_str()) / 1000.0) +
               (meta("cupti.calibration").empty() ? "" : " (" + meta("cupti.calibration") + ")"));
  else
    p.line(Verdict::Warn, "launch cost",
           "not measured: " + (meta("cupti.calibration").empty()
                                   ? std::string("the collector had not calibrated when the run ended")
                                   : meta("cupti.calibration")),
           "a longer --duration gives the calibration time to run");
  return true;
}

}  // namespace

const DoctorCheck kSelfTestCheck = {"self-test", [](Printer& p, DoctorContext& ctx) {
                                      ctx.records = self_test(p, ctx.options, ctx.dir, ctx.gpu);
                                    }};

}  // namespace stepscope::collector::checkup
