// Which samples are stepscope's own work rather than the program's: the threads the collector ran, which v2
// stores mark (threads.collector), and the collector library's frames. Analyses and views leave them out unless asked.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

class CollectorThreads {
 public:
  explicit CollectorThreads(const store::Trace& t) {
    for (const auto& th : t.threads)
      if (th.collector) keys_.insert(key(th.pid, th.tid));
  }
  bool contains(int64_t pid, int64_t tid) const { return !keys_.empty() && keys_.count(key(pid, tid)) > 0; }
  bool contains(const store::Sample& s) const { return contains(s.pid, s.tid); }

 private:
  static int64_t key(int64_t pid, int64_t tid) { return (pid << 32) ^ tid; }
  std::unordered_set<int64_t> keys_;
};

// The collector library's path (any build, any install prefix).
inline bool is_collector_module(std::string_view path) {
  return path.find("libstepscope_collector") != std::string_view::npos;
}

// Frames in the collector library: what v1 stores, which do not mark the collector's threads, show of the
// profiler's own work (its drain, CUPTI's buffer callbacks). A sample whose leaf is one of them is left out too.
class CollectorModules {
 public:
  explicit CollectorModules(const store::Trace& t) : t_(t) {}
  bool contains(const store::Frame& f) {
    auto it = known_.find(f.module);
    if (it == known_.end())
      it = known_.emplace(f.module, is_collector_module(t_.str(f.module))).first;
    return it->second;
  }

 private:
  const store::Trace& t_;
  std::unordered_map<store::StringId, bool> known_;
};

}  // namespace stepscope::analyzer
