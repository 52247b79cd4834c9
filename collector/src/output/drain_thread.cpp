#include "drain_thread.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/collector_state.h"
#include "flight/flight_recorder.h"
#include "gpu/graph_stacks.h"
#include "output/drainer.h"
#include "output/module_maps.h"
#include "sampling/thread_registry.h"
#include "unwind/safe_copy.h"

namespace stepscope::collector {
namespace {

// A libpython loaded after the collector started (a program embedding Python through dlopen): its frames are
// read and its hooks armed once it is there. Looked for once a second while the loaded objects change, or
// while a loaded interpreter is not yet initialized; a process that never loads one pays a dl_iterate_phdr a
// second.
class LatePython {
 public:
  void poll(int64_t now) {
    if (done_ || now - last_ < 1000000000LL) return;
    last_ = now;
    size_t objects = 0;
    dl_iterate_phdr([](dl_phdr_info*, size_t, void* n) { return ++*static_cast<size_t*>(n), 0; }, &objects);
    if (objects == objects_ && !waiting_) return;
    objects_ = objects;
    const bool evaluator = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    const bool libpython = dlsym(RTLD_DEFAULT, "Py_IsInitialized");
#if STEPSCOPE_HAVE_PYTHON
    if (!g->python_ready.load() && evaluator && python::init())
      g->python_ready.store(true, std::memory_order_release);
#endif
    const bool hooks_done = python_hooks::arm_if_late(g->config.python_wait_func, g->config.python_step_func);
    waiting_ = !hooks_done && libpython;
    done_ = hooks_done && libpython && (g->python_ready.load() || !evaluator);
  }

 private:
  bool done_ = false, waiting_ = false;
  int64_t last_ = 0;
  size_t objects_ = 0;
};

void counters_to_meta(std::map<std::string, std::string>& m) {
  auto& c = g->counters;
  m["collector.samples"] = std::to_string(c.samples.load());
  m["collector.dropped_samples"] = std::to_string(c.dropped_ring_full.load());
  m["collector.timer_overruns"] = std::to_string(c.timer_overruns.load());
  m["collector.out_of_memory_passes"] = std::to_string(c.out_of_memory_passes.load());
  m["collector.unknown_thread_signals"] = std::to_string(c.unknown_thread.load());
  m["collector.alt_stack_skipped_samples"] = std::to_string(c.alt_stack_skipped.load());
  // The unwinding of the copied stacks (on this thread): how deep, how often cut by the window, its cost.
  const Drainer::UnwindStats& u = g_drainer->unwind_stats();
  m["collector.unwound_samples"] = std::to_string(u.records);
  m["collector.stack_truncated_samples"] = std::to_string(u.truncated);
  m["collector.stack_unreadable_samples"] = std::to_string(u.unreadable);
  m["collector.guarded_read_faults"] =
      std::to_string(unwind::guarded_read_faults() - c.guarded_faults_before);
  m["collector.leaf_only_samples"] = std::to_string(u.leaf_only);
  m["collector.raw_stack_hits"] = std::to_string(u.raw_hits);
  m["collector.stack_node_lookups"] = std::to_string(u.node_lookups);
  m["collector.python_samples"] = std::to_string(u.python_samples);
  m["collector.python_native_cut_samples"] = std::to_string(u.python_cut);
  m["collector.native_scan_samples"] = std::to_string(u.scanned);
  m["collector.native_scan_attempts"] = std::to_string(g_drainer->unwinder().scans_tried());
  m["collector.stack_window_bytes"] = std::to_string(g->stack_window);
  m["collector.ring_bytes"] = std::to_string(g->ring_bytes);
  m["collector.drain_period_ms"] = std::to_string(g->drain_period_ms);
  m["collector.stack_bytes_max"] = std::to_string(u.max_stack_bytes);
  m["collector.unwind_memory_reads"] = std::to_string(g_drainer->unwinder().memory_reads());
  m["collector.unwind_table_searches"] = std::to_string(g_drainer->unwinder().table_searches());
  m["collector.unwind_object_reads"] = std::to_string(g_drainer->unwinder().object_reads());
  m["collector.unwinder"] = unwind::CopiedStackUnwinder::skips_signal_masks()
                                ? "libunwind remote, copied stacks (cache lock without signal masks)"
                                : "libunwind remote, copied stacks";
  if (u.records) {
    m["collector.stack_bytes_mean"] = std::to_string(u.stack_bytes / u.records);
    char fb[64];
    std::snprintf(fb, sizeof fb, "%.1f", double(u.frames) / double(u.records));
    m["collector.frames_mean"] = fb;
    if (u.timed) m["collector.unwind_cpu_ns_per_sample"] = std::to_string(u.ns / u.timed);
  }
  m["collector.threads"] = std::to_string(c.threads_seen.load());
  m["collector.threads_unsampled"] = std::to_string(c.threads_unsampled.load());
  uint64_t total = 0, seen = 0;
  for (auto& b : c.handler_hist) total += b.load();
  bool median_done = false;
  for (int i = 0; i < 64 && total; ++i) {
    seen += c.handler_hist[i].load();
    if (!median_done && seen * 2 >= total) {
      m["collector.handler_ns_median"] = std::to_string(int64_t(handler_bucket_mid_ns(i)));
      median_done = true;
    }
    if (seen * 100 >= total * 99) {
      m["collector.handler_ns_p99"] = std::to_string(int64_t(handler_bucket_mid_ns(i)));
      break;
    }
  }
  const char* timer = "none";
  switch (g->timer_kind) {
    case TimerKind::PerfEvent: timer = "perf_event task-clock"; break;
    case TimerKind::CpuTimer: timer = "timer_create thread CPU clock"; break;
    case TimerKind::WallTimer: timer = "timer_create CLOCK_MONOTONIC (wall)"; break;
    default: break;
  }
  m["collector.timer"] = timer;
  // The collector's own cost in this process: its thread's CPU time (drain, dedup, SQLite) and how long
  // start() took on the thread that loaded it.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", double(clock_ns(CLOCK_THREAD_CPUTIME_ID)) / 1e9);
  m["collector.thread_cpu_s"] = buf;
  // All of the collector's own threads (its thread, CUPTI's buffer thread), from the kernel's per-thread
  // run time, and the sampling handlers' time estimated from their duration histogram (bucket midpoints).
  std::vector<int32_t> own;
  {
    std::lock_guard<std::mutex> lk(g->own_mu);
    own = g->own_tids;
  }
  double own_s = 0;
  std::string own_list;
  for (int32_t tid : own) {
    own_list += (own_list.empty() ? "" : ",") + std::to_string(tid);
    const std::string st = read_small_file("/proc/self/task/" + std::to_string(tid) + "/schedstat");
    if (!st.empty()) own_s += std::atof(st.c_str()) / 1e9;  // first field: ns on a CPU
  }
  m["collector.own_tids"] = own_list;
  std::snprintf(buf, sizeof buf, "%.6f", own_s);
  m["collector.own_threads_cpu_s"] = buf;
  double handler_ns = 0;
  for (int i = 0; i < 64; ++i) handler_ns += double(c.handler_hist[i].load()) * handler_bucket_mid_ns(i);
  std::snprintf(buf, sizeof buf, "%.6f", handler_ns / 1e9);
  m["collector.handler_cpu_s_estimate"] = buf;
  std::snprintf(buf, sizeof buf, "%.6f", own_s + handler_ns / 1e9);
  m["collector.cpu_s"] = buf;
  m["collector.call_stacks"] = std::to_string(c.call_stacks.load());
  m["collector.call_stacks_skipped"] = std::to_string(c.call_stacks_skipped.load());
  std::snprintf(buf, sizeof buf, "%.6f", double(g->start_ns) / 1e9);
  m["collector.start_s"] = buf;
  if (const int sig = g->flush_signal.load())
    m["collector.end"] = sig == kFlushOnExit ? std::string("_exit") : std::string("signal ") + std::to_string(sig);
  m["collector.cpu_hz"] = std::to_string(g->config.cpu_hz);
#if STEPSCOPE_HAVE_PYTHON
  m["python.hooks"] = python_hooks::status();
  python_hooks::add_meta(m);
  m["python.frames"] = python::describe();
  m["python.frames_read"] = g->python_ready.load() ? "1" : "0";
#endif
  m["collector.signal"] = std::to_string(g->signo);
}

// CUDA graphs and nodes whose creation stack was captured carry its key until here (gpu/graph_stacks.h):
// those whose stack was interned are written with it, directly; the rest (the stack dropped) go with the
// other rows.
void write_graphs_with_stacks(store::Trace& rows) {
  std::vector<int64_t> keys;
  take_graph_stacks(
      rows, [](int64_t key) { return g_drainer->call_stack(key); },
      [](const auto& r) { g_drainer->put_with_own_stack(r); }, keys);
  for (int64_t k : keys) g_drainer->forget_call_stack(k);
}

// One pass: drain every ring (live and retired), append pending rows, free drained retired threads.
void drain_once() {
  std::vector<ThreadState*> rings;
  ThreadState* done = nullptr;
  g_drainer->check_modules();  // before unwinding: a library may have been loaded or unloaded since the last pass
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    rings = g->live;  // may throw bad_alloc before the retired list is taken: it stays for the next pass
    done = g->retired;
    g->retired = nullptr;
  }
  // Samples are lost when memory runs out, states of exited threads are freed all the same.
  bool lost = false;
  const auto drain = [&lost](ThreadState* ts) {
    try {
      ts->ring.drain([&](const uint8_t* rec, size_t len) { g_drainer->add_sample(rec, len); });
    } catch (const std::bad_alloc&) {
      lost = true;
    }
  };
  for (ThreadState* ts : rings) drain(ts);
  while (done) {
    ThreadState* next = done->next_retired;
    drain(done);
    free_thread_state(done);
    done = next;
  }
  if (lost) throw std::bad_alloc();
  store::Trace rows;
  std::vector<PendingRows::CallStack> call_stacks;
  {
    std::lock_guard<std::mutex> lk(g->pending.mu);
    std::swap(rows, g->pending.rows);
    call_stacks.swap(g->pending.call_stacks);
    rows.gpu_windows.swap(g->pending.gpu_windows);
  }
  g_drainer->add_call_stacks(call_stacks);  // before the rows: their API calls pick the stacks up
  write_graphs_with_stacks(rows);
  flight::observe(rows);
  if (!rows.kernels.empty() || !rows.memcpys.empty() || !rows.memsets.empty() || !rows.api_calls.empty() ||
      !rows.syncs.empty() || !rows.ranges.empty() || !rows.data_waits.empty() || !rows.steps.empty() ||
      !rows.devices.empty() || !rows.threads.empty() || !rows.gpu_windows.empty() || !rows.graphs.empty() ||
      !rows.graph_nodes.empty())
    g_drainer->append_pending(rows);
}

std::map<std::string, std::string> status_meta() {
  std::map<std::string, std::string> m;
  {
    std::lock_guard<std::mutex> lk(g->meta_mu);
    m = g->meta;
  }
  counters_to_meta(m);
  return m;
}

void write_status_meta() {
  g_drainer->write_meta(status_meta());
  g_drainer->name_thread(g->collector_tid.load());  // marked as the collector's in threads
}

void* collector_main(void*) {
  g->collector_phase.store(kPhaseStarting);
  g->collector_tid.store(sys_gettid());
  mark_collector_thread(sys_gettid());
  pthread_setname_np(pthread_self(), "stepscope");
#if STEPSCOPE_HAVE_PYTHON
  try {
    if (python::init()) g->python_ready.store(true, std::memory_order_release);
  } catch (...) {
  }
#endif
  int64_t last_commit = clock_ns(CLOCK_MONOTONIC), last_poll = 0, last_meta = 0;
  LatePython late_python;
  bool final_pass = false;
  while (!final_pass) {
    g->collector_phase.store(kPhaseWaiting, std::memory_order_relaxed);
    {
      std::unique_lock<std::mutex> lk(g->wake_mu);
      g->wake_cv.wait_for(lk, std::chrono::milliseconds(g->drain_period_ms),
                          [] { return g->stop_requested || g->flush_signal.load() != 0; });
      final_pass = g->stop_requested || g->flush_signal.load() != 0;
    }
    try {
      g->collector_phase.store(kPhaseCuda, std::memory_order_relaxed);
      if (final_pass) cupti::flush(true);
      else {
        cupti::calibrate_if_due();
        cupti::detach_if_due();
        g->collector_phase.store(kPhasePython, std::memory_order_relaxed);
        late_python.poll(clock_ns(CLOCK_MONOTONIC));
      }
      std::lock_guard<std::mutex> io(g->io_mu);
      g->collector_phase.store(kPhaseDraining, std::memory_order_relaxed);
      const int64_t now = clock_ns(CLOCK_MONOTONIC);
      if (!final_pass && now - last_poll >= g->task_poll_period_ms * 1000000LL) {
        poll_tasks();
        last_poll = now;
      }
      drain_once();
      g->collector_phase.store(kPhaseMeta, std::memory_order_relaxed);
      if (final_pass || now - last_meta >= 1000000000LL) {
        if (final_pass && !g->flush_signal.load()) set_process_meta("collector.end", "exit");
        if (g_drainer->has_writer() || final_pass) write_status_meta();
        last_meta = now;
      }
      g->collector_phase.store(kPhaseFlight, std::memory_order_relaxed);
      if (flight::active()) {
        if (final_pass) {
          const int sig = g->flush_signal.load();
          flight::final_pass(!g->closing_window, sig > 0 ? sig : 0, status_meta);
        } else {
          flight::after_pass(now, status_meta);
        }
      }
      g->collector_phase.store(kPhaseCommitting, std::memory_order_relaxed);
      if (final_pass || now - last_commit >= kCommitPeriodMs * 1000000LL) {
        g_drainer->commit();
        last_commit = now;
      }
      // No close(): the part is only read back by the launcher, so the target does not wait for index
      // creation and a WAL checkpoint at exit; the committed WAL is read like a killed process's part.
    } catch (const std::bad_alloc&) {
      // The target is at its memory limit: what this pass had taken out of the rings is lost (counted), the
      // rings keep filling (full → counted drops) and the next pass tries again — memory often comes back, and
      // at exit the final pass writes what the rings still hold.
      if (g->counters.out_of_memory_passes.fetch_add(1) == 0)
        std::fprintf(stderr, "stepscope: pid %d is out of memory: the collector drops what it cannot store\n",
                     int(getpid()));
      if (final_pass) break;
    } catch (const std::exception& e) {
      // The collector never takes the target down: report once and stop recording.
      std::fprintf(stderr, "stepscope: collector stopped in pid %d: %s\n", int(getpid()), e.what());
      g->state.store(kStopping);
      break;
    }
  }
  g->collector_phase.store(kPhaseDone);
  g->final_done.store(true);
  {
    std::lock_guard<std::mutex> lk(g->wake_mu);
    g->stopped = true;
  }
  g->wake_cv.notify_all();
  return nullptr;
}

}  // namespace

const char* collector_phase_name(int phase) {
  static const char* const names[] = {"starting",
                                      "waiting",
                                      "flushing CUDA activity",
                                      "polling Python",
                                      "draining samples",
                                      "writing meta",
                                      "flight window",
                                      "committing the part",
                                      "done"};
  return phase >= 0 && phase <= kPhaseDone ? names[phase] : "?";
}

void start_collector_thread() {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);  // the collector thread takes no signals (and is never sampled)
  g->stop_requested = false;
  g->stopped = false;
  int rc = real_pthread_create(&g->thread, nullptr, collector_main, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    std::fprintf(stderr, "stepscope: cannot start the collector thread (%s); not recording pid %d\n",
                 std::strerror(rc), int(getpid()));
    g->state.store(kOff);
  }
}

}  // namespace stepscope::collector
