// Collapsed ("folded") stacks of the CPU samples: the flame-graph tools' input format.
#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/export.h"

namespace stepscope::analyzer {

using namespace stepscope::store;

namespace {

// ';' separates frames and the last ' ' the count: a name keeps neither meaning.
std::string folded_name(std::string s) {
  std::replace(s.begin(), s.end(), ';', ':');
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

std::string to_folded_stacks(const Trace& t) {
  std::unordered_map<int64_t, const Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::unordered_map<int64_t, const Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;
  std::map<int64_t, std::string> process_names;
  for (const auto& p : t.processes) process_names[p.pid] = t.str(p.name);
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  for (const auto& th : t.threads) thread_names[{th.pid, th.tid}] = t.str(th.name);

  std::unordered_map<int64_t, std::string> stack_text;  // stack id → "outer;…;inner"
  auto text_of = [&](int64_t id) -> const std::string& {
    auto it = stack_text.find(id);
    if (it != stack_text.end()) return it->second;
    std::vector<std::string> names;
    for (int64_t node = id, hops = 0; node && hops < 100000; ++hops) {
      auto s = stacks.find(node);
      if (s == stacks.end()) break;
      auto f = frames.find(s->second->frame);
      names.push_back(f == frames.end() ? std::string("??") : folded_name(frame_display_name(t, *f->second)));
      node = s->second->parent;
    }
    std::string out;
    for (auto n = names.rbegin(); n != names.rend(); ++n) out += (out.empty() ? "" : ";") + *n;
    return stack_text.emplace(id, std::move(out)).first->second;
  };

  std::map<std::pair<int64_t, int64_t>, std::string> thread_text;  // (pid, tid) → "process (pid);thread (tid)"
  auto prefix_of = [&](int64_t pid, int64_t tid) -> const std::string& {
    auto it = thread_text.find({pid, tid});
    if (it != thread_text.end()) return it->second;
    auto p = process_names.find(pid);
    auto th = thread_names.find({pid, tid});
    std::string text =
        folded_name((p == process_names.end() || p->second.empty() ? "process" : p->second) + " (" +
                    std::to_string(pid) + ")") +
        ";" +
        folded_name((th == thread_names.end() || th->second.empty() ? "thread" : th->second) + " (" +
                    std::to_string(tid) + ")");
    return thread_text.emplace(std::make_pair(pid, tid), std::move(text)).first->second;
  };

  std::map<std::string, int64_t> counts;
  for (const auto& s : t.samples) {
    std::string line = prefix_of(s.pid, s.tid);
    if (s.stack) {
      const std::string& st = text_of(s.stack);
      if (!st.empty()) line += ";" + st;
    }
    if (!s.on_cpu) line += ";[off CPU]";
    counts[line] += s.periods;  // a sample that stands for several periods weighs as many
  }
  std::string out;
  for (const auto& [line, n] : counts) out += line + " " + std::to_string(n) + "\n";
  return out;
}

void export_folded_stacks(const Trace& t, const std::string& path) {
  write_export_atomically(path, to_folded_stacks(t));
}

}  // namespace stepscope::analyzer
