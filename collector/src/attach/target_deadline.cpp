// A wait on a target that does not count its waits for a CPU; see target_deadline.h.
#include "target_deadline.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "attach_support.h"
#include "process_status.h"

namespace stepscope::collector::attach {
namespace {

constexpr int64_t kLookPeriodNs = 50000000;

template <typename F>
void for_each_thread(pid_t pid, pid_t tid, F&& f) {
  if (tid) return f(tid);
  for (pid_t t : task_ids(pid)) f(t);
}

}  // namespace

bool read_thread_times(pid_t pid, pid_t tid, ThreadTimes& out) {
  const std::string task = proc(pid, "task/" + std::to_string(tid));
  FILE* f = std::fopen((task + "/schedstat").c_str(), "re");
  if (!f) return false;
  unsigned long long on_cpu = 0, waiting = 0;
  const int n = std::fscanf(f, "%llu %llu", &on_cpu, &waiting);
  std::fclose(f);
  if (n != 2) return false;
  out.on_cpu_ns = int64_t(on_cpu);
  out.run_queue_ns = int64_t(waiting);
  ProcessStat st;  // a thread's own stat: /proc/TID/stat
  out.runnable = read_stat(tid, st) && st.state == 'R';
  return true;
}

TargetDeadline::TargetDeadline(pid_t pid, pid_t tid, int64_t budget_ns, int64_t cap_ns)
    : pid_(pid),
      tid_(tid),
      budget_ns_(budget_ns),
      cap_ns_(std::max(cap_ns, budget_ns)),
      t0_(mono_ns()),
      last_look_(t0_) {
  for_each_thread(pid_, tid_, [&](pid_t t) {
    ThreadTimes times;
    if (read_thread_times(pid_, t, times)) last_[t] = times;
  });
}

void TargetDeadline::look(int64_t now) {
  const int64_t dt = now - last_look_;
  last_look_ = now;
  int64_t most = 0;
  for_each_thread(pid_, tid_, [&](pid_t t) {
    ThreadTimes times;
    if (!read_thread_times(pid_, t, times)) return;
    auto [it, first] = last_.try_emplace(t, times);
    if (first) return;  // born since the last look: from here on
    const ThreadTimes& was = it->second;
    // A wait the kernel has finished counting, or one still going on: runnable, and ran less than the
    // interval.
    int64_t waited = times.run_queue_ns - was.run_queue_ns;
    if (times.runnable) waited = std::max(waited, dt - (times.on_cpu_ns - was.on_cpu_ns));
    most = std::max(most, std::clamp<int64_t>(waited, 0, dt));
    it->second = times;
  });
  starved_ns_ += most;
}

bool TargetDeadline::expired() {
  const int64_t now = mono_ns();
  const int64_t wall = now - t0_;
  if (wall > cap_ns_) return true;
  if (now - last_look_ >= kLookPeriodNs) look(now);
  return wall - starved_ns_ > budget_ns_;
}

std::string TargetDeadline::starved_words() const {
  if (starved_ns_ < 100000000) return {};
  char buf[64];
  std::snprintf(buf, sizeof buf, " (plus %.1f s waiting for a CPU)", double(starved_ns_) / 1e9);
  return buf;
}

}  // namespace stepscope::collector::attach
