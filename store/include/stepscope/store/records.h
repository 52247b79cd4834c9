// The rows of a stepscope store, in memory. This is the one data model every part shares:
// importers fill a Trace, the collector writes the same rows, the analyzer and the GUI read them.
// All times are integer nanoseconds on the clock named by meta "clock_domain".
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace stepscope::store {

// Index into a StringTable. 0 is always the empty string.
using StringId = int64_t;

// Deduplicating string table. Ids are dense, starting at 0 ("").
class StringTable {
 public:
  StringTable() { intern(""); }
  // The index holds views into values_, so copies rebuild it against their own strings.
  StringTable(const StringTable& o) { *this = o; }
  StringTable& operator=(const StringTable& o) {
    if (this == &o) return *this;
    values_ = o.values_;
    index_.clear();
    index_.reserve(values_.size());
    for (size_t i = 0; i < values_.size(); ++i) index_.emplace(std::string_view(values_[i]), StringId(i));
    return *this;
  }
  StringTable(StringTable&&) noexcept = default;
  StringTable& operator=(StringTable&&) noexcept = default;
  StringId intern(std::string_view s) {
    auto it = index_.find(s);
    if (it != index_.end()) return it->second;
    values_.emplace_back(s);
    StringId id = static_cast<StringId>(values_.size() - 1);
    index_.emplace(std::string_view(values_.back()), id);
    return id;
  }
  // Returns -1 when absent; never inserts.
  StringId find(std::string_view s) const {
    auto it = index_.find(s);
    return it == index_.end() ? -1 : it->second;
  }
  const std::string& get(StringId id) const {
    static const std::string empty;
    return (id >= 0 && static_cast<size_t>(id) < values_.size()) ? values_[id] : empty;
  }
  size_t size() const { return values_.size(); }
  void clear() {
    values_.clear();
    index_.clear();
    intern("");
  }

 private:
  std::deque<std::string> values_;  // deque: stable addresses for the string_view keys
  std::unordered_map<std::string_view, StringId> index_;
};

enum class CopyKind : int32_t { Unknown = 0, HtoD = 1, DtoH = 2, DtoD = 3, PtoP = 4, HtoH = 5 };
enum class MemoryKind : int32_t { Unknown = 0, Pageable = 1, Pinned = 2, Device = 3, Managed = 4 };
enum class SyncType : int32_t { Unknown = 0, Event = 1, StreamWaitEvent = 2, Stream = 3, Context = 4 };
enum class ApiKind : int32_t { Runtime = 1, Driver = 2 };
enum class RangeSource : int32_t { Nvtx = 1, Annotation = 2, Op = 3, Python = 4, GpuAnnotation = 5 };
enum class FrameKind : int32_t { Native = 0, Python = 1 };
enum class Severity : int32_t { Low = 0, Medium = 1, High = 2 };
// How a CUDA/HIP graph came to be (graphs.kind).
enum class GraphKind : int32_t { Unknown = 0, Capture = 1, Explicit = 2, Instantiated = 3, Clone = 4 };
// A graph node's type (graph_nodes.kind): CUDA's CUgraphNodeType + 1, so that 0 stays "unknown".
enum class GraphNodeKind : int32_t {
  Unknown = 0,
  Kernel = 1,
  Memcpy = 2,
  Memset = 3,
  Host = 4,
  Graph = 5,  // a child graph
  Empty = 6,
  WaitEvent = 7,
  EventRecord = 8,
  ExtSemaphoreSignal = 9,
  ExtSemaphoreWait = 10,
  MemAlloc = 11,
  MemFree = 12,
  BatchMemOp = 13,
  Conditional = 14,
};

const char* to_string(CopyKind k);
const char* to_string(MemoryKind k);
const char* to_string(SyncType t);
const char* to_string(ApiKind k);
const char* to_string(RangeSource s);
const char* to_string(FrameKind k);
const char* to_string(Severity s);
const char* to_string(GraphKind k);
const char* to_string(GraphNodeKind k);

struct Process {
  int64_t pid = 0;
  StringId name = 0;
  int64_t parent_pid = 0;  // 0 when unknown
};

struct Thread {
  int64_t pid = 0;
  int64_t tid = 0;
  StringId name = 0;
  bool collector = false;  // one of stepscope's own collector threads (its work, not the user's)
};

struct Device {
  int64_t id = 0;
  StringId name = 0;
  int32_t cc_major = 0;
  int32_t cc_minor = 0;
  int32_t sm_count = 0;
  int64_t memory_bytes = 0;
  StringId vendor = 0;  // "nvidia", "amd", "" when unknown
};

struct Kernel {
  int64_t start = 0, end = 0;
  int64_t device = 0;
  int64_t context = 0;
  int64_t stream = 0;
  int64_t correlation = 0;  // joins ApiCall::correlation; 0 = none
  int32_t grid_x = 0, grid_y = 0, grid_z = 0;
  int32_t block_x = 0, block_y = 0, block_z = 0;
  int32_t registers = 0;
  int64_t shared_memory = 0;  // static + dynamic, bytes
  StringId name = 0;
  int64_t graph_id = 0;  // CUDA/HIP graph the kernel was launched from; 0 = none
  int64_t pid = 0;       // process that launched it (0 when unknown)
  int64_t graph_node_id = 0;  // node of graph_id it ran as (schema v4); 0 = none or not recorded
};

struct Memcpy {
  int64_t start = 0, end = 0;
  int64_t device = 0;
  int64_t stream = 0;
  int64_t correlation = 0;
  int64_t bytes = 0;
  CopyKind kind = CopyKind::Unknown;
  MemoryKind src_kind = MemoryKind::Unknown;
  MemoryKind dst_kind = MemoryKind::Unknown;
  int64_t pid = 0;
  int64_t graph_id = 0;       // graph replay it belongs to (schema v4); 0 = none
  int64_t graph_node_id = 0;  // its node in that graph; 0 = none or not recorded
};

struct Memset {
  int64_t start = 0, end = 0;
  int64_t device = 0;
  int64_t stream = 0;
  int64_t correlation = 0;
  int64_t bytes = 0;
  MemoryKind mem_kind = MemoryKind::Unknown;
  int64_t pid = 0;
  int64_t graph_id = 0;       // graph replay it belongs to (schema v4); 0 = none
  int64_t graph_node_id = 0;  // its node in that graph; 0 = none or not recorded
};

// A synchronization as seen by CUPTI / Kineto `cuda_sync`: the host or a stream waited on something.
struct Sync {
  int64_t start = 0, end = 0;
  int64_t pid = 0, tid = 0;
  SyncType type = SyncType::Unknown;
  int64_t device = 0;
  int64_t stream = -1;  // -1 when not stream-specific
  int64_t correlation = 0;
};

struct ApiCall {
  int64_t start = 0, end = 0;
  int64_t pid = 0, tid = 0;
  ApiKind kind = ApiKind::Runtime;
  StringId name = 0;  // e.g. "cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel"
  int64_t correlation = 0;
  int32_t return_code = 0;
  int64_t stack = 0;  // native + Python stack captured at the call (a Stack id); 0 = none
};

// NVTX ranges, user annotations, framework ops, Python functions. depth 0 = outermost on its thread.
struct Range {
  int64_t start = 0, end = 0;
  int64_t pid = 0, tid = 0;
  StringId domain = 0;
  StringId name = 0;
  int32_t depth = 0;
  RangeSource source = RangeSource::Annotation;
  int64_t correlation = 0;  // framework op → launches it issued, where the source gives one
};

struct Frame {
  int64_t id = 0;  // 1-based; stacks refer to it
  StringId module = 0;
  StringId symbol = 0;
  StringId file = 0;
  int32_t line = 0;
  FrameKind kind = FrameKind::Native;
  int64_t address = 0;  // offset into module (native), 0 when unknown
};

// Stacks form a deduplicated prefix tree: a stack is its leaf node; parent 0 = root.
// The root-most frame is the outermost caller (e.g. _start); the node a sample points at is the leaf.
struct Stack {
  int64_t id = 0;  // 1-based
  int64_t parent = 0;
  int64_t frame = 0;
};

struct Sample {
  int64_t time = 0;
  int64_t pid = 0, tid = 0;
  int64_t stack = 0;  // 0 = no stack
  bool on_cpu = true;
  // Sampling periods this sample stands for: 1, or 1 + the timer expiries merged into its signal while the
  // thread waited for a core (POSIX timers: --wall and the CPU-clock fallback). Schema v3; older stores
  // read 1.
  int64_t periods = 1;
};

struct DataWait {
  int64_t start = 0, end = 0;
  int64_t pid = 0, tid = 0;
  StringId source = 0;  // "dataloader", "tf.data", "api", "nvtx", "python"
};

struct Step {
  int64_t index = 0;
  int64_t start = 0, end = 0;
  StringId source = 0;  // "profiler-step", "optimizer", "dataloader", "pattern", "api", "none"
  int64_t pid = 0, tid = 0;  // thread that drove the step, 0 when unknown
};

struct Finding {
  StringId rule = 0;
  Severity severity = Severity::Low;
  int64_t first_step = -1, last_step = -1;
  double est_savings_ns = 0;  // per affected step
  StringId message = 0;
  std::string evidence_json = "{}";
};

// Executable mappings of a recorded process, for offline symbolization.
struct Module {
  int64_t pid = 0;
  StringId path = 0;
  StringId build_id = 0;  // hex
  int64_t start = 0, end = 0;  // mapped address range
  int64_t file_offset = 0;
};

// An interval during which CUDA activity was traced (GPU windows, `stepscope record --gpu-window`).
// No rows (and meta "gpu.window" absent or "all") = the whole run was traced.
struct GpuWindow {
  int64_t start = 0, end = 0;
  int64_t pid = 0;  // process whose collector switched tracing on
};

// A CUDA/HIP graph or executable graph the collector saw created (schema v4). Ids are the runtime's (CUPTI's
// graph ids), unique per process.
struct Graph {
  int64_t pid = 0;
  int64_t graph_id = 0;
  GraphKind kind = GraphKind::Unknown;
  int64_t source_graph_id = 0;  // the graph it was instantiated or cloned from; 0 = none
  int64_t created = 0;          // ns
  int64_t stack = 0;            // creating / capturing thread's native + Python stack (a Stack id); 0 = none
};

// One node of a graph (schema v4): where a kernel, copy or memset of a replay came from.
struct GraphNode {
  int64_t pid = 0;
  int64_t graph_id = 0;
  int64_t node_id = 0;
  int64_t source_node_id = 0;  // the node it was cloned from at instantiate / clone; 0 = none
  GraphNodeKind kind = GraphNodeKind::Unknown;
  int64_t created = 0;  // ns
  int64_t stack = 0;    // stack of the thread that created or captured the node (a Stack id); 0 = none
};

// A whole recording in memory.
struct Trace {
  StringTable strings;
  std::map<std::string, std::string> meta;
  std::vector<Process> processes;
  std::vector<Thread> threads;
  std::vector<Device> devices;
  std::vector<Kernel> kernels;
  std::vector<Memcpy> memcpys;
  std::vector<Memset> memsets;
  std::vector<Sync> syncs;
  std::vector<ApiCall> api_calls;
  std::vector<Range> ranges;
  std::vector<Frame> frames;
  std::vector<Stack> stacks;
  std::vector<Sample> samples;
  std::vector<DataWait> data_waits;
  std::vector<Step> steps;
  std::vector<Finding> findings;
  std::vector<Module> modules;
  std::vector<GpuWindow> gpu_windows;
  std::vector<Graph> graphs;
  std::vector<GraphNode> graph_nodes;

  const std::string& str(StringId id) const { return strings.get(id); }
  StringId intern(std::string_view s) { return strings.intern(s); }

  void add(const Process& r) { processes.push_back(r); }
  void add(const Thread& r) { threads.push_back(r); }
  void add(const Device& r) { devices.push_back(r); }
  void add(const Kernel& r) { kernels.push_back(r); }
  void add(const Memcpy& r) { memcpys.push_back(r); }
  void add(const Memset& r) { memsets.push_back(r); }
  void add(const Sync& r) { syncs.push_back(r); }
  void add(const ApiCall& r) { api_calls.push_back(r); }
  void add(const Range& r) { ranges.push_back(r); }
  void add(const Frame& r) { frames.push_back(r); }
  void add(const Stack& r) { stacks.push_back(r); }
  void add(const Sample& r) { samples.push_back(r); }
  void add(const DataWait& r) { data_waits.push_back(r); }
  void add(const Step& r) { steps.push_back(r); }
  void add(const Finding& r) { findings.push_back(r); }
  void add(const Module& r) { modules.push_back(r); }
  void add(const GpuWindow& r) { gpu_windows.push_back(r); }
  void add(const Graph& r) { graphs.push_back(r); }
  void add(const GraphNode& r) { graph_nodes.push_back(r); }
  // Number of GPU activities (kernels + memcpys + memsets).
  size_t gpu_event_count() const { return kernels.size() + memcpys.size() + memsets.size(); }
  // [min start, max end] over every timed row; {0,0} when empty.
  std::pair<int64_t, int64_t> time_span() const;
};

// How a trace holds CUDA graph replays (meta gpu.graph_records, docs/schema.md): "nodes" (each replay's
// kernels, copies and memsets), "graph" (one interval a replay) or "" (nothing says). Without the meta,
// records that name a graph node are nodes — CUPTI's graph trace records name none; stepscope recordings up
// to 2026-11-30 lost the meta in their merge — and a stepscope recording without them is "graph" (v3 and
// older traced that way).
std::string graph_records_of(const Trace& t);

// Hands every row of `from` (meta aside) to `sink(row)`, its string ids mapped through `str(id)` and its frame
// and stack ids shifted past `frame_base` / `stack_base` — how one trace's rows join another trace or a store.
template <class StrMap, class Sink>
void visit_remapped(const Trace& from, StrMap&& str, int64_t frame_base, int64_t stack_base, Sink&& sink) {
  for (auto r : from.processes) { r.name = str(r.name); sink(r); }
  for (auto r : from.threads) { r.name = str(r.name); sink(r); }
  for (auto r : from.devices) { r.name = str(r.name); r.vendor = str(r.vendor); sink(r); }
  for (auto r : from.kernels) { r.name = str(r.name); sink(r); }
  for (const auto& r : from.memcpys) sink(r);
  for (const auto& r : from.memsets) sink(r);
  for (const auto& r : from.syncs) sink(r);
  for (auto r : from.api_calls) {
    r.name = str(r.name);
    if (r.stack) r.stack += stack_base;
    sink(r);
  }
  for (auto r : from.ranges) { r.name = str(r.name); r.domain = str(r.domain); sink(r); }
  for (auto r : from.frames) {
    r.id += frame_base;
    r.module = str(r.module);
    r.symbol = str(r.symbol);
    r.file = str(r.file);
    sink(r);
  }
  for (auto r : from.stacks) {
    r.id += stack_base;
    if (r.parent) r.parent += stack_base;
    if (r.frame) r.frame += frame_base;
    sink(r);
  }
  for (auto r : from.samples) {
    if (r.stack) r.stack += stack_base;
    sink(r);
  }
  for (auto r : from.data_waits) { r.source = str(r.source); sink(r); }
  for (auto r : from.steps) { r.source = str(r.source); sink(r); }
  for (auto r : from.findings) { r.rule = str(r.rule); r.message = str(r.message); sink(r); }
  for (auto r : from.modules) { r.path = str(r.path); r.build_id = str(r.build_id); sink(r); }
  for (const auto& r : from.gpu_windows) sink(r);
  for (auto r : from.graphs) {
    if (r.stack) r.stack += stack_base;
    sink(r);
  }
  for (auto r : from.graph_nodes) {
    if (r.stack) r.stack += stack_base;
    sink(r);
  }
}

}  // namespace stepscope::store
