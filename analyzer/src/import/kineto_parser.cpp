// The simdjson On-Demand half of the Kineto importer: one pass over the JSON into a store::Trace (categories,
// args, the Parser that turns events into rows). Parsing is kept to On-Demand views into the input: no DOM, no
// copies of names that need no unescaping.
#include "import/kineto_parser.h"

#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "import/event_counts.h"
#include "import/numbers.h"
#include "import/trace_finalize.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer::import {

using namespace stepscope::store;

namespace {

namespace od = simdjson::ondemand;

enum class Cat {
  Unknown,
  Kernel,
  Memcpy,
  Memset,
  Runtime,
  Driver,
  Sync,
  CpuOp,
  UserAnnotation,
  GpuAnnotation,
  Python,
  Nvtx,
  NvtxGpu,
  NsysCuda,  // nsys-converted Chrome trace: kernels, copies and memsets share "cuda"
  StepscopeStep,
  StepscopeDataWait,
  Drop,
  ForeignDevice,  // device events with no readable timeline (MTIA, XPU, ..., CUPTI range-profiler metrics): counted, said
};

Cat classify(std::string_view c) {
  switch (c.size()) {
    case 4:
      if (c == "cuda") return Cat::NsysCuda;
      if (c == "nvtx") return Cat::Nvtx;
      if (c == "osrt") return Cat::Drop;
      break;
    case 5:
      if (c == "Trace") return Cat::Drop;
      if (c == "sched") return Cat::Drop;
      break;
    case 6:
      if (c == "kernel" || c == "Kernel") return Cat::Kernel;
      if (c == "cpu_op") return Cat::CpuOp;
      if (c == "Memcpy") return Cat::Memcpy;
      if (c == "Memset") return Cat::Memset;
      break;
    case 7:
      if (c == "Runtime") return Cat::Runtime;
      break;
    case 8:
      if (c == "Operator") return Cat::CpuOp;
      if (c == "cuda_api") return Cat::Runtime;
      if (c == "overhead") return Cat::Drop;
      break;
    case 9:
      if (c == "cuda_sync") return Cat::Sync;
      break;
    case 10:
      if (c == "gpu_memcpy") return Cat::Memcpy;
      if (c == "gpu_memset") return Cat::Memset;
      if (c == "cuda_event") return Cat::Drop;
      break;
    case 11:
      if (c == "cuda_driver") return Cat::Driver;
      if (c == "nvtx-kernel") return Cat::NvtxGpu;
      break;
    case 12:
      if (c == "cuda_runtime") return Cat::Runtime;
      break;
    case 14:
      if (c == "stepscope_step") return Cat::StepscopeStep;
      break;
    case 15:
      if (c == "user_annotation") return Cat::UserAnnotation;
      if (c == "python_function") return Cat::Python;
      break;
    case 19:
      if (c == "gpu_user_annotation") return Cat::GpuAnnotation;
      // CUPTI range-profiler metrics: Kineto gives them no real times (CuptiRangeProfilerSession::addRangeEvents
      // splits the profiled span evenly, "the actual times do not really matter"), so they are not a timeline.
      if (c == "cuda_profiler_range") return Cat::ForeignDevice;
      if (c == "stepscope_data_wait") return Cat::StepscopeDataWait;
      break;
    default:
      break;
  }
  // Accelerators whose events stepscope does not model: their kernels and runtime calls must not pass for host
  // annotations, and the analysis must say they were there.
  for (std::string_view prefix : {"mtia", "xpu", "hpu", "npu", "tpu", "mlu", "ipu", "privateuse1"})
    if (c.substr(0, prefix.size()) == prefix) return Cat::ForeignDevice;
  return Cat::Unknown;
}

struct Args {
  int64_t device = -1, stream = INT64_MIN, correlation = 0, context = 0;
  int64_t registers = 0, shared_mem = 0, bytes = 0;
  int64_t start_ns = INT64_MIN, end_ns = INT64_MIN;
  int64_t raw_pid = INT64_MIN, raw_tid = INT64_MIN;
  int64_t graph_id = 0, graph_node_id = 0, index = INT64_MIN, return_code = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  bool has_grid = false;
  std::string_view sync_kind, kind, name, source, domain;
  void reset() { *this = Args{}; }
};

SyncType sync_type_of(std::string_view s) {
  if (s.find("Wait") != std::string_view::npos) return SyncType::StreamWaitEvent;
  if (s.find("Event") != std::string_view::npos) return SyncType::Event;
  if (s.find("Stream") != std::string_view::npos) return SyncType::Stream;
  if (s.find("Context") != std::string_view::npos || s.find("Device") != std::string_view::npos)
    return SyncType::Context;
  return SyncType::Unknown;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Object keys as views into the input (no copy) unless they contain escapes.
inline std::string_view key_of(od::field& f) {
  const char* p = f.key().raw();
  const char* q = p;
  while (*q != '"') {
    if (*q == '\\') {
      std::string_view k = f.unescaped_key();
      return k;
    }
    ++q;
  }
  return {p, static_cast<size_t>(q - p)};
}

// A string value as a view into the input when it has no escapes (most do not): no copy into simdjson's
// string buffer. raw_json_token() does not consume the value, so get_string() is still possible.
inline std::string_view str_of(od::value v) {
  std::string_view tok = v.raw_json_token();
  if (tok.empty() || tok[0] != '"') return {};  // null or a number where a string belongs: treat as empty
  size_t close = tok.rfind('"');
  if (tok.size() >= 2 && tok[0] == '"' && close > 0) {
    std::string_view inner = tok.substr(1, close - 1);
    if (inner.find('\\') == std::string_view::npos) return inner;
  }
  return v.get_string();
}

inline int64_t as_int(od::value v) {
  od::json_type t = v.type();
  if (t == od::json_type::number) return int_text(v.raw_json_token());
  if (t == od::json_type::string) {
    std::string_view s = v.get_string();
    int64_t out = 0;
    return parse_scaled(s, 0, out) ? out : trailing_number(s);
  }
  if (t == od::json_type::boolean) return bool(v.get_bool()) ? 1 : 0;
  return 0;
}

inline void read_dim3(od::value v, int32_t (&d)[3]) {
  if (v.type() != od::json_type::array) return;
  int i = 0;
  for (od::value x : v.get_array()) {
    if (i < 3) d[i] = static_cast<int32_t>(as_int(x));
    ++i;
  }
}

void parse_args(od::object obj, Args& a) {
  for (od::field f : obj) {
    std::string_view k = key_of(f);
    od::value v = f.value();
    switch (k.size()) {
      case 4:
        if (k == "grid") {
          read_dim3(v, a.grid);
          a.has_grid = true;
        } else if (k == "kind") {
          if (v.type() == od::json_type::string) a.kind = v.get_string();
        } else if (k == "name") {
          if (v.type() == od::json_type::string) a.name = v.get_string();
        }
        break;
      case 5:
        if (k == "block") read_dim3(v, a.block);
        else if (k == "bytes") a.bytes = as_int(v);
        else if (k == "index") a.index = as_int(v);
        break;
      case 6:
        if (k == "device") a.device = as_int(v);
        else if (k == "stream") a.stream = as_int(v);
        else if (k == "end_ns") a.end_ns = as_int(v);
        else if (k == "source") {
          if (v.type() == od::json_type::string) a.source = v.get_string();
        } else if (k == "domain") {
          if (v.type() == od::json_type::string) a.domain = v.get_string();
        }
        break;
      case 7:
        if (k == "context") a.context = as_int(v);
        else if (k == "raw_pid") a.raw_pid = as_int(v);
        else if (k == "raw_tid") a.raw_tid = as_int(v);
        else if (k == "graphId") a.graph_id = as_int(v);
        break;
      case 8:
        if (k == "deviceId") a.device = as_int(v);
        else if (k == "streamId") a.stream = as_int(v);
        else if (k == "start_ns") a.start_ns = as_int(v);
        else if (k == "graph id" || k == "graph_id") a.graph_id = as_int(v);
        break;
      case 11:
        if (k == "correlation") a.correlation = as_int(v);
        else if (k == "return_code") a.return_code = as_int(v);
        else if (k == "graphNodeId") a.graph_node_id = as_int(v);
        break;
      case 13:
        if (k == "correlationId") a.correlation = as_int(v);
        else if (k == "shared memory") a.shared_mem += as_int(v);
        // Kineto (CUDA 12+, libkineto's "graph id" / "graph node id" metadata of kernels, copies, memsets).
        else if (k == "graph node id" || k == "graph_node_id") a.graph_node_id = as_int(v);
        break;
      case 14:
        if (k == "cuda_sync_kind" && v.type() == od::json_type::string) a.sync_kind = v.get_string();
        break;
      case 18:
        if (k == "registersPerThread") a.registers = as_int(v);
        else if (k == "staticSharedMemory") a.shared_mem += as_int(v);
        break;
      case 19:
        if (k == "dynamicSharedMemory") a.shared_mem += as_int(v);
        break;
      case 20:
        if (k == "registers per thread") a.registers = as_int(v);
        break;
      default:
        break;
    }
  }
}

struct OpenRange {
  std::string cat, name;
  int64_t ts = 0;
  std::string_view malformed;  // why the B cannot be read (a static reason): its pair is left out, its E still pops it
};

// Which dialect the categories seen so far belong to (docs/formats.md).
struct Dialect {
  bool kineto = false, legacy = false, nsys = false, amd = false, stepscope = false;
  void add(const Dialect& o) {
    kineto |= o.kineto, legacy |= o.legacy, nsys |= o.nsys, amd |= o.amd, stepscope |= o.stepscope;
  }
};

using Counts = std::map<std::string, int64_t, std::less<>>;

// Counted by name: `what` may view a B/E pair's category, which lives only as long as the pair.
void count(Counts& m, std::string_view what) {
  auto it = m.find(what);
  if (it == m.end())
    m.emplace(std::string(what), 1);
  else
    ++it->second;
}

// What a run of trace events becomes: rows in `t` (with its own string table), names of processes and
// threads, what was dropped. One reader takes the whole array, or one reader per chunk of it (`in_chunk`),
// each adopted in file order by the first.
// A chunk's string ids and labels → the ids one pass gives them (EventReader::adopt).
struct ChunkIds {
  std::vector<uint32_t> id;  // every chunk's are held until the merge: a text under 4 GiB has fewer strings
  std::vector<int64_t> label;
  // A chunk numbers its labels from here (one pass from EventReader::kLabel).
  static constexpr int64_t kChunkLabel = int64_t{0x70} << 56;
  void ids(int64_t& a, int64_t& b) const {
    if (label.empty()) return;
    if (is_label(a)) a = label[size_t(a - kChunkLabel)];
    if (is_label(b)) b = label[size_t(b - kChunkLabel)];
  }
  static bool is_label(int64_t v) { return v >= kChunkLabel && v - kChunkLabel < (int64_t{1} << 32); }
  void operator()(Kernel& r) const {
    r.name = id[size_t(r.name)];
    ids(r.device, r.stream);
  }
  void operator()(Memcpy& r) const { ids(r.device, r.stream); }
  void operator()(Memset& r) const { ids(r.device, r.stream); }
  void operator()(Sync& r) const { ids(r.pid, r.tid); }
  void operator()(ApiCall& r) const {
    r.name = id[size_t(r.name)];
    ids(r.pid, r.tid);
  }
  void operator()(Range& r) const {
    r.name = id[size_t(r.name)];
    r.domain = id[size_t(r.domain)];
    ids(r.pid, r.tid);
  }
  void operator()(DataWait& r) const {
    r.source = id[size_t(r.source)];
    ids(r.pid, r.tid);
  }
  void operator()(Step& r) const {
    r.source = id[size_t(r.source)];
    ids(r.pid, r.tid);
  }
};

class EventReader {
 public:
  explicit EventReader(bool in_chunk) : in_chunk_(in_chunk) {
    s_profiler_step_ = intern("profiler-step");
    s_dataloader_ = intern("dataloader");
  }
  void event(od::object obj);
  // Takes a later chunk's names, labels and counts as if its events had followed this reader's; its rows
  // (left in `c`) take this reader's string and label ids through the returned map as they are merged.
  ChunkIds adopt(EventReader& c);
  // A chunk that cannot stand alone: an "E" closing a "B" of an earlier chunk (or none), or a number among
  // the ids labels get (a chunk's own, or one pass's: the same key as a label there, another here).
  bool needs_earlier_chunks() const { return needs_earlier_; }

  Trace t;
  NameHints names;
  Counts dropped, foreign;  // foreign: ForeignDevice events by category
  Dialect dialect;
  size_t n_events = 0;

 private:
  struct Id {
    int64_t num = 0;
    std::string_view label;
  };
  Id read_id(od::value v);
  void emit(std::string_view cat, std::string_view name, int64_t pid, int64_t tid, int64_t ts, int64_t dur,
            const Args& a);
  void metadata(std::string_view name, int64_t pid, int64_t tid, const Args& a);
  void drop(std::string_view what) { count(dropped, what); }
  StringId intern(std::string_view s) {
    auto it = ids_.find(s);
    if (it != ids_.end()) return it->second;
    StringId id = t.intern(s);
    ids_.emplace(std::string_view(t.str(id)), id);
    return id;
  }
  // Names repeat (a kernel's 400-byte template name thousands of times): hashing its length and three words
  // finds it without reading the whole name twice; equality still compares every byte.
  struct NameHash {
    size_t operator()(std::string_view s) const noexcept {
      uint64_t h = s.size() * 0x9e3779b97f4a7c15ull;
      if (s.size() >= 8) {
        uint64_t w[3];
        std::memcpy(&w[0], s.data(), 8);
        std::memcpy(&w[1], s.data() + (s.size() - 8) / 2, 8);
        std::memcpy(&w[2], s.data() + s.size() - 8, 8);
        for (uint64_t x : w) h = (h ^ x) * 0xff51afd7ed558ccdull, h ^= h >> 32;
      } else {
        for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
      }
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  std::unordered_map<std::string_view, StringId, NameHash> ids_;  // views into t's strings

  static constexpr int64_t kLabel = int64_t{1} << 40;
  static constexpr int64_t kChunkLabel = ChunkIds::kChunkLabel;
  static bool chunk_label(int64_t v) { return ChunkIds::is_label(v); }
  static bool label(int64_t v) { return v >= kLabel && v - kLabel < (int64_t{1} << 32); }
  // A number a chunk would take for one of its labels, or one pass for one of its, cannot stand alone.
  void check_not_label(int64_t v) {
    if (in_chunk_ && (chunk_label(v) || label(v))) needs_earlier_ = true;
  }

  bool in_chunk_ = false, needs_earlier_ = false;
  Args args_;
  std::map<std::string, int64_t, std::less<>> label_ids_;
  std::vector<const std::string*> labels_in_order_;  // label_ids_'s keys by first sight
  std::map<std::pair<int64_t, int64_t>, std::vector<OpenRange>> open_;
  StringId s_profiler_step_ = 0, s_dataloader_ = 0;
};

EventReader::Id EventReader::read_id(od::value v) {
  Id id;
  od::json_type t = v.type();
  if (t == od::json_type::number) {
    id.num = int_text(v.raw_json_token());
  } else if (t == od::json_type::string) {
    id.label = v.get_string();
    int64_t n = 0;
    if (parse_scaled(id.label, 0, n)) {
      id.num = n;
    } else if ((n = trailing_number(id.label)) >= 0) {
      id.num = n;
    } else {
      // A label with no number ("Spans", ""): a stable synthetic id far from real pids and tids, by first
      // sight. A chunk cannot know the labels seen before it: it numbers its own from kChunkLabel, and
      // adopt() gives them their ids.
      auto it = label_ids_.find(id.label);
      if (it == label_ids_.end()) {
        int64_t next = (in_chunk_ ? kChunkLabel : kLabel) + int64_t(label_ids_.size());
        it = label_ids_.emplace(std::string(id.label), next).first;
        labels_in_order_.push_back(&it->first);
      }
      id.num = it->second;
      return id;
    }
  }
  check_not_label(id.num);
  return id;
}

void EventReader::metadata(std::string_view name, int64_t pid, int64_t tid, const Args& a) {
  if (name == "process_name" && !a.name.empty())
    names.process_names[pid] = std::string(a.name);
  else if (name == "thread_name" && !a.name.empty())
    names.thread_names[{pid, tid}] = std::string(a.name);
}

void EventReader::emit(std::string_view cat, std::string_view name, int64_t pid, int64_t tid, int64_t ts,
                       int64_t dur, const Args& a) {
  Cat c = classify(cat);
  if (c == Cat::NsysCuda) {
    dialect.nsys = true;
    if (a.has_grid) c = Cat::Kernel;
    else if (name.find("emcpy") != std::string_view::npos) c = Cat::Memcpy;
    else if (name.find("emset") != std::string_view::npos) c = Cat::Memset;
    else c = Cat::Kernel;
  }
  int64_t start = a.start_ns != INT64_MIN ? a.start_ns : ts;
  int64_t end = a.end_ns != INT64_MIN ? a.end_ns : wrapping_add(ts, dur > 0 ? dur : 0);
  if (a.raw_pid != INT64_MIN) pid = a.raw_pid;
  if (a.raw_tid != INT64_MIN) tid = a.raw_tid;
  auto gpu_device = [&] { return a.device >= 0 ? a.device : pid; };
  auto gpu_stream = [&] { return a.stream != INT64_MIN ? a.stream : tid; };
  // A copy or a memset: the fields they share.
  auto copy_like = [&](auto& m) {
    m.start = start;
    m.end = end;
    m.device = gpu_device();
    m.stream = gpu_stream();
    m.correlation = a.correlation;
    m.bytes = a.bytes;
    m.graph_id = a.graph_id;
    m.graph_node_id = a.graph_node_id;
  };

  switch (c) {
    case Cat::Kernel: {
      if (cat == "Kernel")
        dialect.legacy = true;
      else if (cat == "kernel")
        dialect.kineto = true;
      Kernel k;
      k.start = start;
      k.end = end;
      k.device = gpu_device();
      k.context = a.context;
      k.stream = gpu_stream();
      k.correlation = a.correlation;
      k.grid_x = a.grid[0], k.grid_y = a.grid[1], k.grid_z = a.grid[2];
      k.block_x = a.block[0], k.block_y = a.block[1], k.block_z = a.block[2];
      k.registers = static_cast<int32_t>(a.registers);
      k.shared_memory = a.shared_mem;
      k.name = intern(name);
      k.graph_id = a.graph_id;
      k.graph_node_id = a.graph_node_id;
      t.kernels.push_back(k);
      break;
    }
    case Cat::Memcpy: {
      dialect.kineto |= cat == "gpu_memcpy";
      Memcpy m;
      copy_like(m);
      parse_memcpy_name(name, m.kind, m.src_kind, m.dst_kind);
      if (m.kind == CopyKind::Unknown && !a.kind.empty()) {
        CopyKind k2 = CopyKind::Unknown;
        MemoryKind s2 = MemoryKind::Unknown, d2 = MemoryKind::Unknown;
        parse_memcpy_name(a.kind, k2, s2, d2);
        m.kind = k2;
      }
      t.memcpys.push_back(m);
      break;
    }
    case Cat::Memset: {
      dialect.kineto |= cat == "gpu_memset";
      Memset m;
      copy_like(m);
      size_t open = name.find('(');
      m.mem_kind =
          open != std::string_view::npos ? parse_memory_kind(name.substr(open)) : parse_memory_kind(a.kind);
      t.memsets.push_back(m);
      break;
    }
    case Cat::Runtime:
    case Cat::Driver: {
      if (cat == "Runtime")
        dialect.legacy = true;
      else if (cat == "cuda_api")
        dialect.nsys = true;
      else
        dialect.kineto = true;
      ApiCall x;
      x.start = start;
      x.end = end;
      x.pid = pid;
      x.tid = tid;
      std::string_view n = strip_api_version(name);
      if (starts_with(n, "hip")) dialect.amd = true;
      x.kind = (c == Cat::Driver || (starts_with(n, "cu") && !starts_with(n, "cuda"))) ? ApiKind::Driver
                                                                                       : ApiKind::Runtime;
      x.name = intern(n);
      x.correlation = a.correlation;
      x.return_code = static_cast<int32_t>(a.return_code);
      t.api_calls.push_back(x);
      break;
    }
    case Cat::Sync: {
      dialect.kineto = true;
      Sync s;
      s.start = start;
      s.end = end;
      s.pid = pid;
      s.tid = tid;
      s.type = sync_type_of(a.sync_kind.empty() ? name : a.sync_kind);
      s.device = a.device >= 0 ? a.device : 0;
      s.stream = a.stream != INT64_MIN ? a.stream : -1;
      s.correlation = a.correlation;
      t.syncs.push_back(s);
      break;
    }
    case Cat::GpuAnnotation:
    case Cat::NvtxGpu: {
      Range r;
      r.start = start;
      r.end = end;
      r.pid = gpu_device();
      r.tid = gpu_stream();
      r.name = intern(name);
      r.domain = c == Cat::NvtxGpu ? intern("nvtx") : intern(a.domain);
      r.source = RangeSource::GpuAnnotation;
      r.correlation = a.correlation;
      t.ranges.push_back(r);
      break;
    }
    case Cat::CpuOp:
    case Cat::UserAnnotation:
    case Cat::Python:
    case Cat::Nvtx:
    case Cat::Unknown: {
      if (cat == "Operator")
        dialect.legacy = true;
      else if (c != Cat::Unknown && c != Cat::Nvtx)
        dialect.kineto = true;
      Range r;
      r.start = start;
      r.end = end;
      r.pid = pid;
      r.tid = tid;
      r.name = intern(name);
      r.source = c == Cat::CpuOp ? RangeSource::Op
               : c == Cat::Python ? RangeSource::Python
               : c == Cat::Nvtx   ? RangeSource::Nvtx
                                  : RangeSource::Annotation;
      r.domain = c == Cat::Unknown ? intern(cat) : intern(a.domain);
      t.ranges.push_back(r);
      if (c != Cat::Python) {
        if (starts_with(name, "ProfilerStep#")) {
          Step st;
          st.index = trailing_number(name);
          st.start = start;
          st.end = end;
          st.source = s_profiler_step_;
          st.pid = pid;
          st.tid = tid;
          t.steps.push_back(st);
        } else if (starts_with(name, "enumerate(DataLoader)#")) {
          DataWait w;
          w.start = start;
          w.end = end;
          w.pid = pid;
          w.tid = tid;
          w.source = s_dataloader_;
          t.data_waits.push_back(w);
        }
      }
      break;
    }
    case Cat::StepscopeStep: {
      dialect.stepscope = true;
      Step st;
      st.index = a.index != INT64_MIN ? a.index : trailing_number(name);
      st.start = start;
      st.end = end;
      st.source = intern(a.source.empty() ? std::string_view("profiler-step") : a.source);
      st.pid = pid;
      st.tid = tid;
      t.steps.push_back(st);
      break;
    }
    case Cat::StepscopeDataWait: {
      dialect.stepscope = true;
      DataWait w;
      w.start = start;
      w.end = end;
      w.pid = pid;
      w.tid = tid;
      w.source = intern(a.source.empty() ? std::string_view("dataloader") : a.source);
      t.data_waits.push_back(w);
      break;
    }
    case Cat::Drop:
    case Cat::NsysCuda:
      drop(cat);
      break;
    case Cat::ForeignDevice:
      count(foreign, cat);
      break;
  }
}

void EventReader::event(od::object obj) {
  ++n_events;
  std::string_view ph, cat, name;
  Id pid, tid;
  int64_t ts = 0, dur = 0;
  std::string_view malformed;  // why the event cannot be read, where its fields say so
  args_.reset();
  for (od::field f : obj) {
    std::string_view k = key_of(f);
    if (k.size() == 2) {
      if (k == "ph") {
        ph = str_of(f.value());
        // Flows, instants, counters and async events carry nothing we keep: skip the rest of the object.
        if (ph.size() == 1 && ph[0] != 'X' && ph[0] != 'M' && ph[0] != 'B' && ph[0] != 'E') {
          drop(ph);
          return;
        }
      }
      else if (k == "ts") {
        if (!us_token_to_ns(f.value().raw_json_token(), ts)) malformed = "(ts not a time)";
      }
    } else if (k.size() == 3) {
      if (k == "cat") {
        od::value v = f.value();
        const std::string_view tok = v.raw_json_token();
        if (!tok.empty() && tok[0] != '"' && tok[0] != 'n') malformed = "(cat not a string)";  // null: no category
        else cat = str_of(v);
      }
      else if (k == "pid") pid = read_id(f.value());
      else if (k == "tid") tid = read_id(f.value());
      else if (k == "dur") {
        if (!us_token_to_ns(f.value().raw_json_token(), dur) || dur < 0) malformed = "(dur not a duration)";
      }
    } else if (k.size() == 4) {
      if (k == "name") name = str_of(f.value());
      else if (k == "args") {
        // Host ranges need nothing from args (Kineto puts shapes and call stacks there): leave them unread.
        if (!cat.empty()) {
          Cat c = classify(cat);
          if (c == Cat::CpuOp || c == Cat::UserAnnotation || c == Cat::Python || c == Cat::Drop ||
              c == Cat::ForeignDevice)
            continue;
        }
        od::value v = f.value();
        if (v.type() == od::json_type::object) {
          parse_args(v.get_object(), args_);
          for (int64_t x : {args_.device, args_.stream, args_.raw_pid, args_.raw_tid}) check_not_label(x);
        }
      }
    }
  }
  if (ph.size() != 1) {
    drop(ph.empty() ? std::string_view("(no ph)") : ph);
    return;
  }
  // A malformed B or E still opens or closes its pair (the ranges around it keep their nesting); the pair is
  // left out.
  if (!malformed.empty() && ph[0] != 'B' && ph[0] != 'E') {
    drop(malformed);
    return;
  }
  switch (ph[0]) {
    case 'X':
      emit(cat, name, pid.num, tid.num, ts, dur, args_);
      break;
    case 'M':
      metadata(name, pid.num, tid.num, args_);
      break;
    case 'B':
      open_[{pid.num, tid.num}].push_back(OpenRange{std::string(cat), std::string(name), ts, malformed});
      break;
    case 'E': {
      auto it = open_.find({pid.num, tid.num});
      if (it == open_.end() || it->second.empty()) {
        // In a chunk, the "B" it closes may be in an earlier one.
        if (in_chunk_) needs_earlier_ = true;
        drop("E without B");
        break;
      }
      OpenRange o = std::move(it->second.back());
      it->second.pop_back();
      if (!o.malformed.empty() || !malformed.empty()) {
        drop(o.malformed.empty() ? malformed : o.malformed);
        break;
      }
      Args none;
      emit(o.cat, o.name.empty() ? name : std::string_view(o.name), pid.num, tid.num, o.ts,
           wrapping_sub(ts, o.ts), none);
      break;
    }
    default:
      drop(cat.empty() ? ph : cat);
      break;
  }
}

ChunkIds EventReader::adopt(EventReader& c) {
  ChunkIds m;
  // Interning the chunk's strings in its own first-seen order gives every string the id one serial pass
  // would.
  m.id.resize(c.t.strings.size());
  for (size_t i = 0; i < m.id.size(); ++i) m.id[i] = uint32_t(t.intern(c.t.str(static_cast<StringId>(i))));
  // The chunk's labels, in its first-seen order, take the ids one pass would have given them.
  m.label.resize(c.labels_in_order_.size());
  for (size_t i = 0; i < m.label.size(); ++i) {
    const std::string& l = *c.labels_in_order_[i];
    auto it = label_ids_.find(l);
    if (it == label_ids_.end()) {
      it = label_ids_.emplace(l, kLabel + int64_t(label_ids_.size())).first;
      labels_in_order_.push_back(&it->first);
    }
    m.label[i] = it->second;
  }
  for (auto& [pid, name] : c.names.process_names) {
    int64_t p = pid, unused = 0;
    m.ids(p, unused);
    names.process_names[p] = std::move(name);
  }
  for (auto& [key, name] : c.names.thread_names) {
    auto [p, tid] = key;
    m.ids(p, tid);
    names.thread_names[{p, tid}] = std::move(name);
  }
  for (const auto& [what, n] : c.dropped) dropped[what] += n;
  for (const auto& [what, n] : c.foreign) foreign[what] += n;
  dialect.add(c.dialect);
  n_events += c.n_events;
  return m;
}

// One table of every chunk, each in time order, into `into` in time order; rows with equal starts in file
// order (the earlier chunk's first): what a stable sort of the whole table gives.
template <class Row>
void merge_by_start(std::vector<Row>& into, std::vector<std::vector<Row>*> runs,
                    const std::vector<ChunkIds>& ids) {
  size_t total = into.size();
  for (auto* r : runs) total += r->size();
  into.reserve(total);
  using Head = std::pair<int64_t, uint32_t>;  // (start, run): the smaller run wins a tie
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heads;
  std::vector<size_t> at(runs.size(), 0);
  for (uint32_t k = 0; k < runs.size(); ++k)
    if (!runs[k]->empty()) heads.push({(*runs[k])[0].start, k});
  while (!heads.empty()) {
    uint32_t k = heads.top().second;
    heads.pop();
    std::vector<Row>& run = *runs[k];
    // Rows of one run up to the next run's head go in one stretch.
    int64_t limit = heads.empty() ? INT64_MAX : heads.top().first;
    uint32_t limit_run = heads.empty() ? UINT32_MAX : heads.top().second;
    size_t i = at[k];
    const ChunkIds& to_ids = ids[k];
    do {
      into.push_back(std::move(run[i]));
      to_ids(into.back());
      ++i;
    } while (i < run.size() && (run[i].start < limit || (run[i].start == limit && k < limit_run)));
    at[k] = i;
    if (i < run.size())
      heads.push({run[i].start, k});
    else
      run = {};
  }
}

// Where the traceEvents array opens, for parsing it in chunks: `open` is its "[", `begin` its first element.
// Found by bytes, not by parsing; proven later (Parser::in_chunks). Where it closes, the parse finds.
struct EventArray {
  size_t open = 0, begin = 0;
};

constexpr char kUtf8Bom[] = "\xEF\xBB\xBF";

// Where the first top-level object or array of `s` closes (one past its last byte), or npos where it does
// not: for naming what simdjson refused. A balanced document followed by other text read "JSON document ended
// early".
size_t end_of_first_value(const char* s, size_t n) {
  size_t p = 0;
  while (p < n && is_json_space(s[p])) ++p;
  if (p >= n || (s[p] != '{' && s[p] != '[')) return std::string_view::npos;
  std::string open;  // the brackets not yet closed: a stray one is simdjson's to name, not "more text"
  for (bool in_string = false; p < n; ++p) {
    const char c = s[p];
    if (in_string) {
      if (c == '\\')
        ++p;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      open.push_back(c);
    } else if (c == '}' || c == ']') {
      if (open.empty() || open.back() != (c == '}' ? '{' : '[')) return std::string_view::npos;
      open.pop_back();
      if (open.empty()) return p + 1;
    }
  }
  return std::string_view::npos;
}

std::optional<EventArray> find_event_array(const char* s, size_t n) {
  size_t p = 0;
  while (p < n && is_json_space(s[p])) ++p;
  if (p < n && s[p] == '{') {
    constexpr std::string_view kKey = "\"traceEvents\"";
    size_t k = std::string_view(s, n).find(kKey, p);
    if (k == std::string_view::npos) return std::nullopt;
    p = k + kKey.size();
    while (p < n && is_json_space(s[p])) ++p;
    if (p >= n || s[p] != ':') return std::nullopt;
    ++p;
    while (p < n && is_json_space(s[p])) ++p;
  }
  if (p >= n || s[p] != '[') return std::nullopt;  // also a trace that is a top-level array
  EventArray a;
  a.open = p;
  a.begin = p + 1;
  while (a.begin < n && is_json_space(s[a.begin])) ++a.begin;
  return a;
}

// The first element at or after `from` that follows "}" and "," (whitespace between): a guess at where an
// event starts, proven when the chunk before it parses as whole events. `end` when there is none.
size_t next_event_start(const char* s, size_t from, size_t end) {
  for (size_t p = from; p < end;) {
    const void* q = std::memchr(s + p, '{', end - p);
    if (!q) return end;
    size_t i = static_cast<size_t>(static_cast<const char*>(q) - s);
    size_t j = i;
    while (j > from && is_json_space(s[j - 1])) --j;
    if (j > from && s[j - 1] == ',') {
      --j;
      while (j > from && is_json_space(s[j - 1])) --j;
      if (j > from && s[j - 1] == '}') return i;
    }
    p = i + 1;
  }
  return end;
}

// Below this a file is parsed in one pass: threads and cuts would cost more than they save.
constexpr size_t kMinChunkedBytes = size_t{1} << 20;
constexpr size_t kMaxDocumentBytes = 0xFFFFFFFF;  // simdjson's largest document

// Nothing left after the root value (simdjson 3.0's On-Demand documents have no at_end()).
bool at_end(od::document& doc) {
  return doc.current_location().error() == simdjson::OUT_OF_BOUNDS;
}

// Not a failure of the input: the chunked parse cannot prove its cuts, so the file is parsed in one pass.
struct NotChunkable {};

// What a chunk of the traceEvents array parsed into: whole events (the array goes on), or the array's own "]"
// inside it (`close`: its offset in the chunk's text).
struct ChunkParse {
  std::unique_ptr<EventReader> reader;
  bool whole = false;
  size_t close = 0;
};

// A chunk's text parsed as "[" + text + "]": `buf` holds the "[", the text, the "]" and blank padding
// (simdjson checks a root array's balance when the byte after it is "]", and the closing chunk's text is not
// balanced). Throws NotChunkable for a chunk that is neither whole events nor the array's end: a cut that is
// no event's start, or a bad file.
ChunkParse parse_chunk(od::parser& parser, const char* buf, size_t text_size, size_t buf_size) {
  ChunkParse r;
  auto reader = std::make_unique<EventReader>(true);
  od::document doc = parser.iterate(buf, text_size + 2, buf_size);
  for (od::value v : doc.get_array()) {
    if (v.type() != od::json_type::object) throw NotChunkable{};
    reader->event(v.get_object());
  }
  if (reader->needs_earlier_chunks()) throw NotChunkable{};
  sort_rows_by_start(reader->t);
  auto after = doc.current_location();
  if (after.error() == simdjson::OUT_OF_BOUNDS) {
    r.whole = true;
  } else {
    // The array closed before the text ended: its "]" is the last token before `after`.
    size_t c = static_cast<size_t>(after.value_unsafe() - buf);
    while (c > 0 && is_json_space(buf[c - 1])) --c;
    if (c == 0 || buf[c - 1] != ']') throw NotChunkable{};
    r.close = c - 2;  // buf[0] is the "["
  }
  r.reader = std::move(reader);
  return r;
}

// Chunks of a streamed text are this many bytes and more, to the next event's start; looked for in this many
// bytes past the size first, twice as many each time there is none.
constexpr size_t kCutProbe = 4096;
// A streamed text with more than this before its traceEvents array, or with more than this held after the
// array ends (its tail, kept to the end), is parsed whole instead.
constexpr size_t kMaxStreamedHead = size_t{64} << 20;
constexpr size_t kMaxStreamedKept = size_t{256} << 20;
// Chunks read and not yet back for reuse, at most, a parse thread (queued, in parse, parsed after a late
// one).
constexpr size_t kChunksHeldPerThread = 3;

// A chunk of a streamed text in a buffer of its own, reused: "[" + its text + "]" + blank padding.
struct StreamChunk {
  std::unique_ptr<char[]> buf;
  size_t capacity = 0;
  size_t start = 0;  // the text's offset in the file
  size_t len = 0;
  std::string sep;  // the bytes between the text and the next chunk's ("," and blanks): the tail is rebuilt

  char* text() { return buf.get() + 1; }
  // Room for `text` bytes of text and what goes around them, the first `keep` bytes kept. The bytes added.
  size_t make_room(size_t text, size_t keep) {
    const size_t need = text + 2 + simdjson::SIMDJSON_PADDING;
    if (need <= capacity) return 0;
    const size_t cap = std::max(need, capacity + capacity / 2);
    std::unique_ptr<char[]> b(new char[cap]);
    if (keep) std::memcpy(b.get(), buf.get(), keep);
    buf = std::move(b);
    const size_t added = cap - capacity;
    capacity = cap;
    return added;
  }
  void close_text() {
    buf[1 + len] = ']';
    std::memset(buf.get() + 2 + len, ' ', simdjson::SIMDJSON_PADDING);
  }
};

class Parser {
 public:
  Parser(const std::string& file, const std::function<void(uint64_t, uint64_t)>& progress,
         const KinetoParseOptions& options)
      : file_(file), progress_(progress), options_(options) {}

  Trace run(const char* json, size_t size, KinetoParseReport* report);
  Trace run_streamed(size_t size, const std::function<size_t(char*, size_t)>& read,
                     KinetoParseReport* report);

 private:
  void one_pass();
  bool in_chunks();
  void streamed(const std::function<size_t(char*, size_t)>& read);
  // The checks, times and meta every parse ends with.
  Trace finish(KinetoParseReport* report, bool chunked);
  unsigned chunk_threads() const {
    return std::clamp(options_.threads ? options_.threads : std::thread::hardware_concurrency(), 1u, 8u);
  }
  size_t chunk_bytes_for(size_t rest, unsigned threads) const {
    return options_.chunk_bytes
               ? options_.chunk_bytes
               : std::clamp<size_t>(rest / (size_t{32} * threads), size_t{256} << 10, size_t{1} << 20);
  }
  // The document without the array's elements (`skeleton`: the text up to the array's "[" at `open`, then
  // from its "]" on): its top level read as in one pass, and where its traceEvents array is proves where the
  // first chunk began. There the first `used` chunks' rows are adopted, merged into time order.
  void absorb(std::string skeleton, size_t open, std::vector<ChunkParse>& results, size_t used,
              unsigned threads);
  // `at`: where the array's "[" is in the parsed text.
  void top_level(od::document& doc, const std::function<void(od::array, const char* at)>& on_events);
  void refuse_more(od::document& doc);
  void device_properties(od::array arr);
  void distributed_info(od::object obj);
  void events(od::array arr);

  // Progress never goes back, also when a chunked parse gives way to the one pass. A callback's exception
  // (a cancel) is the caller's: kept here, thrown after the threads, never taken for a failed chunk.
  void report(uint64_t done) {
    if (!progress_ || progress_error_) return;
    reported_ = std::max(reported_, done);
    try {
      progress_(reported_, size_);
    } catch (...) {
      progress_error_ = std::current_exception();
    }
  }

  const std::string& file_;
  const std::function<void(uint64_t, uint64_t)>& progress_;
  const KinetoParseOptions& options_;
  uint64_t reported_ = 0;
  std::exception_ptr progress_error_;
  KinetoParseReport* report_ = nullptr;
  const char* json_ = nullptr;
  size_t size_ = 0;
  // What the parse has read; a chunked parse that gives way to the one pass starts it again.
  struct Parsed {
    EventReader reader{false};  // reader.t is the trace
    bool saw_events = false;
    int64_t base_ns = 0;
    std::string display_unit;
    size_t chunks = 0;
  } p_;
};

void Parser::device_properties(od::array arr) {
  Trace& t = p_.reader.t;
  for (od::value v : arr) {
    if (v.type() != od::json_type::object) continue;
    Device d;
    for (od::field f : v.get_object()) {
      std::string_view k = key_of(f);
      od::value x = f.value();
      if (k == "id") d.id = as_int(x);
      else if (k == "name" && x.type() == od::json_type::string)
        d.name = t.intern(std::string_view(x.get_string()));
      else if (k == "totalGlobalMem") d.memory_bytes = as_int(x);
      else if (k == "computeMajor") d.cc_major = static_cast<int32_t>(as_int(x));
      else if (k == "computeMinor") d.cc_minor = static_cast<int32_t>(as_int(x));
      else if (k == "numSms") d.sm_count = static_cast<int32_t>(as_int(x));
    }
    const std::string& nm = t.str(d.name);
    if (nm.find("AMD") != std::string::npos || nm.find("Instinct") != std::string::npos ||
        nm.find("Radeon") != std::string::npos)
      p_.reader.dialect.amd = true;
    t.devices.push_back(d);
  }
}

void Parser::distributed_info(od::object obj) {
  for (od::field f : obj) {
    std::string_view k = key_of(f);
    od::value v = f.value();
    od::json_type ty = v.type();
    if (k == "rank" || k == "world_size" || k == "backend" || k == "nccl_version" || k == "pg_count") {
      if (ty == od::json_type::string)
        p_.reader.t.meta[std::string(k)] = std::string(std::string_view(v.get_string()));
      else if (ty == od::json_type::number)
        p_.reader.t.meta[std::string(k)] = std::to_string(as_int(v));
    }
  }
}

void Parser::events(od::array arr) {
  for (od::value v : arr) {
    if (v.type() != od::json_type::object)
      throw StoreError(file_, "not a trace: traceEvents holds a non-object");
    p_.reader.event(v.get_object());
    if ((p_.reader.n_events & 0x3fff) == 0 && progress_) {
      auto loc = v.current_location();
      if (!loc.error()) report(static_cast<uint64_t>(loc.value_unsafe() - json_));
      if (progress_error_) std::rethrow_exception(progress_error_);
    }
  }
}

// The document's top level, in file order; the traceEvents array goes to `on_events`.
void Parser::top_level(od::document& doc, const std::function<void(od::array, const char*)>& on_events) {
  Trace& t = p_.reader.t;
  od::json_type top = doc.type();
  if (top == od::json_type::array) {
    p_.saw_events = true;
    const char* at = doc.raw_json_token().value().data();
    on_events(doc.get_array(), at);
    refuse_more(doc);
    return;
  }
  if (top != od::json_type::object)
    throw StoreError(file_, "not a trace: JSON top level is neither an object nor an array");
  for (od::field f : doc.get_object()) {
    std::string_view k = key_of(f);
    od::value v = f.value();
    od::json_type ty = v.type();
    if (k == "traceEvents") {
      if (ty != od::json_type::array) throw StoreError(file_, "not a trace: traceEvents is not an array");
      p_.saw_events = true;
      const char* at = v.raw_json_token().data();
      on_events(v.get_array(), at);
    } else if (k == "deviceProperties" && ty == od::json_type::array) {
      device_properties(v.get_array());
    } else if (k == "distributedInfo" && ty == od::json_type::object) {
      distributed_info(v.get_object());
    } else if (k == "baseTimeNanoseconds") {
      p_.base_ns = as_int(v);
      t.meta["baseTimeNanoseconds"] = std::to_string(p_.base_ns);
    } else if (k == "displayTimeUnit" && ty == od::json_type::string) {
      p_.display_unit = std::string(std::string_view(v.get_string()));
    } else if (k == "stepscopeMeta" && ty == od::json_type::object) {
      p_.reader.dialect.stepscope = true;
      for (od::field mf : v.get_object()) {
        std::string mk(key_of(mf));
        od::value mv = mf.value();
        if (mv.type() == od::json_type::string) t.meta[mk] = std::string(std::string_view(mv.get_string()));
      }
    } else if (ty == od::json_type::string || ty == od::json_type::number || ty == od::json_type::boolean) {
      // Recorder facts (cupti_version, hip_runtime_version, host_name ...): kept as meta.
      if (k == "roctracer_version" || k == "hip_runtime_version" || k == "hip_driver_version")
        p_.reader.dialect.amd = true;
      std::string_view text = ty == od::json_type::string ? std::string_view(v.get_string())
                                                          : std::string_view(v.raw_json_token());
      while (!text.empty() && is_json_space(text.back())) text.remove_suffix(1);
      if (text.size() <= 256) t.meta["trace." + std::string(k)] = std::string(text);
    }
  }
  refuse_more(doc);
}

// Text after the document (two traces written into one file, a log line appended) was ignored: one trace read as
// if it were the file.
void Parser::refuse_more(od::document& doc) {
  if (auto at = doc.current_location(); at.error() == simdjson::SUCCESS)
    throw StoreError(file_, "invalid JSON: more text after the trace's document (two traces in one file?)");
}

void Parser::one_pass() {
  od::parser parser;
  od::document doc = parser.iterate(json_, size_, size_ + 64);
  top_level(doc, [this](od::array events_array, const char*) { events(events_array); });
}

void Parser::absorb(std::string skeleton, size_t open, std::vector<ChunkParse>& results, size_t used,
                    unsigned threads) {
  const size_t size = skeleton.size();
  skeleton.resize(size + simdjson::SIMDJSON_PADDING, ' ');
  od::parser parser;
  od::document doc = parser.iterate(skeleton.data(), size, skeleton.size());
  bool absorbed = false;
  top_level(doc, [&](od::array events_array, const char* at) {
    if (absorbed || at != skeleton.data() + open || !events_array.is_empty()) throw NotChunkable{};
    absorbed = true;
    std::vector<ChunkIds> ids;
    ids.reserve(used);
    for (size_t k = 0; k < used; ++k) ids.push_back(p_.reader.adopt(*results[k].reader));
    // Each chunk's tables are in time order (sorted by its worker): merged, they are the one pass's, sorted.
    Trace& t = p_.reader.t;
    auto runs = [&](auto member) {
      std::vector<std::remove_reference_t<decltype(t.*member)>*> v;
      for (size_t k = 0; k < used; ++k) v.push_back(&(results[k].reader->t.*member));
      return v;
    };
    auto gpu_rows = [&] {
      merge_by_start(t.kernels, runs(&Trace::kernels), ids);
      merge_by_start(t.memcpys, runs(&Trace::memcpys), ids);
      merge_by_start(t.memsets, runs(&Trace::memsets), ids);
      merge_by_start(t.syncs, runs(&Trace::syncs), ids);
      merge_by_start(t.api_calls, runs(&Trace::api_calls), ids);
    };
    auto host_rows = [&] {
      merge_by_start(t.ranges, runs(&Trace::ranges), ids);
      merge_by_start(t.data_waits, runs(&Trace::data_waits), ids);
      merge_by_start(t.steps, runs(&Trace::steps), ids);
    };
    std::thread other;
    std::exception_ptr gpu_error;
    if (threads > 1) {
      try {
        other = std::thread([&] {
          try {
            gpu_rows();
          } catch (...) {
            gpu_error = std::current_exception();
          }
        });
      } catch (const std::system_error&) {
      }
    }
    if (!other.joinable()) gpu_rows();
    try {
      host_rows();
    } catch (...) {
      if (other.joinable()) other.join();
      throw;
    }
    if (other.joinable()) other.join();
    if (gpu_error) std::rethrow_exception(gpu_error);
    for (size_t k = 0; k < used; ++k) results[k].reader.reset();
  });
  if (!absorbed || !at_end(doc)) throw NotChunkable{};
  p_.chunks = used;
}

// The traceEvents array cut into chunks of whole events, parsed by several threads, each chunk into its own
// EventReader, then absorbed in file order: the same Trace as one pass, string ids included. Each cut is a
// guess made from bytes, proven when the chunk before it parses as whole events (a cut inside a string or a
// nested value leaves that chunk unbalanced); the first chunk starts where the document's own parse (of the
// file with the array's elements left out) finds the array. Returns false, with nothing kept, when a cut is
// not proven or a chunk needs an earlier one: then the file is parsed in one pass, which also says what is
// wrong with a bad file.
bool Parser::in_chunks() {
  std::optional<EventArray> arr = find_event_array(json_, size_);
  if (!arr || arr->begin >= size_ || json_[arr->begin] != '{') return false;
  unsigned threads = chunk_threads();
  const size_t rest = size_ - arr->begin;
  const size_t chunk_bytes = chunk_bytes_for(rest, threads);
  // Cuts are guessed up to the end of the file: the array's end is not known yet, so a cut may fall after
  // it; the chunk where the array closes says where, and the chunks after it are not used. They are found as
  // the chunks are taken: each is the first event start at or after chunk_bytes past the one before.
  std::mutex cuts_mu;
  std::vector<size_t> starts{arr->begin};
  bool all_cut = false;  // the last cut is known: no event start after starts.back() + chunk_bytes
  const size_t max_chunks = rest / chunk_bytes + 2;
  starts.reserve(std::min<size_t>(max_chunks, size_t{1} << 20));
  // Chunk k's text; false when there is no chunk k.
  auto chunk_text = [&](size_t k, std::string_view& text) {
    size_t b = 0, e = 0;
    bool last = false;
    {
      std::lock_guard<std::mutex> lk(cuts_mu);
      while (starts.size() <= k + 1 && !all_cut) {
        const size_t at = starts.back() + chunk_bytes;
        const size_t s = at >= size_ ? size_ : next_event_start(json_, at, size_);
        if (s >= size_)
          all_cut = true;
        else
          starts.push_back(s);
      }
      if (k >= starts.size()) return false;
      b = starts[k];
      last = k + 1 >= starts.size();
      e = last ? size_ : starts[k + 1];
    }
    if (!last) {  // drop the "," (and whitespace) before the next chunk
      while (e > b && is_json_space(json_[e - 1])) --e;
      --e;
    }
    text = std::string_view(json_ + b, e - b);
    return true;
  };

  std::vector<ChunkParse> results(max_chunks);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::atomic<size_t> done_bytes{0};
  std::atomic<size_t> closing{max_chunks};  // the first chunk known to hold the array's end: none after it is
                                            // needed
  auto work = [&](bool reports) {
    od::parser parser;
    std::vector<char> buf;
    for (size_t k; !failed.load(std::memory_order_relaxed) && (k = next.fetch_add(1)) < max_chunks;) {
      if (k > closing.load()) break;  // chunks are taken in order: every later one is past the array too
      std::string_view text;
      try {
        if (!chunk_text(k, text)) break;
        buf.resize(text.size() + 2 + simdjson::SIMDJSON_PADDING);
        buf[0] = '[';
        std::memcpy(buf.data() + 1, text.data(), text.size());
        buf[text.size() + 1] = ']';
        std::memset(buf.data() + text.size() + 2, ' ', simdjson::SIMDJSON_PADDING);
        ChunkParse r = parse_chunk(parser, buf.data(), text.size(), buf.size());
        if (!r.whole) {
          r.close += static_cast<size_t>(text.data() - json_);
          for (size_t was = closing.load(); k < was && !closing.compare_exchange_weak(was, k);) {
          }
        }
        results[k] = std::move(r);
      } catch (...) {
        failed = true;  // the file is parsed again in one pass, which says what is wrong with a bad one
      }
      size_t done = done_bytes.fetch_add(text.size()) + text.size();
      if (reports) report(std::min(arr->begin + done, size_));
    }
  };
  threads = static_cast<unsigned>(std::min<size_t>(threads, max_chunks));
  std::vector<std::thread> pool;
  try {
    for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work, false);
  } catch (const std::system_error&) {  // no more threads to be had: those started take the chunks
  }
  work(true);
  for (auto& th : pool) th.join();
  if (progress_error_) std::rethrow_exception(progress_error_);
  // The other threads may have taken every chunk: say where the parse got to at least once.
  report(std::min(arr->begin + done_bytes.load(), size_));
  if (progress_error_) std::rethrow_exception(progress_error_);

  // The chunks up to the one where the array closes, each proven by the one before it.
  const size_t n = starts.size();
  size_t used = 0, close = 0;
  for (; used < n; ++used) {
    const ChunkParse& r = results[used];
    if (!r.reader) return false;
    if (!r.whole) {
      close = r.close;
      ++used;
      break;
    }
  }
  if (close == 0) return false;  // the array never closed: a bad file, said by the one pass

  std::string skeleton;
  skeleton.reserve(arr->open + 1 + (size_ - close) + simdjson::SIMDJSON_PADDING);
  skeleton.append(json_, arr->open + 1).append(json_ + close, size_ - close);
  absorb(std::move(skeleton), arr->open, results, used, threads);
  return true;
}

// The chunked parse of a text that is read as it is decompressed, never held whole. One thread reads it into
// chunk buffers, cutting where in_chunks would (each cut at the first event start chunk_bytes or more past
// the last) and carrying the bytes read past a cut into the next buffer; the parse threads take the chunks
// in order. A buffer goes back for reuse once it and every chunk before it held whole events; from the first
// chunk that does not (the array's end) on, the buffers are kept: the document's tail is rebuilt from them.
// Throws NotChunkable where the text cannot be parsed so (then it is parsed whole), NotStreamed where the
// source ended early.
void Parser::streamed(const std::function<size_t(char*, size_t)>& read) {
  auto read_exactly = [&](char* dst, size_t n) {
    if (n && read(dst, n) != n) throw NotStreamed{};
  };
  // The head: the text up to the traceEvents array's first element, looked for in four times as much each
  // time it is not there yet.
  std::string head;
  std::optional<EventArray> arr;
  for (size_t want = std::min<size_t>(size_, size_t{64} << 10);; want = std::min(size_, want * 4)) {
    const size_t had = head.size();
    head.resize(want);
    read_exactly(head.data() + had, want - had);
    if (head.compare(0, 3, kUtf8Bom) == 0) throw NotChunkable{};  // the whole text's parse skips it
    arr = find_event_array(head.data(), head.size());
    if (arr && arr->begin < head.size()) break;
    if (want == size_ || want >= kMaxStreamedHead) throw NotChunkable{};
  }
  if (head[arr->begin] != '{') throw NotChunkable{};
  const unsigned threads = chunk_threads();
  const size_t rest = size_ - arr->begin;
  const size_t chunk_bytes = chunk_bytes_for(rest, threads);
  const size_t max_chunks = rest / chunk_bytes + 2;  // every chunk but the last has chunk_bytes or more

  // Shared by the reading thread and the parse threads, under `mu`.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<size_t, StreamChunk>> queue;  // chunks read, not yet taken
  std::vector<StreamChunk> spare;                    // buffers to reuse
  std::vector<StreamChunk> chunks(max_chunks);       // taken chunks whose buffers are still needed
  std::vector<ChunkParse> results(max_chunks);
  enum State : char { Pending, Whole, Closes, Failed, Kept };
  std::vector<State> state(max_chunks, Pending);
  size_t made = 0;  // chunks read
  bool read_all = false, failed = false;
  size_t recycled = 0;          // chunks known whole from the first: their buffers are back
  size_t closing = max_chunks;  // the first chunk known not to hold whole events: none after it is parsed
  size_t kept_bytes = 0;        // in buffers held for chunks at or after `recycled`
  size_t buffer_bytes = head.capacity();  // every buffer, reading thread only

  StreamChunk cur;
  cur.start = arr->begin;
  size_t filled = head.size() - arr->begin;  // cur's text read so far
  buffer_bytes += cur.make_room(filled, 0);
  cur.buf[0] = '[';
  std::memcpy(cur.text(), head.data() + arr->begin, filled);
  head.resize(arr->open + 1);  // the skeleton's start, up to and with the array's "["

  struct Stop {};  // the parse threads gave up
  auto fresh = [&] {
    std::lock_guard<std::mutex> lk(mu);
    StreamChunk c;
    if (!spare.empty()) {
      c = std::move(spare.back());
      spare.pop_back();
    }
    c.sep.clear();
    return c;
  };
  auto hand_over = [&](StreamChunk c) {
    std::unique_lock<std::mutex> lk(mu);
    // Until the array's end is known, no more chunks in buffers than the threads can use: a chunk whose
    // parse is late (its thread not running) holds back the reuse of every buffer after it.
    cv.wait(lk, [&] {
      return failed || (queue.size() <= threads &&
                        (closing < max_chunks || made - recycled < kChunksHeldPerThread * threads));
    });
    if (failed) throw Stop{};
    queue.emplace_back(made++, std::move(c));
    cv.notify_all();
  };
  auto read_chunks = [&] {
    auto fill_to = [&](size_t n) {
      if (n <= filled) return;
      buffer_bytes += cur.make_room(n, 1 + filled);
      read_exactly(cur.text() + filled, n - filled);
      filled = n;
    };
    for (;;) {
      const size_t left = size_ - cur.start;  // from this chunk's start to the end of the file
      size_t s = left;                        // the next chunk's start in this chunk's text; left: none
      if (chunk_bytes < left) {
        for (size_t seen = std::min(left, chunk_bytes + kCutProbe);;
             seen = std::min(left, chunk_bytes + 2 * (seen - chunk_bytes))) {
          if (seen - chunk_bytes > kCutProbe) {  // a long event (or tail): not read on for a parse given up
            std::lock_guard<std::mutex> lk(mu);
            if (failed) throw Stop{};
            if (seen > kMaxStreamedKept) throw NotStreamed{};
          }
          fill_to(seen);
          s = next_event_start(cur.text(), chunk_bytes, seen);
          if (s < seen || seen == left) break;
        }
      }
      if (s >= left) {  // the last chunk: the rest of the file
        fill_to(left);
        cur.len = left;
        cur.close_text();
        hand_over(std::move(cur));
        return;
      }
      size_t e = s;  // the "," (and whitespace) before the next chunk are not this chunk's text
      while (e > 0 && is_json_space(cur.text()[e - 1])) --e;
      --e;
      StreamChunk next = fresh();
      next.start = cur.start + s;
      buffer_bytes += next.make_room(filled - s, 0);
      next.buf[0] = '[';
      std::memcpy(next.text(), cur.text() + s, filled - s);
      cur.sep.assign(cur.text() + e, s - e);
      cur.len = e;
      cur.close_text();
      hand_over(std::move(cur));
      cur = std::move(next);
      filled -= s;
    }
  };
  std::thread reader;
  std::exception_ptr thread_error;  // no memory in a thread: the caller's
  auto reading = [&] {
    try {
      read_chunks();
    } catch (const Stop&) {
    } catch (const NotStreamed&) {  // the source ended early, or a cut would be past kMaxStreamedKept
      std::lock_guard<std::mutex> lk(mu);
      failed = true;
    } catch (...) {
      std::lock_guard<std::mutex> lk(mu);
      if (!thread_error) thread_error = std::current_exception();
      failed = true;
    }
    std::lock_guard<std::mutex> lk(mu);
    read_all = true;
    cv.notify_all();
  };
  try {
    reader = std::thread(reading);
  } catch (const std::system_error&) {  // no thread to read with: the whole text is parsed instead
    throw NotStreamed{};
  }

  std::atomic<size_t> done_bytes{0};
  auto work_on = [&](bool reports) {
    od::parser parser;
    for (;;) {
      size_t k = 0;
      StreamChunk c;
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return failed || !queue.empty() || read_all; });
        if (failed || queue.empty()) return;
        k = queue.front().first;
        c = std::move(queue.front().second);
        queue.pop_front();
        cv.notify_all();
        if (k > closing) {  // past the array: kept unparsed, for the tail
          kept_bytes += c.capacity;
          chunks[k] = std::move(c);
          state[k] = Kept;
          if (kept_bytes > kMaxStreamedKept) failed = true;
          continue;
        }
      }
      ChunkParse r;
      bool parsed = true;
      try {
        r = parse_chunk(parser, c.buf.get(), c.len, c.capacity);
      } catch (...) {
        parsed = false;  // fatal only if the array goes on into it
      }
      const size_t done = done_bytes.fetch_add(c.len) + c.len;
      if (reports) report(std::min(arr->begin + done, size_));
      const bool cancelled = reports && progress_error_;
      std::lock_guard<std::mutex> lk(mu);
      state[k] = !parsed ? Failed : r.whole ? Whole : Closes;
      results[k] = std::move(r);
      kept_bytes += c.capacity;
      chunks[k] = std::move(c);
      if (state[k] != Whole) closing = std::min(closing, k);
      while (recycled < max_chunks && state[recycled] == Whole) {
        kept_bytes -= chunks[recycled].capacity;
        spare.push_back(std::move(chunks[recycled]));
        ++recycled;
      }
      // The array goes on into a chunk that is not whole events, or too much is held: parsed whole instead.
      if ((recycled < max_chunks && state[recycled] == Failed) || kept_bytes > kMaxStreamedKept || cancelled)
        failed = true;
      cv.notify_all();
    }
  };
  auto work = [&](bool reports) {
    try {
      work_on(reports);
    } catch (...) {  // no memory (a parse failure is a chunk's state): stops all, the caller's
      std::lock_guard<std::mutex> lk(mu);
      if (!thread_error) thread_error = std::current_exception();
      failed = true;
      cv.notify_all();
    }
  };
  {
    std::lock_guard<std::mutex> lk(mu);
    spare.reserve(kChunksHeldPerThread * threads + 4);
  }
  std::vector<std::thread> pool;
  // Whatever leaves this frame while the threads run (no memory) stops and joins them first.
  auto join_all = [&] {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!read_all || !queue.empty()) failed = true;
    }
    cv.notify_all();
    for (auto& th : pool)
      if (th.joinable()) th.join();
    if (reader.joinable()) reader.join();
  };
  try {
    try {
      pool.reserve(threads);
      for (unsigned i = 1; i < threads; ++i) pool.emplace_back(work, false);
    } catch (const std::system_error&) {  // no more threads to be had: those started take the chunks
    }
    work(true);
  } catch (...) {
    join_all();
    throw;
  }
  join_all();
  if (progress_error_) std::rethrow_exception(progress_error_);
  if (thread_error) std::rethrow_exception(thread_error);
  if (failed || closing >= made || state[closing] != Closes) throw NotChunkable{};
  report(std::min(arr->begin + done_bytes.load(), size_));
  if (progress_error_) std::rethrow_exception(progress_error_);
  if (report_) report_->streamed_buffer_bytes = buffer_bytes;

  // The skeleton: the head, then the text from the array's "]" on, out of the buffers kept.
  std::string skeleton = std::move(head);
  StreamChunk& last = chunks[closing];
  skeleton.append(last.text() + results[closing].close, last.len - results[closing].close).append(last.sep);
  for (size_t k = closing + 1; k < made; ++k)
    skeleton.append(chunks[k].text(), chunks[k].len).append(chunks[k].sep);
  chunks.clear();
  spare.clear();
  absorb(std::move(skeleton), arr->open, results, closing + 1, threads);
}

Trace Parser::run(const char* json, size_t size, KinetoParseReport* report) {
  // A UTF-8 byte order mark (some Windows editors write one) is no JSON: the text starts after it (simdjson
  // called the file "improper structure").
  const size_t bom = size >= 3 && std::memcmp(json, kUtf8Bom, 3) == 0 ? 3 : 0;
  json += bom, size -= bom;
  json_ = json;
  size_ = size;
  bool chunked = false;
  // Over simdjson's 4 GiB the one pass refuses the file: so do the chunks, or an import would depend on
  // whether a cut held.
  if (options_.chunks && size <= kMaxDocumentBytes && (size >= kMinChunkedBytes || options_.chunk_bytes)) {
    try {
      chunked = in_chunks();
    } catch (...) {
      if (progress_error_) throw;
      chunked = false;
    }
    if (!chunked) p_ = Parsed{};
  }
  if (!chunked) {
    try {
      one_pass();
    } catch (const simdjson::simdjson_error& e) {
      if (size_t end = end_of_first_value(json_, size_); end != std::string_view::npos) {
        while (end < size_ && is_json_space(json_[end])) ++end;
        if (end < size_)
          throw StoreError(file_, "invalid JSON: more text after the trace's document, at offset " +
                                      std::to_string(end + bom) + " of the JSON text (a log line appended?)");
      }
      throw StoreError(file_, std::string("invalid JSON: ") + simdjson::error_message(e.error()));
    }
  }
  return finish(report, chunked);
}

Trace Parser::run_streamed(size_t size, const std::function<size_t(char*, size_t)>& read,
                           KinetoParseReport* report) {
  size_ = size;
  report_ = report;
  if (size > kMaxDocumentBytes) throw NotStreamed{};
  // A progress callback's exception (a cancel) is the caller's, whatever its type.
  try {
    streamed(read);
  } catch (const NotChunkable&) {
    if (progress_error_) std::rethrow_exception(progress_error_);
    throw NotStreamed{};
  } catch (const simdjson::simdjson_error&) {
    if (progress_error_) std::rethrow_exception(progress_error_);
    throw NotStreamed{};
  } catch (const StoreError&) {  // the skeleton's top level: the whole text's parse says it
    if (progress_error_) std::rethrow_exception(progress_error_);
    throw NotStreamed{};
  }
  return finish(report, true);
}

Trace Parser::finish(KinetoParseReport* report, bool chunked) {
  if (report) {
    report->chunked = chunked;
    report->chunks = p_.chunks;
  }
  if (!p_.saw_events) throw StoreError(file_, "not a trace: no traceEvents array");
  if (p_.reader.n_events == 0) throw StoreError(file_, "not a trace: no trace events");

  Trace& t = p_.reader.t;
  // Kineto writes ts relative to baseTimeNanoseconds when present; fold it in so times are absolute ns.
  if (p_.base_ns) {
    auto shift = [&](auto& v) {
      for (auto& r : v) {
        r.start = wrapping_add(r.start, p_.base_ns);
        r.end = wrapping_add(r.end, p_.base_ns);
      }
    };
    shift(t.kernels);
    shift(t.memcpys);
    shift(t.memsets);
    shift(t.syncs);
    shift(t.api_calls);
    shift(t.ranges);
    shift(t.data_waits);
    shift(t.steps);
  }
  finalize_trace(t, p_.reader.names);

  const Dialect& d = p_.reader.dialect;
  bool kineto = d.kineto || d.legacy;
  t.meta["source_format"] = kineto && !d.stepscope ? "kineto-json" : "chrome-json";
  t.meta["chrome_dialect"] = d.stepscope ? "stepscope"
                             : d.nsys    ? "nsys-chrome"
                             : d.legacy  ? "kineto-legacy"
                             : d.amd     ? "kineto-hip"
                             : kineto    ? "kineto"
                                         : "generic";
  if (!p_.display_unit.empty()) t.meta["displayTimeUnit"] = p_.display_unit;
  if (!d.stepscope || !t.meta.count("clock_domain")) {
    // Kineto timestamps come from the system clock (Unix epoch); nsys-converted traces start near 0.
    auto span = t.time_span();
    t.meta["clock_domain"] = span.first > int64_t{946684800} * 1000000000 ? "realtime" : "trace-relative";
  }
  t.meta["gpu_vendor"] = d.amd ? "amd" : (t.gpu_event_count() || !t.devices.empty()) ? "nvidia" : "";
  if (!t.meta["gpu_vendor"].empty()) {
    StringId vendor = t.intern(t.meta["gpu_vendor"]);
    for (auto& dev : t.devices) dev.vendor = vendor;
  }
  if (!p_.reader.dropped.empty()) t.meta["import.dropped_events"] = join_event_counts(p_.reader.dropped);
  if (!p_.reader.foreign.empty()) t.meta["import.unread_device_events"] = join_event_counts(p_.reader.foreign);
  t.meta["source_file"] = file_;
  return std::move(t);
}

}  // namespace

Trace parse_kineto_json(const char* json, size_t size, const std::string& file,
                        const std::function<void(uint64_t, uint64_t)>& progress,
                        const KinetoParseOptions& options, KinetoParseReport* report) {
  return Parser(file, progress, options).run(json, size, report);
}

Trace parse_kineto_stream(size_t size, const std::function<size_t(char*, size_t)>& read,
                          const std::string& file, const std::function<void(uint64_t, uint64_t)>& progress,
                          const KinetoParseOptions& options, KinetoParseReport* report) {
  return Parser(file, progress, options).run_streamed(size, read, report);
}

}  // namespace stepscope::analyzer::import
