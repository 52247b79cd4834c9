// libstepscope_collector.so: the sampler (per-thread timers → signal handler → per-thread rings), the collector
// thread (drain, deduplicate stacks, module maps, commit to this process's partial store), fork/exit handling and
// the exported C API of stepscope.h. See docs/collector.md for the design and its limits.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#define UNW_LOCAL_ONLY
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <libunwind.h>
#include <link.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector_internal.h"
#include "ring.h"
#include "stepscope/store/store.h"

#if __has_include("python/python_frames.h")
#include "python/python_frames.h"
#define STEPSCOPE_HAVE_PYTHON 1
#else
#define STEPSCOPE_HAVE_PYTHON 0
namespace stepscope::collector::python {
struct RawPyFrame {
  uint64_t code;
  int32_t instr_offset;
  uint8_t is_entry;
};
}  // namespace stepscope::collector::python
#endif

namespace stepscope::collector {
namespace {

constexpr int kMaxPcs = 128;
constexpr int kMaxPy = 64;
constexpr size_t kRingBytes = 128 * 1024;  // ~400 samples of depth 30 per thread between drains
constexpr int kTableSize = 8192;           // open-addressing tid → ThreadState (power of two)
constexpr int kMaxLiveThreads = 2048;      // bounded memory: threads beyond this are not sampled (counted)
constexpr int kDrainPeriodMs = 20;
constexpr int kCommitPeriodMs = 250;
constexpr int kTaskPollPeriodMs = 100;
constexpr size_t kMaxRawStacks = 65536;

struct SampleHeader {
  int64_t time;
  int32_t tid;
  uint16_t n_pcs;
  uint16_t n_py;
  uint8_t on_cpu;
  uint8_t pad[7];
};

enum class TimerKind { None, PerfEvent, CpuTimer, WallTimer };

struct ThreadState {
  std::atomic<int32_t> tid{0};
  bool own = false;  // registered by the thread itself (pthread_create wrapper / init thread)
  TimerKind timer_kind = TimerKind::None;
  int perf_fd = -1;
  timer_t timer{};
  SampleRing ring;
  void* pcs[kMaxPcs + 16];
  python::RawPyFrame py[kMaxPy];
  size_t map_bytes = 0;
};

ThreadState* const kTombstone = reinterpret_cast<ThreadState*>(uintptr_t{1});

struct Counters {
  std::atomic<uint64_t> samples{0};
  std::atomic<uint64_t> dropped_ring_full{0};
  std::atomic<uint64_t> unknown_thread{0};
  std::atomic<uint64_t> unwind_failed{0};
  std::atomic<uint64_t> in_loader{0};
  std::atomic<uint64_t> threads_seen{0};
  std::atomic<uint64_t> threads_unsampled{0};
  std::atomic<uint64_t> handler_hist[64] = {};  // handler duration, 100 ns buckets (last: >= 6.3 us)
};

enum RunState : int { kOff = 0, kRunning = 1, kStopping = 2 };

// Globals are heap objects that are never destroyed: the collector runs until the very end of exit().
struct Globals {
  Config config;
  std::atomic<int> state{kOff};
  int signo = 0;
  int64_t period_ns = 1000000;
  TimerKind timer_kind = TimerKind::None;
  std::atomic<ThreadState*> table[kTableSize];
  std::mutex reg_mu;  // registration; lock order: io_mu → reg_mu → pending.mu → meta_mu
  std::vector<ThreadState*> live;
  std::vector<ThreadState*> retired;
  std::mutex io_mu;  // held by the collector thread while it touches SQLite (fork waits on it)
  std::mutex meta_mu;
  std::map<std::string, std::string> meta;
  PendingRows pending;
  Counters counters;
  uintptr_t ldso_lo = 0, ldso_hi = 0;
  pthread_t thread{};
  std::atomic<int32_t> collector_tid{0};
  std::mutex wake_mu;
  std::condition_variable wake_cv;
  bool stop_requested = false;
  bool stopped = false;
  std::atomic<bool> python_ready{false};
  std::atomic<int> flush_signal{0};   // a termination signal asked for the final flush (0: none)
  std::atomic<bool> final_done{false};  // the collector thread finished its final pass
  int64_t start_ns = 0;                  // wall time start() took
  pthread_key_t key{};
  int32_t pid = 0;
};

Globals* g = nullptr;

// The calling thread's state when it registered itself (pthread_create wrapper, start, fork child): the handler
// finds it without a gettid() system call. Initial-exec: no lazy TLS allocation can happen in the handler.
// Threads found by /proc/self/task polling are looked up by tid instead.
__thread ThreadState* t_state __attribute__((tls_model("initial-exec"))) = nullptr;

using pthread_create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
pthread_create_fn real_pthread_create = nullptr;

// libunwind is opened RTLD_LOCAL: its _Unwind_* compatibility symbols must not interpose libgcc_s's in the
// target (C++ exceptions), which a link-time dependency of a preloaded library would risk.
using unw_backtrace_fn = int (*)(void**, int);
unw_backtrace_fn p_unw_backtrace = nullptr;

bool load_libunwind() {
  if (p_unw_backtrace) return true;
  void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!h) return false;
  auto bt = reinterpret_cast<unw_backtrace_fn>(dlsym(h, "unw_backtrace"));
  auto set_policy = reinterpret_cast<int (*)(unw_addr_space_t, unw_caching_policy_t)>(
      dlsym(h, "_ULx86_64_set_caching_policy"));
  auto* space = static_cast<unw_addr_space_t*>(dlsym(h, "_ULx86_64_local_addr_space"));
  if (!bt) return false;
  if (set_policy && space) set_policy(*space, UNW_CACHE_PER_THREAD);
  p_unw_backtrace = bt;
  return true;
}

inline int32_t sys_gettid() { return static_cast<int32_t>(syscall(SYS_gettid)); }

inline int64_t clock_ns(clockid_t c) {
  timespec ts;
  clock_gettime(c, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

inline uint32_t tid_hash(int32_t tid) { return (uint32_t(tid) * 2654435761u) & (kTableSize - 1); }

// Async-signal-safe.
ThreadState* lookup(int32_t tid) {
  uint32_t h = tid_hash(tid);
  for (int i = 0; i < kTableSize; ++i) {
    ThreadState* s = g->table[h].load(std::memory_order_acquire);
    if (!s) return nullptr;
    if (s != kTombstone && s->tid.load(std::memory_order_relaxed) == tid) return s;
    h = (h + 1) & (kTableSize - 1);
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------------
// The signal handler: capture only.

// True when the thread was blocked in a system call when the signal came: the kernel either rewound the
// instruction pointer onto the `syscall` instruction to restart it (SA_RESTART) or made it return -EINTR.
// A thread that is merely waiting for a CPU (preempted in user code) counts as on-CPU.
bool interrupted_in_syscall(const ucontext_t* uc) {
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const long ax = static_cast<long>(uc->uc_mcontext.gregs[REG_RAX]);
  const auto* p = reinterpret_cast<const volatile uint8_t*>(ip);
  // 0x0f starts a two-byte opcode, so p[1] is mapped whenever p[0] is 0x0f.
  if (p[0] == 0x0f && p[1] == 0x05) return true;
  // The two bytes before ip: only within ip's own (mapped) page.
  if ((ip & 4095) >= 2 && ax == -EINTR && p[-2] == 0x0f && p[-1] == 0x05) return true;
  return false;
}

void on_sample_signal(int, siginfo_t*, void* ucv) {
  const int saved_errno = errno;
  const int64_t t_enter = clock_ns(CLOCK_MONOTONIC);
  if (g->state.load(std::memory_order_relaxed) != kRunning) {
    errno = saved_errno;
    return;
  }
  ThreadState* ts = t_state;
  const int32_t tid = ts ? ts->tid.load(std::memory_order_relaxed) : sys_gettid();
  if (!ts) ts = lookup(tid);
  if (!ts) {
    g->counters.unknown_thread.fetch_add(1, std::memory_order_relaxed);
    errno = saved_errno;
    return;
  }
  auto* uc = static_cast<ucontext_t*>(ucv);
  const uintptr_t ip = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  void** pcs = ts->pcs;
  int n = 0;
  if (ip >= g->ldso_lo && ip < g->ldso_hi) {
    // Interrupted inside the dynamic loader: unwinding would re-enter it (dl_iterate_phdr). Leaf only.
    pcs[0] = reinterpret_cast<void*>(ip);
    n = 1;
    g->counters.in_loader.fetch_add(1, std::memory_order_relaxed);
  } else {
    const int got = p_unw_backtrace(pcs, kMaxPcs + 16);
    int start = -1;
    for (int i = 0; i < got && i < 16; ++i)
      if (reinterpret_cast<uintptr_t>(pcs[i]) == ip) {
        start = i;
        break;
      }
    if (start < 0) {
      pcs[0] = reinterpret_cast<void*>(ip);
      n = 1;
      g->counters.unwind_failed.fetch_add(1, std::memory_order_relaxed);
    } else {
      pcs += start;
      n = std::min(got - start, kMaxPcs);
    }
  }
  int n_py = 0;
#if STEPSCOPE_HAVE_PYTHON
  if (g->python_ready.load(std::memory_order_acquire)) n_py = python::capture_current_thread(ts->py, kMaxPy);
  if (n_py < 0) n_py = 0;
#endif
  SampleHeader h{};
  h.time = t_enter;
  h.tid = tid;
  h.n_pcs = static_cast<uint16_t>(n);
  h.n_py = static_cast<uint16_t>(n_py);
  h.on_cpu = 1;
  if (ts->timer_kind == TimerKind::WallTimer && interrupted_in_syscall(uc)) h.on_cpu = 0;
  if (ts->ring.push(&h, sizeof h, pcs, sizeof(void*) * n, ts->py, sizeof(python::RawPyFrame) * n_py))
    g->counters.samples.fetch_add(1, std::memory_order_relaxed);
  else
    g->counters.dropped_ring_full.fetch_add(1, std::memory_order_relaxed);
  const int64_t bucket = std::min<int64_t>((clock_ns(CLOCK_MONOTONIC) - t_enter) / 100, 63);
  g->counters.handler_hist[bucket].fetch_add(1, std::memory_order_relaxed);
  errno = saved_errno;
}

// ---------------------------------------------------------------------------------------------------------
// Timers.

int move_fd_high(int fd) {
  // Keep our descriptors out of the low numbers a program may expect to get from open().
  int hi = fcntl(fd, F_DUPFD_CLOEXEC, 900);
  if (hi < 0) return fd;
  close(fd);
  return hi;
}

bool arm_perf_event(ThreadState* ts, int32_t tid) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = static_cast<uint64_t>(g->period_ns);
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  a.wakeup_events = 1;
  int fd = static_cast<int>(syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) return false;
  fd = move_fd_high(fd);
  f_owner_ex owner{F_OWNER_TID, tid};
  if (fcntl(fd, F_SETOWN_EX, &owner) != 0 || fcntl(fd, F_SETSIG, g->signo) != 0 ||
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_ASYNC) != 0 || ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0) {
    close(fd);
    return false;
  }
  ts->perf_fd = fd;
  ts->timer_kind = TimerKind::PerfEvent;
  return true;
}

bool arm_posix_timer(ThreadState* ts, int32_t tid, bool wall) {
  // A thread's CPU clock can be named by tid from any thread: MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED).
  clockid_t clk = wall ? CLOCK_MONOTONIC : static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  sigevent sev{};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = g->signo;
  sev._sigev_un._tid = tid;
  timer_t t;
  if (timer_create(clk, &sev, &t) != 0) return false;
  itimerspec its{};
  its.it_interval.tv_sec = g->period_ns / 1000000000;
  its.it_interval.tv_nsec = g->period_ns % 1000000000;
  // Stagger the first expiry so threads are not sampled in lockstep.
  int64_t first = g->period_ns / 2 + (tid * 7919LL) % std::max<int64_t>(1, g->period_ns / 2);
  its.it_value.tv_sec = first / 1000000000;
  its.it_value.tv_nsec = first % 1000000000;
  if (timer_settime(t, 0, &its, nullptr) != 0) {
    timer_delete(t);
    return false;
  }
  ts->timer = t;
  ts->timer_kind = wall ? TimerKind::WallTimer : TimerKind::CpuTimer;
  return true;
}

bool arm_timer(ThreadState* ts, int32_t tid) {
  if (g->config.wall) return arm_posix_timer(ts, tid, true);
  if (g->timer_kind != TimerKind::CpuTimer && arm_perf_event(ts, tid)) return true;
  return arm_posix_timer(ts, tid, false);
}

void disarm_timer(ThreadState* ts) {
  if (ts->timer_kind == TimerKind::PerfEvent && ts->perf_fd >= 0) {
    ioctl(ts->perf_fd, PERF_EVENT_IOC_DISABLE, 0);
    close(ts->perf_fd);
    ts->perf_fd = -1;
  } else if (ts->timer_kind == TimerKind::CpuTimer || ts->timer_kind == TimerKind::WallTimer) {
    timer_delete(ts->timer);
  }
  ts->timer_kind = TimerKind::None;
}

// ---------------------------------------------------------------------------------------------------------
// Thread registry. Never called from the signal handler.

void table_remove_locked(ThreadState* ts) {
  const int32_t tid = ts->tid.load(std::memory_order_relaxed);
  uint32_t h = tid_hash(tid);
  for (int i = 0; i < kTableSize; ++i) {
    ThreadState* s = g->table[h].load(std::memory_order_relaxed);
    if (!s) return;
    if (s == ts) {
      g->table[h].store(kTombstone, std::memory_order_release);
      return;
    }
    h = (h + 1) & (kTableSize - 1);
  }
}

void retire_locked(ThreadState* ts) {
  table_remove_locked(ts);
  disarm_timer(ts);
  g->live.erase(std::remove(g->live.begin(), g->live.end(), ts), g->live.end());
  g->retired.push_back(ts);
}

ThreadState* register_thread(int32_t tid, bool own) {
  if (own) {
    // Warm libunwind's per-thread trace cache outside the handler (it allocates on first use).
    void* warm[64];
    p_unw_backtrace(warm, 64);
  }
  std::lock_guard<std::mutex> lk(g->reg_mu);
  if (g->state.load() != kRunning) return nullptr;
  if (ThreadState* old = lookup(tid)) {
    // /proc/self/task polling can see a thread that has just registered itself: keep that state (the
    // thread's t_state points to it). A thread registering itself replaces a polled or stale (tid reuse) one.
    if (!own) return old;
    retire_locked(old);
  }
  if (static_cast<int>(g->live.size()) >= kMaxLiveThreads) {
    g->counters.threads_unsampled.fetch_add(1);
    return nullptr;
  }
  const size_t bytes = sizeof(ThreadState) + kRingBytes;
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    g->counters.threads_unsampled.fetch_add(1);
    return nullptr;
  }
  auto* ts = new (mem) ThreadState();
  ts->map_bytes = bytes;
  ts->own = own;
  ts->tid.store(tid);
  ts->ring.init(static_cast<uint8_t*>(mem) + sizeof(ThreadState), kRingBytes);
  uint32_t h = tid_hash(tid);
  for (int i = 0; i < kTableSize; ++i) {
    ThreadState* s = g->table[h].load(std::memory_order_relaxed);
    if (!s || s == kTombstone) break;
    h = (h + 1) & (kTableSize - 1);
  }
  g->table[h].store(ts, std::memory_order_release);
  g->live.push_back(ts);
  g->counters.threads_seen.fetch_add(1);
  if (!arm_timer(ts, tid)) {
    g->counters.threads_unsampled.fetch_add(1);
  } else if (g->timer_kind == TimerKind::None) {
    g->timer_kind = ts->timer_kind;
  }
  return ts;
}

void free_thread_state(ThreadState* ts) {
  size_t bytes = ts->map_bytes;
  ts->~ThreadState();
  munmap(ts, bytes);
}

// The sampling signal runs on an alternate stack (SA_ONSTACK) on threads that register themselves: JIT code
// that keeps live data below its stack pointer past the 128-byte red zone (oneDNN's sgemm kernels inside
// TensorFlow do) would otherwise have it overwritten by the signal frame — the target then corrupts its heap.
// gperftools' SIGPROF crashes the same TensorFlow program that way; with the alternate stack it runs clean.
constexpr size_t kAltStackBytes = 64 * 1024;
__thread void* t_alt_stack __attribute__((tls_model("initial-exec"))) = nullptr;

void install_alt_stack() {
  stack_t cur{};
  if (sigaltstack(nullptr, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return;  // keep the program's own
  void* mem = mmap(nullptr, kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return;
  stack_t st{};
  st.ss_sp = mem;
  st.ss_size = kAltStackBytes;
  if (sigaltstack(&st, nullptr) != 0) {
    munmap(mem, kAltStackBytes);
    return;
  }
  t_alt_stack = mem;
}

void remove_alt_stack() {
  if (!t_alt_stack) return;
  stack_t cur{};
  if (sigaltstack(nullptr, &cur) == 0 && cur.ss_sp == t_alt_stack && !(cur.ss_flags & SS_ONSTACK)) {
    stack_t off{};
    off.ss_flags = SS_DISABLE;
    if (sigaltstack(&off, nullptr) == 0) munmap(t_alt_stack, kAltStackBytes);
  }
  t_alt_stack = nullptr;
}

void on_thread_exit(void* p) {
  auto* ts = static_cast<ThreadState*>(p);
  t_state = nullptr;  // before retiring: the drain frees retired states, and a late signal must not use it
  std::atomic_signal_fence(std::memory_order_seq_cst);
  remove_alt_stack();
  if (!g || !ts) return;
  std::lock_guard<std::mutex> lk(g->reg_mu);
  if (std::find(g->live.begin(), g->live.end(), ts) != g->live.end()) retire_locked(ts);
}

void register_current_thread() {
  install_alt_stack();
  t_state = nullptr;
  ThreadState* ts = register_thread(sys_gettid(), true);
  if (ts) {
    pthread_setspecific(g->key, ts);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_state = ts;
  }
}

struct StartArgs {
  void* (*fn)(void*);
  void* arg;
};

void* thread_trampoline(void* p) {
  StartArgs a = *static_cast<StartArgs*>(p);
  std::free(p);
  if (g && g->state.load() == kRunning) register_current_thread();
  return a.fn(a.arg);
}

// ---------------------------------------------------------------------------------------------------------
// Module maps.

struct ModuleRange {
  uintptr_t lo, hi, bias;
  int index;  // into Drainer::module_paths
};

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string read_build_id(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const uint8_t* name = p + sizeof(ElfW(Nhdr));
      const uint8_t* desc = name + ((nh->n_namesz + 3) & ~3u);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + nh->n_descsz <= end)
        return hex(desc, nh->n_descsz);
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return {};
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "[exe]";
  buf[n] = 0;
  return buf;
}

std::string read_small_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return {};
  char buf[4096];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// The collector thread's state: this process's partial store and its dedup tables.

struct PairHash {
  size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<int64_t>()(p.first * 1000003) ^ std::hash<int64_t>()(p.second);
  }
};

class Drainer {
 public:
  explicit Drainer(std::string parts_dir) : parts_dir_(std::move(parts_dir)), pid_(getpid()) {}

  // Opens the part lazily: a process that forks and execs at once leaves no empty part behind.
  store::StoreWriter& writer() {
    if (!writer_) {
      char name[128];
      std::snprintf(name, sizeof name, "/%d-%lld.db", int(pid_), (long long)clock_ns(CLOCK_MONOTONIC));
      store::WriterOptions opt;
      opt.batch_rows = 1 << 20;  // we commit on our own cadence
      opt.fsync = false;         // a part must survive this process dying, not the machine: no disk syncs
      writer_ = std::make_unique<store::StoreWriter>(parts_dir_ + name, opt);
      writer_->set_meta("clock_domain", "CLOCK_MONOTONIC");
      writer_->set_meta("source", "stepscope-collector");
      store::Process p;
      p.pid = pid_;
      std::string exe = self_exe();
      std::string comm = read_small_file("/proc/self/comm");
      p.name = writer_->intern(exe.empty() ? comm : exe.substr(exe.rfind('/') + 1));
      p.parent_pid = getppid();
      writer_->add(p);
    }
    return *writer_;
  }
  bool has_writer() const { return writer_ != nullptr; }
  // After fork the child must not touch the parent's SQLite handle: forget it without closing.
  void abandon_after_fork() {
    (void)writer_.release();
  }

  void refresh_modules() {
    struct Ctx {
      Drainer* self;
      std::vector<ModuleRange> ranges;
    } ctx{this, {}};
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) -> int {
          auto* c = static_cast<Ctx*>(data);
          std::string path = info->dlpi_name ? info->dlpi_name : "";
          if (path.empty()) path = c->self->exe_path_;
          int index = c->self->module_index(path);
          bool fresh = c->self->modules_written_.insert(path + "@" + std::to_string(info->dlpi_addr)).second;
          std::string build_id = fresh ? read_build_id(info) : std::string();
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
            uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
            c->ranges.push_back({lo, hi, info->dlpi_addr, index});
            if (fresh) {
              store::Module m;
              m.pid = c->self->pid_;
              m.path = c->self->writer().intern(path);
              m.build_id = c->self->writer().intern(build_id);
              m.start = static_cast<int64_t>(lo);
              m.end = static_cast<int64_t>(hi);
              m.file_offset = static_cast<int64_t>(ph.p_offset);
              c->self->writer().add(m);
            }
          }
          return 0;
        },
        &ctx);
    std::sort(ctx.ranges.begin(), ctx.ranges.end(),
              [](const ModuleRange& a, const ModuleRange& b) { return a.lo < b.lo; });
    ranges_ = std::move(ctx.ranges);
    raw_stacks_.clear();  // a library may have been replaced at the same addresses
    last_refresh_ns_ = clock_ns(CLOCK_MONOTONIC);
  }

  const ModuleRange* find_module(uintptr_t pc) {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pc,
                               [](uintptr_t v, const ModuleRange& r) { return v < r.lo; });
    if (it == ranges_.begin()) return nullptr;
    --it;
    return pc < it->hi ? &*it : nullptr;
  }

  int64_t native_frame(uintptr_t pc, bool leaf) {
    const ModuleRange* m = find_module(pc);
    if (!m && clock_ns(CLOCK_MONOTONIC) - last_refresh_ns_ > 50000000) {  // a dlopen since the last look
      refresh_modules();
      m = find_module(pc);
    }
    // Return addresses point after the call; step back into it so file:line names the call site.
    uintptr_t addr = leaf ? pc : pc - 1;
    int64_t mod = m ? m->index : -1;
    int64_t rel = m ? static_cast<int64_t>(addr - m->bias) : static_cast<int64_t>(addr);
    auto key = std::make_pair(mod, rel);
    auto it = frames_.find(key);
    if (it != frames_.end()) return it->second;
    store::Frame f;
    f.id = ++last_frame_;
    f.module = writer().intern(m ? module_paths_[m->index] : "[unknown]");
    f.address = rel;
    f.kind = store::FrameKind::Native;
    writer().add(f);
    frames_.emplace(key, f.id);
    return f.id;
  }

  int64_t python_frame(const python::RawPyFrame& pf) {
    auto key = std::make_pair(static_cast<int64_t>(pf.code), static_cast<int64_t>(pf.instr_offset));
    auto it = py_frames_.find(key);
    if (it != py_frames_.end()) return it->second;
    store::Frame f;
    f.id = ++last_frame_;
    f.module = writer().intern("python");
    f.kind = store::FrameKind::Python;
#if STEPSCOPE_HAVE_PYTHON
    std::string function, file;
    int line = 0;
    if (python::resolve(pf, function, file, line)) {
      f.symbol = writer().intern(function);
      f.file = writer().intern(file);
      f.line = line;
    } else {
      f.symbol = writer().intern("[python]");
    }
#else
    f.symbol = writer().intern("[python]");
#endif
    writer().add(f);
    py_frames_.emplace(key, f.id);
    return f.id;
  }

  bool is_eval_frame(uintptr_t pc) {
#if STEPSCOPE_HAVE_PYTHON
    return g->python_ready.load() && python::is_eval_frame(pc);
#else
    (void)pc;
    return false;
#endif
  }

  int64_t stack_node(int64_t parent, int64_t frame) {
    auto key = std::make_pair(parent, frame);
    auto it = stacks_.find(key);
    if (it != stacks_.end()) return it->second;
    store::Stack s;
    s.id = ++last_stack_;
    s.parent = parent;
    s.frame = frame;
    writer().add(s);
    stacks_.emplace(key, s.id);
    return s.id;
  }

  void add_sample(const uint8_t* rec, size_t len) {
    if (len < sizeof(SampleHeader)) return;
    SampleHeader h;
    std::memcpy(&h, rec, sizeof h);
    const size_t n_pc_bytes = h.n_pcs * sizeof(void*), n_py_bytes = h.n_py * sizeof(python::RawPyFrame);
    if (sizeof h + n_pc_bytes + n_py_bytes > len) return;
    if (!ranges_.size()) refresh_modules();

    // Most samples repeat a stack seen before: look the raw PCs (and raw Python frames) up first, and only
    // map PCs to modules and walk the prefix tree for a stack not seen yet.
    raw_key_.assign(reinterpret_cast<const char*>(rec + sizeof h), n_pc_bytes + n_py_bytes);
    int64_t node;
    if (auto it = raw_stacks_.find(raw_key_); it != raw_stacks_.end()) {
      node = it->second;
    } else {
      node = intern_stack(rec + sizeof h, h.n_pcs, rec + sizeof h + n_pc_bytes, h.n_py);
      if (raw_stacks_.size() >= kMaxRawStacks) raw_stacks_.clear();  // bounded memory (Python's varied stacks)
      raw_stacks_.emplace(raw_key_, node);
    }

    if (threads_named_.insert(h.tid).second) {
      store::Thread t;
      t.pid = pid_;
      t.tid = h.tid;
      t.name = writer().intern(read_small_file("/proc/self/task/" + std::to_string(h.tid) + "/comm"));
      writer().add(t);
    }
    store::Sample s;
    s.time = h.time;
    s.pid = pid_;
    s.tid = h.tid;
    s.stack = node;
    s.on_cpu = h.on_cpu != 0;
    writer().add(s);
  }

  // The prefix-tree node of one raw stack (PCs innermost first, then the raw Python frames).
  int64_t intern_stack(const uint8_t* pc_bytes, size_t n_pcs, const uint8_t* py_bytes, size_t n_py) {
    pcs_.resize(n_pcs);
    std::memcpy(pcs_.data(), pc_bytes, n_pcs * sizeof(void*));
    py_.resize(n_py);
    std::memcpy(static_cast<void*>(py_.data()), py_bytes, n_py * sizeof(python::RawPyFrame));
    // Frames innermost first, Python frames spliced in place of each evaluator frame up to its entry frame.
    frame_ids_.clear();
    size_t py_i = 0;
    bool spliced = false;
    for (size_t i = 0; i < pcs_.size(); ++i) {
      if (py_i < py_.size() && is_eval_frame(pcs_[i])) {
        while (py_i < py_.size()) {
          const auto& pf = py_[py_i++];
          frame_ids_.push_back(python_frame(pf));
          spliced = true;
          if (pf.is_entry) break;
        }
        continue;
      }
      frame_ids_.push_back(native_frame(pcs_[i], i == 0));
    }
    if (!spliced && !py_.empty()) {  // no evaluator frame found natively: Python frames as the leaf
      std::vector<int64_t> with_py;
      for (const auto& pf : py_) with_py.push_back(python_frame(pf));
      with_py.insert(with_py.end(), frame_ids_.begin(), frame_ids_.end());
      frame_ids_.swap(with_py);
    }
    int64_t node = 0;
    for (auto it = frame_ids_.rbegin(); it != frame_ids_.rend(); ++it) node = stack_node(node, *it);
    return node;
  }

  void append_pending(store::Trace& rows) {
    for (const auto& t : rows.threads) threads_named_.insert(static_cast<int32_t>(t.tid));
    writer().append(rows);
  }

  void write_meta(const std::map<std::string, std::string>& meta) {
    for (const auto& [k, v] : meta) writer().set_meta(k, v);
  }

  void commit() {
    if (writer_) writer_->flush();
  }
  void close() {
    if (writer_) writer_->close();
  }

  std::string exe_path_ = self_exe();

 private:
  int module_index(const std::string& path) {
    auto it = module_ids_.find(path);
    if (it != module_ids_.end()) return it->second;
    module_paths_.push_back(path);
    int id = static_cast<int>(module_paths_.size() - 1);
    module_ids_.emplace(path, id);
    return id;
  }

  std::string parts_dir_;
  int32_t pid_;
  std::unique_ptr<store::StoreWriter> writer_;
  std::vector<ModuleRange> ranges_;
  std::vector<std::string> module_paths_;
  std::unordered_map<std::string, int> module_ids_;
  std::unordered_set<std::string> modules_written_;
  int64_t last_refresh_ns_ = 0;
  std::unordered_map<std::pair<int64_t, int64_t>, int64_t, PairHash> frames_, py_frames_, stacks_;
  int64_t last_frame_ = 0, last_stack_ = 0;
  std::unordered_set<int32_t> threads_named_;
  std::vector<int64_t> frame_ids_;
  std::vector<uintptr_t> pcs_;
  std::vector<python::RawPyFrame> py_;
  std::string raw_key_;
  std::unordered_map<std::string, int64_t> raw_stacks_;  // raw PCs + raw Python frames → stack node
};

Drainer* g_drainer = nullptr;

void counters_to_meta(std::map<std::string, std::string>& m) {
  auto& c = g->counters;
  m["collector.samples"] = std::to_string(c.samples.load());
  m["collector.dropped_samples"] = std::to_string(c.dropped_ring_full.load());
  m["collector.unknown_thread_signals"] = std::to_string(c.unknown_thread.load());
  m["collector.unwind_failed"] = std::to_string(c.unwind_failed.load());
  m["collector.in_loader_samples"] = std::to_string(c.in_loader.load());
  m["collector.threads"] = std::to_string(c.threads_seen.load());
  m["collector.threads_unsampled"] = std::to_string(c.threads_unsampled.load());
  uint64_t total = 0, seen = 0;
  for (auto& b : c.handler_hist) total += b.load();
  for (int i = 0; i < 64 && total; ++i) {
    seen += c.handler_hist[i].load();
    if (seen * 2 >= total) {
      m["collector.handler_ns_median"] = std::to_string(i * 100 + 50);  // bucket midpoint
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
  std::snprintf(buf, sizeof buf, "%.6f", double(g->start_ns) / 1e9);
  m["collector.start_s"] = buf;
  if (const int sig = g->flush_signal.load()) m["collector.end"] = std::string("signal ") + std::to_string(sig);
  m["collector.cpu_hz"] = std::to_string(g->config.cpu_hz);
  m["collector.signal"] = std::to_string(g->signo);
}

// One pass: drain every ring (live and retired), append pending rows, free drained retired threads.
void drain_once() {
  std::vector<ThreadState*> rings, done;
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    rings = g->live;
    done.swap(g->retired);
    rings.insert(rings.end(), done.begin(), done.end());
  }
  for (ThreadState* ts : rings)
    ts->ring.drain([&](const uint8_t* rec, size_t len) { g_drainer->add_sample(rec, len); });
  for (ThreadState* ts : done) free_thread_state(ts);
  store::Trace rows;
  {
    std::lock_guard<std::mutex> lk(g->pending.mu);
    std::swap(rows, g->pending.rows);
  }
  if (!rows.kernels.empty() || !rows.memcpys.empty() || !rows.memsets.empty() || !rows.api_calls.empty() ||
      !rows.syncs.empty() || !rows.ranges.empty() || !rows.data_waits.empty() || !rows.steps.empty() ||
      !rows.devices.empty() || !rows.threads.empty())
    g_drainer->append_pending(rows);
}

void poll_tasks() {
  DIR* d = opendir("/proc/self/task");
  if (!d) return;
  std::vector<int32_t> tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  std::sort(tids.begin(), tids.end());
  const int32_t self = g->collector_tid.load();
  std::vector<int32_t> fresh;
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    for (ThreadState* ts : std::vector<ThreadState*>(g->live))
      if (!ts->own && !std::binary_search(tids.begin(), tids.end(), ts->tid.load())) retire_locked(ts);
    for (int32_t tid : tids)
      if (tid != self && !lookup(tid)) fresh.push_back(tid);
  }
  for (int32_t tid : fresh) register_thread(tid, false);
}

void write_status_meta() {
  std::map<std::string, std::string> m;
  {
    std::lock_guard<std::mutex> lk(g->meta_mu);
    m = g->meta;
  }
  counters_to_meta(m);
  g_drainer->write_meta(m);
}

void* collector_main(void*) {
  g->collector_tid.store(sys_gettid());
  pthread_setname_np(pthread_self(), "stepscope");
#if STEPSCOPE_HAVE_PYTHON
  try {
    if (python::init()) g->python_ready.store(true, std::memory_order_release);
  } catch (...) {
  }
#endif
  int64_t last_commit = clock_ns(CLOCK_MONOTONIC), last_poll = 0, last_meta = 0;
  bool final_pass = false;
  while (!final_pass) {
    {
      std::unique_lock<std::mutex> lk(g->wake_mu);
      g->wake_cv.wait_for(lk, std::chrono::milliseconds(kDrainPeriodMs),
                          [] { return g->stop_requested || g->flush_signal.load() != 0; });
      final_pass = g->stop_requested || g->flush_signal.load() != 0;
    }
    try {
      if (final_pass) cupti::flush(true);
      std::lock_guard<std::mutex> io(g->io_mu);
      const int64_t now = clock_ns(CLOCK_MONOTONIC);
      if (!final_pass && now - last_poll >= kTaskPollPeriodMs * 1000000LL) {
        poll_tasks();
        last_poll = now;
      }
      drain_once();
      if (final_pass || now - last_meta >= 1000000000LL) {
        if (final_pass && !g->flush_signal.load()) set_process_meta("collector.end", "exit");
        if (g_drainer->has_writer() || final_pass) write_status_meta();
        last_meta = now;
      }
      if (final_pass || now - last_commit >= kCommitPeriodMs * 1000000LL) {
        g_drainer->commit();
        last_commit = now;
      }
      // No close(): the part is only read back by the launcher, so the target does not wait for index
      // creation and a WAL checkpoint at exit; the committed WAL is read like a killed process's part.
    } catch (const std::exception& e) {
      // The collector never takes the target down: report once and stop recording.
      std::fprintf(stderr, "stepscope: collector stopped in pid %d: %s\n", int(getpid()), e.what());
      g->state.store(kStopping);
      break;
    }
  }
  g->final_done.store(true);
  {
    std::lock_guard<std::mutex> lk(g->wake_mu);
    g->stopped = true;
  }
  g->wake_cv.notify_all();
  return nullptr;
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

int pick_signal() {
  for (int s = SIGRTMAX - 3; s > SIGRTMIN + 4; --s) {
    struct sigaction cur{};
    if (sigaction(s, nullptr, &cur) == 0 && cur.sa_handler == SIG_DFL) return s;
  }
  return 0;
}

void find_loader_range() {
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) -> int {
        if (!info->dlpi_name || !std::strstr(info->dlpi_name, "ld-linux")) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
          g->ldso_lo = info->dlpi_addr + ph.p_vaddr;
          g->ldso_hi = g->ldso_lo + ph.p_memsz;
        }
        return 1;
      },
      nullptr);
}

void atfork_prepare();
void install_termination_standins();
void atfork_parent();
void atfork_child();

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

void load_config(Config& c) {
  const char* dir = std::getenv("STEPSCOPE_PARTS_DIR");
  c.parts_dir = dir ? dir : "";
  if (const char* hz = std::getenv("STEPSCOPE_CPU_HZ")) c.cpu_hz = std::clamp(std::atoi(hz), 1, 20000);
  c.wall = env_flag("STEPSCOPE_WALL");
  c.no_gpu = env_flag("STEPSCOPE_NO_GPU");
  try {
    if (const char* r = std::getenv("STEPSCOPE_DATA_WAIT_REGEX"); r && *r)
      c.data_wait_regex = std::regex(r, std::regex::icase | std::regex::optimize);
    if (const char* r = std::getenv("STEPSCOPE_STEP_REGEX"); r && *r) {
      c.step_regex = std::regex(r, std::regex::icase | std::regex::optimize);
      c.has_step_regex = true;
    }
  } catch (const std::regex_error&) {
    std::fprintf(stderr, "stepscope: ignoring an invalid --data-wait-regex/--step-regex\n");
  }
}

// Starts recording in this process. Works at process start (LD_PRELOAD constructor) and later (dlopen into a
// running process): existing threads are found through /proc/self/task.
void start() {
  if (g && g->state.load() != kOff) return;
  const int64_t t0 = clock_ns(CLOCK_MONOTONIC);
  if (!g) {
    g = new Globals();
    for (auto& s : g->table) s.store(nullptr, std::memory_order_relaxed);
  }
  load_config(g->config);
  if (g->config.parts_dir.empty()) return;
  g->pid = getpid();
  if (!real_pthread_create)
    real_pthread_create = reinterpret_cast<pthread_create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
  if (!real_pthread_create) return;
  g->signo = pick_signal();
  if (!g->signo) {
    std::fprintf(stderr, "stepscope: no free real-time signal; not sampling pid %d\n", int(getpid()));
    return;
  }
  g->period_ns = 1000000000LL / g->config.cpu_hz;
  find_loader_range();
  if (!load_libunwind()) {
    std::fprintf(stderr, "stepscope: cannot load libunwind.so.8; not sampling pid %d\n", int(getpid()));
    return;
  }
  struct sigaction sa{};
  sa.sa_sigaction = on_sample_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(g->signo, &sa, nullptr);
  pthread_key_create(&g->key, on_thread_exit);
  static bool atfork_done = false;
  if (!atfork_done) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atfork_done = true;
  }
  g_drainer = new Drainer(g->config.parts_dir);
  g->state.store(kRunning);
  register_current_thread();
  start_collector_thread();
  install_termination_standins();
  g->start_ns = clock_ns(CLOCK_MONOTONIC) - t0;
  if (!g->config.no_gpu) cupti::start_if_possible("start");
}

// ---------------------------------------------------------------------------------------------------------
// Termination signals. SIGINT, SIGTERM and SIGHUP with the default action would end the process without the
// final drain that exit() gets. Where the program left them at SIG_DFL, a stand-in handler asks the collector
// thread for its final pass, waits for it (bounded), restores SIG_DFL and re-raises: the process still dies of
// the same signal. sigaction()/signal() are interposed so the program never sees the stand-in: it reads
// SIG_DFL, and installing its own handler replaces the stand-in as it would replace SIG_DFL (CPython only
// installs its KeyboardInterrupt handler over SIG_DFL, so it must see SIG_DFL).

using sigaction_fn = int (*)(int, const struct sigaction*, struct sigaction*);
sigaction_fn real_sigaction_fn = nullptr;
constexpr int kTerminationSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kMaxSignal = 65;
std::atomic<bool> g_standin[kMaxSignal];  // the stand-in is installed for this signal
constexpr int kFlushWaitMs = 2000;

sigaction_fn real_sigaction() {
  if (!real_sigaction_fn) real_sigaction_fn = reinterpret_cast<sigaction_fn>(dlsym(RTLD_NEXT, "sigaction"));
  return real_sigaction_fn;
}

void on_termination_signal(int sig, siginfo_t*, void*) {
  const int saved_errno = errno;
  if (g && g->state.load() == kRunning) {
    int expected = 0;
    g->flush_signal.compare_exchange_strong(expected, sig);
    g->state.store(kStopping);  // sample handlers capture no more; the final pass drains what they captured
  }
  if (g && g->flush_signal.load() != 0) {
    // The collector thread looks at flush_signal at least every kDrainPeriodMs. Bounded: a thread frozen here
    // may hold a lock the collector needs (then the process ends with what was committed).
    for (int waited = 0; waited < kFlushWaitMs && !g->final_done.load(); waited += 2) {
      timespec ts{0, 2000000};
      nanosleep(&ts, nullptr);
    }
  }
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  real_sigaction_fn(sig, &dfl, nullptr);
  g_standin[sig].store(false);
  // `sig` is blocked while this handler runs: the re-raised signal is delivered, with the default action, as
  // soon as it returns.
  raise(sig);
  errno = saved_errno;
}

void install_termination_standins() {
  if (!real_sigaction()) return;
  for (int sig : kTerminationSignals) {
    struct sigaction cur{};
    if (real_sigaction_fn(sig, nullptr, &cur) != 0 || cur.sa_handler != SIG_DFL) continue;  // program's own, or SIG_IGN
    struct sigaction sa{};
    sa.sa_sigaction = on_termination_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int other : kTerminationSignals) sigaddset(&sa.sa_mask, other);
    if (real_sigaction_fn(sig, &sa, nullptr) == 0) g_standin[sig].store(true);
  }
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
  g->wake_cv.wait_for(lk, std::chrono::seconds(5), [] { return g->stopped; });
  g->state.store(kStopping);
}

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
  g_drainer = new Drainer(g->config.parts_dir);  // the parent's (copied) tables are leaked, not freed
  {
    std::lock_guard<std::mutex> lk(g->reg_mu);
    for (auto& s : g->table) s.store(nullptr, std::memory_order_relaxed);
    for (ThreadState* ts : g->live) {
      // Descriptors of the parent's perf events must not be disabled (they are shared); just close ours.
      if (ts->timer_kind == TimerKind::PerfEvent && ts->perf_fd >= 0) close(ts->perf_fd);
      free_thread_state(ts);
    }
    for (ThreadState* ts : g->retired) free_thread_state(ts);
    g->live.clear();
    g->retired.clear();
  }
  {
    std::lock_guard<std::mutex> lk(g->pending.mu);
    g->pending.rows = store::Trace();
    g->pending.step_sequences.clear();
  }
  {
    std::lock_guard<std::mutex> lk(g->meta_mu);
    g->meta.clear();
  }
  auto& c = g->counters;
  for (auto* a : {&c.samples, &c.dropped_ring_full, &c.unknown_thread, &c.unwind_failed, &c.in_loader,
                  &c.threads_seen, &c.threads_unsampled})
    a->store(0);
  for (auto& b : c.handler_hist) b.store(0);
  cupti::after_fork_child();
  register_current_thread();
  start_collector_thread();
}

__attribute__((constructor)) void collector_init() {
  if (!std::getenv("STEPSCOPE_PARTS_DIR")) return;
  try {
    start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepscope: collector not started: %s\n", e.what());
  }
}

__attribute__((destructor)) void collector_fini() { stop(); }

thread_local std::vector<std::pair<int64_t, std::string>> t_data_waits;

}  // namespace

bool running() { return g && g->state.load(std::memory_order_relaxed) == kRunning; }
const Config& config() { return g->config; }
int64_t now_ns() { return clock_ns(CLOCK_MONOTONIC); }
int32_t current_tid() { return sys_gettid(); }
PendingRows& pending() { return g->pending; }

void set_process_meta(const std::string& key, const std::string& value) {
  if (!g) return;
  std::lock_guard<std::mutex> lk(g->meta_mu);
  g->meta[key] = value;
}

void add_step_boundary(int64_t t, int32_t tid, const char* source) {
  if (!running()) return;
  auto& p = g->pending;
  const char* name = source && *source ? source : "api";
  std::lock_guard<std::mutex> lk(p.mu);
  PendingRows::StepSequence& seq = p.step_sequences[name];
  if (seq.last_boundary >= 0 && t > seq.last_boundary) {
    store::Step s;
    s.index = seq.next_index++;
    s.start = seq.last_boundary;
    s.end = t;
    s.source = p.rows.intern(name);
    s.pid = getpid();
    s.tid = tid;
    p.rows.steps.push_back(s);
  }
  seq.last_boundary = t;
}

}  // namespace stepscope::collector

// ---------------------------------------------------------------------------------------------------------
// Exported entry points.

using namespace stepscope::collector;

extern "C" {

// Interposed so every new thread registers itself (ring, warmed unwinder, its own timer) before user code.
__attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                          void* (*fn)(void*), void* arg) {
  if (!real_pthread_create) {
    real_pthread_create = reinterpret_cast<pthread_create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
    if (!real_pthread_create) return EAGAIN;
  }
  if (!running()) return real_pthread_create(thread, attr, fn, arg);
  auto* a = static_cast<StartArgs*>(std::malloc(sizeof(StartArgs)));
  if (!a) return real_pthread_create(thread, attr, fn, arg);
  a->fn = fn;
  a->arg = arg;
  int rc = real_pthread_create(thread, attr, thread_trampoline, a);
  if (rc != 0) std::free(a);
  return rc;
}

// While the stand-in handler replaces SIG_DFL (see install_termination_standins), the program sees SIG_DFL.
__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  sigaction_fn real = real_sigaction();
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  if (sig <= 0 || sig >= kMaxSignal || !g_standin[sig].load()) return real(sig, act, old);
  struct sigaction prev{};
  int rc;
  if (act && act->sa_handler == SIG_DFL) {
    rc = real(sig, nullptr, &prev);  // "back to the default": the stand-in stays (it ends the same way)
  } else {
    rc = real(sig, act, &prev);
    if (rc == 0 && act) g_standin[sig].store(false);
  }
  if (rc == 0 && old) {
    *old = prev;
    if (prev.sa_sigaction == on_termination_signal) {
      *old = {};
      old->sa_handler = SIG_DFL;
      sigemptyset(&old->sa_mask);
    }
  }
  return rc;
}

__attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t handler) {
  using signal_fn = sighandler_t (*)(int, sighandler_t);
  static signal_fn real_signal = reinterpret_cast<signal_fn>(dlsym(RTLD_NEXT, "signal"));
  if (sig <= 0 || sig >= kMaxSignal || !g_standin[sig].load())
    return real_signal ? real_signal(sig, handler) : SIG_ERR;
  // glibc's signal(): BSD semantics.
  struct sigaction act{}, old{};
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

__attribute__((visibility("default"))) int stepscope_collector_active(void) { return running() ? 1 : 0; }

__attribute__((visibility("default"))) void stepscope_collector_step(const char* source) {
  add_step_boundary(now_ns(), current_tid(), source);
}

__attribute__((visibility("default"))) void stepscope_collector_step_at(int64_t t_ns, const char* source) {
  add_step_boundary(t_ns, current_tid(), source);
}

__attribute__((visibility("default"))) void stepscope_collector_data_wait(int64_t start_ns, int64_t end_ns,
                                                                          const char* source) {
  if (!running() || end_ns < start_ns) return;
  auto& p = pending();
  std::lock_guard<std::mutex> lk(p.mu);
  stepscope::store::DataWait w;
  w.start = start_ns;
  w.end = end_ns;
  w.pid = getpid();
  w.tid = current_tid();
  w.source = p.rows.intern(source && *source ? source : "api");
  p.rows.data_waits.push_back(w);
}

__attribute__((visibility("default"))) void stepscope_collector_data_wait_begin(const char* source) {
  if (!running()) return;
  t_data_waits.emplace_back(now_ns(), source && *source ? source : "api");
}

__attribute__((visibility("default"))) void stepscope_collector_data_wait_end(void) {
  if (!running() || t_data_waits.empty()) return;
  auto [start, source] = t_data_waits.back();
  t_data_waits.pop_back();
  stepscope_collector_data_wait(start, now_ns(), source.c_str());
}

}  // extern "C"
