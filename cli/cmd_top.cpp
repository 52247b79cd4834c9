// `stepscope top PID`: attaches (a flight window with no trigger) and refreshes once a second: the trainer's
// pace, GPU and data-wait shares, the training thread's functions and Python lines, and the findings of the
// last window (docs/flight.md, "stepscope top"). `q` or Ctrl-C detaches; the program keeps running.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "command.h"
#include "recording_options.h"

#if defined(HAVE_STEPSCOPE_ATTACH) && defined(HAVE_STEPSCOPE_ANALYZER)
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/live_view.h"
#include "stepscope/collector/attach.h"
#include "stepscope/store/store.h"
#endif

namespace stepscope::cli {
namespace {

#if defined(HAVE_STEPSCOPE_ATTACH) && defined(HAVE_STEPSCOPE_ANALYZER)

struct TopOptions {
  collector::RecordOptions record;
  std::string window = "10s", interval = "1s";
  int iterations = 0;  // 0: until q or Ctrl-C
};

int64_t top_clock_ns(clockid_t clock = CLOCK_MONOTONIC) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// stdin is a terminal and this process is in its foreground process group: only then may top change its modes
// or read it (a background job would be stopped by SIGTTOU in tcsetattr, or by SIGTTIN in read).
bool terminal_is_ours() {
  return isatty(0) && tcgetpgrp(0) == getpgrp();
}

// The terminal in "one key at a time, no echo" while top runs in the foreground; the user's modes are put
// back on every exit, before a stop (Ctrl-Z) and whenever top finds itself in the background.
class RawTerminal {
 public:
  ~RawTerminal() { restore(); }
  void enter() {
    if (active_ || !terminal_is_ours() || tcgetattr(0, &saved_) != 0) return;
    termios raw = saved_;
    raw.c_lflag &= tcflag_t(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = set(raw);
  }
  void restore() {
    if (active_) set(saved_);
    active_ = false;
  }

 private:
  // SIGTTOU blocked for the call: should top have been moved to the background since the check, the call
  // completes instead of stopping top with the terminal still raw.
  static bool set(const termios& t) {
    sigset_t ttou, old;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, &old);
    const bool ok = tcsetattr(0, TCSANOW, &t) == 0;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return ok;
  }
  termios saved_{};
  bool active_ = false;
};

// The terminal's width; not a terminal (a log, a pipe): no width to fit, so no line is cut.
int columns() {
  if (const int n = terminal_columns(); n > 0) return n;
  return isatty(1) ? 100 : 1 << 20;
}

std::string clock_now() {
  const time_t t = time(nullptr);
  tm local{};
  localtime_r(&t, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

// Whether `pid` still runs: a zombie (its parent has not reaped it yet) has ended.
bool target_running(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (!std::getline(f, s)) return false;
  const auto paren = s.rfind(')');
  return paren != std::string::npos && paren + 2 < s.size() && s[paren + 2] != 'Z' && s[paren + 2] != 'X';
}

// The target's end is watched with a pidfd, readable once it exits (Linux 5.3+); without one, top looks at
// /proc at least this often. So often too it looks whose the terminal is.
constexpr int kTopCheckMs = 250;

int open_exit_watch(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// One refresh: the view and its title, or why the window could not be read.
struct TopRefresh {
  analyzer::LiveView view;
  std::string title, error;
};

// Sets `sig` to `handler`, the previous action in `old`.
void top_signal_action(int sig, void (*handler)(int), struct sigaction* old) {
  struct sigaction sa = {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, old);
}

// What ended the loop.
enum class TopEnding { Quit, Iterations, Signal, TargetExited, TargetFailed, OutputClosed };

int run_top(pid_t pid, TopOptions& o) {
  double window_s = 0, interval_s = 0;
  if (!parse_seconds(o.window, window_s) || window_s <= 0) {
    std::fprintf(stderr, "stepscope: top: --window: expected a duration like 10s, got %s\n",
                 o.window.c_str());
    return 2;
  }
  if (!parse_seconds(o.interval, interval_s) || interval_s < 0.1) {
    std::fprintf(stderr, "stepscope: top: --interval: expected a duration of at least 100ms, got %s\n",
                 o.interval.c_str());
    return 2;
  }
  char tmpl[] = "/tmp/stepscope-top-XXXXXX";
  if (!mkdtemp(tmpl)) {
    std::fprintf(stderr, "stepscope: top: cannot make a scratch folder in /tmp\n");
    return 1;
  }
  const std::string scratch = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{scratch};

  // The signals that end top or stop it are taken synchronously (a signalfd in the wait below), so that each
  // one restores the terminal and closes the window first. One the caller ignores stays ignored (nohup keeps
  // SIGHUP away, a script's `top &` SIGINT). SIGCONT and SIGWINCH only wake the loop; a write to a closed
  // pipe fails with EPIPE instead of killing top before it detaches.
  sigset_t taken, old_mask;
  sigemptyset(&taken);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGTSTP}) {
    struct sigaction now = {};
    if (sigaction(s, nullptr, &now) != 0 || now.sa_handler != SIG_IGN) sigaddset(&taken, s);
  }
  sigaddset(&taken, SIGCONT);
  sigaddset(&taken, SIGWINCH);
  pthread_sigmask(SIG_BLOCK, &taken, &old_mask);
  struct sigaction old_pipe = {};
  top_signal_action(SIGPIPE, SIG_IGN, &old_pipe);
  struct SignalGuard {
    sigset_t taken, old;
    struct sigaction pipe;
    ~SignalGuard() {
      // What arrived during the detach is done with: unblocked, a pending SIGTERM would kill top now.
      timespec zero{0, 0};
      while (sigtimedwait(&taken, nullptr, &zero) > 0) {
      }
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      sigaction(SIGPIPE, &pipe, nullptr);
    }
  } signal_guard{taken, old_mask, old_pipe};
  struct Fd {
    int fd;
    ~Fd() {
      if (fd >= 0) close(fd);
    }
  } signals{signalfd(-1, &taken, SFD_CLOEXEC | SFD_NONBLOCK)};

  std::unique_ptr<collector::LiveWindow> live;
  try {
    live = std::make_unique<collector::LiveWindow>(pid, o.record, window_s, scratch + "/w");
  } catch (const collector::AttachError& e) {
    // A missing process, one another stepscope records, no permission: like `stepscope attach`, exit 2.
    std::fprintf(stderr, "stepscope: top: %s\n", e.what());
    return 2;
  }
  Fd exit_watch{open_exit_watch(pid)};

  RawTerminal terminal;  // entered in the wait below
  const bool tty = isatty(1);
  // stdin is read for `q` while it can say something: not once it is at its end (a pipe, /dev/null) or when
  // it is a terminal top is in the background of.
  bool stdin_open = true;
  TopEnding ending = TopEnding::Quit;
  int end_signal = 0;
  std::string failure;
  std::optional<TopRefresh> last_view;  // redrawn at the terminal's new width (SIGWINCH) and after a stop
  const int64_t interval_ns = int64_t(interval_s * 1e9);
  int64_t next_refresh = top_clock_ns() + interval_ns;

  // False when the output is gone (a closed pipe, a hung-up terminal).
  auto show = [&](const TopRefresh& s) {
    const std::string text =
        s.error.empty() ? analyzer::render_live_view(s.view, s.title, columns()) : s.error;
    // Over SSH in any terminal: cursor home and clear, then plain lines. Piped: one block per refresh.
    const std::string out = tty ? "\x1b[H\x1b[2J" + text : text + "--\n";
    return std::fwrite(out.data(), 1, out.size(), stdout) == out.size() && std::fflush(stdout) == 0;
  };
  // The next signal taken, or 0.
  auto take_signal = [&]() -> int {
    if (signals.fd < 0) {
      timespec zero{0, 0};
      return std::max(0, sigtimedwait(&taken, nullptr, &zero));
    }
    signalfd_siginfo si{};
    return read(signals.fd, &si, sizeof si) == ssize_t(sizeof si) ? int(si.ssi_signo) : 0;
  };

  for (int shown = 0; o.iterations <= 0 || shown < o.iterations;) {
    // Wait for the next refresh, watching the stop signals, the target's end and q.
    bool done = false;
    while (!done) {
      const int64_t left_ns = next_refresh - top_clock_ns();
      if (left_ns <= 0) break;
      // `fg` of a job running in the background sends no SIGCONT: whose the terminal is, is looked at on each
      // wake-up, at least every kTopCheckMs on a terminal.
      const bool ours = terminal_is_ours();
      if (ours)
        terminal.enter();
      else
        terminal.restore();
      const bool read_stdin = stdin_open && (!isatty(0) || ours);
      pollfd p[3] = {{signals.fd, POLLIN, 0}, {exit_watch.fd, POLLIN, 0}, {read_stdin ? 0 : -1, POLLIN, 0}};
      int timeout_ms = int(std::min<int64_t>((left_ns + 999999) / 1000000, 60000));
      if (exit_watch.fd < 0 || signals.fd < 0 || isatty(0)) timeout_ms = std::min(timeout_ms, kTopCheckMs);
      (void)poll(p, 3, timeout_ms);  // EINTR: a signal, taken just below
      int sig = take_signal();
      if (sig > 0) {
        if (sig == SIGTSTP) {
          // Ctrl-Z: the user's terminal back, then stop for real (the default action, unblocked just for it).
          terminal.restore();
          std::fflush(stdout);
          sigset_t tstp;
          sigemptyset(&tstp);
          sigaddset(&tstp, SIGTSTP);
          raise(SIGTSTP);
          pthread_sigmask(SIG_UNBLOCK, &tstp, nullptr);  // stops here until SIGCONT
          pthread_sigmask(SIG_BLOCK, &tstp, nullptr);
          sig = SIGCONT;
        }
        if (sig == SIGCONT || sig == SIGWINCH) {
          // Continued in the foreground (fg): raw again (above, on the next turn) and the last view redrawn;
          // in the background (bg): the terminal stays the shell's.
          if (tty && last_view && !show(*last_view)) {
            ending = TopEnding::OutputClosed;
            done = true;
          }
          continue;
        }
        ending = TopEnding::Signal;
        end_signal = sig;
        done = true;
        break;
      }
      if ((exit_watch.fd >= 0 && (p[1].revents & POLLIN)) || (exit_watch.fd < 0 && !target_running(pid))) {
        ending = TopEnding::TargetExited;
        done = true;
        break;
      }
      if (read_stdin && p[2].revents) {
        char keys[64];
        const ssize_t n = (p[2].revents & POLLIN) ? read(0, keys, sizeof keys) : -1;
        if (n > 0 &&
            (std::find(keys, keys + n, 'q') != keys + n || std::find(keys, keys + n, 'Q') != keys + n)) {
          ending = TopEnding::Quit;
          done = true;
        } else if ((n == 0 && !isatty(0)) || (n < 0 && errno != EAGAIN && errno != EINTR) ||
                   (p[2].revents & (POLLHUP | POLLERR | POLLNVAL))) {
          stdin_open = false;  // at its end, or hung up: polling it again would return at once, forever
        }
      }
    }
    if (done) break;

    const int64_t cpu_start = top_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    const std::string store_path = scratch + "/window.db";
    std::string error;
    if (!live->snapshot(store_path, error)) {
      // An ending process stops answering before it is gone: give it a moment to be seen to exit.
      for (int i = 0; i < 40 && target_running(pid); ++i) {
        timespec ts{0, 50000000};
        nanosleep(&ts, nullptr);
      }
      ending = target_running(pid) ? TopEnding::TargetFailed : TopEnding::TargetExited;
      failure = error;
      break;
    }
    TopRefresh now;
    try {
      const store::Trace trace = store::StoreReader(store_path).load();
      const analyzer::Analysis a = analyzer::analyze(trace);
      now.view = analyzer::live_view(trace, a);
      now.title = "stepscope top - pid " + std::to_string(pid) + " - last " + o.window + " - " + clock_now() +
                  "   (q or Ctrl-C: detach)";
    } catch (const std::exception& e) {
      now.error = std::string("stepscope top: cannot read the window: ") + e.what() + "\n";
    }
    last_view = now;
    if (!show(now)) {
      ending = TopEnding::OutputClosed;
      break;
    }
    ++shown;
    ending = TopEnding::Iterations;
    // The same pace whatever a refresh costs, except that top never takes more than a fifth of a core from
    // the machine it watches: a refresh that cost C CPU-seconds is followed by at least 5 C of rest (a sixth,
    // with room for the attach and the detach).
    const int64_t cpu_ns = top_clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
    const int64_t t = top_clock_ns();
    next_refresh = std::max(next_refresh + interval_ns, t);  // behind (a stop, a slow snapshot): on from now
    next_refresh = std::max(next_refresh, t + 5 * cpu_ns);
  }

  terminal.restore();
  if (ending == TopEnding::TargetExited) {
    std::fprintf(stderr, "stepscope: top: process %d exited\n", int(pid));
    return 0;
  }
  live.reset();  // closes the window: the program keeps running
  if (ending == TopEnding::TargetFailed) {
    std::fprintf(stderr, "stepscope: top: process %d: %s\n", int(pid), failure.c_str());
    return 1;
  }
  std::fprintf(stderr, "stepscope: top: detached from %d (it keeps running)\n", int(pid));
  // Ctrl-C is the ordinary way out (0); SIGTERM and SIGHUP end it as they end any program (128 + the signal).
  return ending == TopEnding::Signal && end_signal != SIGINT ? 128 + end_signal : 0;
}

CommandRegistration top_command(14, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("top",
                                 "Live view of a running trainer: pace, GPU and data-wait shares, hot "
                                 "functions and Python lines, findings; q or Ctrl-C detaches");
  auto o = std::make_shared<TopOptions>();
  auto pid = std::make_shared<int>(0);
  o->record.cpu_hz = 100;
  o->record.wall = true;
  cmd->add_option("pid", *pid, "Process to watch")->required();
  cmd->add_option("--window", o->window, "What each refresh analyzes: the last DURATION")
      ->capture_default_str();
  cmd->add_option("--interval", o->interval, "Time between refreshes")->capture_default_str();
  cmd->add_option("--iterations", o->iterations, "Refreshes before detaching (0: until q or Ctrl-C)")
      ->capture_default_str()
      ->check(at_least_zero(true));
  cmd->add_option("--cpu-hz", o->record.cpu_hz, "Samples per second per thread")
      ->capture_default_str()
      ->check(CLI::Range(1, 20000));
  cmd->add_flag("--wall,!--cpu-time", o->record.wall, "Wall-clock samples (default) or CPU time only");
  cmd->add_flag("--no-gpu", o->record.no_gpu, "Do not trace CUDA activity");
  cmd->add_option("--step-func", o->record.step_func, "Python functions matching this mark steps")
      ->check(python_regex_option());
  cmd->add_option("--data-wait-func", o->record.data_wait_func,
                  "Python functions matching this are data waits")
      ->check(python_regex_option());
  cmd->callback([o, pid, &exit_code]() { exit_code = run_top(*pid, *o); });
});

#endif

}  // namespace
}  // namespace stepscope::cli
