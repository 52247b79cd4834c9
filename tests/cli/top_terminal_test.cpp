// `stepscope top PID` as a terminal tool (issue 47): real targets, `top` on a real pseudo-terminal as a job
// of a small job-control shell written here (its own process group, the terminal's foreground or not), the
// terminal's modes read back after every signal and `stty -a` run inside the terminal at the end; `top` with
// no terminal at all (its CPU time), the target's exit, and the refusals.
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_support.h"

namespace test = stepscope::test;

namespace {

const std::string kCli = STEPSCOPE_CLI;

int64_t mono_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

bool wait_until(const std::function<bool()>& pred, int timeout_ms) {
  for (const int64_t until = mono_ms() + timeout_ms; mono_ms() < until;) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

bool ptrace_disabled() {
  return test::run_shell("cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null").output.rfind("3", 0) == 0;
}

// The process's state letter from /proc (R, S, T, Z, ...), '?' when it is gone.
char state_of(pid_t pid) {
  const std::string s = test::slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = s.rfind(')');
  return paren == std::string::npos || paren + 2 >= s.size() ? '?' : s[paren + 2];
}

// A target: a real program started here, killed and reaped at scope end.
struct Target {
  pid_t pid = -1;
  explicit Target(std::vector<std::string> args) {
    pid = fork();
    if (pid == 0) {
      const int null = open("/dev/null", O_RDWR);
      dup2(null, 0);
      dup2(null, 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    // Running its own program (not the fork of this test) before anyone attaches.
    wait_until(
        [&] { return test::slurp("/proc/" + std::to_string(pid) + "/cmdline").rfind(args[0], 0) == 0; },
        5000);
  }
  int wait() {
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) == pid) pid = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  bool running() const { return pid > 0 && state_of(pid) != 'Z' && state_of(pid) != '?'; }
  ~Target() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

Target sleeper(const std::string& seconds) {
  return Target({"/bin/sleep", seconds});
}

// `stepscope top ARGS` as a job on a new pseudo-terminal (100x40). The terminal's session leader plays the
// job-control shell: it puts top in a process group of its own, gives it the terminal (foreground) or not,
// waits for it, takes the terminal back, prints "top-exit=N" and runs `stty -a` there.
struct PtyJob {
  pid_t shell = -1, top = -1;
  int master = -1;
  std::string screen;

  PtyJob(const std::vector<std::string>& top_args, bool foreground, const std::string& stderr_file) {
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = 100;
    int to_test[2];
    REQUIRE(pipe(to_test) == 0);
    std::fflush(stdout);
    shell = forkpty(&master, nullptr, nullptr, &ws);
    REQUIRE(shell >= 0);
    if (shell == 0) {
      close(to_test[0]);
      signal(SIGTTOU, SIG_IGN);  // the shell takes the terminal back from a background position
      const pid_t job = fork();
      if (job == 0) {
        setpgid(0, 0);
        if (foreground) tcsetpgrp(0, getpid());
        for (int s : {SIGTTOU, SIGTTIN, SIGTSTP, SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD})
          signal(s, SIG_DFL);
        const int err = open(stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(err, 2);
        std::vector<std::string> args{kCli, "top"};
        args.insert(args.end(), top_args.begin(), top_args.end());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
      }
      setpgid(job, job);
      if (foreground) tcsetpgrp(0, job);
      (void)!write(to_test[1], &job, sizeof job);
      close(to_test[1]);
      int st = 0;
      while (waitpid(job, &st, 0) < 0 && errno == EINTR) {
      }
      tcsetpgrp(0, getpgrp());
      std::printf("\ntop-exit=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
      std::fflush(stdout);
      execl("/bin/stty", "stty", "-a", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_test[1]);
    REQUIRE(read(to_test[0], &top, sizeof top) == ssize_t(sizeof top));
    close(to_test[0]);
  }
  ~PtyJob() {
    if (top > 0 && state_of(top) != '?') kill(top, SIGKILL);
    if (shell > 0) {
      kill(shell, SIGKILL);
      waitpid(shell, nullptr, 0);
    }
    if (master >= 0) close(master);
  }

  void read_for(int ms) { test::read_terminal_for(master, ms, screen); }
  bool read_until(const std::string& needle, int timeout_ms, size_t from = 0) {
    for (const int64_t until = mono_ms() + timeout_ms; mono_ms() < until; read_for(50))
      if (screen.find(needle, from) != std::string::npos) return true;
    return screen.find(needle, from) != std::string::npos;
  }
  // The terminal's local modes as `stty` sees them (on Linux the master reads the slave's termios).
  tcflag_t lflag() const {
    termios t{};
    if (tcgetattr(master, &t) != 0) return ~tcflag_t(0);
    return t.c_lflag;
  }
  bool raw() const { return !(lflag() & ICANON) && !(lflag() & ECHO); }
  bool cooked() const { return (lflag() & ICANON) && (lflag() & ECHO); }
  // The exit status the shell printed, then what `stty -a` printed after it; -1 before the shell's line.
  int finish(std::string& stty) {
    read_until("top-exit=", 30000);
    read_until("\n", 5000, screen.find("top-exit="));
    read_until("rows", 5000, screen.find("top-exit="));
    read_for(200);  // the rest of stty's lines
    const size_t at = screen.find("top-exit=");
    if (at == std::string::npos) return -1;
    stty = screen.substr(at);
    return std::atoi(screen.c_str() + at + 9);
  }
};

// `stty -a` shows the flag itself, not "-flag".
bool stty_has(const std::string& stty, const std::string& flag) {
  return std::regex_search(stty, std::regex("(^|[\\s;])" + flag + "([\\s;]|$)"));
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The control channel's status of the collector in `pid` ("ok recording ...", "ok dormant ..."), or "".
std::string collector_status(pid_t pid) {
  const std::string path =
      "/tmp/stepscope-" + std::to_string(geteuid()) + "/" + std::to_string(pid) + ".sock";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    (void)!write(fd, "status\n\n", 8);
    char buf[256];
    for (ssize_t n; reply.find('\n') == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0;)
      reply.append(buf, size_t(n));
  }
  close(fd);
  return reply;
}

}  // namespace

TEST_CASE(
    "top in a terminal: Ctrl-Z gives the terminal back and stops, fg makes it raw again, Ctrl-C restores "
    "it") {
  if (ptrace_disabled()) STEPSCOPE_SKIP("ptrace is disabled here (kernel.yama.ptrace_scope = 3)");
  test::ScratchDir dir("top_terminal_keys");
  Target target = sleeper("60");
  PtyJob job({std::to_string(target.pid), "--interval", "300ms", "--window", "3s"}, true,
             dir.file("top.err"));
  REQUIRE(job.read_until("stepscope top - pid " + std::to_string(target.pid), 20000));
  INFO(job.screen);
  CHECK(job.raw());

  (void)!write(job.master, "\x1a", 1);  // Ctrl-Z
  CHECK(wait_until([&] { return state_of(job.top) == 'T'; }, 5000));
  CHECK(job.cooked());  // given back before stopping

  const size_t before = job.screen.size();
  kill(-job.top, SIGCONT);  // what `fg` does: the job keeps the terminal
  CHECK(wait_until([&] { return state_of(job.top) != 'T' && job.raw(); }, 5000));
  CHECK(job.read_until("stepscope top - pid", 5000, before));  // drawn again

  (void)!write(job.master, "\x03", 1);  // Ctrl-C
  std::string stty;
  CHECK(job.finish(stty) == 0);
  INFO(stty);
  CHECK(stty_has(stty, "icanon"));
  CHECK(stty_has(stty, "echo"));
  const std::string err = test::slurp(dir.file("top.err"));
  CHECK(err == "stepscope: top: detached from " + std::to_string(target.pid) + " (it keeps running)\n");
  CHECK(target.running());
}

TEST_CASE("top in a terminal: SIGTERM and SIGHUP restore the terminal, detach, exit 128 + the signal") {
  if (ptrace_disabled()) STEPSCOPE_SKIP("ptrace is disabled here (kernel.yama.ptrace_scope = 3)");
  test::ScratchDir dir("top_terminal_signals");
  Target target = sleeper("60");
  for (int sig : {SIGTERM, SIGHUP}) {
    INFO(strsignal(sig));
    PtyJob job({std::to_string(target.pid), "--interval", "300ms", "--window", "3s"}, true,
               dir.file("top.err"));
    REQUIRE(job.read_until("stepscope top - pid " + std::to_string(target.pid), 20000));
    CHECK(job.raw());
    kill(job.top, sig);
    std::string stty;
    CHECK(job.finish(stty) == 128 + sig);
    INFO(stty);
    CHECK(stty_has(stty, "icanon"));
    CHECK(stty_has(stty, "echo"));
    CHECK(test::slurp(dir.file("top.err")) ==
          "stepscope: top: detached from " + std::to_string(target.pid) + " (it keeps running)\n");
    // Detached: the window is closed, the collector dormant, the target runs on.
    CHECK(collector_status(target.pid).rfind("ok dormant", 0) == 0);
    CHECK(target.running());
  }
}

TEST_CASE("top in a background process group leaves the terminal alone and ends on SIGTERM") {
  if (ptrace_disabled()) STEPSCOPE_SKIP("ptrace is disabled here (kernel.yama.ptrace_scope = 3)");
  test::ScratchDir dir("top_terminal_background");
  Target target = sleeper("60");
  PtyJob job({std::to_string(target.pid), "--interval", "300ms", "--window", "3s"}, false,
             dir.file("top.err"));
  REQUIRE(job.read_until("stepscope top - pid " + std::to_string(target.pid), 20000));
  job.read_for(700);  // two more refreshes
  INFO(job.screen);
  CHECK(state_of(job.top) != 'T');  // not stopped by SIGTTOU (tcsetattr) or SIGTTIN (a read of the terminal)
  CHECK(job.cooked());
  kill(job.top, SIGTERM);
  std::string stty;
  CHECK(job.finish(stty) == 128 + SIGTERM);
  CHECK(stty_has(stty, "icanon"));
  CHECK(stty_has(stty, "echo"));
  CHECK(target.running());
}

TEST_CASE("top in a terminal: the target's exit is one line and exit 0, the terminal restored") {
  if (ptrace_disabled()) STEPSCOPE_SKIP("ptrace is disabled here (kernel.yama.ptrace_scope = 3)");
  test::ScratchDir dir("top_terminal_target_exit");
  Target target = sleeper("3");
  const pid_t pid = target.pid;
  PtyJob job({std::to_string(pid), "--interval", "300ms", "--window", "3s"}, true, dir.file("top.err"));
  REQUIRE(job.read_until("stepscope top - pid " + std::to_string(pid), 20000));
  CHECK(job.raw());
  CHECK(target.wait() == 0);  // reaped here: top sees it gone
  const int64_t t_exit = mono_ms();
  std::string stty;
  CHECK(job.finish(stty) == 0);
  CHECK(mono_ms() - t_exit < 3000);  // noticed at once, not at some later refresh
  INFO(stty);
  CHECK(stty_has(stty, "icanon"));
  CHECK(stty_has(stty, "echo"));
  CHECK(test::slurp(dir.file("top.err")) == "stepscope: top: process " + std::to_string(pid) + " exited\n");
}

TEST_CASE("top with no terminal: one plain refresh per interval, at most 0.2 CPU-seconds per second") {
  if (ptrace_disabled()) STEPSCOPE_SKIP("ptrace is disabled here (kernel.yama.ptrace_scope = 3)");
  test::ScratchDir dir("top_no_terminal");
  // 30 frames deep, a step every ~10 ms: a window to symbolize and analyze like a trainer's.
  Target target(
      {test::binary_dir() + "/samples/cpu/hot_loop", "--iterations", "40000000000", "--steps", "8000"});
  const int refreshes = 6;
  const std::string out = dir.file("top.out"), err = dir.file("top.err");
  const int64_t t0 = mono_ms();
  const pid_t top = fork();
  if (top == 0) {
    // stdin /dev/null: always readable, at its end at once; stdout and stderr files.
    const int null = open("/dev/null", O_RDONLY);
    dup2(null, 0);
    dup2(open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 1);
    dup2(open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 2);
    execl(kCli.c_str(), kCli.c_str(), "top", std::to_string(target.pid).c_str(), "--interval", "500ms",
          "--iterations", std::to_string(refreshes).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int st = 0;
  rusage ru{};
  REQUIRE(wait4(top, &st, 0, &ru) == top);
  const double wall_s = double(mono_ms() - t0) / 1000;
  const double cpu_s = double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  const std::string text = test::slurp(out);
  INFO(text);
  INFO(test::slurp(err));
  std::printf("top, no terminal: %d refreshes in %.2f s, %.3f CPU-s (%.3f CPU-s per s)\n", refreshes, wall_s,
              cpu_s, cpu_s / wall_s);
  REQUIRE(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);
  CHECK(text.find('\x1b') == std::string::npos);  // plain lines
  int blocks = 0, titles = 0;
  for (const auto& line : lines_of(text)) {
    blocks += line == "--";
    titles += line.rfind("stepscope top - pid " + std::to_string(target.pid), 0) == 0;
  }
  CHECK(blocks == refreshes);
  CHECK(titles == refreshes);
  CHECK(wall_s >= refreshes * 0.5 - 0.05);  // the interval kept, not a refresh as fast as it can
  CHECK(cpu_s / wall_s <= 0.2);
  CHECK(target.running());
}

TEST_CASE("top on a missing pid or on one another stepscope records: one line naming the pid, exit 2") {
  if (ptrace_disabled()) STEPSCOPE_SKIP("ptrace is disabled here (kernel.yama.ptrace_scope = 3)");
  test::ScratchDir dir("top_refusals");
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  auto r = test::run_shell(test::shell_quote(kCli) + " top " + std::to_string(gone) + " 2>&1 </dev/null");
  CHECK(r.status == 2);
  CHECK(lines_of(r.output).size() == 1);
  CHECK(r.output.find("no such process: " + std::to_string(gone)) != std::string::npos);

  Target target = sleeper("60");
  test::Spawned attach =
      test::spawn_shell("exec " + test::shell_quote(kCli) + " attach " + std::to_string(target.pid) +
                        " --no-gpu --duration 60 -o " + test::shell_quote(dir.file("a.db")) + " >" +
                        test::shell_quote(dir.file("attach.log")) + " 2>&1");
  REQUIRE(wait_until([&] { return collector_status(target.pid).rfind("ok recording", 0) == 0; }, 15000));
  r = test::run_shell(test::shell_quote(kCli) + " top " + std::to_string(target.pid) + " 2>&1 </dev/null");
  INFO(r.output);
  CHECK(r.status == 2);
  CHECK(lines_of(r.output).size() == 1);
  CHECK(r.output.find("process " + std::to_string(target.pid) + " is being recorded by another stepscope") !=
        std::string::npos);
  CHECK(collector_status(target.pid).rfind("ok recording", 0) == 0);  // the attach's window is left alone
  kill(attach.pid, SIGINT);
  CHECK(attach.wait() == 0);
  INFO(test::slurp(dir.file("attach.log")));
  CHECK(target.running());
}
