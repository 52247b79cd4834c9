// One rank's trace → RankResult, and many rank files reduced in parallel, one trace in memory per thread.
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <tuple>
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

CollectiveKind host_collective_kind(std::string_view name) {
  // "all_reduce", "c10d::allreduce_", "nccl:all_to_all", "gloo:_reduce_scatter_base": lowercase, no underscores.
  std::string low;
  for (char c : name.substr(0, 160))
    if (c != '_') low += char(std::tolower(static_cast<unsigned char>(c)));
  auto has = [&](const char* s) { return low.find(s) != std::string::npos; };
  if (has("allreduce")) return CollectiveKind::AllReduce;
  if (has("allgather")) return CollectiveKind::AllGather;
  if (has("reducescatter")) return CollectiveKind::ReduceScatter;
  if (has("alltoall")) return CollectiveKind::AllToAll;
  if (has("send") || has("recv")) return CollectiveKind::SendRecv;
  if (has("broadcast") || has("bcast")) return CollectiveKind::Broadcast;
  if (has("reduce")) return CollectiveKind::Reduce;
  return CollectiveKind::Other;  // barrier, gather, scatter
}

bool parse_host_collective(std::string_view domain, std::string_view name, HostCollective* out) {
  if (domain != "stepscope.comm" || name.empty()) return false;
  HostCollective c;
  size_t i = 0;
  bool first = true;
  while (i < name.size()) {
    size_t j = name.find(' ', i);
    if (j == std::string_view::npos) j = name.size();
    const std::string_view tok = name.substr(i, j - i);
    i = j + 1;
    if (tok.empty()) continue;
    auto number = [](std::string_view v, int64_t* n) {
      int64_t x = 0;
      bool neg = !v.empty() && v[0] == '-';
      if (neg) v.remove_prefix(1);
      if (v.empty()) return false;
      for (char ch : v) {
        if (ch < '0' || ch > '9') return false;
        x = x * 10 + (ch - '0');
      }
      *n = neg ? -x : x;
      return true;
    };
    if (first) {
      c.op = std::string(tok), first = false;
    } else if (tok.size() > 1 && tok.back() == 'B') {
      number(tok.substr(0, tok.size() - 1), &c.bytes);
    } else if (tok.rfind("pg=", 0) == 0) {
      c.group = std::string(tok.substr(3));
    } else if (tok.rfind("seq=", 0) == 0) {
      if (!number(tok.substr(4), &c.seq)) c.seq = -1;
    } else if (tok == "async") {
      c.async = true;
    }
  }
  c.kind = host_collective_kind(c.op);
  if (out) *out = std::move(c);
  return true;
}

namespace {

struct Op {
  int64_t start = 0, end = 0;
  bool comm = false;
  CollectiveKind kind = CollectiveKind::Other;
  store::StringId name = 0;  // kernels only
  int64_t host = -1;         // index of its HostCollective (host collectives only)
};

struct HostOp {
  int64_t start = 0, end = 0, pid = 0, tid = 0;
  HostCollective c;
};

// The job's collectives as the host saw them, when no NCCL/RCCL kernel says it: the collector's torch.distributed
// hooks, else a Kineto trace's gloo:<op> ranges, else its record_param_comms ranges (their kind from the
// c10d::/nccl:/gloo: ranges around or inside them on the same thread). Kineto's give no size, group or sequence
// number.
std::vector<HostOp> host_collectives(const store::Trace& t, SharedName* source) {
  std::vector<HostOp> out;
  std::unordered_map<store::StringId, bool> comm_domain;
  for (const auto& r : t.ranges) {
    if (r.source == store::RangeSource::GpuAnnotation) continue;
    auto [it, fresh] = comm_domain.try_emplace(r.domain);
    if (fresh) it->second = t.str(r.domain) == "stepscope.comm";
    HostOp h{r.start, r.end, r.pid, r.tid, {}};
    if (it->second && parse_host_collective("stepscope.comm", t.str(r.name), &h.c)) out.push_back(std::move(h));
  }
  if (!out.empty()) {
    *source = "torch.distributed";
    return out;
  }
  struct Named {
    int64_t start, end;
    store::StringId name;
  };
  std::map<std::pair<int64_t, int64_t>, std::vector<Named>> around;  // per thread, by start
  std::vector<const store::Range*> params;
  std::unordered_map<store::StringId, int> what;  // 1: record_param_comms, 2: a c10d::/nccl:/gloo: range
  for (const auto& r : t.ranges) {
    if (r.source == store::RangeSource::GpuAnnotation) continue;
    auto [it, fresh] = what.try_emplace(r.name, 0);
    if (fresh) {
      const std::string& n = t.str(r.name);
      it->second = n == "record_param_comms"                                                  ? 1
                   : n.rfind("c10d::", 0) == 0 || n.rfind("nccl:", 0) == 0 || n.rfind("gloo:", 0) == 0 ? 2
                                                                                              : 0;
    }
    if (it->second == 1) params.push_back(&r);
    if (it->second == 2) around[{r.pid, r.tid}].push_back({r.start, r.end, r.name});
  }
  // gloo's own ranges (Kineto's "gloo:all_reduce" user annotations, on the gloo worker thread that runs the
  // collective: its execution, wait included) are the collectives themselves, as NCCL kernels are.
  for (const auto& r : t.ranges) {
    if (r.source == store::RangeSource::GpuAnnotation) continue;
    const std::string& n = t.str(r.name);
    if (n.rfind("gloo:", 0) != 0) continue;
    HostOp h{r.start, r.end, r.pid, r.tid, {}};
    h.c.op = n;
    h.c.kind = host_collective_kind(n);
    out.push_back(std::move(h));
  }
  if (!out.empty()) {
    *source = "gloo";
    return out;
  }
  if (params.empty()) return out;
  for (auto& [thread, v] : around)
    std::sort(v.begin(), v.end(), [](const Named& a, const Named& b) { return a.start < b.start; });
  for (const auto* p : params) {
    HostOp h{p->start, p->end, p->pid, p->tid, {}};
    h.c.op = "record_param_comms";
    if (auto it = around.find({p->pid, p->tid}); it != around.end()) {
      const auto& v = it->second;
      auto e = std::upper_bound(v.begin(), v.end(), p->end, [](int64_t x, const Named& n) { return x < n.start; });
      for (int k = 0; e != v.begin() && k < 8; ++k) {
        --e;
        if (e->end < p->start) continue;
        const CollectiveKind kind = host_collective_kind(t.str(e->name));
        if (kind != CollectiveKind::Other || h.c.op == "record_param_comms") {
          h.c.kind = kind;
          h.c.op = t.str(e->name);
        }
        if (kind != CollectiveKind::Other) break;
      }
    }
    h.c.async = true;  // Kineto does not say; the issue is what its range covers
    out.push_back(std::move(h));
  }
  *source = "record_param_comms";
  return out;
}

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

RankResult analyze_rank(const store::Trace& t, const std::string& file, const AnalyzeOptions& options,
                        bool keep_findings) {
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
  bool comm_kernels = false;
  for (const auto& k : t.kernels) {
    auto [it, fresh] = kind_of_name.try_emplace(k.name);
    if (fresh) it->second.first = is_collective_kernel(t.str(k.name), &it->second.second);
    comm_kernels = comm_kernels || it->second.first;
    ops.push_back({k.start, k.end, it->second.first, it->second.second, k.name});
  }
  for (const auto& m : t.memcpys) ops.push_back({m.start, m.end, false, CollectiveKind::Other, 0});
  for (const auto& m : t.memsets) ops.push_back({m.start, m.end, false, CollectiveKind::Other, 0});
  // Host collectives only where no NCCL/RCCL kernel is there: the kernels are the same collectives, timed on
  // the GPU. An async host collective is "covered" (its issuing thread went on working) from its issue to the
  // next collective that thread issued while it was in flight: DDP issues a bucket and computes the next one's
  // gradients. After the thread's last issue, and for a sync call throughout, the thread waits: exposed.
  std::vector<HostOp> host;
  std::vector<Span> host_cover;
  if (comm_kernels)
    r.comm_source = "nccl";
  else
    host = host_collectives(t, &r.comm_source);
  if (!host.empty()) {
    std::sort(host.begin(), host.end(), [](const HostOp& x, const HostOp& y) {
      return std::tie(x.pid, x.tid, x.start) < std::tie(y.pid, y.tid, y.start);
    });
    for (size_t i = 0; i < host.size(); ++i) {
      const auto& h = host[i];
      ops.push_back({h.start, h.end, true, h.c.kind, 0, int64_t(i)});
      if (!h.c.async) continue;
      // Covered only up to a next issue while it is in flight: with none, the thread had nothing more to
      // issue and waited for it (DDP's last bucket, at the end of the backward pass).
      if (i + 1 < host.size() && host[i + 1].pid == h.pid && host[i + 1].tid == h.tid &&
          host[i + 1].start < h.end && host[i + 1].start > h.start)
        host_cover.push_back({h.start, host[i + 1].start});
    }
    host_cover = multirank::union_of(std::move(host_cover));
  }
  std::sort(ops.begin(), ops.end(), [](const Op& x, const Op& y) { return x.start < y.start; });
  int64_t max_dur = 0;
  for (const auto& o : ops) max_dur = std::max(max_dur, o.end - o.start);

  // The host's waits for input, where the GPU computed nothing meanwhile: a stretch's data wait (WorkSplit).
  std::vector<Span> waits;
  waits.reserve(a.data_waits.size());
  for (const auto& w : a.data_waits) waits.push_back({w.start_ns, w.end_ns});

  std::unordered_map<store::StringId, int64_t> kernel_ns;
  std::unordered_map<store::StringId, SharedName> collective_name;  // up to its parameter list
  for (const auto& s : a.steps) {
    RankStep rs;
    rs.index = s.index;
    rs.start_ns = s.start_ns;
    rs.dur_ns = s.dur_ns;
    rs.data_wait_ns = s.host_data_wait_ns;
    rs.bound = s.bound;
    const int64_t w0 = s.start_ns, w1 = s.start_ns + s.dur_ns;
    std::vector<Span> compute, comm;
    auto it = std::lower_bound(ops.begin(), ops.end(), w0 - max_dur,
                               [](const Op& o, int64_t v) { return o.start < v; });
    for (; it != ops.end() && it->start < w1; ++it) {
      // A host collective belongs to the step that issued it: its completion callback can run after that step
      // has ended (it waits for the GIL, up to Python's 5 ms switch interval), and a tail in the next step
      // would be a second, unmatched collective there.
      if (it->host >= 0 && it->start < w0) continue;
      const int64_t a0 = std::max(it->start, w0), a1 = std::min(it->end, w1);
      if (a1 <= a0) continue;
      if (it->comm && it->host >= 0) {
        comm.push_back({a0, a1});
        const HostCollective& c = host[size_t(it->host)].c;
        CollectiveCall call;
        call.kind = it->kind, call.start_ns = a0, call.dur_ns = a1 - a0, call.name = c.op;
        call.host_call = uint32_t(rs.host_calls.size());
        rs.host_calls.push_back({c.bytes, c.group, c.seq});
        rs.collectives.push_back(std::move(call));
      } else if (it->comm) {
        comm.push_back({a0, a1});
        auto [named, fresh] = collective_name.try_emplace(it->name);
        if (fresh) {  // interned once a name, not once a call: the pool's lock is shared by the workers
          const std::string_view full = t.str(it->name);
          named->second = full.substr(0, full.find('('));
        }
        CollectiveCall c;
        c.kind = it->kind, c.start_ns = a0, c.dur_ns = a1 - a0, c.name = named->second;
        rs.collectives.push_back(std::move(c));
      } else {
        compute.push_back({a0, a1});
        if (it->name) kernel_ns[it->name] += a1 - a0;
      }
    }
    compute = multirank::union_of(std::move(compute));
    comm = multirank::union_of(std::move(comm));
    rs.compute_ns = multirank::total(compute);
    rs.comm_ns = multirank::total(comm);
    // What hides communication: GPU work, and the host's own work beside its async collectives.
    std::vector<Span> busy = compute;
    if (!host_cover.empty()) {
      busy.insert(busy.end(), host_cover.begin(), host_cover.end());
      busy = multirank::union_of(std::move(busy));
    }
    for (const auto& c : comm)
      rs.exposed_comm_ns += (c.end - c.start) - multirank::covered(busy, c.start, c.end);
    for (auto& c : rs.collectives)
      c.exposed_ns = c.dur_ns - multirank::covered(busy, c.start_ns, c.start_ns + c.dur_ns);
    rs.host_ns = std::max<int64_t>(0, rs.dur_ns - rs.compute_ns - rs.exposed_comm_ns - rs.data_wait_ns);

    // The step cut where its collectives end, for the job's critical path (combine_ranks): the own work before
    // each (compute, data wait, host) and its own span after that; the stretches tile the step.
    std::vector<Span> compute_or_wait = compute;
    for (auto w = std::upper_bound(waits.begin(), waits.end(), w0, [](int64_t v, const Span& x) { return v < x.end; });
         w != waits.end() && w->start < w1; ++w)
      compute_or_wait.push_back({std::max(w->start, w0), std::min(w->end, w1)});
    compute_or_wait = multirank::union_of(std::move(compute_or_wait));
    auto split = [&](int64_t x, int64_t y) {
      WorkSplit ws;
      if (y <= x) return ws;
      ws.dur_ns = y - x;
      ws.compute_ns = multirank::covered(compute, x, y);
      ws.data_wait_ns = multirank::covered(compute_or_wait, x, y) - ws.compute_ns;
      return ws;
    };
    std::vector<size_t> by_end(rs.collectives.size());
    for (size_t j = 0; j < by_end.size(); ++j) by_end[j] = j;
    std::stable_sort(by_end.begin(), by_end.end(), [&](size_t x, size_t y) {
      const auto &cx = rs.collectives[x], &cy = rs.collectives[y];
      return cx.start_ns + cx.dur_ns < cy.start_ns + cy.dur_ns;
    });
    int64_t reached = w0;
    for (size_t j = 0; j < by_end.size(); ++j) {
      CollectiveCall& c = rs.collectives[by_end[j]];
      const int64_t from = std::max(reached, c.start_ns), end = c.start_ns + c.dur_ns;
      c.end_order = int32_t(j);
      c.before = split(reached, from);
      c.after_ns = std::max<int64_t>(0, end - from);
      reached = std::max(reached, end);
    }
    rs.tail = split(reached, w1);
    r.steps.push_back(std::move(rs));
  }
  std::stable_sort(r.steps.begin(), r.steps.end(),
                   [](const RankStep& x, const RankStep& y) { return x.index < y.index; });
  // The longest names only: choosing before naming keeps a rank from holding all its kernel names.
  std::vector<std::pair<store::StringId, int64_t>> longest(kernel_ns.begin(), kernel_ns.end());
  const size_t kept = std::min(longest.size(), kMaxRankKernels);
  std::partial_sort(longest.begin(), longest.begin() + long(kept), longest.end(),
                    [&](const auto& x, const auto& y) {
                      return x.second != y.second ? x.second > y.second : t.str(x.first) < t.str(y.first);
                    });
  r.kernel_ns.reserve(kept);
  for (size_t i = 0; i < kept; ++i) r.kernel_ns.emplace_back(t.str(longest[i].first), longest[i].second);

  // Each finding's cure, for the what-if across ranks: what it takes off this rank's own work, and of which kind.
  for (const auto& f : a.findings) {
    RankCure c;
    c.rule = f.rule;
    c.part = f.rule == "input-bound"       ? RankCure::Part::DataWait
             : f.rule == "no-tensor-cores" ? RankCure::Part::Compute
                                           : RankCure::Part::Host;
    double us = f.est_savings_us_per_step;
    for (const auto& w : a.what_if.cures)  // the GPU replay's saving where it has one (launch-overhead: CUDA graph)
      if (w.rule == f.rule) {
        if (w.saving_us > 0) us = w.saving_us;
        break;
      }
    c.saving_ns = int64_t(us * 1000.0);
    c.steps = f.steps;
    std::sort(c.steps.begin(), c.steps.end());
    if (c.saving_ns > 0) r.cures.push_back(std::move(c));
  }
  std::stable_sort(r.cures.begin(), r.cures.end(),
                   [](const RankCure& x, const RankCure& y) { return x.saving_ns > y.saving_ns; });
  // Kept for the whole job: no room to grow.
  r.steps.shrink_to_fit();
  for (auto& s : r.steps) s.collectives.shrink_to_fit(), s.host_calls.shrink_to_fit();
  r.cures.shrink_to_fit();
  if (keep_findings) r.findings = std::move(a.findings);
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
      if (!fs::exists(arg, ec)) throw store::StoreError(arg, store::missing_file_reason(arg));
      out.push_back(arg);
      continue;
    }
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(arg, ec)) {
      const std::string name = e.path().filename().string();
      auto ends = [&name](const char* x) {
        const size_t n = std::strlen(x);
        return name.size() >= n && name.compare(name.size() - n, n, x) == 0;
      };
      const bool named_as_rank = ends(".db") || ends(".json") || ends(".gz") || ends(".zst") || ends(".sqlite");
      if (!e.is_regular_file(ec)) {
        // A link named as a rank that leads nowhere is a rank lost (it was passed over without a word).
        if (named_as_rank && e.is_symlink(ec))
          throw store::StoreError(e.path().string(), "a symbolic link to nothing readable (" + store::missing_file_reason(e.path().string()) +
                                                         "); remove it from the folder or name the files to read");
        continue;
      }
      switch (store::sniff_file(e.path().string())) {
        case store::FileKind::Store:
        case store::FileKind::NsysSqlite:
        case store::FileKind::Gzip:
        case store::FileKind::Zstd:
        case store::FileKind::Json:
          found.push_back(e.path().string());
          break;
        case store::FileKind::OtherSqlite:
          break;  // another program's database (optuna.db, a tracker's): not a rank
        default: {
          // READMEs and logs are passed over; a file named as a store or trace that is none (empty, cut
          // short, overwritten) is a rank lost, said in one line (it was skipped: a job's diff or analysis
          // ran on the ranks that were left, exit 0).
          if (named_as_rank)
            throw store::StoreError(e.path().string(),
                                    "not a stepscope store or a trace (empty or damaged); "
                                    "remove it from the folder or name the files to read");
          break;
        }
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
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr error;
  size_t error_index = files.size();
  std::mutex error_mutex;
  // Each finished rank comes to this thread, which loads nothing and copies it into its own heap, then goes
  // back to its worker to be freed there before its next file. Left in the workers' heaps, where traces come
  // and go, each rank's result would pin pages among the freed ones (at 10,000 ranks 32.5 MB of heap
  // held 16.8 MB of results, measured); freed here, the originals would go to this thread's cache, and the
  // next copies there.
  struct Finished {
    size_t index = 0;
    unsigned worker = 0;
    std::unique_ptr<RankResult> result;
    std::unique_ptr<RankIdentity> id;
  };
  std::vector<RankResult> results(files.size());
  std::vector<RankIdentity> ids(files.size());
  std::mutex handoff_mutex;
  std::condition_variable handoff_cv;
  std::deque<Finished> done, copied;  // to this thread; back to their workers
  unsigned running = threads;
  auto work = [&](unsigned me) {
    auto free_copied = [&] {
      std::vector<Finished> mine;  // freed on leaving, outside the lock
      try {
        std::lock_guard<std::mutex> lock(handoff_mutex);
        for (auto it = copied.begin(); it != copied.end();)
          if (it->worker == me)
            mine.push_back(std::move(*it)), it = copied.erase(it);
          else
            ++it;
      } catch (const std::bad_alloc&) {  // what stays is freed next time, or after the workers end
      }
    };
    for (size_t i = next++; i < files.size() && !failed; i = next++) {
      free_copied();
      try {
        Finished f{i, me, nullptr, nullptr};
        {
          // Dropped before the next file: memory is per thread. Ranks in parallel parse each file on one
          // thread.
          LoadOptions load;
          load.threads = threads > 1 ? 1 : 0;
          store::Trace t = load_trace(files[i], load);
          f.result =
              std::make_unique<RankResult>(analyze_rank(t, files[i], options.analyze, options.keep_rank_findings));
          f.id = std::make_unique<RankIdentity>(rank_identity(t.meta, t.processes, files[i]));
        }
        malloc_trim(0);  // hand the trace's memory back before the next one
        std::lock_guard<std::mutex> lock(handoff_mutex);
        done.push_back(std::move(f));
        handoff_cv.notify_one();
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (i < error_index) error = std::current_exception(), error_index = i;
        failed = true;
      }
    }
    free_copied();
    std::lock_guard<std::mutex> lock(handoff_mutex);
    --running;
    handoff_cv.notify_one();
  };
  std::vector<std::thread> pool;
  for (unsigned k = 0; k < threads; ++k) pool.emplace_back(work, k);
  for (std::unique_lock<std::mutex> lock(handoff_mutex);;) {
    handoff_cv.wait(lock, [&] { return !done.empty() || running == 0; });
    if (done.empty()) break;
    Finished f = std::move(done.front());
    done.pop_front();
    lock.unlock();
    // Copied without their file names, which the inputs' list holds, until the last trace is gone (10,000
    // ranks: 1 MB less at the peak). Moved aside, not freed: a free here would feed this thread's cache.
    std::string result_file = std::move(f.result->file), id_file = std::move(f.id->file);
    try {
      results[f.index] = *f.result;
      ids[f.index] = *f.id;
    } catch (...) {  // out of memory: said as that rank's error once the workers have stopped
      std::lock_guard<std::mutex> error_lock(error_mutex);
      if (f.index < error_index) error = std::current_exception(), error_index = f.index;
      failed = true;
    }
    f.result->file = std::move(result_file), f.id->file = std::move(id_file);
    lock.lock();
    try {
      copied.push_back(std::move(f));
    } catch (const std::bad_alloc&) {  // freed here, then
    }
  }
  for (auto& th : pool) th.join();
  copied.clear();  // the last few, whose workers had ended
  for (size_t i = 0; i < files.size(); ++i) results[i].file = ids[i].file = files[i];
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
  std::vector<RankIdentity>().swap(ids);  // not needed while the ranks are combined
  malloc_trim(0);                         // nor what the workers' heaps held
  return combine_ranks(std::move(results));
}

}  // namespace stepscope::analyzer
