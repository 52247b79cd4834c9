// One store per rank for `stepscope record -o run-%r.db` (docs/collector.md, "Several ranks").
#include "rank_outputs.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "stepscope/store/store.h"

namespace fs = std::filesystem;

namespace stepscope::collector {

std::string expand_output(const std::string& pattern, const std::string* rank, const std::string* pid,
                          const std::string* host) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = i + 1 < pattern.size() && pattern[i] == '%' ? pattern[i + 1] : 0;
    const std::string* field = c == 'r' ? rank : c == 'p' ? pid : c == 'h' ? host : nullptr;
    if (field)
      out += *field, ++i;
    else if (c == '%')
      out += '%', ++i;
    else
      out += pattern[i];
  }
  return out;
}

std::vector<std::string> rank_stores(const std::string& pattern) {
  // Whatever stands in for %r, and the rest of the file name as it is.
  const fs::path p(pattern);
  const std::string name = p.filename().string();
  const auto at = name.find("%r");
  std::vector<std::string> out;
  if (at == std::string::npos) return out;
  const std::string head = name.substr(0, at), tail = name.substr(at + 2);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(p.parent_path().empty() ? "." : p.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > head.size() + tail.size() && n.compare(0, head.size(), head) == 0 &&
        n.compare(n.size() - tail.size(), tail.size(), tail) == 0)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  return buf;
}

// The parts (one per process) are grouped by the rank their process inherited from the launcher of the job
// (meta "rank", written by the collector); processes outside every rank (the torchrun agent) form one more
// store. Each group is moved into a folder of its own and merged.
void merge_parts_by_rank(const std::string& parts_dir, const std::string& pattern, const std::string& host,
                         std::map<std::string, std::string> meta, RecordSummary& summary) {
  struct Group {
    std::vector<fs::path> parts;
    std::map<std::string, std::string> rank_meta;
    std::string first_pid;
    int64_t first_start = INT64_MAX;
  };
  std::map<std::string, Group> groups;  // by rank ("" for none)
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parts_dir, ec)) {
    if (e.path().extension() != ".db") continue;
    std::map<std::string, std::string> m;
    try {
      m = store::StoreReader(e.path().string()).meta();
    } catch (const std::exception&) {  // killed before its first commit: merge_parts counts it as unreadable
    }
    Group& g = groups[m.count("rank") ? m["rank"] : std::string()];
    g.parts.push_back(e.path());
    const std::string stem = e.path().stem().string();  // "<pid>-<monotonic ns>"
    const auto dash = stem.find('-');
    const int64_t start = dash == std::string::npos ? 0 : std::atoll(stem.c_str() + dash + 1);
    if (start < g.first_start) {
      g.first_start = start, g.first_pid = stem.substr(0, dash);
      for (const char* k : {"rank", "world_size", "local_rank", "job"})
        if (m.count(k)) g.rank_meta[k] = m[k];
    }
  }
  // Freed (its results saved) when the stores are written: a flight recording's launcher keeps no module's
  // debug information between saves (libtorch's: ~390 MB).
  Symbolizer symbolizer;
  const bool any_rank = groups.size() > 1 || (groups.size() == 1 && !groups.begin()->first.empty());
  for (auto& [rank, g] : groups) {
    const std::string label = !rank.empty() ? rank : any_rank ? "launcher" : "0";
    const fs::path dir = fs::path(parts_dir) / ("rank-" + label);
    fs::create_directories(dir, ec);
    for (const auto& p : g.parts)  // with its -wal / -shm files, if the process left them
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
        fs::path from = p.string() + suffix;
        if (fs::exists(from, ec)) fs::rename(from, dir / from.filename(), ec);
      }
    std::map<std::string, std::string> m = meta;
    for (const auto& [k, v] : g.rank_meta) m[k] = v;
    const std::string out =
        fs::absolute(expand_output(pattern, &label, &g.first_pid, &host)).lexically_normal().string();
    RecordSummary one;  // per store: merge_parts writes its counters into that store's meta
    merge_parts(dir.string(), out, m, one, &symbolizer);
    summary.processes += one.processes, summary.threads += one.threads, summary.samples += one.samples;
    summary.steps += one.steps, summary.data_waits += one.data_waits;
    summary.kernels += one.kernels, summary.ranges += one.ranges,
        summary.dropped_samples += one.dropped_samples;
    summary.dropped_gpu_records += one.dropped_gpu_records,
        summary.unsampled_threads += one.unsampled_threads;
    summary.parts += one.parts, summary.unreadable_parts += one.unreadable_parts;
    summary.outputs.push_back(out);
    summary.replaced.insert(summary.replaced.end(), one.replaced.begin(), one.replaced.end());
  }
}

}  // namespace stepscope::collector
