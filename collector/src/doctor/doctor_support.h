// What every check of `stepscope doctor` shares: the line printer (verdict, detail, advice), interruption
// between checks, child processes with a timeout, and small text and system helpers. See doctor_check.h for
// the checks.
#pragma once

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <unordered_map>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::collector::checkup {

// The self-test workload's CUDA thread and kernel, which the self-test looks for in the recording.
inline constexpr const char* kCudaThreadName = "ss-doctor-cuda";
inline constexpr const char* kKernelName = "stepscope_doctor_empty";

std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));
double thread_cpu_s();
std::string read_trimmed(const std::string& path, bool* exists = nullptr);
std::string first_line(const std::string& s);
std::string join(const std::vector<std::string>& v, const char* sep);
// Effective capability `bit` of this process (/proc/self/status CapEff), as the attach injector reads it.
bool have_capability(int bit);
// The path the loader found a dlopen'ed shared object at.
std::string loaded_path(void* handle);

// --- one line per check

enum class Verdict { Ok, Warn, Fail, Skip };

// Ctrl-C (or SIGTERM/SIGHUP) stops the doctor between two checks, and its temp folder is removed. While a
// recording runs, record() handles these signals itself and says so in RecordSummary::launcher_signal.
struct Interrupted {};
extern volatile sig_atomic_t g_stop;
void on_stop(int sig);
void stop_if_asked(int launcher_signal = 0);

class Printer {
 public:
  explicit Printer(std::FILE* out) : out_(out) {}
  void section(const std::string& title) {
    std::fprintf(out_, "%s\n", title.c_str());
    std::fflush(out_);
  }
  // `todo` (warn, FAIL, skip): what to do. `part` (FAIL): what does not work, for the final line.
  void line(Verdict v, const std::string& what, const std::string& detail, const std::string& todo = {},
            const std::string& part = {}) {
    static const char* const tags[] = {"ok", "warn", "FAIL", "skip"};
    std::string l = strf("  %-6s", tags[int(v)]) + what + ": " + detail;
    if (v != Verdict::Ok && !todo.empty()) l += " \u2014 " + todo;
    std::fprintf(out_, "%s\n", l.c_str());
    std::fflush(out_);
    if (v == Verdict::Fail &&
        std::find(parts_.begin(), parts_.end(), part.empty() ? what : part) == parts_.end())
      parts_.push_back(part.empty() ? what : part);
  }
  const std::vector<std::string>& parts() const { return parts_; }

 private:
  std::FILE* out_;
  std::vector<std::string> parts_;
};

// --- child processes

struct Captured {
  int status = -1;  // exit code, 128 + signal, -1 when it could not be started
  std::string out;  // stdout and stderr together
};

// Runs argv (no shell) with `env_add` ("K=V") over this environment, stdin from /dev/null; killed after
// timeout_ms (an interpreter that hangs must not hang the doctor).
Captured capture(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                 int timeout_ms);
// The first executable file called `name` on PATH, as execvp would run it; "" when none.
std::string on_path(const std::string& name);
// The dynamic loader this process runs under (its PT_INTERP), found by its load address.
std::string dynamic_loader();
std::string self_exe();

// --- reading a recording back

// Stacks (ids) that hold a frame satisfying `want`, computed once per stack along the parent chain.
template <class Want>
std::vector<char> stacks_with(const store::Trace& t, Want want) {
  std::unordered_map<int64_t, const store::Frame*> frame_of;
  for (const auto& f : t.frames) frame_of[f.id] = &f;
  int64_t max_id = 0;
  for (const auto& s : t.stacks) max_id = std::max(max_id, s.id);
  std::vector<const store::Stack*> by_id(size_t(max_id + 1), nullptr);
  for (const auto& s : t.stacks) by_id[size_t(s.id)] = &s;
  std::vector<char> memo(size_t(max_id + 1), -1);
  for (int64_t id = 1; id <= max_id; ++id) {
    std::vector<int64_t> chain;
    int64_t cur = id;
    char result = 0;
    while (cur > 0 && cur <= max_id && by_id[size_t(cur)]) {
      if (memo[size_t(cur)] >= 0) {
        result = memo[size_t(cur)];
        break;
      }
      chain.push_back(cur);
      auto f = frame_of.find(by_id[size_t(cur)]->frame);
      if (f != frame_of.end() && want(*f->second)) {
        result = 1;
        break;
      }
      cur = by_id[size_t(cur)]->parent;
    }
    for (int64_t c : chain) memo[size_t(c)] = result;
  }
  return memo;
}

inline bool has(const std::vector<char>& memo, int64_t stack) {
  return stack > 0 && size_t(stack) < memo.size() && memo[size_t(stack)] == 1;
}

}  // namespace stepscope::collector::checkup
