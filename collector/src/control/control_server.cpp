// The control thread inside the target: see control_server.h and control_protocol.h.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "control_server.h"
#include "flight/flight_recorder.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "control/control_protocol.h"

namespace stepscope::collector::control {
namespace {

constexpr int kHighFd = 900;           // out of the program's own descriptor numbering, like the timers' fds
constexpr int kRequestTimeoutS = 5;    // a client that connects and sends nothing is dropped
constexpr int kExitWaitS = 5;  // at exit, how long a request in progress (a window closing) is waited for
// A socket file younger than this may be one whose process is between bind() and listen(): never judged
// stale.
constexpr time_t kStaleSocketAgeS = 60;

struct Server {
  std::mutex mu;
  // Held from a request's decoding to its reply's write: the process's exit waits for it, so a window that
  // closes as the program ends is closed whole (its part complete) and answered.
  std::timed_mutex serving;
  std::atomic<bool> ending{false};  // quiesce_for_exit has run: requests are refused unanswered
  int fd = -1;
  pid_t pid = 0;  // the process that listens (a forked child must not unlink its parent's socket)
  std::string path;
  std::atomic<uint64_t> page_to_unmap{0};
  std::atomic<int32_t> tid{0};  // the injector's page, unmapped once its call has returned
  bool atfork_registered = false;
};
Server* g_server = nullptr;  // never destroyed: the thread runs until the process ends

void after_fork_child() {
  // The listening thread did not survive the fork; the child's copy of the descriptor belongs to the parent.
  if (!g_server) return;
  new (&g_server->mu) std::mutex();
  new (&g_server->serving) std::timed_mutex();
  if (g_server->fd >= 0) close(g_server->fd);
  g_server->fd = -1;
  g_server->pid = 0;
  g_server->tid.store(0);
  g_server->path.clear();
}

std::string handle(const Request& req) {
  if (req.command == "status") return std::string("ok ") + (window_open() ? "recording" : "dormant") + " pid=" + std::to_string(getpid());
  if (req.command == "start") {
    if (window_open()) return "error already recording";
    std::string error;
    if (!open_window(req.options, error)) return "error " + error;
    return "ok recording";
  }
  if (req.command == "stop") {
    if (!window_open()) return "ok dormant";
    std::string result, error;
    if (!close_window(result, error)) return "error " + error;
    return "ok stopped " + result;
  }
  if (req.command == "dump" || req.command == "snapshot") {
    // The flight recorder's window: a save of every process (dump), or this process's part for `stepscope top`.
    auto it = req.options.find("dir");
    if (req.command == "snapshot" && (it == req.options.end() || it->second.empty())) return "error snapshot needs dir=";
    std::string result, error;
    if (!flight::request(req.command, it == req.options.end() ? std::string() : it->second, result, error))
      return "error " + error;
    return "ok " + result;
  }
  return "error unknown command " + req.command;
}

void serve(int client) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(client, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || (cred.uid != geteuid() && cred.uid != 0)) {
    static const char kDenied[] = "error permission denied\n";
    (void)!write(client, kDenied, sizeof kDenied - 1);
    return;
  }
  timeval tv{kRequestTimeoutS, 0};
  setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string text;
  Request req;
  char buf[4096];
  while (text.size() < kMaxRequestBytes) {
    const ssize_t n = read(client, buf, sizeof buf);
    if (n <= 0) return;
    text.append(buf, size_t(n));
    if (text.find("\n\n") != std::string::npos) break;
  }
  if (!decode(text, req)) return;
  std::unique_lock<std::timed_mutex> serving(g_server->serving);
  if (g_server->ending.load())
    return;  // the process is ending: the client sees no reply and looks at the pid
  if (const uint64_t page = g_server->page_to_unmap.exchange(0)) munmap(reinterpret_cast<void*>(page), 4096);
  std::string reply;
  try {
    reply = handle(req);
  } catch (const std::exception& e) {
    reply = std::string("error ") + e.what();
  }
  for (char& c : reply)
    if (c == '\n') c = ' ';
  reply += "\n";
  (void)!write(client, reply.data(), reply.size());
}

void* listen_main(void* arg) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(arg));
  g_server->tid.store(static_cast<int32_t>(syscall(SYS_gettid)));
  pthread_setname_np(pthread_self(), "stepscope-ctl");
  for (;;) {
    const int client = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return nullptr;  // the descriptor is gone (a forked child closed its copy) or broken: stop listening
    }
    serve(client);
    close(client);
  }
}

// Sockets of processes that ended without removing theirs (SIGKILL, the OOM killer), which would pile up in
// the directory. A pid that exists here is left without a look; one that does not may belong to another pid
// namespace sharing /tmp, so only a connection refused (nobody listens on that socket) removes the file, and
// only the file that was looked at.
void remove_stale_sockets(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  const time_t now = time(nullptr);
  while (const dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || end == e->d_name || std::strcmp(end, ".sock") != 0 || pid == long(getpid())) continue;
    if (kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string path = dir + "/" + e->d_name;
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid() ||
        now - st.st_mtime < kStaleSocketAgeS)
      continue;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof addr.sun_path) continue;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) break;
    // Non-blocking: a listener whose backlog is full answers EAGAIN (alive), where a blocking connect waits.
    const bool refused =
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno == ECONNREFUSED;
    close(fd);
    struct stat again {};
    // The same file, still old: a process of that pid that re-bound it meanwhile (an inode number reused) has
    // a fresh one, between its bind() and listen().
    if (refused && lstat(path.c_str(), &again) == 0 && again.st_ino == st.st_ino &&
        again.st_dev == st.st_dev && time(nullptr) - again.st_mtime >= kStaleSocketAgeS &&
        again.st_ctime == st.st_ctime)
      unlink(path.c_str());
  }
  closedir(d);
}

bool private_dir(const std::string& dir, std::string& error) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error = "cannot create " + dir + ": " + std::strerror(errno);
    return false;
  }
  struct stat st{};
  if (lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    error = dir + " is not a private directory of uid " + std::to_string(geteuid()) + " (mode 0700)";
    return false;
  }
  return true;
}

__attribute__((destructor)) void remove_socket() {
  if (g_server && g_server->pid == getpid() && !g_server->path.empty()) unlink(g_server->path.c_str());
}

}  // namespace

void unmap_page_later(uint64_t page) {
  if (g_server) g_server->page_to_unmap.store(page);
}

int32_t thread_id() { return g_server ? g_server->tid.load() : 0; }

void quiesce_for_exit() {
  if (!g_server || g_server->pid != getpid()) return;
  // Never unlocked: the process is ending, and no request may start a window or half-answer after this. A
  // request still running after the wait (stuck) is left to the exit; later ones are refused.
  (void)g_server->serving.try_lock_for(std::chrono::seconds(kExitWaitS));
  g_server->ending.store(true);
}

bool server_running() { return g_server && g_server->fd >= 0 && g_server->pid == getpid(); }

bool start_server(std::string& error) {
  if (!g_server) g_server = new Server();
  std::lock_guard<std::mutex> lk(g_server->mu);
  if (g_server->fd >= 0 && g_server->pid == getpid()) return true;
  if (!g_server->atfork_registered) {
    pthread_atfork(nullptr, nullptr, after_fork_child);
    g_server->atfork_registered = true;
  }
  const std::string dir = socket_dir(geteuid()), path = socket_path(geteuid(), getpid());
  if (!private_dir(dir, error)) return false;
  remove_stale_sockets(dir);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    error = "socket path too long: " + path;
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  unlink(path.c_str());  // a stale socket of an earlier process with this pid (the directory is ours alone)
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || chmod(path.c_str(), 0600) != 0 ||
      listen(fd, 8) != 0) {
    error = "cannot listen at " + path + ": " + std::strerror(errno);
    close(fd);
    return false;
  }
  if (int high = fcntl(fd, F_DUPFD_CLOEXEC, kHighFd); high >= 0) {
    close(fd);
    fd = high;
  }
  // The program's own calls of pthread_create may be interposed by the collector (LD_PRELOAD): take libc's.
  using create_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  auto create = reinterpret_cast<create_fn>(dlsym(RTLD_NEXT, "pthread_create"));
  if (!create) create = pthread_create;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);  // the control thread takes no signals
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  pthread_t thread;
  const int rc = create(&thread, &attr, listen_main, reinterpret_cast<void*>(intptr_t(fd)));
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (rc != 0) {
    error = std::string("cannot start the control thread: ") + std::strerror(rc);
    close(fd);
    unlink(path.c_str());
    return false;
  }
  g_server->fd = fd;
  g_server->pid = getpid();
  g_server->path = path;
  return true;
}

}  // namespace stepscope::collector::control

// Called by `stepscope attach` through the ptrace-injected stub, on whichever thread it borrowed: only starts
// the control thread and returns. `request`: "page=0x..." (the injector's page, unmapped later). Returns 0, or
// the address of a message saying why not.
extern "C" __attribute__((visibility("default"))) long stepscope_collector_attach(const char* request) {
  using namespace stepscope::collector::control;
  static char error_text[256];
  std::string error;
  try {
    if (!start_server(error)) {
      std::snprintf(error_text, sizeof error_text, "%s", error.c_str());
      return reinterpret_cast<long>(error_text);
    }
    if (const char* p = request ? std::strstr(request, "page=") : nullptr)
      unmap_page_later(std::strtoull(p + 5, nullptr, 16));
  } catch (const std::exception& e) {
    std::snprintf(error_text, sizeof error_text, "%s", e.what());
    return reinterpret_cast<long>(error_text);
  }
  return 0;
}
