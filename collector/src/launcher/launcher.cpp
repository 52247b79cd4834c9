// `stepscope record`: start the command with the collector injected, survive it (whatever way it ends), then
// merge the per-process partial stores into one store, atomically.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/rank_env.h"
#include "launcher/collector_build_path.h"
#include "launcher/flight_watcher.h"
#include "launcher/launcher_clock.h"
#include "launcher/rank_outputs.h"
#include "stepscope/collector/launcher.h"
#include "stepscope/store/store.h"

extern char** environ;

namespace fs = std::filesystem;

namespace stepscope::collector {
namespace {

std::atomic<pid_t> g_child{0};
std::atomic<int> g_signal{0};  // the last SIGINT/SIGTERM/SIGHUP the launcher got while the command ran

// A signal sent to the launcher by kill(1) is passed on to the command; one from the terminal already reached
// the whole foreground process group, so it is not sent twice.
void forward_signal(int sig, siginfo_t* si, void*) {
  g_signal.store(sig);
  pid_t child = g_child.load();
  if (child > 0 && si && si->si_code == SI_USER && si->si_pid != child) kill(child, sig);
}

std::string self_exe_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.parent_path().string();
}

void set_env(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  const std::string prefix = key + "=";
  for (auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) {
      e = prefix + value;
      return;
    }
  env.push_back(prefix + value);
}

std::string get_env(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env)
    if (e.compare(0, prefix.size(), prefix) == 0) return e.substr(prefix.size());
  return {};
}

int64_t meta_int(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : std::atoll(it->second.c_str());
}

// One part's rows made to keep the invariant of docs/schema.md: a sync without its thread gets the thread of
// the API call with the same correlation id; the collector's own threads are marked; every (pid, tid) a row
// names gets a threads row (named "" when the collector could not read its comm in time).
// Thread rows for every thread the part's rows name, and the thread of a sync written without one (v1 parts)
// from its API call. The part's API calls and samples are read from `bulk` (load() left them out), one at a
// time.
void complete_threads(store::Trace& t, const store::StoreReader& bulk) {
  std::unordered_map<int64_t, std::pair<bool, int64_t>> tid_of;  // correlation → (seen, the first call's tid)
  for (const auto& s : t.syncs)
    if (!s.tid) tid_of.emplace(s.correlation, std::pair<bool, int64_t>{false, 0});
  std::vector<std::pair<int64_t, int64_t>> api_threads;  // in the order the calls first name them
  std::set<std::pair<int64_t, int64_t>> api_seen;
  bulk.each_api_call([&](const store::ApiCall& a) {
    if (!tid_of.empty())
      if (auto it = tid_of.find(a.correlation); it != tid_of.end() && !it->second.first)
        it->second = {true, a.tid};
    if (api_seen.insert({a.pid, a.tid}).second) api_threads.push_back({a.pid, a.tid});
  });
  for (auto& s : t.syncs)
    if (!s.tid)
      if (auto it = tid_of.find(s.correlation); it != tid_of.end() && it->second.first)
        s.tid = it->second.second;
  std::set<int64_t> own;
  if (auto it = t.meta.find("collector.own_tids"); it != t.meta.end()) {
    std::string list = it->second;
    for (size_t i = 0; i < list.size();) {
      size_t j = list.find(',', i);
      if (j == std::string::npos) j = list.size();
      own.insert(std::atoll(list.substr(i, j - i).c_str()));
      i = j + 1;
    }
  }
  std::set<std::pair<int64_t, int64_t>> known;
  for (auto& th : t.threads) {
    if (own.count(th.tid)) th.collector = true;
    known.insert({th.pid, th.tid});
  }
  auto need = [&](int64_t pid, int64_t tid) {
    if (tid && known.insert({pid, tid}).second) {
      store::Thread th;
      th.pid = pid;
      th.tid = tid;
      th.collector = own.count(tid) > 0;
      t.threads.push_back(th);
    }
  };
  bulk.each_sample([&](const store::Sample& r) { need(r.pid, r.tid); });
  for (const auto& [pid, tid] : api_threads) need(pid, tid);
  for (const auto& r : t.syncs) need(r.pid, r.tid);
  for (const auto& r : t.ranges) need(r.pid, r.tid);
  for (const auto& r : t.data_waits) need(r.pid, r.tid);
  for (const auto& r : t.steps) need(r.pid, r.tid);
}

std::string python_processes_text(int64_t n) {
  return std::to_string(n) + " Python process" + (n == 1 ? "" : "es");
}

// The processes' `python.hooks` lines (collector/src/python/python_hooks.h), summed for the store and the
// summary. One status a process: a process recorded in several windows (`record --paused`, start/stop twice)
// writes a part for each, and a window's part may close before its pending call ran ("pending: …") while
// another's installed them; counted by part, one process read "missing in 1 of 2 Python processes" with its
// steps recorded.
struct PythonHooksTally {
  std::map<std::string, std::string> of_process;  // pid → its best status: installed, else the first other
  void add(const std::string& process, const std::string& s) {
    auto [it, fresh] = of_process.try_emplace(process, s);
    if (!fresh && it->second.rfind("installed", 0) != 0 && s.rfind("installed", 0) == 0) it->second = s;
  }
  struct Counts {
    int64_t installed = 0, missing = 0, none = 0;
    std::string first_missing;  // why, for the first process without them
    int64_t python_processes() const { return installed + missing; }
  };
  Counts counts() const {
    Counts c;
    for (const auto& [pid, s] : of_process) {
      if (s.rfind("installed", 0) == 0) {
        ++c.installed;
      } else if (s.rfind("none", 0) == 0) {
        ++c.none;
      } else if (c.missing++ == 0) {
        c.first_missing = s;
      }
    }
    return c;
  }
  std::string line() const {
    const Counts c = counts();
    if (c.python_processes() == 0) return "none: no CPython in the recorded processes";
    std::string l =
        "installed in " + std::to_string(c.installed) + " of " + python_processes_text(c.python_processes());
    if (c.missing) l += "; first without them: " + c.first_missing;
    return l;
  }
  std::string warning() const {
    const Counts c = counts();
    if (!c.missing) return {};
    return "the Python hooks are missing in " + std::to_string(c.missing) + " of " +
           python_processes_text(c.python_processes()) + " (" + c.first_missing +
           "): no steps or data waits from their DataLoader, optimizer or --step-func hooks "
           "(stepscope.step() marks still count where the program imports an installed stepscope package; "
           "docs/python.md)";
  }
};

// The processes' `python.frames` lines (python::describe()): in how many Python processes the frame reader
// works.
struct PythonFramesTally {
  std::map<std::string, std::pair<std::string, bool>> of_process;  // one a process, as PythonHooksTally
  void add(const std::string& process, const std::string& s, bool is_read) {
    if (s.rfind("CPython ", 0) != 0) return;  // no CPython in that process
    auto [it, fresh] = of_process.try_emplace(process, s, is_read);
    if (!fresh && !it->second.second && is_read) it->second = {s, true};
  }
  struct Counts {
    int64_t read = 0, unread = 0;
    std::string first_read, first_unread;
  };
  Counts counts() const {
    Counts c;
    for (const auto& [pid, status] : of_process) {
      if (status.second) {
        if (c.read++ == 0) c.first_read = status.first;
      } else if (c.unread++ == 0) {
        c.first_unread = status.first;
      }
    }
    return c;
  }
  int64_t python_processes() const { return int64_t(of_process.size()); }
  std::string line() const {
    const Counts c = counts();
    std::string l = "read in " + std::to_string(c.read) + " of " + python_processes_text(python_processes());
    if (c.read) l += " (first: " + c.first_read + ")";
    if (c.unread) l += "; first without them: " + c.first_unread;
    return l;
  }
  std::string warning() const {
    const Counts c = counts();
    if (!c.unread) return {};
    return "Python frames are not read in " + std::to_string(c.unread) + " of " +
           python_processes_text(python_processes()) + " (" + c.first_unread +
           "): their samples show the interpreter's native frames only (docs/python.md)";
  }
};

}  // namespace

bool valid_gpu_window(const std::string& spec) {
  if (spec == "all") return true;
  int n = 0, m = 0;
  char tail = 0;
  return std::sscanf(spec.c_str(), "%d/%d%c", &n, &m, &tail) == 2 && n > 0 && m > n;
}

std::string collector_library_path() {
  if (const char* p = std::getenv("STEPSCOPE_COLLECTOR_LIB"); p && *p) return p;
  const std::string dir = self_exe_dir();
  for (const std::string& c : {dir + "/../lib/libstepscope_collector.so", dir + "/../collector/libstepscope_collector.so",
                               dir + "/libstepscope_collector.so"}) {
    std::error_code ec;
    if (fs::exists(c, ec)) return fs::canonical(c, ec).string();
  }
  return collector_build_path();
}

// The file `command` runs (PATH searched like execvp), or "" when not found.
static std::string resolve_command(const std::string& command) {
  if (command.find('/') != std::string::npos)
    return ::access(command.c_str(), X_OK) == 0 ? command : std::string();
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = (end > start ? dirs.substr(start, end - start) : ".") + "/" + command;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// True for an ELF executable with no program interpreter (PT_INTERP): the dynamic loader never runs, so
// LD_PRELOAD cannot inject the collector. Scripts and unreadable files are not called static.
static bool statically_linked(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char h[64] = {};
  bool is_static = false;
  if (::pread(fd, h, sizeof h, 0) == ssize_t(sizeof h) && std::memcmp(h, "\x7f" "ELF", 4) == 0 && h[4] == 2 &&
      h[5] == 1) {  // 64-bit little-endian
    uint64_t phoff;
    uint16_t phentsize, phnum;
    std::memcpy(&phoff, h + 32, 8);
    std::memcpy(&phentsize, h + 54, 2);
    std::memcpy(&phnum, h + 56, 2);
    is_static = phnum > 0 && phentsize >= 4;
    for (uint16_t i = 0; is_static && i < phnum; ++i) {
      uint32_t type = 0;
      if (::pread(fd, &type, 4, off_t(phoff + uint64_t(i) * phentsize)) != 4) is_static = false;
      if (type == 3) is_static = false;  // PT_INTERP
    }
  }
  ::close(fd);
  return is_static;
}

void PartsFolderLock::release() {
  if (fd_ >= 0) ::close(fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  fd_ = dir_fd_ = -1;
}

PartsFolderLock::~PartsFolderLock() {
  release();
}

bool PartsFolderLock::take(const std::string& output, const std::string& dir, std::string& holder) {
  release();
  const auto fail = [&](const std::string& why) {
    const int saved = errno;
    release();
    throw store::StoreError(output, why + ": " + std::strerror(saved));
  };
  // A holder that ends removes the folder and its .lock while a starter may have the old lock open: retried.
  for (int attempt = 0; attempt < 3; ++attempt) {
    if (::mkdir(dir.c_str(), S_IRWXU) != 0 && errno != EEXIST) fail("cannot create " + dir);
    dir_fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir_fd_ < 0) {
      if (errno == ENOTDIR || errno == ELOOP) {
        release();
        throw store::StoreError(
            output, dir + " is in the way: a symbolic link or a file, not a folder of parts (remove it)");
      }
      if (errno == ENOENT) continue;  // removed by the holder that just ended
      fail("cannot use " + dir);
    }
    fd_ = ::openat(dir_fd_, ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, S_IRUSR | S_IWUSR);
    if (fd_ < 0) fail("cannot use " + dir);
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
      char pid[32] = {};
      (void)!::pread(fd_, pid, sizeof pid - 1, 0);
      holder = pid;
      release();
      return false;
    }
    // Still the folder's .lock (not one its holder unlinked as it ended)?
    struct stat mine {
    }, there{}, folder{};
    if (::fstat(fd_, &mine) != 0 || ::fstatat(dir_fd_, ".lock", &there, AT_SYMLINK_NOFOLLOW) != 0 ||
        ::stat(dir.c_str(), &folder) != 0 || mine.st_ino != there.st_ino || mine.st_dev != there.st_dev) {
      release();
      continue;
    }
    break;
  }
  if (fd_ < 0) fail("cannot lock " + dir);
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size()))
    fail("cannot write " + dir + "/.lock");
  // Part files hold the same private data as the store: only the owner may list or read them.
  if (::fchmod(fd_, S_IRUSR | S_IWUSR) != 0 || ::fchmod(dir_fd_, S_IRWXU) != 0)
    fail("cannot make " + dir + " private");
  // A killed recording's parts, never merged: removed through the folder's descriptor, links as links.
  if (DIR* d = ::fdopendir(::dup(dir_fd_))) {
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..") && std::strcmp(e->d_name, ".lock"))
        names.push_back(e->d_name);
    ::closedir(d);
    for (const auto& n : names) ::unlinkat(dir_fd_, n.c_str(), 0);  // a folder in it stays (EISDIR)
  }
  return true;
}

void PartsFolderLock::give_to(uid_t uid) {
  if (dir_fd_ >= 0) (void)!::fchown(dir_fd_, uid, static_cast<gid_t>(-1));
  if (fd_ >= 0) (void)!::fchown(fd_, uid, static_cast<gid_t>(-1));
}

void merge_parts(const std::string& parts_dir, const std::string& output,
                 const std::map<std::string, std::string>& meta, RecordSummary& summary, Symbolizer* shared) {
  std::vector<std::string> parts;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parts_dir, ec))
    if (e.path().extension() == ".db") parts.push_back(e.path().string());
  std::sort(parts.begin(), parts.end(), [](const std::string& a, const std::string& b) {
    // "<pid>-<monotonic ns>.db": order by start time so an exec'd image comes after the one it replaced.
    auto key = [](const std::string& p) {
      std::string n = fs::path(p).stem().string();
      auto dash = n.find('-');
      return dash == std::string::npos ? 0LL : std::atoll(n.c_str() + dash + 1);
    };
    return key(a) < key(b);
  });

  int64_t load_ns = 0;
  // First, which parts open and which process each one is (one process row per pid: the last image wins, exec
  // replaces the name). Each part is then read at its turn in the write below, alone: without its kernels,
  // API calls and samples, which grow with the run and are streamed from the part into the store, so the
  // merge holds one part's other tables at a time.
  std::vector<std::string> part_of;  // the parts that open, in order
  std::map<int64_t, store::Process> process_of;
  std::map<int64_t, std::string> process_name;
  auto unreadable = [&](const std::string& p, const std::exception& e, const char* what) {
    ++summary.unreadable_parts;
    const auto* store_error = dynamic_cast<const store::StoreError*>(&e);
    const std::string why = store_error ? store_error->reason() : e.what();
    // A process killed before its first commit leaves a part with no schema: nothing to lose. Any other
    // unreadable part held samples that the recording now lacks: say so.
    if (why.rfind("empty file", 0) != 0 && why.find("(no schema version)") == std::string::npos)
      summary.warnings.push_back("part " + fs::path(p).filename().string() + what + why);
  };
  for (const auto& p : parts) {
    const int64_t t0 = mono_ns();
    try {
      store::StoreReader reader(p);
      for (const auto& proc : reader.processes()) {
        process_name[proc.pid] = reader.strings().get(proc.name);
        process_of[proc.pid] = proc;
      }
      part_of.push_back(p);
    } catch (const std::exception& e) {
      unreadable(p, e, " not merged: ");
    }
    load_ns += mono_ns() - t0;
  }
  summary.parts = static_cast<int64_t>(parts.size());

  const std::string tmp = store::temp_path_beside(output);
  std::map<std::string, std::string> merged_meta = meta;
  std::set<std::string> statuses, endings, lent;
  PythonHooksTally python_hooks;
  PythonFramesTally python_frames;
  int64_t captured = 0, symbolize_ns = 0, call_stacks = 0;
  int64_t timer_overruns = 0;
  int64_t pinned_processes = 0;  // CUPTI kept attached after a CUDA graph (cupti.detach "kept attached …")
  std::map<std::string, double> own_cpu;  // the collector's own CPU time, summed over processes
  std::map<std::string, int64_t> summed;  // per-process counters, summed over processes
  std::map<std::string, double> weighted;  // per-process means × their unwound samples
  int64_t unwind_weight = 0, stack_bytes_max = 0;
  double collector_cpu = 0, start_max = 0;
  std::optional<Symbolizer> own;
  Symbolizer& symbolizer = shared ? *shared : own.emplace();
  // This store's share of a Symbolizer that serves several (it keeps what it resolved for the earlier ones).
  const int64_t modules_before = symbolizer.modules_opened(), addresses_before = symbolizer.addresses_looked_up(),
                hits_before = symbolizer.cache_hits();
  // Nothing half-written: a merge that fails leaves no temporary store beside the output.
  struct RemoveUnlessDone {
    const std::string& path;
    bool done = false;
    ~RemoveUnlessDone() {
      if (!done) store::remove_store_files(path);
    }
  } tmp_guard{tmp};
  {
    store::StoreWriter w(tmp);
    std::set<int64_t> written_pids;
    std::set<std::pair<int64_t, int64_t>> written_threads;
    for (const std::string& part : part_of) {
      // One snapshot of the part for its tables and its streamed rows: a process still writing it (a worker
      // past the grace period) adds rows the names and stacks read here would not cover.
      std::optional<store::StoreReader> bulk;
      store::Trace t;
      int64_t samples = 0, kernels = 0;
      const int64_t t0 = mono_ns();
      try {
        bulk.emplace(part);
        bulk->hold_snapshot();
        for (const auto& c : bulk->counts()) {
          if (c.table == "samples") samples = c.rows;
          if (c.table == "kernels") kernels = c.rows;
        }
        t = bulk->load(store::StoreReader::LoadOptions{.bulk = false});
      } catch (const std::exception& e) {
        unreadable(part, e, " not merged: ");
        continue;
      }
      load_ns += mono_ns() - t0;
      summary.samples += samples;
      summary.kernels += kernels;
      summary.ranges += static_cast<int64_t>(t.ranges.size());
      summary.steps += static_cast<int64_t>(t.steps.size());
      summary.data_waits += static_cast<int64_t>(t.data_waits.size());
      summary.dropped_samples += meta_int(t.meta, "collector.dropped_samples");
      summary.dropped_gpu_records += meta_int(t.meta, "cupti.dropped_records");
      summary.unsampled_threads += meta_int(t.meta, "collector.threads_unsampled");
      captured += meta_int(t.meta, "collector.samples");
      timer_overruns += meta_int(t.meta, "collector.timer_overruns");
      if (auto it = t.meta.find("collector.thread_cpu_s"); it != t.meta.end()) collector_cpu += std::atof(it->second.c_str());
      if (auto it = t.meta.find("collector.start_s"); it != t.meta.end())
        start_max = std::max(start_max, std::atof(it->second.c_str()));
      if (auto it = t.meta.find("collector.end"); it != t.meta.end()) endings.insert(it->second);
      const std::string part_name = fs::path(part).filename().string();
      const std::string process =
          part_name.substr(0, part_name.find('-'));  // a part is "PID-MONO.db" (drainer.cpp)
      if (auto it = t.meta.find("python.hooks"); it != t.meta.end()) python_hooks.add(process, it->second);
      if (auto it = t.meta.find("python.frames"); it != t.meta.end())
        python_frames.add(process, it->second,
                          t.meta.count("python.frames_read") && t.meta.at("python.frames_read") == "1");
      if (auto it = t.meta.find("cupti.status"); it != t.meta.end() && it->second != "recording")
        statuses.insert(it->second);
      if (auto it = t.meta.find("cupti.detach");
          it != t.meta.end() && it->second.rfind("kept attached", 0) == 0)
        ++pinned_processes;
      if (auto it = t.meta.find("cupti.lent");
          it != t.meta.end() && meta_int(t.meta, "cupti.lent_while_tracing") > 0)
        lent.insert(
            "CUDA tracing lent to " + it->second + " (no GPU activity recorded then)" +
            (t.meta.count("cupti.subscriber") ? "; " + t.meta.at("cupti.subscriber") : std::string()));
      for (const char* k : {"collector.timer",
                            "collector.signal",
                            "cupti.clock",
                            "collector.handler_ns_median",
                            "collector.handler_ns_p99",
                            "collector.stack_window_bytes",
                            "collector.ring_bytes",
                            "collector.drain_period_ms",
                            "collector.unwinder",
                            "cupti.api_tracing",
                            "cupti.thread_ids",
                            "cupti.stack_callback_ids",
                            "gpu.window",
                            "gpu.window_requested",
                            "gpu.window_budget",
                            "gpu.graph_records",
                            "cupti.graph_callbacks",
                            "cupti.launch_cost_ns",
                            "cupti.launch_cost_method",
                            "cupti.calibration",
                            "cupti.detach",
                            "cupti.lent",
                            "cupti.lent_while_tracing",
                            "cupti.subscriber",
                            "cupti.foreign_buffers",
                            "python.func_hooks",
                            "python.hook_ns_per_step_call",
                            "python.hook_ns_per_wait_call"})
        if (auto it = t.meta.find(k); it != t.meta.end()) merged_meta[k] = it->second;
      for (const char* k : {"collector.cpu_s", "collector.own_threads_cpu_s", "collector.handler_cpu_s_estimate"})
        if (auto it = t.meta.find(k); it != t.meta.end()) own_cpu[k] += std::atof(it->second.c_str());
      // A flight save's parts say what their window held (flight_recorder.cpp); the trigger's meta comes first.
      for (const auto& [k, v] : t.meta)
        if (k.rfind("flight.", 0) == 0) merged_meta.emplace(k, v);
      call_stacks += meta_int(t.meta, "collector.call_stacks");
      for (const char* k :
           {"collector.unwound_samples", "collector.stack_truncated_samples",
            "collector.stack_unreadable_samples", "collector.leaf_only_samples",
            "collector.guarded_read_faults", "collector.out_of_memory_passes",
            "collector.unknown_thread_signals", "collector.alt_stack_skipped_samples",
            "collector.call_stacks_skipped", "collector.unwind_memory_reads", "collector.raw_stack_hits",
            "collector.stack_node_lookups", "collector.unwind_table_searches", "collector.python_samples",
            "collector.python_native_cut_samples", "collector.native_scan_samples",
            "collector.native_scan_attempts",
            "collector.unwind_object_reads", "cupti.syncs_without_thread", "cupti.incomplete_records",
            "cupti.records", "cupti.untraced_replay_records", "cupti.graph_stacks"})
        if (t.meta.count(k)) summed[k] += meta_int(t.meta, k);
      // Means and maxima over processes, weighted by their unwound samples.
      if (const int64_t n = meta_int(t.meta, "collector.unwound_samples"); n > 0) {
        unwind_weight += n;
        for (const char* k : {"collector.stack_bytes_mean", "collector.frames_mean", "collector.unwind_cpu_ns_per_sample"})
          if (auto it = t.meta.find(k); it != t.meta.end()) weighted[k] += std::atof(it->second.c_str()) * double(n);
        stack_bytes_max = std::max(stack_bytes_max, meta_int(t.meta, "collector.stack_bytes_max"));
      }
      try {
        complete_threads(t, *bulk);
      } catch (const std::exception& e) {
        unreadable(part, e, " not merged: ");
        continue;
      }
      std::vector<store::Process> procs;
      for (const auto& p : t.processes)
        if (written_pids.insert(p.pid).second) {
          store::Process q = process_of[p.pid];
          q.name = t.intern(process_name[p.pid]);
          procs.push_back(q);
        }
      t.processes = std::move(procs);
      std::vector<store::Thread> threads;
      for (const auto& th : t.threads)
        if (written_threads.insert({th.pid, th.tid}).second) threads.push_back(th);
      t.threads = std::move(threads);
      t.meta.clear();  // per-process counters are summed below
      const int64_t t_sym = mono_ns();
      const auto renumbered = symbolizer.symbolize(t);
      symbolize_ns += mono_ns() - t_sym;
      try {
        w.append(t, *bulk, [&renumbered](int64_t id) {
          const auto it = renumbered.find(id);
          return it == renumbered.end() ? int64_t{0} : it->second;
        });
      } catch (const store::StoreError& e) {
        if (e.file() == tmp) throw;  // the store being written failed: no store
        // The part broke while its rows were streamed: those written stay, the rest are lost, and it says so.
        unreadable(part, e, " merged only in part: ");
      }
    }
    summary.processes = static_cast<int64_t>(written_pids.size());
    summary.threads = static_cast<int64_t>(written_threads.size());
    merged_meta["clock_domain"] = "CLOCK_MONOTONIC";
    merged_meta["host.cpus"] = std::to_string(sysconf(_SC_NPROCESSORS_ONLN));  // sizes the input-bound advice
    merged_meta["collector.samples"] = std::to_string(summary.samples);
    // Samples the handlers captured, by the processes' own final counts: equal to collector.samples when every
    // process ended through a final flush (exit, or SIGINT/SIGTERM/SIGHUP with the default action).
    merged_meta["collector.captured_samples"] = std::to_string(captured);
    std::string ending;
    for (const auto& e : endings) ending += (ending.empty() ? "" : "; ") + e;
    if (!ending.empty()) merged_meta["collector.end"] = ending;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6f", collector_cpu);
    merged_meta["collector.thread_cpu_s"] = buf;  // all processes' collector threads together
    for (const auto& [k, v] : own_cpu) {
      std::snprintf(buf, sizeof buf, "%.6f", v);
      merged_meta[k] = buf;
    }
    merged_meta["collector.call_stacks"] = std::to_string(call_stacks);
    for (const auto& [k, v] : summed) merged_meta[k] = std::to_string(v);
    if (unwind_weight > 0) {
      for (const auto& [k, v] : weighted) {
        std::snprintf(buf, sizeof buf, k == "collector.frames_mean" ? "%.1f" : "%.0f", v / double(unwind_weight));
        merged_meta[k] = buf;
      }
      merged_meta["collector.stack_bytes_max"] = std::to_string(stack_bytes_max);
    }
    std::snprintf(buf, sizeof buf, "%.6f", start_max);
    merged_meta["collector.start_s"] = buf;  // the slowest process's start()
    std::snprintf(buf, sizeof buf, "%.6f", double(load_ns) / 1e9);
    merged_meta["record.load_parts_s"] = buf;
    std::snprintf(buf, sizeof buf, "%.6f", double(symbolize_ns) / 1e9);
    merged_meta["record.symbolize_s"] = buf;
    merged_meta["record.symbolized_modules"] = std::to_string(symbolizer.modules_opened() - modules_before);
    merged_meta["record.symbolized_addresses"] =
        std::to_string(symbolizer.addresses_looked_up() - addresses_before);
    merged_meta["record.symbol_cache_hits"] = std::to_string(symbolizer.cache_hits() - hits_before);
    merged_meta["collector.dropped_samples"] = std::to_string(summary.dropped_samples);
    merged_meta["collector.timer_overruns"] = std::to_string(timer_overruns);
    merged_meta["collector.threads_unsampled"] = std::to_string(summary.unsampled_threads);
    merged_meta["cupti.dropped_records"] = std::to_string(summary.dropped_gpu_records);
    merged_meta["collector.processes"] = std::to_string(summary.processes);
    merged_meta["collector.unreadable_parts"] = std::to_string(summary.unreadable_parts);
    std::string status;
    for (const auto& s : statuses) status += (status.empty() ? "" : "; ") + s;
    if (!status.empty()) merged_meta["cupti.status"] = status;
    if (const auto hooks = python_hooks.counts(); hooks.python_processes() > 0 || hooks.none > 0) {
      merged_meta["python.hooks"] = python_hooks.line();
      merged_meta["python.hooks_installed"] = std::to_string(hooks.installed);
      merged_meta["python.processes"] = std::to_string(hooks.python_processes());
    }
    if (python_frames.python_processes() > 0) merged_meta["python.frames"] = python_frames.line();
    for (const auto& [k, v] : merged_meta) w.set_meta(k, v);
    w.close();
  }
  tmp_guard.done = true;
  for (const auto& s : statuses) summary.warnings.push_back(s);
  for (const auto& s : lent) summary.warnings.push_back(s);
  if (auto w = python_hooks.warning(); !w.empty()) summary.warnings.push_back(w);
  if (auto w = python_frames.warning(); !w.empty()) summary.warnings.push_back(w);
  if (pinned_processes > 0)
    summary.warnings.push_back(
        std::string(pinned_processes == 1 ? "CUPTI"
                                          : std::to_string(pinned_processes) + " processes: CUPTI") +
        " stayed attached after the program's first CUDA graph (a detach would fault the graph's later "
        "replays): GPU windows switch tracing off without detaching, so CUPTI's per-launch cost stays "
        "between windows (docs/collector.md, \"CUDA graphs keep CUPTI attached\")");
  if (const int64_t n = summed["collector.alt_stack_skipped_samples"]; n > 0)
    summary.warnings.push_back(
        std::to_string(n) +
        " samples not taken: the signal ran on the program's own alternate signal stack "
        "(sigaltstack) with too little room left for the sampler (docs/collector.md)");
  if (fs::exists(output, ec)) summary.replaced.push_back(output);
  if (std::rename(tmp.c_str(), output.c_str()) != 0) {
    std::string err = std::strerror(errno);
    fs::remove(tmp, ec);
    throw store::StoreError(output, "cannot rename the finished store into place: " + err);
  }
}

std::map<std::string, std::string> flight_env(const RecordOptions& o, const std::string& dir, const std::string& prefix) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", o.flight_slow_step);
  return {{"STEPSCOPE_FLIGHT_DIR", dir},
          {"STEPSCOPE_FLIGHT_PREFIX", prefix},
          {"STEPSCOPE_FLIGHT_WINDOW_MS", std::to_string(int64_t(o.flight_s * 1000))},
          {"STEPSCOPE_FLIGHT_SLOW_STEP", buf},
          {"STEPSCOPE_FLIGHT_MIN_EXCESS_MS", std::to_string(int64_t(o.flight_min_excess_ms))},
          {"STEPSCOPE_FLIGHT_WARMUP", std::to_string(o.flight_warmup_steps)},
          {"STEPSCOPE_FLIGHT_DATA_WAIT_MS", std::to_string(int64_t(o.flight_data_wait_ms))},
          {"STEPSCOPE_FLIGHT_MAX_PER_HOUR", std::to_string(o.flight_max_per_hour)},
          {"STEPSCOPE_FLIGHT_GPU_STEPS", std::to_string(o.flight_gpu_steps)}};
}

// "0 ranges" read as nothing marked where the hooks recorded 39 steps and 41 data waits: they are said.
std::string steps_and_waits(const RecordSummary& s) {
  std::string out;
  if (s.steps > 0) out += ", " + std::to_string(s.steps) + (s.steps == 1 ? " step" : " steps");
  if (s.data_waits > 0)
    out += ", " + std::to_string(s.data_waits) + (s.data_waits == 1 ? " data wait" : " data waits");
  return out;
}

// The summary says when a store took the place of a file of the same name (an earlier recording, often
// wanted; `-o` with %p or a dated name keeps each).
const char* replaced_note(const RecordSummary& s, const std::string& output) {
  return std::find(s.replaced.begin(), s.replaced.end(), output) != s.replaced.end()
             ? "; replaced the file that was there"
             : "";
}

RecordSummary record(const RecordOptions& o) {
  RecordSummary summary;
  if (o.command.empty()) throw store::StoreError(o.output, "no command to record (stepscope record -- CMD ...)");
  // -o may hold %r (rank), %p (pid), %h (host): docs/collector.md, "Several ranks". A launcher started as one
  // rank (srun/mpirun run `stepscope record` once per rank) knows its rank now; under torchrun only the
  // processes it starts do, and their parts are grouped by rank after the run.
  const auto own_rank = rank_from_env();
  const std::string host = host_name(), launcher_pid = std::to_string(getpid());
  const std::string rank_now = own_rank.count("rank") ? own_rank.at("rank") : std::string();
  const bool per_rank = rank_now.empty() && o.output.find("%r") != std::string::npos;
  std::string pattern = rank_now.empty() ? o.output : expand_output(o.output, &rank_now, nullptr, nullptr);
  std::string output =
      fs::absolute(expand_output(pattern, nullptr, &launcher_pid, &host)).lexically_normal().string();
  store::require_output_folder(output);  // the user's to make, with the mode they choose
  PartsFolderLock parts_lock;
  if (std::string holder; !parts_lock.take(output, output + ".parts", holder)) {
    // Another recording writes this output (every rank of `srun stepscope record` with the default run.db,
    // the nodes of a job on one shared folder): this one goes to a name of its own and the command runs.
    const std::string busy = output;
    const auto dot = pattern.rfind('.');
    const auto slash = pattern.rfind('/');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    pattern = (ext ? pattern.substr(0, dot) : pattern) + "-" + host + "-" + launcher_pid +
              (ext ? pattern.substr(dot) : "");
    output = fs::absolute(expand_output(pattern, nullptr, &launcher_pid, &host)).lexically_normal().string();
    if (std::string other; !parts_lock.take(output, output + ".parts", other))
      throw store::StoreError(output, "another stepscope is recording to it (pid " + other + ")");
    std::fprintf(stderr, "stepscope: %s is being recorded by pid %s: this recording writes %s\n",
                 busy.c_str(), holder.c_str(), output.c_str());
  }
  const std::string parts_dir = output + ".parts";
  std::error_code ec;
  const std::string lib = collector_library_path();
  if (!fs::exists(lib, ec)) throw store::StoreError(lib, "collector library not found (set STEPSCOPE_COLLECTOR_LIB)");

  const std::string command_file = resolve_command(o.command[0]);
  // A command that is not found fails at exec with its own line: no warning about the GPU before it.
  if (!o.no_gpu && !command_file.empty()) {
    if (void* cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {
      dlclose(cuda);
    } else {
      std::fprintf(stderr, "stepscope: warning: no CUDA driver (libcuda.so.1 not found): recording CPU data only\n");
      summary.warnings.push_back("no CUDA driver");
    }
  }

  if (!command_file.empty() && statically_linked(command_file)) {
    std::fprintf(
        stderr,
        "stepscope: warning: %s is statically linked: the collector cannot be injected (LD_PRELOAD needs "
        "the dynamic loader); the command runs unchanged and nothing of it is sampled\n",
        command_file.c_str());
    summary.warnings.push_back("statically linked command");
  }

  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  const std::string preload = get_env(env, "LD_PRELOAD");
  set_env(env, "LD_PRELOAD", preload.empty() ? lib : lib + ":" + preload);
  if (!o.no_gpu) set_env(env, "CUDA_INJECTION64_PATH", lib);
  set_env(env, "NVTX_INJECTION64_PATH", lib);
  set_env(env, "STEPSCOPE_PARTS_DIR", parts_dir);
  set_env(env, "STEPSCOPE_CPU_HZ", std::to_string(o.cpu_hz));
  set_env(env, "STEPSCOPE_STACK_BYTES", std::to_string(o.stack_bytes));
  set_env(env, "STEPSCOPE_WALL", o.wall ? "1" : "0");
  set_env(env, "STEPSCOPE_NO_GPU", o.no_gpu ? "1" : "0");
  set_env(env, "STEPSCOPE_PAUSED", o.paused ? "1" : "0");
  set_env(env, "STEPSCOPE_DATA_WAIT_REGEX", o.data_wait_regex);
  set_env(env, "STEPSCOPE_STEP_REGEX", o.step_regex);
  set_env(env, "STEPSCOPE_CUDA_API", o.cuda_api);
  set_env(env, "STEPSCOPE_CUDA_GRAPHS", o.cuda_graphs);
  set_env(env, "STEPSCOPE_GPU_WINDOW", o.gpu_window);
  set_env(env, "STEPSCOPE_CUDA_STACKS_PER_S", std::to_string(o.cuda_stacks_per_s));
  if (!o.data_wait_func.empty()) set_env(env, "STEPSCOPE_DATA_WAIT_FUNC", o.data_wait_func);
  if (!o.step_func.empty()) set_env(env, "STEPSCOPE_STEP_FUNC", o.step_func);
  const bool flight = o.flight_s > 0;
  const std::string flight_dir = output + ".flight";
  if (flight) {
    fs::remove_all(flight_dir, ec);
    if (!fs::create_directories(flight_dir, ec) && ec)
      throw store::StoreError(output, "cannot create " + flight_dir + ": " + ec.message());
    fs::permissions(flight_dir, fs::perms::owner_all, fs::perm_options::replace, ec);
    for (const auto& [k, v] : flight_env(o, flight_dir, flight_prefix(output))) set_env(env, k, v);
    set_env(env, "STEPSCOPE_FLIGHT_PARENT_PID", launcher_pid);  // the command itself is the root process
  }
  // No PYTHONPATH: the collector installs the Python hooks itself (collector/src/python/python_hooks.cpp), so
  // the program's own PYTHONPATH and sitecustomize stay exactly as they were.

  std::vector<char*> envp, argv;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.command;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Orphaned descendants (forked workers outliving the command) are re-parented to us, so we can wait for them.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  g_signal.store(0);
  struct sigaction sa{}, old_int{}, old_term{}, old_hup{};
  sa.sa_sigaction = forward_signal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGHUP, &sa, &old_hup);
  // SIGCHLD stays blocked so the launcher sleeps in sigtimedwait() until a child changes state, instead of
  // polling (it shares the CPUs with the command it measures).
  sigset_t chld, old_mask;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &chld, &old_mask);

  std::map<std::string, std::string> flight_meta;
  if (flight) {
    std::string cmdline;
    for (const auto& a : o.command) cmdline += (cmdline.empty() ? "" : " ") + a;
    flight_meta = {{"recorder", "stepscope record --flight"}, {"command", cmdline}, {"host", host},
                   {"collector.cpu_hz", std::to_string(o.cpu_hz)}, {"collector.mode", o.wall ? "wall" : "cpu"}};
    for (const auto& [k, v] : own_rank) flight_meta[k] = v;
  }
  FlightWatcher watcher(flight_dir, flight_prefix(output), flight_meta, o.flight_quota_bytes, o.print_summary);

  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) throw store::StoreError(output, "pipe: " + std::string(std::strerror(errno)));
  const int64_t t_start = mono_ns();
  pid_t child = fork();
  if (child < 0) throw store::StoreError(output, "fork: " + std::string(std::strerror(errno)));
  if (child == 0) {
    close(exec_pipe[0]);
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
    execvpe(argv[0], argv.data(), envp.data());
    int err = errno;
    (void)!write(exec_pipe[1], &err, sizeof err);
    _exit(127);
  }
  g_child.store(child);
  close(exec_pipe[1]);
  int exec_errno = 0;
  if (read(exec_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno)
    std::fprintf(stderr, "stepscope: %s %s: %s (no store written)\n", o.command[0].c_str(),
                 exec_errno == ENOENT ? "not found" : "cannot run", std::strerror(exec_errno));
  close(exec_pipe[0]);
  if (o.paused && !exec_errno && o.print_summary)
    std::fprintf(stderr, "stepscope: %s runs paused as process %d: `stepscope start %d` / `stepscope stop %d` open and "
                 "close recording windows\n", o.command[0].c_str(), int(child), int(child), int(child));

  // Reaps every exited child that is not `keep` (orphans re-parented to us); true when `keep` has exited too
  // (it is left for wait4 so its status and rusage are not lost).
  auto reap_others = [](pid_t keep) {
    for (;;) {
      siginfo_t si{};
      if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0) return false;
      if (si.si_pid == keep) return true;
      waitpid(si.si_pid, nullptr, 0);
    }
  };
  auto sleep_for_child = [&](int64_t max_ns) {
    timespec ts{static_cast<time_t>(max_ns / 1000000000), static_cast<long>(max_ns % 1000000000)};
    sigtimedwait(&chld, nullptr, &ts);  // EINTR (a forwarded signal) or EAGAIN (timeout): just look again
  };

  bool interrupted = false, killed = false;
  int status = 0;
  rusage ru{};
  int64_t t_exit = 0;
  for (;;) {
    pid_t r = wait4(child, &status, WNOHANG, &ru);
    if (r == child) {
      t_exit = mono_ns();
      break;
    }
    if (r < 0 && errno != EINTR) break;
    reap_others(child);
    const int64_t elapsed = mono_ns() - t_start;
    const int64_t duration = static_cast<int64_t>(o.duration_s * 1e9);
    if (duration > 0 && !interrupted && elapsed >= duration) {
      // A command that ended on its own since the look above ended before --duration did: its status is its
      // own (a failure must not read as "ended as asked").
      if (wait4(child, &status, WNOHANG, &ru) == child) {
        t_exit = mono_ns();
        break;
      }
      // Said before the signal lands, so the program's reaction (CPython's KeyboardInterrupt traceback) reads as
      // the expected end it is.
      if (o.print_summary)
        std::fprintf(stderr,
                     "stepscope: --duration %g s reached: SIGINT to %s (a Python program prints a KeyboardInterrupt "
                     "traceback: expected)\n",
                     o.duration_s, o.command[0].c_str());
      kill(child, SIGINT);
      interrupted = true;
    }
    if (interrupted && !killed && elapsed >= duration + 5000000000LL) {
      kill(child, SIGKILL);
      killed = true;
    }
    if (flight) watcher.poll();
    int64_t wait = 200000000;  // a periodic look even without SIGCHLD (orphans, missed signals)
    if (duration > 0 && !interrupted) wait = std::min(wait, std::max<int64_t>(duration - elapsed, 1000000));
    if (interrupted && !killed) wait = std::min(wait, std::max<int64_t>(duration + 5000000000LL - elapsed, 1000000));
    sleep_for_child(wait);
  }
  if (!t_exit) t_exit = mono_ns();
  g_child.store(0);
  if (exec_errno)
    summary.exit_code = 127;
  else if (WIFEXITED(status))
    summary.exit_code = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    summary.exit_code = 128 + WTERMSIG(status);
  // Ended by our own --duration stop: a crash (SIGSEGV in the program's cleanup) is still the program's
  // failure.
  summary.stopped_by_duration =
      interrupted && !exec_errno &&
      (WIFEXITED(status) ||
       (WIFSIGNALED(status) && (WTERMSIG(status) == SIGINT || (killed && WTERMSIG(status) == SIGKILL))));

  // Descendants still running (workers the command left behind): give them a moment to finish their stores.
  const int64_t wait_until = mono_ns() + 3000000000LL;
  for (;;) {
    reap_others(0);
    siginfo_t si{};
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD) break;
    const int64_t left = wait_until - mono_ns();
    if (left <= 0) break;
    sleep_for_child(std::min<int64_t>(left, 100000000));
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGHUP, &old_hup, nullptr);
  summary.launcher_signal = g_signal.load();
  if (exec_errno) {  // nothing ran: a store would only hold an empty recording under the command's name
    fs::remove_all(parts_dir, ec);
    return summary;
  }
  const int64_t t_finalize = mono_ns();
  if (flight) {
    std::string failure;
    if (WIFSIGNALED(status)) failure = "signal " + std::to_string(WTERMSIG(status));
    else if (summary.exit_code != 0) failure = "exit status " + std::to_string(summary.exit_code);
    watcher.finish(failure);
    fs::remove_all(parts_dir, ec);
    summary.outputs = watcher.saved();
    summary.flight_skipped = watcher.skipped();
    summary.command_wall_s = double(t_exit - t_start) / 1e9;
    summary.finalize_s = double(mono_ns() - t_finalize) / 1e9;
    if (o.print_summary) std::fprintf(stderr, "stepscope: %s\n", watcher.summary().c_str());
    return summary;
  }

  std::map<std::string, std::string> meta;
  std::string cmdline;
  for (const auto& a : o.command) cmdline += (cmdline.empty() ? "" : " ") + a;
  meta["recorder"] = "stepscope record";
  meta["command"] = cmdline;
  meta["exit_code"] = std::to_string(summary.exit_code);
  meta["collector.cpu_hz"] = std::to_string(o.cpu_hz);
  meta["collector.mode"] = o.wall ? "wall" : "cpu";
  // How long the command ran (exec, collector start-up and its final flush included) and the CPU it used:
  // the figures bench/overhead compares with the plain run.
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", double(t_exit - t_start) / 1e9);
  meta["record.command_wall_s"] = buf;
  std::snprintf(buf, sizeof buf, "%.6f",
                ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
  meta["record.command_cpu_s"] = buf;
  meta["record.command_start_ns"] = std::to_string(t_start);
  meta["record.command_end_ns"] = std::to_string(t_exit);
  meta["host"] = host;
  for (const auto& [k, v] : own_rank) meta[k] = v;
  if (per_rank) {
    try {
      merge_parts_by_rank(parts_dir, pattern, host, meta, summary);
    } catch (const store::StoreError& e) {
      throw store::StoreError(pattern, e.reason() +
                                           "; the recording's parts (a store per process, not "
                                           "symbolized) stay in " +
                                           parts_dir);
    }
  } else {
    const std::string zero = "0", child_pid = std::to_string(child);
    const std::string final_output =
        fs::absolute(expand_output(pattern, &zero, &child_pid, &host)).lexically_normal().string();
    try {
      merge_parts(parts_dir, final_output, meta, summary);
    } catch (const store::StoreError& e) {
      // Named as the output (the message named the hidden temporary file); the parts are the recording.
      throw store::StoreError(final_output, e.reason() +
                                                "; the recording's parts (a store per process, not "
                                                "symbolized) stay in " +
                                                parts_dir);
    }
    summary.outputs.push_back(final_output);
  }
  fs::remove_all(parts_dir, ec);
  summary.command_wall_s = double(t_exit - t_start) / 1e9;
  summary.finalize_s = double(mono_ns() - t_finalize) / 1e9;
  // A process writes its part at its first commit (250 ms) and at its exit; one killed before both leaves
  // none.
  if (summary.processes == 0 && !o.paused && !(!command_file.empty() && statically_linked(command_file)))
    summary.warnings.push_back(
        "nothing was recorded: the command ended before the collector's first commit (250 ms) without "
        "running its "
        "exit (killed by a signal?)");

  if (o.print_summary) {
    std::fprintf(
        stderr,
        "stepscope: %lld samples (%lld thread%s, %lld process%s), %lld kernels, %lld ranges%s; dropped: %lld "
        "samples, %lld GPU records -> %s (finalized in %.2f s%s)\n",
        (long long)summary.samples, (long long)summary.threads, summary.threads == 1 ? "" : "s",
        (long long)summary.processes, summary.processes == 1 ? "" : "es", (long long)summary.kernels,
        (long long)summary.ranges, steps_and_waits(summary).c_str(), (long long)summary.dropped_samples,
        (long long)summary.dropped_gpu_records,
        summary.outputs.size() == 1 ? summary.outputs[0].c_str()
                                    : (std::to_string(summary.outputs.size()) + " stores").c_str(),
        summary.finalize_s, summary.outputs.size() == 1 ? replaced_note(summary, summary.outputs[0]) : "");
    if (summary.outputs.size() > 1)
      for (const auto& out : summary.outputs)
        std::fprintf(stderr, "stepscope: wrote %s%s\n", out.c_str(),
                     *replaced_note(summary, out) ? " (replaced the file that was there)" : "");

    for (const auto& w : summary.warnings)  // those said before the command ran are not said twice
      if (w != "no CUDA driver" && w != "statically linked command")
        std::fprintf(stderr, "stepscope: warning: %s\n", w.c_str());
  }
  return summary;
}

}  // namespace stepscope::collector
