// `stepscope top PID`: attaches (a flight window with no trigger) and refreshes once a second: the trainer's
// pace, GPU and data-wait shares, the training thread's functions and Python lines, and the findings of the
// last window (docs/flight.md, "stepscope top"). `q` or Ctrl-C detaches; the program keeps running.
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

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

// The terminal in "one key at a time, no echo" while top runs (only when stdin is one); restored on every
// exit.
class RawTerminal {
 public:
  RawTerminal() {
    if (!isatty(0) || tcgetattr(0, &old_) != 0) return;
    termios raw = old_;
    raw.c_lflag &= tcflag_t(~(ICANON | ECHO));
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    active_ = tcsetattr(0, TCSANOW, &raw) == 0;
  }
  ~RawTerminal() {
    if (active_) tcsetattr(0, TCSANOW, &old_);
  }

 private:
  termios old_{};
  bool active_ = false;
};

int columns() {
  winsize ws{};
  if (isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 100;
}

std::string clock_now() {
  const time_t t = time(nullptr);
  tm local{};
  localtime_r(&t, &local);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &local);
  return buf;
}

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

  // q on stdin, or SIGINT/SIGTERM/SIGHUP (taken synchronously), ends it.
  sigset_t stop, old_mask;
  sigemptyset(&stop);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, s);
  pthread_sigmask(SIG_BLOCK, &stop, &old_mask);
  struct MaskGuard {
    sigset_t old;
    ~MaskGuard() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } mask_guard{old_mask};

  std::unique_ptr<collector::LiveWindow> live;
  try {
    live = std::make_unique<collector::LiveWindow>(pid, o.record, window_s, scratch + "/w");
  } catch (const collector::AttachError& e) {
    std::fprintf(stderr, "stepscope: top: %s\n", e.what());
    return 1;
  }
  RawTerminal terminal;
  const bool tty = isatty(1);
  std::string ending = "q";
  for (int shown = 0; o.iterations <= 0 || shown < o.iterations;) {
    // Wait one interval, watching for q and the stop signals.
    const int64_t step_ms = 50;
    bool quit = false;
    for (int64_t waited = 0; waited < int64_t(interval_s * 1000) && !quit; waited += step_ms) {
      timespec zero{0, 0};
      if (sigtimedwait(&stop, nullptr, &zero) > 0) {
        quit = true;
        ending = "signal";
        break;
      }
      pollfd p{0, POLLIN, 0};
      if (poll(&p, 1, int(step_ms)) > 0 && (p.revents & POLLIN)) {
        char c = 0;
        if (read(0, &c, 1) == 1 && (c == 'q' || c == 'Q')) quit = true;
      }
    }
    if (quit) break;
    const std::string store_path = scratch + "/window.db";
    std::string error;
    if (!live->snapshot(store_path, error)) {
      std::fprintf(stderr, "stepscope: top: process %d: %s\n", int(pid), error.c_str());
      ending = "gone";
      break;
    }
    std::string text;
    try {
      const store::Trace trace = store::StoreReader(store_path).load();
      const analyzer::Analysis a = analyzer::analyze(trace);
      const auto view = analyzer::live_view(trace, a);
      const std::string title = "stepscope top - pid " + std::to_string(pid) + " - last " + o.window + " - " +
                                clock_now() + "   (q or Ctrl-C: detach)";
      text = analyzer::render_live_view(view, title, columns());
    } catch (const std::exception& e) {
      text = std::string("stepscope top: cannot read the window: ") + e.what() + "\n";
    }
    // Over SSH in any terminal: cursor home and clear, then plain lines. Piped: one block per refresh.
    if (tty) std::fputs("\x1b[H\x1b[2J", stdout);
    std::fputs(text.c_str(), stdout);
    if (!tty) std::fputs("--\n", stdout);
    std::fflush(stdout);
    ++shown;
  }
  const bool gone = ending == "gone";
  live.reset();  // closes the window: the program keeps running
  if (!gone) std::fprintf(stderr, "stepscope: top: detached from %d (it keeps running)\n", int(pid));
  return 0;
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
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--cpu-hz", o->record.cpu_hz, "Samples per second per thread")
      ->capture_default_str()
      ->check(CLI::Range(1, 20000));
  cmd->add_flag("--wall,!--cpu-time", o->record.wall, "Wall-clock samples (default) or CPU time only");
  cmd->add_flag("--no-gpu", o->record.no_gpu, "Do not trace CUDA activity");
  cmd->add_option("--step-func", o->record.step_func, "Python functions matching this mark steps");
  cmd->add_option("--data-wait-func", o->record.data_wait_func,
                  "Python functions matching this are data waits");
  cmd->callback([o, pid, &exit_code]() { exit_code = run_top(*pid, *o); });
});

#endif

}  // namespace
}  // namespace stepscope::cli
