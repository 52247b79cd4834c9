#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_support.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/auxv.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "launcher/launcher_clock.h"

extern char** environ;

namespace fs = std::filesystem;

namespace stepscope::collector::checkup {

std::string strf(const char* format, ...) {
  va_list ap, again;
  va_start(ap, format);
  va_copy(again, ap);
  char buf[512];
  const int n = std::vsnprintf(buf, sizeof buf, format, ap);
  std::string s = n < 0 ? std::string() : std::string(size_t(n), '\0');
  if (n >= 0) std::vsnprintf(s.data(), size_t(n) + 1, format, again);
  va_end(again);
  va_end(ap);
  return s;
}

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

std::string read_trimmed(const std::string& path, bool* exists) {
  std::ifstream f(path);
  if (exists) *exists = bool(f);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string first_line(const std::string& s) {
  const auto start = s.find_first_not_of(" \t\n");
  if (start == std::string::npos) return {};
  return s.substr(start, s.find('\n', start) - start);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

bool have_capability(int bit) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> bit) & 1;
  return false;
}

std::string loaded_path(void* handle) {
  link_map* lm = nullptr;
  if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
    return lm->l_name;
  return "?";
}

volatile sig_atomic_t g_stop = 0;
void on_stop(int sig) {
  g_stop = sig;
}
void stop_if_asked(int launcher_signal) {
  if (launcher_signal) g_stop = launcher_signal;
  if (g_stop) throw Interrupted{};
}

Captured capture(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                 int timeout_ms) {
  Captured r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return r;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    bool replaced = false;
    for (const auto& a : env_add) replaced |= s.compare(0, a.find('=') + 1, a, 0, a.find('=') + 1) == 0;
    if (!replaced) env.push_back(s);
  }
  env.insert(env.end(), env_add.begin(), env_add.end());
  std::vector<char*> envp, args;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return r;
  }
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  const int64_t deadline = mono_ns() + int64_t(timeout_ms) * 1000000;
  bool killed = false;
  for (;;) {
    const int64_t left_ms = (deadline - mono_ns()) / 1000000;
    if (left_ms <= 0 && !killed) {
      kill(pid, SIGKILL);
      killed = true;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, killed ? 1000 : int(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) break;
    if (!(p.revents & (POLLIN | POLLHUP))) {
      if (killed) break;
      continue;
    }
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (r.out.size() < (1 << 16)) r.out.append(buf, size_t(n));
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  if (killed) r.out = strf("killed after %d s without finishing", timeout_ms / 1000);
  return r;
}

std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string c = (dir.empty() ? "." : dir) + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(c, ec) && access(c.c_str(), X_OK) == 0) return c;
  }
  return {};
}

std::string dynamic_loader() {
  struct Ctx {
    uintptr_t base;
    std::string name;
  } ctx{uintptr_t(getauxval(AT_BASE)), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* c = static_cast<Ctx*>(data);
        if (c->base && info->dlpi_addr == c->base && info->dlpi_name && *info->dlpi_name)
          c->name = info->dlpi_name;
        return 0;
      },
      &ctx);
  return ctx.name.empty() ? "/lib64/ld-linux-x86-64.so.2" : ctx.name;
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

}  // namespace stepscope::collector::checkup
