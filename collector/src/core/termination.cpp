#include "termination.h"

#include <dlfcn.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <ctime>
#include <iterator>
#include <vector>

#include "core/collector_state.h"

namespace stepscope::collector {
namespace {

using sigaction_fn = int (*)(int, const struct sigaction*, struct sigaction*);
sigaction_fn real_sigaction_fn = nullptr;
constexpr int kTerminationSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
constexpr int kMaxSignal = 65;
std::atomic<bool> g_standin[kMaxSignal];  // the stand-in is installed for this signal
constexpr int kFlushWaitMs = 2000;

sigaction_fn real_sigaction() {
  if (!real_sigaction_fn) real_sigaction_fn = reinterpret_cast<sigaction_fn>(dlsym(RTLD_NEXT, "sigaction"));
  return real_sigaction_fn;
}

// Asks the collector thread for its final pass and waits for it, bounded. Async-signal-safe (atomics and
// nanosleep only): it runs in signal handlers and in _exit, which programs call from signal handlers.
void final_flush(int reason) {
  if (g && g->state.load() == kRunning) {
    int expected = 0;
    g->flush_signal.compare_exchange_strong(expected, reason);
    g->state.store(kStopping);  // sample handlers capture no more; the final pass drains what they captured
  }
  if (g && g->flush_signal.load() != 0) {
    // The collector thread looks at flush_signal at least every drain period (100 ms at most). Bounded: a
    // thread frozen here may hold a lock the collector needs (then the process ends with what was committed).
    for (int waited = 0; waited < kFlushWaitMs && !g->final_done.load(); waited += 2) {
      timespec ts{0, 2000000};
      nanosleep(&ts, nullptr);
    }
  }
}

void on_termination_signal(int sig, siginfo_t*, void*) {
  const int saved_errno = errno;
  final_flush(sig);
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

}  // namespace

void install_termination_standins(bool crash_signals) {
  if (!real_sigaction()) return;
  std::vector<int> signals(std::begin(kTerminationSignals), std::end(kTerminationSignals));
  if (crash_signals) signals.insert(signals.end(), std::begin(kCrashSignals), std::end(kCrashSignals));
  for (int sig : signals) {
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


}  // namespace stepscope::collector

using namespace stepscope::collector;

extern "C" {

// Programs that end with _exit skip atexit handlers and destructors, and with them the final drain: dash ends
// every script so, and Python's multiprocessing children (DataLoader workers) end with os._exit. Without this
// stand-in the samples since the last commit were lost. Only in the process that owns the collector: a vfork
// child shares the parent's memory (and its collector) but has its own pid.
[[noreturn]] static void exit_after_final_flush(int status) {
  if (g && g->pid == getpid() && g->state.load() == kRunning && sys_gettid() != g->collector_tid.load())
    final_flush(kFlushOnExit);
  for (;;) syscall(SYS_exit_group, status);
}

// CPython ends an uncaught KeyboardInterrupt by finalizing, restoring SIGINT's default action and sending it to
// itself: the process dies of the signal without running this library's exit code, so the last samples and a
// flight recording's exit save were lost. The Python hooks call this from the interpreter's last atexit handler
// when that is how it ends: the final pass runs as the stand-in would run it, for `sig`. Recordings that started
// with the process only (record): a window's end is its attacher's.
__attribute__((visibility("default"))) void stepscope_collector_python_interrupted(int sig) {
  if (g && !g->windowed && g->pid == getpid() && g->state.load() == kRunning && sig > 0 &&
      sys_gettid() != g->collector_tid.load())
    final_flush(sig);
}

__attribute__((visibility("default"))) void _exit(int status) { exit_after_final_flush(status); }
__attribute__((visibility("default"))) void _Exit(int status) { exit_after_final_flush(status); }

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

}  // extern "C"
