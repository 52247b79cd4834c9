// Recording windows opened and closed over the control channel: `stepscope attach` (options sent with the
// request) and `record --paused` (the launcher's environment). A closed window leaves the collector dormant.
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "control/control_server.h"
#include "core/collector_state.h"
#include "output/drain_thread.h"
#include "output/drainer.h"
#include "sampling/thread_registry.h"
#include "sampling/timers.h"

namespace stepscope::collector {
namespace {

std::mutex g_window_mu;  // one window opens or closes at a time
constexpr int kHandlerWaitSpins = 1000000;  // sched_yield rounds; a handler takes microseconds

// Ends the open window: no timer, no signal, no CUPTI activity; every captured sample committed and the part
// closed; the rings freed. The signal handler stays installed (returning at once) so a still-queued signal
// cannot kill the process. Returns the samples the window captured.
int64_t end_window() {
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    for (ThreadState* ts : g->live) disarm_timer(ts);
  }
  cupti::stop();  // while still running: its buffer callback only keeps records when running()
  g->state.store(kStopping, std::memory_order_release);
  // A handler that saw kRunning may still be writing into a ring: the final pass must drain after it.
  for (int i = 0; i < kHandlerWaitSpins && g->in_handler.load(std::memory_order_acquire) != 0; ++i) sched_yield();
  {
    std::unique_lock<std::mutex> lk(g->wake_mu);
    g->closing_window = true;
    g->stop_requested = true;
    g->wake_cv.notify_all();
  }
  pthread_join(g->thread, nullptr);  // its final pass drains, writes meta and commits
  g->closing_window = false;
  const int64_t samples = static_cast<int64_t>(g->counters.samples.load());
  {
    std::lock_guard<std::mutex> io(g->io_mu);
    try {
      if (g_drainer) g_drainer->close();  // a complete part, indexes and all: the process may live on for days
    } catch (const std::exception& e) {
      std::fprintf(stderr, "stepscope: closing the part of pid %d: %s\n", int(getpid()), e.what());
    }
    delete g_drainer;
    g_drainer = nullptr;
  }
  reset_recorded_state(false);
#if STEPSCOPE_HAVE_PYTHON
  python_hooks::disarm();  // nothing of ours runs in the program's Python between windows
#endif
  g->timer_kind = TimerKind::None;
  g->collector_tid.store(0);
  g->state.store(kOff, std::memory_order_release);
  return samples;
}

// A window whose collector thread stopped after an error (its part could not be written: the parts folder
// gone, the disk full) is closed as any window, so the process is dormant again and a later attach can open
// one: it stayed failed for good, every later attach refused.
void reclaim_failed_window() {
  if (g && g->windowed && g->state.load() == kStopping && g->final_done.load()) end_window();
}

}  // namespace

bool open_window(const std::map<std::string, std::string>& options, std::string& error) {
  std::lock_guard<std::mutex> lk(g_window_mu);
  if (running()) {
    error = "already recording";
    return false;
  }
  reclaim_failed_window();
  if (g && g->state.load() != kOff) {
    error = "the collector stopped in this process (after an error, or at exit)";
    return false;
  }
  Config c;
  // Attach sends the STEPSCOPE_* settings the launcher would put in the environment; record --paused has them
  // in its environment already.
  const bool ok = options.empty() ? load_config(c, [](const char* name) { return static_cast<const char*>(std::getenv(name)); })
                                  : load_config(c, [&](const char* name) -> const char* {
                                      auto it = options.find(name);
                                      return it == options.end() ? nullptr : it->second.c_str();
                                    });
  if (!ok) {
    error = "invalid --data-wait-regex/--step-regex";
    return false;
  }
  if (c.parts_dir.empty()) {
    // `start` of a process that `record --paused` did not start (one attached before, now dormant): nowhere
    // for its rows to go. It said "no parts directory".
    error =
        "this process was not started by `stepscope record --paused`: to record it, `stepscope attach PID`";
    return false;
  }
  start_with(&c, true);
  if (!running()) {
    error = "the collector could not start (see the process's stderr)";
    return false;
  }
  return true;
}

bool close_window(std::string& result, std::string& error) {
  std::lock_guard<std::mutex> lk(g_window_mu);
  result.clear();
  if (!running()) {
    reclaim_failed_window();
    return true;
  }
  if (!g->windowed) {
    error =
        "recorded by `stepscope record` from its start: that recording ends with the program (or Ctrl-C to "
        "record); only windows opened by attach or record --paused close";
    return false;
  }
  result = "samples=" + std::to_string(end_window());
  return true;
}

bool window_open() { return running(); }

}  // namespace stepscope::collector
