// Starting and stopping the collector in a process: configuration from the environment, the sampling signal,
// the rings' size, the collector thread, fork handling (the child records into a part of its own), the LD_PRELOAD
// constructor and destructor.
#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "control/control_server.h"
#include "core/collector_state.h"
#include "core/termination.h"
#include "flight/flight_recorder.h"
#include "output/drain_thread.h"
#include "output/drainer.h"
#include "sampling/signal_handler.h"
#include "sampling/thread_registry.h"
#include "sampling/timers.h"
#include "unwind/safe_copy.h"

namespace stepscope::collector {
namespace {

int pick_signal() {
  for (int s = SIGRTMAX - 3; s > SIGRTMIN + 4; --s) {
    struct sigaction cur{};
    if (sigaction(s, nullptr, &cur) == 0 && cur.sa_handler == SIG_DFL) return s;
  }
  return 0;
}

// Bytes of each thread's ring: two drain periods of full-window samples at the sampling rate, a power of two.
size_t ring_bytes_for(size_t window, int hz, int period_ms) {
  const size_t record = sizeof(SampleHeader) + window + sizeof(python::RawPyFrame) * kMaxPy + 8;
  const size_t per_period = std::max<size_t>(1, size_t(hz) * size_t(period_ms) / 1000);
  const size_t want = std::clamp(2 * record * per_period, std::max(kMinRingBytes, 4 * record), kMaxRingBytes);
  size_t bytes = 1;
  while (bytes < want) bytes <<= 1;
  return bytes;
}

void atfork_prepare();
void atfork_parent();
void atfork_child();

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace

bool load_config(Config& c, const std::function<const char*(const char*)>& get) {
  auto flag = [&](const char* name) {
    const char* v = get(name);
    return v && *v && std::strcmp(v, "0") != 0;
  };
  const char* dir = get("STEPSCOPE_PARTS_DIR");
  c.parts_dir = dir ? dir : "";
  if (const char* hz = get("STEPSCOPE_CPU_HZ")) c.cpu_hz = std::clamp(std::atoi(hz), 1, 20000);
  if (const char* v = get("STEPSCOPE_STACK_BYTES"))
    c.stack_bytes = std::clamp<size_t>(std::strtoull(v, nullptr, 10), kMinStackWindow, kMaxStackWindow) & ~size_t{7};
  c.wall = flag("STEPSCOPE_WALL");
  c.no_gpu = flag("STEPSCOPE_NO_GPU");
  if (const char* v = get("STEPSCOPE_CUDA_API")) c.cuda_api_all = std::strcmp(v, "all") == 0;
  if (const char* v = get("STEPSCOPE_CUDA_GRAPHS")) c.cuda_graph_nodes = std::strcmp(v, "graph") != 0;
  if (const char* v = get("STEPSCOPE_GPU_WINDOW")) {
    int n = 0, m = 0;
    if (std::strcmp(v, "all") == 0 || std::sscanf(v, "%d/%d", &n, &m) != 2 || n <= 0 || m <= n)
      n = m = 0;  // the whole run
    c.gpu_window_n = n;
    c.gpu_window_m = m;
  }
  if (const char* v = get("STEPSCOPE_CUDA_STACKS_PER_S")) c.cuda_stacks_per_s = std::max(0, std::atoi(v));
  if (const char* v = get("STEPSCOPE_CALIBRATE")) c.calibrate = std::strcmp(v, "0") != 0;
  if (const char* v = get("STEPSCOPE_DATA_WAIT_FUNC")) c.python_wait_func = v;
  if (const char* v = get("STEPSCOPE_STEP_FUNC")) c.python_step_func = v;
  if (const char* v = get("STEPSCOPE_FLIGHT_DIR")) c.flight_dir = v;
  if (const char* v = get("STEPSCOPE_FLIGHT_PREFIX")) c.flight_prefix = v;
  if (const char* v = get("STEPSCOPE_FLIGHT_WINDOW_MS"))
    c.flight_window_ns = std::max<int64_t>(1, std::atoll(v)) * 1000000;
  if (const char* v = get("STEPSCOPE_FLIGHT_SLOW_STEP")) c.flight_slow_step = std::max(0.0, std::atof(v));
  if (const char* v = get("STEPSCOPE_FLIGHT_MIN_EXCESS_MS"))
    c.flight_min_excess_ns = std::max(0LL, std::atoll(v)) * 1000000;
  if (const char* v = get("STEPSCOPE_FLIGHT_WARMUP")) c.flight_warmup_steps = std::max(0, std::atoi(v));
  if (const char* v = get("STEPSCOPE_FLIGHT_DATA_WAIT_MS")) c.flight_data_wait_ns = std::max(0LL, std::atoll(v)) * 1000000;
  if (const char* v = get("STEPSCOPE_FLIGHT_MAX_PER_HOUR")) c.flight_max_per_hour = std::atoi(v);
  if (const char* v = get("STEPSCOPE_FLIGHT_GPU_STEPS")) c.flight_gpu_steps = std::max(0, std::atoi(v));
  if (const char* v = get("STEPSCOPE_FLIGHT_ROOT_PID")) c.flight_root_pid = std::atoi(v);
  if (const char* v = get("STEPSCOPE_FLIGHT_PARENT_PID")) c.flight_parent_pid = std::atoi(v);
  try {
    if (const char* r = get("STEPSCOPE_DATA_WAIT_REGEX"); r && *r)
      c.data_wait_regex = std::regex(r, std::regex::icase | std::regex::optimize);
    if (const char* r = get("STEPSCOPE_STEP_REGEX"); r && *r) {
      c.step_regex = std::regex(r, std::regex::icase | std::regex::optimize);
      c.has_step_regex = true;
    }
  } catch (const std::regex_error&) {
    return false;
  }
  return true;
}

// Starts recording in this process. Works at process start (LD_PRELOAD constructor) and later (dlopen into a
// running process): existing threads are found through /proc/self/task.
void start() { start_with(nullptr, false); }

void start_with(const Config* config, bool windowed) {
  if (g && g->state.load() != kOff) return;
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  if (!g) {
    g = new Globals();
    for (auto& s : g->table) s.store(nullptr, std::memory_order_relaxed);
    g->live.reserve(kMaxLiveThreads);
  }
  if (config) {
    g->config = *config;
  } else if (!load_config(g->config, [](const char* name) { return static_cast<const char*>(std::getenv(name)); })) {
    std::fprintf(stderr, "stepscope: ignoring an invalid --data-wait-regex/--step-regex\n");
  }
  g->windowed = windowed;
  if (g->config.parts_dir.empty()) return;
  g->pid = getpid();
  if (!real_pthread_create)
    real_pthread_create = reinterpret_cast<pthread_create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
  if (!real_pthread_create) return;
  // A later window keeps the first one's signal: its handler stays installed between windows.
  struct sigaction current{};
  if (!g->signo || sigaction(g->signo, nullptr, &current) != 0 || current.sa_sigaction != on_sample_signal)
    g->signo = pick_signal();
  if (!g->signo) {
    std::fprintf(stderr, "stepscope: no free real-time signal; not sampling pid %d\n", int(getpid()));
    return;
  }
  g->period_ns = 1000000000LL / g->config.cpu_hz;
  g->stack_window = g->config.stack_bytes;
  const bool flight = !g->config.flight_dir.empty();
  g->drain_period_ms = flight ? kFlightDrainPeriodMs : kDrainPeriodMs;
  g->task_poll_period_ms = flight ? kFlightTaskPollPeriodMs : kTaskPollPeriodMs;
  g->ring_bytes = ring_bytes_for(g->stack_window, g->config.cpu_hz, g->drain_period_ms);
  g->handler_stack_need = handler_stack_need();
  struct sigaction sa{};
  sa.sa_sigaction = on_sample_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(g->signo, &sa, nullptr);
  if (!g->key_created) g->key_created = pthread_key_create(&g->key, on_thread_exit) == 0;
  static bool atfork_done = false;
  if (!atfork_done) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atfork_done = true;
  }
  g_drainer = new Drainer(g->config.parts_dir);
  flight::begin();
  g_drainer->set_flight(flight::window_rows());
  g->flush_signal.store(0);
  g->final_done.store(false);
  g->state.store(kRunning);
  if (windowed)
    poll_tasks();  // every thread now, not at the collector thread's first poll
  else
    register_current_thread();
  start_collector_thread();
  // The program's signal handling stays exactly as it was. A flight recording also saves its window when the
  // program crashes (SIGSEGV, SIGABRT, ...), where the program left those signals at their default.
  if (!windowed) install_termination_standins(flight::active());
  // After the stand-ins (which take only a signal left at its default): the guard passes every fault that is
  // not its own to whatever was installed before it (unwind/safe_copy.h).
  unwind::install_fault_guard();
  if (windowed && flight::active()) flight::watch_exit_status();  // the launcher sees it only under record
  if (flight::active() && !windowed) {
    std::string error;  // `stepscope dump PID` asks over the control channel
    if (!control::start_server(error))
      std::fprintf(stderr, "stepscope: no `stepscope dump` for pid %d: %s\n", int(getpid()), error.c_str());
  }
#if STEPSCOPE_HAVE_PYTHON
  // Before the interpreter starts (LD_PRELOAD) or into a running one (attach): steps and data waits need them.
  python_hooks::arm(g->config.python_wait_func, g->config.python_step_func);
#endif
  g->start_ns = clock_ns(CLOCK_MONOTONIC) - t0;
  if (!g->config.no_gpu) cupti::start_if_possible("start");
}

// Stops recording: no more signals, a final drain and commit. Bounded wait so exit never hangs.
void stop() {
  if (!g || g->state.load() != kRunning) return;
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    for (ThreadState* ts : g->live) disarm_timer(ts);
  }
  if (pthread_equal(pthread_self(), g->thread)) return;  // exit() from the collector thread: nothing to join
  std::unique_lock<std::mutex> lk(g->wake_mu);
  g->stop_requested = true;
  g->wake_cv.notify_all();
  if (!g->wake_cv.wait_for(lk, std::chrono::seconds(5), [] { return g->stopped; })) {
    // The process exits without its last samples (a fork's child may leave no part at all): said, with where
    // the collector thread was and the CPU it had, to tell a starved thread from a blocked one.
    clockid_t cid;
    const double cpu_s = pthread_getcpuclockid(g->thread, &cid) == 0 ? double(clock_ns(cid)) / 1e9 : -1.0;
    std::fprintf(
        stderr,
        "stepscope: pid %d exits before its collector's final pass ended (waited 5 s; the collector thread "
        "was %s, %.3f s of CPU): its last samples are lost\n",
        int(getpid()), collector_phase_name(g->collector_phase.load()), cpu_s);
  }
  g->state.store(kStopping);
}

namespace {

void atfork_prepare() {
  if (!g || g->state.load() != kRunning) return;
  g->io_mu.lock();
  g->reg_mu.lock();
  g->pending.mu.lock();
  g->meta_mu.lock();
}

void atfork_parent() {
  if (!g || g->state.load() != kRunning) return;
  g->meta_mu.unlock();
  g->pending.mu.unlock();
  g->reg_mu.unlock();
  g->io_mu.unlock();
}

// The child has one thread (the forking one) and a copy of the parent's memory: start a fresh recording for
// the new pid with a new partial store; never touch the parent's SQLite handle.
void atfork_child() {
  if (!g || g->state.load() != kRunning) return;
  g->meta_mu.unlock();
  g->pending.mu.unlock();
  g->reg_mu.unlock();
  g->io_mu.unlock();
  // The parent's collector thread may have been waiting on the condition variable (or holding its mutex) at
  // the fork: the child's copy would wait for a waiter that does not exist here. Start both afresh.
  new (&g->wake_mu) std::mutex();
  new (&g->wake_cv) std::condition_variable();
  g->flush_signal.store(0);
  g->final_done.store(false);
  g->pid = getpid();
  t_state = nullptr;  // the parent's state of this thread is freed below
  g_drainer->abandon_after_fork();
  // Nothing may leave a fork handler: the child of a program at its memory limit is left unrecorded instead.
  try {
    // the parent's (copied) tables are leaked, not freed; a window's child records nothing until attached itself
    g_drainer = g->windowed ? nullptr : new Drainer(g->config.parts_dir);
    if (g_drainer) {
      flight::begin();  // the child's own window: the parent's rows are the parent's
      g_drainer->set_flight(flight::window_rows());
    }
    // The parent's threads, rows and counters are not this process's (its perf-event descriptors are shared:
    // only closed). Pending call stacks and GPU windows went too: the child must not write the parent's.
    reset_recorded_state(true);
  } catch (const std::exception&) {
    g_drainer = nullptr;
    g->state.store(kOff);
    return;
  }
  cupti::after_fork_child();
  if (g->windowed) {
    g->state.store(kOff);
    return;
  }
  register_current_thread();
  start_collector_thread();
}

__attribute__((constructor)) void collector_init() {
  if (!std::getenv("STEPSCOPE_PARTS_DIR")) return;
  try {
    if (env_flag("STEPSCOPE_PAUSED")) {
      // record --paused: windows opened by `stepscope start PID` over the control channel (recording_window.cpp).
      std::string error;
      if (!control::start_server(error))
        std::fprintf(stderr, "stepscope: no control channel in pid %d: %s\n", int(getpid()), error.c_str());
      return;
    }
    start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepscope: collector not started: %s\n", e.what());
  }
}

__attribute__((destructor)) void collector_fini() {
  control::quiesce_for_exit();
  stop();
}

}  // namespace
}  // namespace stepscope::collector
