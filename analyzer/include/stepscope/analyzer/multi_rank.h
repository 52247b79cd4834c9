// Several ranks of one distributed job at once (docs/multi-rank.md): each rank's store or trace is reduced to
// a small RankResult (per step: compute, communication, exposed communication, data wait, host time, and the
// ordered collective kernels), in parallel and streaming; the ranks are then aligned by step index and the
// cross-rank rules `straggler` and `exposed-comm` run over them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer {

enum class CollectiveKind : uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  SendRecv,
  Broadcast,
  Reduce,
  Other
};
inline constexpr int kCollectiveKinds = 8;
const char* to_string(CollectiveKind k);

// A name many ranks share (kernel names, process groups, rules, step sources): the text is kept once in a
// process-wide pool and each holder keeps 8 bytes. At 10,000 ranks the copies were most of what the ranks
// kept (docs/performance.md, "Several ranks"). Interning takes a lock; the pool lives as long as the process
// (one job's distinct names: hundreds). Equal texts are the same pointer.
class SharedName {
 public:
  SharedName() = default;
  SharedName(std::string_view text);  // NOLINT(google-explicit-constructor): assigned from strings throughout
  SharedName(const std::string& text) : SharedName(std::string_view(text)) {}
  SharedName(const char* text) : SharedName(std::string_view(text)) {}
  const std::string& str() const { return text_ ? *text_ : empty_text(); }
  operator const std::string&() const { return str(); }  // NOLINT(google-explicit-constructor)
  bool empty() const { return str().empty(); }
  friend bool operator==(SharedName a, SharedName b) { return a.text_ == b.text_; }
  friend bool operator==(SharedName a, std::string_view b) { return std::string_view(a.str()) == b; }
  friend bool operator==(SharedName a, const char* b) { return std::string_view(a.str()) == b; }
  friend bool operator==(SharedName a, const std::string& b) { return a.str() == b; }
  friend bool operator<(SharedName a, SharedName b) { return a.str() < b.str(); }

 private:
  static const std::string& empty_text();
  const std::string* text_ = nullptr;  // nullptr: ""
};

// True when `kernel_name` is an NCCL/RCCL communication kernel; `kind` is then what it does.
bool is_collective_kernel(std::string_view kernel_name, CollectiveKind* kind = nullptr);

// A collective recorded on the host, from any backend (docs/multi-rank.md, "Collectives from any backend").
struct HostCollective {
  CollectiveKind kind = CollectiveKind::Other;
  std::string op;      // "all_reduce", "barrier", ...
  int64_t bytes = -1;  // -1: unknown
  std::string group;   // process group name; empty: unknown
  int64_t seq = -1;    // per-group sequence number; -1: unknown
  bool async = false;  // issued with async_op (DDP's buckets): the issuing thread went on meanwhile
};

// The range's collective when it is one: the collector's torch.distributed hooks (domain "stepscope.comm",
// name "<op> <bytes>B pg=<group> seq=<n> <sync|async>[ issued]"). Kineto's record_param_comms carries its kind in
// the c10d:: op around it: see analyze_rank.
bool parse_host_collective(std::string_view domain, std::string_view name, HostCollective* out);

// Kind of a torch collective named "all_reduce", "c10d::allreduce_", "nccl:all_to_all", "gloo:broadcast", ...
CollectiveKind host_collective_kind(std::string_view name);

// A stretch of one rank's step (for the job's critical path): how long, and how much of it the rank's GPU computed
// and its host waited for input while the GPU did not; the rest is host time (host_ns()).
struct WorkSplit {
  int64_t dur_ns = 0, compute_ns = 0, data_wait_ns = 0;
  int64_t host_ns() const { return dur_ns > compute_ns + data_wait_ns ? dur_ns - compute_ns - data_wait_ns : 0; }
};

// A host collective's size, process group and sequence number (torch.distributed's hooks), where recorded.
struct HostCallId {
  int64_t bytes = -1;  // -1: unknown
  SharedName group;
  int64_t seq = -1;  // -1: unknown
};

// One communication kernel (or host collective) of one rank inside a step, clipped to the step.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::Other;
  // The step cut where its collectives end (docs/multi-rank.md, "The job's critical path"): this one's place
  // in end order; `before` and `after_ns` below.
  int32_t end_order = 0;
  int64_t start_ns = 0;
  int64_t dur_ns = 0;
  int64_t exposed_ns = 0;  // the part of it during which the rank ran no other work (GPU, or host: below)
  SharedName name;         // kernel name up to its parameter list; a host collective's op
  // The rank's own work before it (from the previous collective's end, or the step's start, to this one's
  // start) and its own span after that (to its end: wait and transfer).
  WorkSplit before;
  int64_t after_ns = 0;
  // A host collective's identity: RankStep::host_calls[host_call]; kNoHostCall for kernels. Kept beside the
  // call, not in it, so the thousands of NCCL kernels of a job's ranks do not carry 24 empty bytes each.
  static constexpr uint32_t kNoHostCall = UINT32_MAX;
  uint32_t host_call = kNoHostCall;
};

struct RankStep {
  int64_t index = 0;  // the single-rank analysis' step index: ranks are aligned on it
  int64_t start_ns = 0, dur_ns = 0;
  int64_t compute_ns = 0;       // union of the rank's non-communication GPU work (kernels, copies, memsets)
  int64_t comm_ns = 0;          // union of its communication kernels
  int64_t exposed_comm_ns = 0;  // comm_ns minus compute: communication not overlapped with compute
  int64_t data_wait_ns = 0;     // host waiting for input (StepBreakdown::host_data_wait_ns)
  int64_t host_ns = 0;          // the rest: dur - compute - exposed_comm - data_wait, at least 0
  Bound bound = Bound::Untraced;  // the single-rank analysis' label of the step
  std::vector<CollectiveCall> collectives;  // by start
  std::vector<HostCallId> host_calls;       // of its host collectives (CollectiveCall::host_call)
  WorkSplit tail;  // from the last collective's end (the step's start when it has none) to the step's end

  // A call's size, group and sequence number; unknown ones (-1, "", -1) for a kernel.
  const HostCallId& host_call(const CollectiveCall& c) const {
    static const HostCallId unknown;
    return c.host_call < host_calls.size() ? host_calls[c.host_call] : unknown;
  }
};

// What a rank-level finding's cure would take off that rank's steps (its single-rank analysis): the what-if
// across ranks applies it to the rank's own work of that kind (docs/multi-rank.md, "What-if across ranks").
struct RankCure {
  SharedName rule;  // "input-bound", "launch-overhead", ...
  enum class Part { Compute, DataWait, Host } part = Part::Host;
  int64_t saving_ns = 0;       // per affected step: the replayed saving where the GPU replay has one, else the
                               // finding's estimate
  std::vector<int64_t> steps;  // the step indexes it applies to
};

struct RankResult {
  std::string file;
  int64_t rank = -1;  // meta "rank" (Kineto distributedInfo, stepscope record); -1 when the input has none
  int64_t world_size = 0, local_rank = -1;
  SharedName host;
  SharedName step_source;
  // Where its collectives come from: "nccl" (NCCL/RCCL kernels), "torch.distributed" (the collector's hooks),
  // "gloo" (a Kineto trace's gloo:<op> ranges), "record_param_comms" (its record_param_comms ranges), "" (none).
  SharedName comm_source;
  std::vector<RankStep> steps;
  // Non-communication kernel time by name inside steps, largest first (at most kMaxRankKernels names).
  std::vector<std::pair<SharedName, int64_t>> kernel_ns;
  std::vector<RankCure> cures;  // one per finding of its own analysis, largest saving first
  // Its own analysis' findings whole, kept only with MultiRankOptions::keep_rank_findings (the GUI: a job of
  // thousands of ranks keeps no evidence per rank).
  std::vector<FindingResult> findings;
};

// Few: a job of thousands of ranks keeps every rank's result in memory (docs/multi-rank.md).
inline constexpr size_t kMaxRankKernels = 8;

// The step of `r` with this index (its steps are sorted by index), nullptr when it has none.
const RankStep* find_step(const RankResult& r, int64_t index);

// One step index present in every rank.
struct AlignedStep {
  int64_t index = 0;
  int64_t median_dur_ns = 0, max_dur_ns = 0;
  std::vector<int64_t> wait_ns;  // per rank (parallel to MultiRankAnalysis::ranks): time its collectives
                                 // waited for a later rank, estimated from the matched collectives' durations
  std::vector<int64_t>
      caused_ns;  // per rank: collective time the others would save if it arrived with the median
  int64_t critical_exposed_ns =
      0;  // exposed collective time of the last-arriving rank of each collective, summed
  std::vector<int64_t> critical_exposed_by_kind;  // the same, indexed by CollectiveKind
  int64_t matched_collectives = 0;
  // The job's critical path through this step (docs/multi-rank.md): before each matched collective (in the
  // order they completed) the own work of the rank that arrived last, then that collective's transfer, and
  // after the last one the longest tail. Per rank (parallel to ranks), what of it was that rank's: GPU compute,
  // data wait, host time, and communication (transfers, and other collectives of its before it arrived).
  struct PathPart {
    int64_t compute_ns = 0, data_wait_ns = 0, host_ns = 0, comm_ns = 0;
    int64_t total() const { return compute_ns + data_wait_ns + host_ns + comm_ns; }
  };
  std::vector<PathPart> path;
  int64_t path_ns = 0;  // Σ path[r].total()
  // The path's stretches in order, each on its rank's own clock (RankStep times): from the previous completion
  // (or that rank's step start) to its arrival, then the transfer to `end_ns`; the last is the longest tail
  // (arrive_ns == end_ns, the rank's step end). For a view that draws the path across ranks.
  struct PathRound {
    size_t rank = 0;  // index into ranks
    int64_t start_ns = 0, arrive_ns = 0, end_ns = 0;
  };
  std::vector<PathRound> path_rounds;
};

struct MultiRankAnalysis {
  // Non-empty when the inputs are not the ranks of one job (why_not_one_job): nothing was combined, the
  // vectors below are empty and each input is to be analyzed on its own.
  std::string not_one_job;
  std::vector<RankResult> ranks;   // by rank (inputs without a rank keep their order after those with one)
  std::vector<AlignedStep> steps;  // step indexes present in every rank, ascending
  std::vector<FindingResult> findings;  // `straggler`, `exposed-comm`; largest saving first
  std::vector<std::string> notes;       // what could not be aligned or matched, said plainly
  // The job's step: the median over aligned steps of the median rank's step (a synchronous job's ranks take
  // the same time per step).
  int64_t job_step_ns = 0;
  // The job's step after one rank-level change (docs/multi-rank.md, "What-if across ranks").
  struct WhatIf {
    // "at the median rank's pace (the straggler's own delay removed)", "input-bound cured"
    SharedName change;
    int64_t rank = -1;  // the rank it is applied on
    int64_t job_step_ns = 0;
    SharedName rule;             // the rank-level finding whose cure it is; "straggler" for the pace change
    int64_t rank_saving_ns = 0;  // what the change takes off that rank's own step (per affected step)
  };
  std::vector<WhatIf> what_if;  // the straggler's pace first, then each rank-level cure, shortest job step first
  // The critical path over the aligned steps: per rank, its mean time per step on it by part, and the mean path.
  std::vector<AlignedStep::PathPart> job_path;
  int64_t job_path_ns = 0;
};

struct MultiRankOptions {
  AnalyzeOptions analyze;
  unsigned threads = 0;  // 0: every core
  bool keep_rank_findings = false;  // RankResult::findings
};

// The arguments of `analyze`/`report`: files as given, directories replaced by the traces and stores in them
// (not recursive; other files skipped), sorted by name. Throws store::StoreError for a missing path.
std::vector<std::string> expand_rank_inputs(const std::vector<std::string>& args);

// What says whether an input is a rank of a job, and of which: its metadata, never its file name.
struct RankIdentity {
  std::string file;
  int64_t rank = -1;       // meta "rank" (the launcher's environment; a Kineto trace's distributedInfo)
  int64_t world_size = 0;  // meta "world_size"; 0 when unknown
  SharedName job;   // meta "job": the launcher's job id ("slurm:4242.0", "torchelastic:…", "master:…")
  SharedName host;  // meta "host"
  int64_t pid = 0;  // the recorded process: meta "flight.pid", else the first process without a parent
  SharedName flight_save;  // meta "flight.save": the moment a flight save holds; empty for other inputs
};
RankIdentity rank_identity(const std::map<std::string, std::string>& meta,
                           const std::vector<store::Process>& processes, const std::string& file);

// "" when `inputs` are the ranks of one job: every input with a rank has the same world size, the same job
// id and flight save where those are present, and a rank of its own (inputs without a rank beside ranked ones
// are a launcher's store: combine_ranks leaves them out). Else why not, as a phrase for one line: "2 flight
// saves of one process (pid 4242 on gpu-7)", "3 inputs, none with a rank in its metadata", "rank 0 in both
// a.db and b.db", … One input is always "one job".
std::string why_not_one_job(const std::vector<RankIdentity>& inputs);

// why_not_one_job() from the stores' metadata alone, without loading them; "" as well when some input is not
// a store (its metadata needs the whole import: analyze_ranks() checks it after loading).
std::string why_stores_not_one_job(const std::vector<std::string>& files);

// One rank's reduction (the trace can be dropped afterwards).
RankResult analyze_rank(const store::Trace& trace, const std::string& file,
                        const AnalyzeOptions& options = {}, bool keep_findings = false);

// Loads and reduces every file on `options.threads` threads, at most one trace in memory per thread, then
// combine_ranks(). Inputs that are not the ranks of one job are not combined: the result holds only
// `not_one_job`. Throws store::StoreError naming the first bad file.
MultiRankAnalysis analyze_ranks(const std::vector<std::string>& files, const MultiRankOptions& options = {});

// Aligns the ranks by step index, matches their collectives and runs the cross-rank rules.
MultiRankAnalysis combine_ranks(std::vector<RankResult> ranks);

// One collective of an aligned step across ranks, as combine_ranks matched it: per rank (parallel to
// MultiRankAnalysis::ranks) its call, pointing into that rank's RankStep::collectives, and the rank that arrived
// last (the shortest call; the lowest rank on a tie). Each other rank's call waited `calls[r]->dur_ns -
// calls[last]->dur_ns` for it. For views that mark the collectives a straggler delayed.
struct CollectiveMatch {
  std::vector<const CollectiveCall*> calls;
  size_t last = 0;
};
// The matched collectives of step `index` of `m` (empty when some rank lacks that step); valid while `m` lives.
std::vector<CollectiveMatch> matched_collectives(const MultiRankAnalysis& m, int64_t index);

// "stepscope.multirank/1" JSON (docs/multi-rank.md).
std::string multirank_to_json(const MultiRankAnalysis& m);
std::string render_multirank_report(const MultiRankAnalysis& m, ReportFormat format);

// The ranks in one trace for a timeline (`stepscope-gui DIR`): rank k's processes and devices are named
// "rank N · name" (pids, device ids and correlation ids made distinct per rank, so each rank is a group of
// its own) and its times shifted so the first step index every rank has starts where it does on the lowest
// rank. Ranks of different hosts need no common clock for this. The ranks' own findings are dropped.
// Inputs `analyze` leaves out (no steps, or no rank among ranked inputs: a launcher's store) are left out
// here too and named in meta `ranks.left_out` ("FILE: why; …"); meta `ranks` counts the ranks kept. Inputs
// that are not the ranks of one job are not merged: the first input is returned alone, with meta
// `ranks.not_one_job` saying why (why_not_one_job) and no meta `ranks`. For views that place a rank's own times
// (RankStep, CollectiveCall, AlignedStep::PathRound) on the merged timeline, meta `ranks.file.<k>` names the k-th
// merged rank's input (RankResult::file) and `ranks.shift.<k>` the ns added to its times: its own time t is
// t + shift there.
store::Trace merge_ranks_for_timeline(const std::vector<std::string>& files);

// Where that trace put each merged rank, in merged order k: its input (meta ranks.file.<k>) and the ns added to its
// times (ranks.shift.<k>). Empty for a trace that is no merge of ranks.
struct RankPlacement {
  std::string file;
  int64_t shift_ns = 0;
};
std::vector<RankPlacement> rank_placements(const std::map<std::string, std::string>& meta);

// The verdicts of the ranks themselves in the analysis of that merged trace (the GUI's, of `stepscope-gui DIR`):
// analyzed as one program, 8 ranks' GPUs read as one busy GPU ("gpu-bound" steps, input-bound 5.3%, no
// launch-overhead where every rank had it high). Its findings become every rank's own (m from analyze_ranks with
// keep_rank_findings), each summary led by "rank N: " and its ranges on the merged clock; each step's bound
// becomes the one most ranks gave that step index (ties: the first in Bound's order). The merged trace's
// meta (ranks.file.<k>, ranks.shift.<k>) places the ranks; a trace without them is left as it is.
void adopt_rank_verdicts(Analysis& merged, const MultiRankAnalysis& m, const std::map<std::string, std::string>& meta);

// The offsets that keep ranks apart in that trace: rank k's pid p reads (k + 1) · kRankPidBase + p and its device
// d (k + 1) · kRankDeviceBase + d. Views show the recorded ids (id % base).
inline constexpr int64_t kRankPidBase = 10'000'000;
inline constexpr int64_t kRankDeviceBase = 1'000;

// The per-rank section of `diff BASE_DIR NEW_DIR`: ranks matched by rank number, means over aligned steps,
// and each side's `straggler` / `exposed-comm` (text, or a Markdown section).
std::string render_multirank_diff(const MultiRankAnalysis& base, const MultiRankAnalysis& now, bool markdown);
// The same as a JSON object, `stepscope diff --json`'s "ranks" (docs/multi-rank.md, "diff").
std::string multirank_diff_json(const MultiRankAnalysis& base, const MultiRankAnalysis& now);
// Why two job folders have no per-rank comparison (a folder whose files are not the ranks of one job), as the
// same object: {"compared":false,"why":"…"}.
std::string multirank_diff_json_none(const std::string& why);

// The per-rank results as two CSV tables for a query engine over many jobs (docs/scale.md): one row per
// (rank, step) and one per (rank, step, collective). Only per-rank figures: waits and stragglers are a query
// over the collectives table. `job` names the job in every row.
std::string rank_steps_csv(const std::vector<RankResult>& ranks, const std::string& job);
std::string rank_collectives_csv(const std::vector<RankResult>& ranks, const std::string& job);

}  // namespace stepscope::analyzer
