// `stepscope attach PID`: load the collector into running processes (once), open a recording window over the
// control channel, close it when asked, merge the partial stores. See stepscope/collector/attach.h.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "stepscope/collector/attach.h"
#include "launcher/flight_watcher.h"
#include "launcher/launcher_clock.h"
#include "launcher/rank_outputs.h"

#include <dirent.h>
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "control/control_protocol.h"
#include "injector.h"
#include "target_deadline.h"
#include "stepscope/store/store.h"

namespace fs = std::filesystem;

namespace stepscope::collector {
namespace {

constexpr int kReplyTimeoutMs = 15000;   // `stop` waits for the final drain and commit in the target
constexpr int kReplyPollMs = 100;        // how often a reply's deadline is looked at
constexpr int64_t kPollNs = 200000000;   // how often the window is looked at (exit, stopped from elsewhere)
constexpr int64_t kChildScanNs = 500000000;  // --children: how often new descendants are looked for

bool alive(pid_t pid) {
  // A zombie still answers kill(0): look at its state.
  attach::ProcessStat st;
  return attach::read_stat(pid, st) && st.state != 'Z' && st.state != 'X';
}

// A stopped process (SIGSTOP, Ctrl-Z) answers nothing until it runs again, and a request left queued in it
// was served later against a parts folder already removed: refused before anything is sent or injected.
void refuse_stopped(pid_t pid, const std::string& name) {
  attach::ProcessStat st;
  if (!attach::read_stat(pid, st)) return;
  if (st.state == 'T')
    throw AttachError("process " + std::to_string(pid) + " (" + name +
                      ") is stopped (SIGSTOP or Ctrl-Z): it cannot answer until it runs; `kill -CONT " +
                      std::to_string(pid) + "` first");
  if (st.state == 't')
    throw AttachError(
        "process " + std::to_string(pid) + " (" + name +
        ") is stopped by its tracer (a debugger at a breakpoint): it cannot answer until it runs");
}

// A target that does not answer `stop` because it is exiting: its exit waits up to 5 s for a request in
// progress and up to 5 s for the collector's final pass.
constexpr int64_t kExitWaitNs = 12000000000;

bool gone_within(pid_t pid, int64_t ns) {
  const int64_t until = mono_ns() + ns;
  while (alive(pid)) {
    if (mono_ns() > until) return false;
    timespec ts{0, 20000000};
    nanosleep(&ts, nullptr);
  }
  return true;
}

struct NoCollector {};  // nobody listens at the process's control socket

// The collector took the request and closed without a reply: the process is ending (control::quiesce_for_exit).
struct ClosedUnanswered : AttachError {
  using AttachError::AttachError;
};

// One request, one reply line. Throws NoCollector when there is no socket or it refuses.
std::string request(pid_t pid, uid_t uid, const control::Request& req, int timeout_ms = kReplyTimeoutMs) {
  const std::string path = control::socket_path(uid, pid);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), std::min(path.size() + 1, sizeof addr.sun_path - 1));
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw AttachError(std::string("socket: ") + std::strerror(errno));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const int err = errno;
    close(fd);
    if (err == EACCES) throw AttachError("cannot open the control socket " + path + ": permission denied (another user's process?)");
    throw NoCollector{};
  }
  const std::string text = control::encode(req);
  (void)!write(fd, text.data(), text.size());
  // The reply's wait does not count the target's waits for a CPU (a busy machine), up to a cap.
  const int64_t budget_ns = int64_t(timeout_ms) * 1000000;
  attach::TargetDeadline deadline(pid, 0, budget_ns, budget_ns * attach::kStarvedCapFactor);
  std::string reply;
  char buf[512];
  bool timed_out = false;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, kReplyPollMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {
      if ((timed_out = deadline.expired())) break;
      continue;
    }
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    reply.append(buf, size_t(n));
    if (reply.find('\n') != std::string::npos) break;
  }
  close(fd);
  if (reply.empty() && !timed_out)
    throw ClosedUnanswered("no reply from the collector in process " + std::to_string(pid) + " (" + path +
                           "): it closed the connection");
  if (reply.empty())
    throw AttachError("no reply from the collector in process " + std::to_string(pid) + " (" + path + ")" +
                      (timed_out ? " within " + std::to_string(timeout_ms / 1000) + " s" + deadline.starved_words()
                                 : std::string(": it closed the connection")));
  reply.erase(reply.find('\n'));
  return reply;
}

std::vector<pid_t> descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> kids;
  if (DIR* d = opendir("/proc")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      const pid_t pid = std::atoi(e->d_name);
      attach::ProcessStat st;
      if (attach::read_stat(pid, st) && st.state != 'Z') kids[st.ppid].push_back(pid);
    }
    closedir(d);
  }
  std::vector<pid_t> out, todo{root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : kids[p]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Target {
  pid_t pid = 0;
  uid_t uid = 0;
  bool recording = false;
  bool ended = false;
};

std::string parts_dir_for(const std::string& output) { return output + ".parts"; }

// The command a `stepscope record` launcher runs (its one direct child), or 0 when pid is not such a launcher:
// `pgrep` finds the launcher first, and its pid is what people pass to start/stop.
pid_t command_of_launcher(pid_t pid) {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec);
  if (ec || exe.filename() != "stepscope") return 0;
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
  std::string arg;
  bool record = false;
  while (std::getline(f, arg, '\0'))
    if (arg == "record") record = true;
  if (!record) return 0;
  std::vector<pid_t> direct;
  for (pid_t d : descendants(pid))
    if (attach::ProcessStat st; attach::read_stat(d, st) && st.ppid == pid) direct.push_back(d);
  return direct.size() == 1 ? direct.front() : 0;
}

// The settings `record` passes through the environment, under the same names, for a window's `start`.
std::map<std::string, std::string> start_options(const RecordOptions& o, const std::string& parts_dir) {
  return {{"STEPSCOPE_PARTS_DIR", parts_dir},
          {"STEPSCOPE_CPU_HZ", std::to_string(o.cpu_hz)},
          {"STEPSCOPE_STACK_BYTES", std::to_string(o.stack_bytes)},
          {"STEPSCOPE_WALL", o.wall ? "1" : "0"},
          {"STEPSCOPE_NO_GPU", o.no_gpu ? "1" : "0"},
          {"STEPSCOPE_DATA_WAIT_REGEX", o.data_wait_regex},
          {"STEPSCOPE_STEP_REGEX", o.step_regex},
          {"STEPSCOPE_DATA_WAIT_FUNC", o.data_wait_func},
          {"STEPSCOPE_STEP_FUNC", o.step_func},
          {"STEPSCOPE_CUDA_API", o.cuda_api},
          {"STEPSCOPE_CUDA_GRAPHS", o.cuda_graphs},
          {"STEPSCOPE_GPU_WINDOW", o.gpu_window},
          {"STEPSCOPE_CUDA_STACKS_PER_S", std::to_string(o.cuda_stacks_per_s)}};
}

// Loads the collector into `pid` when nobody listens there yet, then opens a window with `start`. Throws
// AttachError; `summary` counts the injection and its stops.
void load_and_start(pid_t pid, const attach::ProcessStatus& st, const std::string& lib, const control::Request& start,
                    AttachSummary& summary) {
  refuse_stopped(pid, st.name);
  control::Request status;
  status.command = "status";
  bool listening = true;
  try {
    request(pid, st.uid, status, 2000);
  } catch (const NoCollector&) {
    listening = false;
  } catch (const AttachError&) {
    listening = false;  // not ours to open (another user's): ptrace below says precisely why
  }
  if (!listening) {
    attach::InjectRequest ir;
    ir.pid = pid;
    ir.library = lib;
    ir.function = "stepscope_collector_attach";
    ir.argument = "page={page}";
    const attach::InjectResult r = attach::inject(ir);
    if (r.function_result != 0)
      throw AttachError("the collector in process " + std::to_string(pid) + " cannot listen: " +
                        r.function_message);
    ++summary.injected;
    summary.max_stopped_ms = std::max(summary.max_stopped_ms, double(r.stopped_all_ns) / 1e6);
    summary.max_caller_stopped_ms = std::max(summary.max_caller_stopped_ms, double(r.stopped_caller_ns) / 1e6);
  }
  // A process in its exit has closed the channel (its socket unlinked, or requests refused unanswered) while
  // it is still alive: its destructors and the collector's final pass run before it becomes a zombie.
  const auto exited = [&] { return !alive(pid) || gone_within(pid, kExitWaitNs); };
  std::string reply;
  try {
    reply = request(pid, st.uid, start);
  } catch (const NoCollector&) {
    if (exited()) throw AttachError("process " + std::to_string(pid) + " exited during attach");
    throw AttachError("the collector loaded into process " + std::to_string(pid) + " does not answer at " +
                      control::socket_path(st.uid, pid));
  } catch (const ClosedUnanswered&) {
    if (exited()) throw AttachError("process " + std::to_string(pid) + " exited during attach");
    throw;
  }
  if (reply.rfind("ok", 0) != 0)
    throw AttachError("process " + std::to_string(pid) + " (" + st.name + "): cannot start recording: " +
                      (reply.rfind("error ", 0) == 0 ? reply.substr(6) : reply));
}

}  // namespace

std::string control_request(pid_t pid, const std::string& command) {
  const attach::ProcessStatus st = attach::read_status(pid);
  refuse_stopped(pid, st.name);
  control::Request req;
  req.command = command;
  try {
    const std::string reply = request(pid, st.uid, req);
    if (reply.rfind("ok", 0) != 0)
      throw AttachError("process " + std::to_string(pid) + ": " +
                        (reply.rfind("error ", 0) == 0 ? reply.substr(6) : reply));
    return reply;
  } catch (const NoCollector&) {
    if (const pid_t child = command_of_launcher(pid)) {
      const std::string reply = control_request(child, command);
      return reply + " (in process " + std::to_string(child) + ", the command stepscope record " +
             std::to_string(pid) + " runs)";
    }
    throw AttachError("process " + std::to_string(pid) + " (" + st.name + ") has no stepscope collector listening (" +
                      control::socket_path(st.uid, pid) + "): start it with `stepscope record --paused` or use `stepscope attach`");
  }
}

std::string attach_output_name(const std::string& pattern, pid_t pid) {
  if (pattern.find('%') == std::string::npos) return pattern;
  std::string rank;
  if (pattern.find("%r") != std::string::npos) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
    std::map<std::string, std::string> env;
    for (std::string kv; std::getline(f, kv, '\0');)
      if (const auto eq = kv.find('='); eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
      if (auto it = env.find(name); it != env.end() && !it->second.empty() &&
                                    it->second.find_first_not_of("0123456789") == std::string::npos) {
        rank = it->second;
        break;
      }
    if (rank.empty())
      throw AttachError(
          pattern + ": %r: process " + std::to_string(pid) +
          " has no rank in its environment (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK)");
  }
  const std::string p = std::to_string(pid), host = host_name();
  return expand_output(pattern, rank.empty() ? nullptr : &rank, &p, &host);
}

AttachSummary record_attached(const AttachOptions& o) {
  AttachSummary summary;
  const std::string output = fs::absolute(o.record.output).lexically_normal().string();
  const std::string parts_dir = parts_dir_for(output);
  const std::string lib = collector_library_path();
  std::error_code ec;
  if (!fs::exists(lib, ec)) throw AttachError("collector library not found: " + lib + " (set STEPSCOPE_COLLECTOR_LIB)");
  const attach::ProcessStatus root_status = attach::read_status(o.pid);
  if (o.pid == getpid()) throw AttachError("stepscope cannot attach to itself");

  // SIGINT/SIGTERM/SIGHUP end the window (Ctrl-C); they are taken synchronously below.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, s);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  struct MaskGuard {
    sigset_t old;
    ~MaskGuard() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } mask_guard{old_mask};

  PartsFolderLock parts_lock;
  if (std::string holder; !parts_lock.take(output, parts_dir, holder))
    throw store::StoreError(output, "another stepscope is recording to it (pid " + holder + ", " + parts_dir +
                                        " in use): name another output with -o");
  struct PartsGuard {  // nothing half-written is left behind when attaching fails
    std::string dir;
    bool keep = false;
    ~PartsGuard() {
      std::error_code e;
      if (!keep) fs::remove_all(dir, e);
    }
  } parts_guard{parts_dir};

  control::Request start;
  start.command = "start";
  start.options = start_options(o.record, parts_dir);
  const bool flight = o.record.flight_s > 0;
  const std::string flight_dir = output + ".flight";
  if (flight) {
    fs::remove_all(flight_dir, ec);
    if (!fs::create_directories(flight_dir, ec) && ec) throw AttachError("cannot create " + flight_dir + ": " + ec.message());
    fs::permissions(flight_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (root_status.uid != geteuid()) (void)!chown(flight_dir.c_str(), root_status.uid, static_cast<gid_t>(-1));
    for (const auto& [k, v] : flight_env(o.record, flight_dir, flight_prefix(output))) start.options[k] = v;
    start.options["STEPSCOPE_FLIGHT_ROOT_PID"] = std::to_string(o.pid);
  }
  struct FlightGuard {  // a failed attach leaves no flight folder behind
    std::string dir;
    bool on = false;
    ~FlightGuard() {
      std::error_code e;
      if (on) fs::remove_all(dir, e);
    }
  } flight_guard{flight_dir, flight};
  std::map<std::string, std::string> flight_meta{{"recorder", "stepscope attach --flight"},
                                                 {"command", "attach " + std::to_string(o.pid)},
                                                 {"collector.cpu_hz", std::to_string(o.record.cpu_hz)},
                                                 {"collector.mode", o.record.wall ? "wall" : "cpu"}};
  FlightWatcher watcher(flight_dir, flight_prefix(output), flight_meta, o.record.flight_quota_bytes,
                        o.record.print_summary);
  for (const auto& [k, v] : start.options)
    if (v.find('\n') != std::string::npos) throw AttachError("option " + k + " contains a newline");

  std::map<pid_t, Target> targets;
  const int64_t t_begin = mono_ns();
  // Loads the collector when nobody listens yet, then opens the window. A process that ends meanwhile is
  // skipped when it is a descendant, an error when it is the one asked for.
  auto add_target = [&](pid_t pid) {
    const bool is_root = pid == o.pid;
    Target t;
    t.pid = pid;
    try {
      const attach::ProcessStatus st = is_root ? root_status : attach::read_status(pid);
      t.uid = st.uid;
      // The target writes its part: a process of another user (we are root) gets the directory as its own.
      if (st.uid != geteuid()) parts_lock.give_to(st.uid);
      load_and_start(pid, st, lib, start, summary);
      t.recording = true;
      targets[pid] = t;
      summary.attached.push_back(pid);
    } catch (const AttachError& e) {
      if (is_root && !alive(pid)) throw AttachError("process " + std::to_string(pid) + " exited during attach");
      if (is_root) throw;
      if (alive(pid)) std::fprintf(stderr, "stepscope: warning: not recording child %d: %s\n", int(pid), e.what());
    }
  };

  // Closes every open window (best effort: the target may be gone).
  auto stop_all = [&] {
    control::Request stop;
    stop.command = "stop";
    for (auto& [pid, t] : targets) {
      if (!t.recording || t.ended) continue;
      try {
        request(pid, t.uid, stop);
      } catch (const NoCollector&) {
      } catch (const AttachError& e) {
        // A process that ends as its window closes answers nothing: its exit stops the collector and
        // completes the part (control_server.h). The merge waits for that end; only a live process's silence
        // is news.
        if (gone_within(pid, kExitWaitNs))
          t.ended = true;
        else
          std::fprintf(stderr, "stepscope: warning: %s\n", e.what());
      }
      t.recording = false;
    }
  };

  try {
    add_target(o.pid);
    // As record says it (here after the attach, so a refusal is its one line): the summary's 0 kernels said
    // why. Looked for here and in the process (a sidecar container may lack the driver the process has).
    if (!o.record.no_gpu && o.record.print_summary) {
      void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
      if (cuda) dlclose(cuda);
      std::ifstream maps("/proc/" + std::to_string(o.pid) + "/maps");
      bool mapped = false;
      for (std::string line; !cuda && !mapped && std::getline(maps, line);)
        mapped = line.find("/libcuda.so") != std::string::npos;
      if (!cuda && !mapped)
        std::fprintf(stderr, "stepscope: warning: no CUDA driver (libcuda.so.1 not found): recording CPU data only\n");
    }
    if (o.children) {
      for (pid_t c : descendants(o.pid)) add_target(c);
    } else if (const size_t n = descendants(o.pid).size(); n > 0) {
      std::fprintf(stderr,
                   "stepscope: %zu child process%s of %d (DataLoader workers, ranks?) not recorded: --children takes "
                   "them\n",
                   n, n == 1 ? "" : "es", int(o.pid));
    }
  } catch (...) {
    stop_all();
    throw;
  }
  const int64_t t_recording = mono_ns();

  // The window: until the duration, a stop signal, `stepscope detach` (the root's collector turns dormant),
  // or the root process's end.
  const int64_t duration = static_cast<int64_t>(o.record.duration_s * 1e9);
  int64_t last_scan = t_recording;
  std::string ending;
  for (;;) {
    if (flight) watcher.poll();
    int64_t wait = kPollNs;
    if (duration > 0) wait = std::min(wait, std::max<int64_t>(t_recording + duration - mono_ns(), 0));
    timespec ts{static_cast<time_t>(wait / 1000000000), static_cast<long>(wait % 1000000000)};
    const int sig = wait > 0 ? sigtimedwait(&stop_signals, nullptr, &ts) : -1;
    if (sig > 0) {
      ending = std::string("signal ") + strsignal(sig);
      break;
    }
    if (duration > 0 && mono_ns() - t_recording >= duration) {
      ending = "duration";
      break;
    }
    Target& root = targets[o.pid];
    if (!alive(o.pid)) {
      root.ended = true;
      summary.target_exited = true;
      ending = "process exited";
      break;
    }
    control::Request status;
    status.command = "status";
    try {
      if (request(o.pid, root.uid, status, 2000).find("dormant") != std::string::npos) {
        root.recording = false;
        ending = "stepscope detach";
        break;
      }
    } catch (const NoCollector&) {
      // The collector's channel closes as the process begins to exit (control::quiesce_for_exit), before the
      // final pass writes its last part with the exit status: wait for the end, bounded, or a failing end seen
      // this early (a loaded machine, a slow final pass) left the flight recorder's last window unsaved.
      root.ended = !alive(o.pid) || gone_within(o.pid, kExitWaitNs);
      summary.target_exited = root.ended;
      ending = "process exited";
      break;
    } catch (const AttachError&) {
    }
    if (o.children && mono_ns() - last_scan >= kChildScanNs) {
      last_scan = mono_ns();
      for (pid_t c : descendants(o.pid))
        if (!targets.count(c)) add_target(c);
    }
  }
  for (auto& [pid, t] : targets)
    if (!alive(pid)) t.ended = true;
  const int64_t t_stop = mono_ns();
  stop_all();
  const int64_t t_end = mono_ns();
  if (flight) {
    // The process's failing end (a signal, an exit status) is said in its last window: attach cannot wait for it.
    watcher.finish(targets[o.pid].ended ? watcher.exit_failure() : std::string());
    fs::remove_all(parts_dir, ec);
    parts_guard.keep = true;
    summary.record.outputs = watcher.saved();
    summary.record.flight_skipped = watcher.skipped();
    summary.record.command_wall_s = double(t_end - t_recording) / 1e9;
    if (o.record.print_summary) {
      std::string saved = watcher.summary();  // "flight recorder: N windows saved (…), …" as record says it
      if (const auto colon = saved.find(": "); colon != std::string::npos) saved = saved.substr(colon + 2);
      std::fprintf(stderr, "stepscope: flight recorder attached to %zu process%s for %.1f s (%s): %s\n",
                   summary.attached.size(), summary.attached.size() == 1 ? "" : "es",
                   summary.record.command_wall_s, ending.c_str(), saved.c_str());
    }
    return summary;
  }

  std::map<std::string, std::string> meta;
  meta["recorder"] = "stepscope attach";
  std::string pids;
  for (pid_t p : summary.attached) pids += (pids.empty() ? "" : " ") + std::to_string(p);
  meta["command"] = "attach " + pids;
  meta["attach.pids"] = pids;
  meta["attach.ending"] = ending;
  meta["attach.injected"] = std::to_string(summary.injected);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", summary.max_stopped_ms);
  meta["attach.max_stopped_ms"] = buf;
  std::snprintf(buf, sizeof buf, "%.3f", summary.max_caller_stopped_ms);
  meta["attach.max_caller_stopped_ms"] = buf;
  meta["attach.start_ns"] = std::to_string(t_recording);
  meta["attach.stop_ns"] = std::to_string(t_stop);
  meta["attach.end_ns"] = std::to_string(t_end);
  meta["collector.cpu_hz"] = std::to_string(o.record.cpu_hz);
  meta["collector.mode"] = o.record.wall ? "wall" : "cpu";
  std::snprintf(buf, sizeof buf, "%.6f", double(t_end - t_begin) / 1e9);
  meta["record.command_wall_s"] = buf;
  const int64_t t_finalize = mono_ns();
  try {
    merge_parts(parts_dir, output, meta, summary.record);
  } catch (const store::StoreError& e) {
    parts_guard.keep = true;  // the window's parts are the recording: kept and said, as record does
    throw store::StoreError(output, e.reason() +
                                        "; the recording's parts (a store per process, not symbolized) "
                                        "stay in " +
                                        parts_dir);
  }
  fs::remove_all(parts_dir, ec);
  parts_guard.keep = true;
  summary.record.command_wall_s = double(t_end - t_recording) / 1e9;
  summary.record.finalize_s = double(mono_ns() - t_finalize) / 1e9;
  if (o.record.print_summary) {
    const auto& s = summary.record;
    std::fprintf(
        stderr,
        "stepscope: attached to %zu process%s for %.1f s (%s; longest stop %.1f ms): %lld samples (%lld "
        "thread%s), %lld kernels, %lld ranges%s; dropped: %lld samples, %lld GPU records -> %s (finalized in "
        "%.2f s%s)\n",
        summary.attached.size(), summary.attached.size() == 1 ? "" : "es", s.command_wall_s, ending.c_str(),
        summary.max_stopped_ms, (long long)s.samples, (long long)s.threads, s.threads == 1 ? "" : "s",
        (long long)s.kernels, (long long)s.ranges, steps_and_waits(s).c_str(), (long long)s.dropped_samples,
        (long long)s.dropped_gpu_records, o.record.output.c_str(), s.finalize_s, replaced_note(s, output));
    for (const auto& w : s.warnings) std::fprintf(stderr, "stepscope: warning: %s\n", w.c_str());
  }
  return summary;
}

}  // namespace stepscope::collector

namespace stepscope::collector {

LiveWindow::LiveWindow(pid_t pid, const RecordOptions& o, double window_s, std::string scratch_dir)
    : pid_(pid), scratch_(std::move(scratch_dir)) {
  const std::string lib = collector_library_path();
  std::error_code ec;
  if (!fs::exists(lib, ec)) throw AttachError("collector library not found: " + lib + " (set STEPSCOPE_COLLECTOR_LIB)");
  if (pid == getpid()) throw AttachError("stepscope cannot attach to itself");
  const attach::ProcessStatus st = attach::read_status(pid);
  uid_ = st.uid;
  for (const char* d : {"/parts", "/flight", "/snapshot"}) {
    fs::create_directories(scratch_ + d, ec);
    if (st.uid != geteuid()) (void)!chown((scratch_ + d).c_str(), st.uid, static_cast<gid_t>(-1));
  }
  if (st.uid != geteuid()) (void)!chown(scratch_.c_str(), st.uid, static_cast<gid_t>(-1));
  control::Request start;
  start.command = "start";
  start.options = start_options(o, scratch_ + "/parts");
  start.options["STEPSCOPE_FLIGHT_DIR"] = scratch_ + "/flight";
  start.options["STEPSCOPE_FLIGHT_WINDOW_MS"] = std::to_string(int64_t(window_s * 1000));
  start.options["STEPSCOPE_FLIGHT_SLOW_STEP"] = "0";
  start.options["STEPSCOPE_FLIGHT_MAX_PER_HOUR"] = "0";
  start.options["STEPSCOPE_FLIGHT_GPU_STEPS"] = "0";
  for (const auto& [k, v] : start.options)
    if (v.find('\n') != std::string::npos) throw AttachError("option " + k + " contains a newline");
  try {
    load_and_start(pid, st, lib, start, summary_);
    open_ = true;
  } catch (const AttachError& e) {
    if (!alive(pid)) throw AttachError("process " + std::to_string(pid) + " exited during attach");
    // Recording already (record --flight, attach --flight): its own window serves the snapshots, and stays.
    if (std::string(e.what()).find("already recording") == std::string::npos) throw;
    // A window without a flight recorder (attach, record, start) has no snapshots to give: say so now, not as
    // the first refresh's error.
    control::Request probe;
    probe.command = "snapshot";
    probe.options["dir"] = scratch_ + "/snapshot";
    std::string reply;
    try {
      reply = request(pid, st.uid, probe, 30000);
    } catch (const NoCollector&) {
    }
    if (reply.find("not flight recording") != std::string::npos)
      throw AttachError("process " + std::to_string(pid) +
                        " is being recorded by another stepscope (attach, record or start without --flight); "
                        "top can watch it once that recording ends");
  }
  summary_.attached.push_back(pid);
}

LiveWindow::~LiveWindow() {
  if (!open_) return;
  control::Request stop;
  stop.command = "stop";
  try {
    request(pid_, uid_, stop);
  } catch (...) {  // the process is gone (NoCollector is no std::exception), or its collector stopped
  }
}

bool LiveWindow::snapshot(const std::string& output, std::string& error) {
  const std::string dir = scratch_ + "/snapshot";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) fs::remove_all(e.path(), ec);
  control::Request snap;
  snap.command = "snapshot";
  snap.options["dir"] = dir;
  try {
    const std::string reply = request(pid_, uid_, snap, 30000);
    if (reply.rfind("ok", 0) != 0) {
      error = reply.rfind("error ", 0) == 0 ? reply.substr(6) : reply;
      return false;
    }
  } catch (const NoCollector&) {
    error = alive(pid_) ? "the collector does not answer" : "the process exited";
    return false;
  } catch (const AttachError& e) {
    error = e.what();
    return false;
  }
  try {
    RecordSummary rs;
    merge_parts(dir, output, {{"recorder", "stepscope top"}, {"command", "top " + std::to_string(pid_)}}, rs);
  } catch (const std::exception& e) {
    error = e.what();
    return false;
  }
  return true;
}

}  // namespace stepscope::collector
