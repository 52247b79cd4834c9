#include "flight/flight_recorder.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>

#include "core/collector_state.h"
#include "flight/flight_trigger.h"
#include "flight/flight_window.h"
#include "flight/save_names.h"

namespace stepscope::collector::flight {
namespace {

// A trigger's save waits this long after the slow step ended: the next step's start, the GPU records of the
// slow step (CUPTI hands buffers over late) and the other processes' rows arrive in the meantime.
constexpr int64_t kTailNs = 500LL * 1000000;
constexpr int64_t kScanPeriodNs = 250LL * 1000000;  // other processes' save folders
constexpr int64_t kPrunePeriodNs = 1000LL * 1000000;
constexpr int kRequestWaitS = 20;

struct Request {
  std::string kind, dir;
  bool done = false, ok = false;
  std::string result;
};

struct Recorder {
  FlightWindow window;
  TriggerEvaluator triggers;
  std::set<std::string> seen;  // save folders this process started or answered
  std::optional<Trigger> due;
  int64_t due_at = 0, due_fired_at = 0, last_scan = 0, last_prune = 0;
  int64_t other_save_seen_at = -1;  // when a scan last found a save another process began
  std::deque<std::pair<int64_t, int64_t>> other_triggers;  // the slow intervals of the last of those saves
  int64_t saves = 0, parts = 0, failures = 0, joined = 0;
  int64_t unsaved = 0;  // triggers that found no save folder (it could not be made)
  // What note_trigger_counts last wrote, and this image's name for its file.
  int64_t held_noted = 0, unsaved_noted = 0;
  const int64_t image = clock_ns(CLOCK_REALTIME);
  std::mutex mu;  // requests (the control thread) ↔ the collector thread
  std::condition_variable cv;
  std::deque<Request*> requests;
  explicit Recorder(TriggerSettings s) : triggers(s) {}
};
Recorder* r = nullptr;  // never freed: a forked child's copy is leaked, the control thread may hold a pointer

// Step indices as ranges: "200-263, 400".
std::string ranges_of(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::string out;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(v[i]) + (j > i ? "-" + std::to_string(v[j]) : "");
    i = j + 1;
  }
  return out;
}

// What the save says about itself: the window, and which of its steps have GPU activity.
std::map<std::string, std::string> part_meta(const MetaFn& meta) {
  std::map<std::string, std::string> m = meta();
  const store::Trace& t = r->window.rows();
  char window[32];
  std::snprintf(window, sizeof window, "%g", double(g->config.flight_window_ns) / 1e9);
  m["flight.window_s"] = window;
  m["flight.window_memory_bytes"] = std::to_string(r->window.memory_bytes());
  if (!t.steps.empty()) {
    std::vector<int64_t> gpu, all;
    for (const auto& s : t.steps) {
      all.push_back(s.index);
      const auto in = [&s](const auto& a) { return a.start < s.end && a.end > s.start; };
      if (std::any_of(t.kernels.begin(), t.kernels.end(), in) ||
          std::any_of(t.memcpys.begin(), t.memcpys.end(), in))
        gpu.push_back(s.index);
    }
    m["flight.gpu_steps"] = gpu.empty() ? "none" : ranges_of(gpu);
  }
  if (r->triggers.suppressed()) m["flight.suppressed_triggers"] = std::to_string(r->triggers.suppressed());
  if (r->joined) m["flight.joined_triggers"] = std::to_string(r->joined);
  if (r->triggers.excluded_steps())
    m["flight.steps_not_judged"] =
        std::to_string(r->triggers.excluded_steps());  // they paid for a GPU window switch
  return m;
}

bool write_part_into(const std::string& dir, const MetaFn& meta) {
  const int64_t start = clock_ns(CLOCK_MONOTONIC);
  try {
    r->window.prune(start - g->config.flight_window_ns);
    r->window.write_part(dir, g->pid, part_meta(meta));
    ++r->parts;
    r->triggers.discount(start, clock_ns(CLOCK_MONOTONIC));  // the program's steps may have shared a core
    return true;
  } catch (const std::exception& e) {
    if (r->failures++ == 0)
      std::fprintf(stderr, "stepscope: flight save of pid %d: %s\n", int(g->pid), e.what());
    return false;
  }
}

// A save folder, made whole (with its trigger file) before it appears under its name. "" on failure.
std::string make_save_folder(const std::string& label, const std::map<std::string, std::string>& trigger) {
  const std::string& base = g->config.flight_dir;
  std::string name = utc_stamp() + "-" + label;
  for (int i = 2; i < 100; ++i) {
    const std::string hidden = base + "/." + name;
    if (mkdir(hidden.c_str(), 0700) == 0) {
      {
        std::ofstream out(hidden + "/trigger");
        for (const auto& [k, v] : trigger) out << k << '=' << v << '\n';
      }
      if (std::rename(hidden.c_str(), (base + "/" + name).c_str()) == 0) {
        r->seen.insert(name);
        return name;
      }
      std::error_code ec;
      std::filesystem::remove_all(hidden, ec);
      return "";
    }
    if (errno != EEXIST) return "";
    name = utc_stamp() + "-" + label + "-" + std::to_string(i);
  }
  return "";
}

std::map<std::string, std::string> trigger_meta(const Trigger* t, const std::string& kind) {
  std::map<std::string, std::string> m;
  m["kind"] = t ? t->kind : kind;
  m["pid"] = std::to_string(g->pid);
  if (t) {
    m["detail"] = t->detail();
    m["source"] = t->source;
    m["start_ns"] = std::to_string(t->start_ns);
    m["end_ns"] = std::to_string(t->end_ns);
    if (t->step >= 0) m["step"] = std::to_string(t->step);
    if (t->median_ns) m["median_ns"] = std::to_string(t->median_ns);
  } else {
    m["detail"] = kind == "dump" ? "stepscope dump" : kind;
  }
  return m;
}

// A save's folder, its trigger file in it; "" (said once) when it cannot be made.
std::string make_save(const Trigger* t, const std::string& kind) {
  const std::string label = t ? (t->step >= 0 ? "step" + std::to_string(t->step) : t->kind) : kind;
  const std::string name = make_save_folder(label, trigger_meta(t, kind));
  if (name.empty()) {
    if (t) ++r->unsaved;  // a dump is answered with the failure; a trigger has only the launcher's last line
    if (r->failures++ == 0)
      std::fprintf(stderr, "stepscope: flight save of pid %d: cannot make a folder in %s\n", int(g->pid),
                   g->config.flight_dir.c_str());
    return "";
  }
  ++r->saves;
  return name;
}

std::string save(const Trigger* t, const std::string& kind, const MetaFn& meta) {
  const std::string name = make_save(t, kind);
  if (!name.empty()) write_part_into(g->config.flight_dir + "/" + name, meta);
  return name;
}

// Save folders other processes made since the last look (now marked seen).
std::vector<std::string> other_saves() {
  std::vector<std::string> fresh;
  DIR* d = opendir(g->config.flight_dir.c_str());
  if (!d) return fresh;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.empty() || n[0] == '.' || n == "exit" || r->seen.count(n)) continue;
    fresh.push_back(n);
    r->seen.insert(n);
  }
  closedir(d);
  // Not the pass's `now`, which was read before its drain judged the steps.
  if (!fresh.empty()) r->other_save_seen_at = clock_ns(CLOCK_MONOTONIC);
  for (const auto& n : fresh) {
    std::ifstream in(g->config.flight_dir + "/" + n + "/trigger");
    int64_t start = -1, end = -1;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("start_ns=", 0) == 0) start = std::atoll(line.c_str() + 9);
      if (line.rfind("end_ns=", 0) == 0) end = std::atoll(line.c_str() + 7);
    }
    if (start < 0 || end < start) continue;  // a dump: no interval
    r->other_triggers.emplace_back(start, end);
    if (r->other_triggers.size() > 16) r->other_triggers.pop_front();
  }
  return fresh;
}

// Whether another process's save, begun since this trigger fired or for an interval overlapping its own,
// holds the slow step: every rank of a job waits for the straggler's step and sees it slow, and a rank whose
// rows came in late may see it after the first rank's save was made.
bool saved_elsewhere(const Trigger& t) {
  if (r->other_save_seen_at >= r->due_fired_at) return true;
  return std::any_of(r->other_triggers.begin(), r->other_triggers.end(),
                     [&](const auto& o) { return o.first < t.end_ns && o.second > t.start_ns; });
}

// This process adds its window to each.
void answer(const std::vector<std::string>& saves, const MetaFn& meta) {
  for (const auto& n : saves)
    if (r->window.timed_rows() > 0) write_part_into(g->config.flight_dir + "/" + n, meta);
}

// Held while a process looks for other saves and then makes its own folder, so that of two processes whose
// triggers come due at the same moment the second sees the first's save. Without it (the lock file cannot
// be made) the save goes on, and such a pair may save twice.
class SaveLock {
 public:
  SaveLock() : fd_(::open((g->config.flight_dir + "/.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0)
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
  }
  ~SaveLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

 private:
  int fd_;
};

// The triggers the hourly limit held back and those that found no save folder, for the launcher's last line:
// under the limit there may be no next save whose meta would count them, and an unsaved one has no folder at
// all. A dot-name, which no process takes for a save; replaced whole. Best effort: where the folder could not
// be made this file may not be either, and the process's stderr said so.
void note_trigger_counts() {
  const int64_t held = r->triggers.suppressed();
  if (held == r->held_noted && r->unsaved == r->unsaved_noted) return;
  const std::string base = g->config.flight_dir + "/",
                    id = std::to_string(g->pid) + "-" + std::to_string(r->image);
  const std::string tmp = base + ".tmp-counts-" + id;
  bool written = false;
  {
    std::ofstream out(tmp);
    out << held << ' ' << r->unsaved << '\n';
    out.close();
    written = bool(out);
  }
  // Noted only once the file is in place: a failed write (a full disk for a moment) is tried again next pass.
  if (written && std::rename(tmp.c_str(), (base + kTriggerCountsPrefix + id).c_str()) == 0) {
    r->held_noted = held;
    r->unsaved_noted = r->unsaved;
  } else {
    std::remove(tmp.c_str());
  }
}

void mark_existing_seen() {
  DIR* d = opendir(g->config.flight_dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) r->seen.insert(e->d_name);
  closedir(d);
}

bool is_root() {
  const Config& c = g->config;
  if (c.flight_root_pid > 0) return c.flight_root_pid == g->pid;
  return c.flight_parent_pid > 0 && c.flight_parent_pid == getppid();
}

}  // namespace

void begin() {
  if (g->config.flight_dir.empty()) {
    r = nullptr;
    return;
  }
  TriggerSettings s;
  s.slow_step_factor = g->config.flight_slow_step;
  s.min_excess_ns = g->config.flight_min_excess_ns;
  s.warmup_steps = g->config.flight_warmup_steps;
  s.data_wait_ns = g->config.flight_data_wait_ns;
  s.max_per_hour = g->config.flight_max_per_hour;
  r = new Recorder(s);  // a child's (or an earlier window's) recorder is left behind: see `r`
  mark_existing_seen();
}

bool active() {
  return r != nullptr;
}

store::Trace* window_rows() {
  return r ? &r->window.rows() : nullptr;
}

void observe(const store::Trace& rows) {
  if (!r) return;
  std::vector<std::pair<int64_t, int64_t>> switches;
  cupti::take_switches(switches);
  for (const auto& [a, b] : switches) r->triggers.exclude(a, b);
  if (rows.steps.empty() && rows.data_waits.empty()) return;
  // In the order they ended, so a data wait inside a slow step and the step itself fire once.
  struct Ended {
    int64_t end;
    const store::Step* step;
    const store::DataWait* wait;
  };
  std::vector<Ended> order;
  for (const auto& s : rows.steps) order.push_back({s.end, &s, nullptr});
  for (const auto& w : rows.data_waits) order.push_back({w.end, nullptr, &w});
  std::sort(order.begin(), order.end(), [](const Ended& a, const Ended& b) { return a.end < b.end; });
  for (const auto& e : order) {
    std::optional<Trigger> t =
        e.step ? r->triggers.on_step(rows.str(e.step->source), e.step->index, e.step->start, e.step->end,
                                     e.step->tid)
               : r->triggers.on_data_wait(rows.str(e.wait->source), e.wait->start, e.wait->end);
    if (!t || r->due) continue;  // one save at a time: a second trigger in its tail is in the same window
    r->due = std::move(t);
    r->due_fired_at = clock_ns(CLOCK_MONOTONIC);
    r->due_at = r->due_fired_at + kTailNs;
    // The steps after a trigger are traced whole (slow steps often come back), with windowed GPU tracing.
    if (g->config.flight_gpu_steps > 0) cupti::arm_window(g->config.flight_gpu_steps);
  }
}

void after_pass(int64_t now, const MetaFn& meta) {
  if (!r) return;
  const bool due = r->due && now >= r->due_at;
  if (due) {
    const Trigger t = *r->due;
    r->due.reset();
    // A due save looks first: another process may have saved the same slow interval.
    std::vector<std::string> fresh;
    std::string name;
    bool joined = false;
    {
      SaveLock lock;
      fresh = other_saves();
      joined = saved_elsewhere(t);
      if (!joined) name = make_save(&t, t.kind);
    }
    r->last_scan = now;
    if (joined) {
      r->triggers.withdraw(t);
      ++r->joined;
    }
    if (!name.empty()) write_part_into(g->config.flight_dir + "/" + name, meta);
    answer(fresh, meta);
  } else if (now - r->last_scan >= kScanPeriodNs) {
    r->last_scan = now;
    answer(other_saves(), meta);
  }
  std::deque<Request*> requests;
  {
    std::lock_guard<std::mutex> lk(r->mu);
    requests.swap(r->requests);
  }
  for (Request* q : requests) {
    if (q->kind == "snapshot") {
      q->ok = write_part_into(q->dir, meta);
      q->result = q->ok ? "snapshot" : "error writing the snapshot";
    } else {
      const std::string name = save(nullptr, "dump", meta);
      q->ok = !name.empty();
      // save=: the folder the launcher merges and then removes (with -o run-%r.db the path is a pattern).
      q->result = q->ok ? "path=" + g->config.flight_prefix + "-" + name +
                              ".db save=" + g->config.flight_dir + "/" + name
                        : "cannot save (see the process's stderr)";
    }
    std::lock_guard<std::mutex> lk(r->mu);
    q->done = true;
    r->cv.notify_all();
  }
  note_trigger_counts();
  if (now - r->last_prune >= kPrunePeriodNs) {
    r->last_prune = now;
    r->window.prune(now - g->config.flight_window_ns);
  }
}

namespace {
std::atomic<int> g_exit_status{-1};  // what exit() was given, once watch_exit_status() registered for it
void note_exit_status(int status, void*) {
  g_exit_status.store(status, std::memory_order_relaxed);
}
}  // namespace

void watch_exit_status() {
  // Registered once: the library stays loaded after a window closes (dormant), so the handler stays valid.
  static std::atomic<bool> registered{false};
  if (!registered.exchange(true)) on_exit(note_exit_status, nullptr);
}

void final_pass(bool process_end, int signal, const MetaFn& meta) {
  if (!r) return;
  // A trigger still in its tail: the program is ending, so its window is saved now.
  if (r->due) r->due_at = 0;
  after_pass(clock_ns(CLOCK_MONOTONIC), meta);
  if (!process_end || !is_root()) return;
  // The launcher keeps it only when the program failed (a signal, or an exit status other than 0).
  const std::string dir = g->config.flight_dir + "/exit";
  mkdir(dir.c_str(), 0700);
  const MetaFn with_end = [&] {
    auto m = meta();
    const int status = g_exit_status.load(std::memory_order_relaxed);
    m["flight.end"] = signal > 0   ? "signal " + std::to_string(signal)
                      : status > 0 ? "exit status " + std::to_string(status)
                                   : "exit";
    return m;
  };
  write_part_into(dir, with_end);
}

bool request(const std::string& kind, const std::string& dir, std::string& result, std::string& error) {
  Recorder* rec = r;
  if (!rec || !g || g->state.load() != kRunning) {
    error = "not flight recording (stepscope record --flight or attach --flight)";
    return false;
  }
  Request q;
  q.kind = kind;
  q.dir = dir;
  {
    std::lock_guard<std::mutex> lk(rec->mu);
    rec->requests.push_back(&q);
  }
  {
    std::lock_guard<std::mutex> lk(g->wake_mu);
    g->wake_cv.notify_all();
  }
  std::unique_lock<std::mutex> lk(rec->mu);
  if (!rec->cv.wait_for(lk, std::chrono::seconds(kRequestWaitS), [&] { return q.done; })) {
    // Still queued: take it back so the collector thread never touches this stack frame.
    auto it = std::find(rec->requests.begin(), rec->requests.end(), &q);
    if (it != rec->requests.end()) {
      rec->requests.erase(it);
      error = "the collector thread did not answer in time";
      return false;
    }
    rec->cv.wait(lk, [&] { return q.done; });
  }
  if (!q.ok) error = q.result;
  result = q.result;
  return q.ok;
}

}  // namespace stepscope::collector::flight
