// Which samples are stepscope's own work rather than the program's: the threads the collector ran, which v2
// stores mark (threads.collector). Analyses and views leave them out unless asked.
#pragma once

#include <cstdint>
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

}  // namespace stepscope::analyzer
