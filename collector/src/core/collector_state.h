// The sampler's shared state: per-thread rings and timers, the tid table the signal handler searches, the
// process-wide Globals, and the few helpers every room of the collector uses. Internal; not installed.
#pragma once
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/collector_internal.h"
#include "sampling/ring.h"
#include "unwind/stack_capture.h"

#if __has_include("python/python_frames.h")
#include "python/python_frames.h"
#include "python/python_hooks.h"
#define STEPSCOPE_HAVE_PYTHON 1
#else
#define STEPSCOPE_HAVE_PYTHON 0
namespace stepscope::collector::python {
struct RawPyFrame {
  uint64_t code;
  uint64_t name, file;
  uint32_t names_digest;
  int32_t first_line;
  int32_t instr_offset;
  uint8_t is_entry;
};
struct CaptureScratch {};
}  // namespace stepscope::collector::python
#endif

namespace stepscope::collector {

// Native frames kept per sample. Nested imports reach 200+ native frames within the 32 KiB window; a stack
// cut here is marked truncated like one cut by the window, so its root is the truncation marker.
constexpr int kMaxPcs = 256;
constexpr int kMaxPy = 64;
// The stack window each sample copies from the stack pointer up (STEPSCOPE_STACK_BYTES, --stack-bytes): what
// the collector thread can unwind. Deeper stacks are cut there (counted: collector.stack_truncated_samples).
constexpr size_t kDefaultStackWindow = 32 * 1024;
constexpr size_t kMinStackWindow = 1024, kMaxStackWindow = 256 * 1024;
// A thread's ring holds two drain periods of full-window samples at the sampling rate (within these bounds).
constexpr size_t kMinRingBytes = 256 * 1024, kMaxRingBytes = 16 * 1024 * 1024;
constexpr int kTableSize = 8192;           // open-addressing tid → ThreadState (power of two)
constexpr int kMaxLiveThreads = 2048;      // bounded memory: threads beyond this are not sampled (counted)
constexpr int kDrainPeriodMs = 20;
// A flight recording writes nothing while all is well, and the collector thread's wake-ups were most of what
// it cost: 0.43% of a core at 1 Hz as at 100 Hz (docs/flight.md, "Cost"). It drains less often, its rings
// sized for the longer period, and looks for threads it was not told of less often.
constexpr int kFlightDrainPeriodMs = 100;
constexpr int kFlightTaskPollPeriodMs = 500;
constexpr int kFlushOnExit = -1;  // Globals::flush_signal when _exit asked for the final flush
constexpr int kCommitPeriodMs = 250;
constexpr int kTaskPollPeriodMs = 100;
constexpr size_t kMaxRawStacks = 65536;

constexpr uint8_t kSampleStackCapped = 1;      // the copy stopped at the window: the unwind may be cut short
constexpr uint8_t kSampleStackUnreadable = 2;  // nothing could be read at the stack pointer
constexpr uint8_t kSampleSkipLeaf = 4;         // a call stack: its leaf is the collector's capture function

// One ring record: this header (with the interrupted registers), the stack copy (stack_bytes, padded to 8),
// then n_py raw Python frames.
struct SampleHeader {
  int64_t time;
  int32_t tid;
  uint16_t n_py;
  uint8_t on_cpu;
  uint8_t flags;
  uint32_t stack_bytes;
  // Timer expiries merged into this signal (si_overrun): a thread waiting for a core takes one signal for
  // several periods, and the sample stands for 1 + overruns of them.
  uint32_t overruns;
  unwind::Registers regs;
};
static_assert(sizeof(SampleHeader) % 8 == 0);

enum class TimerKind { None, PerfEvent, CpuTimer, WallTimer };

struct ThreadState {
  std::atomic<int32_t> tid{0};
  bool own = false;  // registered by the thread itself (pthread_create wrapper / init thread)
  TimerKind timer_kind = TimerKind::None;
  int perf_fd = -1;
  timer_t timer{};
  SampleRing ring;
  size_t map_bytes = 0;
  // Known for threads that register themselves: the handler then copies the stack with memcpy; otherwise it
  // reads it fault-safely (unwind::copy_stack).
  unwind::StackBounds stack;
  // Without them: where fault-safe copies of its stack stopped (unwind::copy_stack).
  unwind::SeenStackTop stack_seen_top;
  ThreadState* next_retired = nullptr;  // retired threads form a list: retiring never allocates
  // The handler's working memory for Python frames (its pages are touched only on threads that run Python).
  python::CaptureScratch py_scratch;
};

ThreadState* const kTombstone = reinterpret_cast<ThreadState*>(uintptr_t{1});

struct Counters {
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> dropped_ring_full{0};
  std::atomic<uint64_t> timer_overruns{0};  // periods carried by samples beyond their own (si_overrun)
  std::atomic<uint64_t> unknown_thread{0};
  // Samples not taken because the signal ran on the program's own alternate stack with too little room left
  // below it for the handler (Globals::handler_stack_need).
  std::atomic<uint64_t> alt_stack_skipped{0};
  std::atomic<uint64_t> threads_seen{0};
  std::atomic<uint64_t> threads_unsampled{0};
  std::atomic<uint64_t> call_stacks{0};          // stacks captured at blocking CUDA calls
  std::atomic<uint64_t> call_stacks_skipped{0};  // over the rate limit or the queue bound
  std::atomic<uint64_t> out_of_memory_passes{0};  // drain passes lost because an allocation failed
  std::atomic<uint64_t> handler_hist[64] = {};    // handler duration, buckets of handler_bucket()
  uint64_t guarded_faults_before = 0;             // unwind::guarded_read_faults() when the window began
};

// Handler durations: 100 ns buckets up to 3.2 µs, then four a doubling up to ~820 µs (the last open-ended).
// Integer-only, for the signal handler. (Linear buckets capped at 6.3 µs once hid handlers that took longer.)
inline int handler_bucket(int64_t ns) {
  const uint64_t r = ns > 0 ? uint64_t(ns) / 100 : 0;  // in 100 ns units
  if (r < 32) return int(r);
  const int msb = 63 - __builtin_clzll(r);  // >= 5
  const int b = 32 + (msb - 5) * 4 + int((r >> (msb - 2)) & 3);
  return b < 63 ? b : 63;
}
// The middle of bucket b, in ns. Above 3.2 µs bucket b spans [4+q, 5+q) << (msb-2) in 100 ns units: its
// middle is 4.5/4 of its low end.
inline double handler_bucket_mid_ns(int b) {
  if (b < 32) return b * 100.0 + 50.0;
  const int msb = 5 + (b - 32) / 4, q = (b - 32) % 4;
  return 100.0 * double((4 + q) << (msb - 2)) * 1.125;
}

enum RunState : int { kOff = 0, kRunning = 1, kStopping = 2 };

// What the collector thread is doing (Globals::collector_phase).
enum CollectorPhase : int {
  kPhaseStarting = 0,
  kPhaseWaiting,
  kPhaseCuda,
  kPhasePython,
  kPhaseDraining,
  kPhaseMeta,
  kPhaseFlight,
  kPhaseCommitting,
  kPhaseDone
};
const char* collector_phase_name(int phase);

// Globals are heap objects that are never destroyed: the collector runs until the very end of exit().
struct Globals {
  Config config;
  std::atomic<int> state{kOff};
  int signo = 0;
  int64_t period_ns = 1000000;
  size_t stack_window = kDefaultStackWindow;  // bytes each sample copies (Config::stack_bytes)
  size_t ring_bytes = kMinRingBytes;          // each thread's ring
  int drain_period_ms = kDrainPeriodMs;  // the collector thread's pass (kFlightDrainPeriodMs in flight mode)
  int task_poll_period_ms = kTaskPollPeriodMs;
  // Room the handler needs below its first frame on an alternate stack (signal_handler.h).
  size_t handler_stack_need = 0;
  TimerKind timer_kind = TimerKind::None;
  std::atomic<ThreadState*> table[kTableSize];
  std::mutex reg_mu;  // registration; lock order: io_mu → reg_mu → pending.mu → meta_mu
  // Threads exit (and register) while the program may have exhausted its memory: neither may allocate, since
  // an exception cannot leave a thread-exit destructor or a thread's start routine without ending the program.
  std::vector<ThreadState*> live;         // capacity kMaxLiveThreads, reserved once
  ThreadState* retired = nullptr;         // exited, not yet drained (newest first)
  std::mutex io_mu;  // held by the collector thread while it touches SQLite (fork waits on it)
  std::mutex meta_mu;
  std::map<std::string, std::string> meta;
  PendingRows pending;
  Counters counters;
  pthread_t thread{};
  std::atomic<int32_t> collector_tid{0};
  std::mutex wake_mu;
  std::condition_variable wake_cv;
  bool stop_requested = false;
  bool stopped = false;
  std::atomic<bool> python_ready{false};
  std::atomic<int> flush_signal{0};   // a termination signal (or kFlushOnExit) asked for the final flush (0: none)
  std::atomic<bool> final_done{false};  // the collector thread finished its final pass
  // Where the collector thread is (CollectorPhase), for stop()'s line when the final pass outlasts its wait.
  std::atomic<int> collector_phase{0};
  int64_t start_ns = 0;                  // wall time start() took
  pthread_key_t key{};
  int32_t pid = 0;
  std::mutex own_mu;             // guards own_tids
  std::vector<int32_t> own_tids;  // the collector's own threads (collector thread, CUPTI's buffer thread)
  // Recording windows (attach, record --paused; recording_window.cpp): every thread is found by polling (none
  // registers itself, so no thread-local pointer outlives a window), no termination stand-ins, a forked child
  // stays dormant.
  bool windowed = false;
  bool closing_window = false;  // the final pass ends a window, not the process (flight: no exit save)
  bool key_created = false;
  std::atomic<int> in_handler{0};  // sample handlers running now: a window's end frees rings only at 0
};

extern Globals* g;

// The calling thread's state when it registered itself (pthread_create wrapper, start, fork child): the handler
// finds it without a gettid() system call. Initial-exec: no lazy TLS allocation can happen in the handler.
// Threads found by /proc/self/task polling are looked up by tid instead.
extern __thread ThreadState* t_state __attribute__((tls_model("initial-exec")));

using pthread_create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
extern pthread_create_fn real_pthread_create;


inline int32_t sys_gettid() { return static_cast<int32_t>(syscall(SYS_gettid)); }

inline int64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline uint32_t tid_hash(int32_t tid) { return (uint32_t(tid) * 2654435761u) & (kTableSize - 1); }

// The registered state of `tid`, or null. Async-signal-safe.
ThreadState* lookup(int32_t tid);

// Lifecycle (lifecycle.cpp): start recording in this process, stop it (final drain, bounded wait).
void start();
void stop();
// start() with a given configuration (null: the environment's); `windowed`: see Globals::windowed.
void start_with(const Config* config, bool windowed);
// The configuration from named settings (the STEPSCOPE_* environment variables, or the same names sent over
// the control channel); false when a regex is invalid.
bool load_config(Config& c, const std::function<const char*(const char*)>& get);

}  // namespace stepscope::collector
