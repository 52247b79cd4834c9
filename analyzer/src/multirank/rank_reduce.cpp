// One rank's trace → RankResult, and many rank files reduced in parallel, one trace in memory per thread.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "multirank/interval_math.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

using multirank::Span;

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::AllReduce:
      return "all-reduce";
    case CollectiveKind::AllGather:
      return "all-gather";
    case CollectiveKind::ReduceScatter:
      return "reduce-scatter";
    case CollectiveKind::AllToAll:
      return "all-to-all";
    case CollectiveKind::SendRecv:
      return "send/recv";
    case CollectiveKind::Broadcast:
      return "broadcast";
    case CollectiveKind::Reduce:
      return "reduce";
    case CollectiveKind::Other:
      return "other";
  }
  return "other";
}

bool is_collective_kernel(std::string_view name, CollectiveKind* kind) {
  // NCCL and RCCL name their kernels ncclKernel_<Op>_…, ncclDevKernel_<Op>_… (RCCL keeps the nccl prefix);
  // lowercase once, then look for the op (all-reduce before reduce, send/recv in either spelling).
  std::string low(name.substr(0, 160));
  for (char& c : low) c = char(std::tolower(static_cast<unsigned char>(c)));
  if (low.find("nccl") == std::string::npos && low.find("rccl") == std::string::npos) return false;
  if (!kind) return true;
  auto has = [&](const char* s) { return low.find(s) != std::string::npos; };
  if (has("allreduce"))
    *kind = CollectiveKind::AllReduce;
  else if (has("allgather"))
    *kind = CollectiveKind::AllGather;
  else if (has("reducescatter"))
    *kind = CollectiveKind::ReduceScatter;
  else if (has("alltoall"))
    *kind = CollectiveKind::AllToAll;
  else if (has("sendrecv") || has("_send") || has("_recv"))
    *kind = CollectiveKind::SendRecv;
  else if (has("broadcast") || has("bcast"))
    *kind = CollectiveKind::Broadcast;
  else if (has("reduce"))
    *kind = CollectiveKind::Reduce;
  else
    *kind = CollectiveKind::Other;
  return true;
}

namespace {

struct Op {
  int64_t start = 0, end = 0;
  bool comm = false;
  CollectiveKind kind = CollectiveKind::Other;
  store::StringId name = 0;  // kernels only
};

int64_t meta_int(const store::Trace& t, const char* key, int64_t fallback) {
  auto it = t.meta.find(key);
  if (it == t.meta.end() || it->second.empty()) return fallback;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    return fallback;
  }
}

}  // namespace

RankResult analyze_rank(const store::Trace& t, const std::string& file, const AnalyzeOptions& options) {
  RankResult r;
  r.file = file;
  r.rank = meta_int(t, "rank", -1);
  r.world_size = meta_int(t, "world_size", 0);
  r.local_rank = meta_int(t, "local_rank", -1);
  if (auto it = t.meta.find("host"); it != t.meta.end()) r.host = it->second;

  Analysis a = analyze(t, options);
  r.step_source = a.summary.step_source;

  std::vector<Op> ops;
  ops.reserve(t.gpu_event_count());
  std::unordered_map<store::StringId, std::pair<bool, CollectiveKind>> kind_of_name;
  for (const auto& k : t.kernels) {
    auto [it, fresh] = kind_of_name.try_emplace(k.name);
    if (fresh) it->second.first = is_collective_kernel(t.str(k.name), &it->second.second);
    ops.push_back({k.start, k.end, it->second.first, it->second.second, k.name});
  }
  for (const auto& m : t.memcpys) ops.push_back({m.start, m.end, false, CollectiveKind::Other, 0});
  for (const auto& m : t.memsets) ops.push_back({m.start, m.end, false, CollectiveKind::Other, 0});
  std::sort(ops.begin(), ops.end(), [](const Op& x, const Op& y) { return x.start < y.start; });
  int64_t max_dur = 0;
  for (const auto& o : ops) max_dur = std::max(max_dur, o.end - o.start);

  std::unordered_map<store::StringId, int64_t> kernel_ns;
  for (const auto& s : a.steps) {
    RankStep rs;
    rs.index = s.index;
    rs.start_ns = s.start_ns;
    rs.dur_ns = s.dur_ns;
    rs.data_wait_ns = s.host_data_wait_ns;
    const int64_t w0 = s.start_ns, w1 = s.start_ns + s.dur_ns;
    std::vector<Span> compute, comm;
    auto it = std::lower_bound(ops.begin(), ops.end(), w0 - max_dur,
                               [](const Op& o, int64_t v) { return o.start < v; });
    for (; it != ops.end() && it->start < w1; ++it) {
      const int64_t a0 = std::max(it->start, w0), a1 = std::min(it->end, w1);
      if (a1 <= a0) continue;
      if (it->comm) {
        comm.push_back({a0, a1});
        const std::string& full = t.str(it->name);
        rs.collectives.push_back({it->kind, a0, a1 - a0, 0, full.substr(0, full.find('('))});
      } else {
        compute.push_back({a0, a1});
        if (it->name) kernel_ns[it->name] += a1 - a0;
      }
    }
    compute = multirank::union_of(std::move(compute));
    comm = multirank::union_of(std::move(comm));
    rs.compute_ns = multirank::total(compute);
    rs.comm_ns = multirank::total(comm);
    for (const auto& c : comm)
      rs.exposed_comm_ns += (c.end - c.start) - multirank::covered(compute, c.start, c.end);
    for (auto& c : rs.collectives)
      c.exposed_ns = c.dur_ns - multirank::covered(compute, c.start_ns, c.start_ns + c.dur_ns);
    rs.host_ns = std::max<int64_t>(0, rs.dur_ns - rs.compute_ns - rs.exposed_comm_ns - rs.data_wait_ns);
    r.steps.push_back(std::move(rs));
  }
  std::stable_sort(r.steps.begin(), r.steps.end(),
                   [](const RankStep& x, const RankStep& y) { return x.index < y.index; });
  for (const auto& [name, ns] : kernel_ns) r.kernel_ns.emplace_back(t.str(name), ns);
  std::sort(r.kernel_ns.begin(), r.kernel_ns.end(), [](const auto& x, const auto& y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  if (r.kernel_ns.size() > kMaxRankKernels) r.kernel_ns.resize(kMaxRankKernels);
  return r;
}

const RankStep* find_step(const RankResult& r, int64_t index) {
  auto it = std::lower_bound(r.steps.begin(), r.steps.end(), index,
                             [](const RankStep& s, int64_t i) { return s.index < i; });
  return it != r.steps.end() && it->index == index ? &*it : nullptr;
}

std::vector<std::string> expand_rank_inputs(const std::vector<std::string>& args) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  for (const auto& arg : args) {
    std::error_code ec;
    if (!fs::is_directory(arg, ec)) {
      if (!fs::exists(arg, ec)) throw store::StoreError(arg, "no such file");
      out.push_back(arg);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(arg, ec)) {
      if (!e.is_regular_file(ec)) continue;
      switch (store::sniff_file(e.path().string())) {
        case store::FileKind::Store:
        case store::FileKind::NsysSqlite:
        case store::FileKind::Gzip:
        case store::FileKind::Zstd:
        case store::FileKind::Json:
          found.push_back(e.path().string());
          break;
        default:
          break;  // READMEs, logs, other databases
      }
    }
    if (ec) throw store::StoreError(arg, "cannot list the directory: " + ec.message());
    if (found.empty()) throw store::StoreError(arg, "no stores or traces in this directory");
    std::sort(found.begin(), found.end());
    out.insert(out.end(), found.begin(), found.end());
  }
  return out;
}

MultiRankAnalysis analyze_ranks(const std::vector<std::string>& files, const MultiRankOptions& options) {
  // Stores say from their meta alone whether they are one job's ranks: no loading for saves of one process.
  if (std::string why = why_stores_not_one_job(files); !why.empty()) {
    MultiRankAnalysis m;
    m.not_one_job = std::move(why);
    return m;
  }
  unsigned threads = options.threads ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min<unsigned>(threads, unsigned(std::max<size_t>(1, files.size())));
  std::vector<RankResult> results(files.size());
  std::vector<RankIdentity> ids(files.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  size_t error_index = files.size();
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i = next++; i < files.size() && !failed; i = next++) {
      try {
        {
          store::Trace t = load_trace(files[i]);  // dropped before the next file: memory is per thread
          results[i] = analyze_rank(t, files[i], options.analyze);
          ids[i] = rank_identity(t.meta, t.processes, files[i]);
        }
        malloc_trim(0);  // hand the trace's memory back before the next one, so results do not pin it
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < error_index) error = std::current_exception(), error_index = i;
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const store::StoreError&) {
      throw;
    } catch (const std::invalid_argument& e) {  // a bad --step-regex
      throw store::StoreError(files[error_index], e.what());
    }
  }
  if (std::string why = why_not_one_job(ids); !why.empty()) {
    MultiRankAnalysis m;
    m.not_one_job = std::move(why);
    return m;
  }
  return combine_ranks(std::move(results));
}

}  // namespace stepscope::analyzer
