// The simdjson On-Demand half of the Kineto importer: one pass over the JSON into a store::Trace (categories,
// args, the Parser that turns events into rows). Parsing is kept to On-Demand views into the input: no DOM, no
// copies of names that need no unescaping.
#include "import/kineto_parser.h"

#include <simdjson.h>

#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

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
};

class Parser {
 public:
  Parser(const std::string& file, const std::function<void(uint64_t, uint64_t)>& progress)
      : file_(file), progress_(progress) {}

  Trace run(const char* json, size_t size);

 private:
  struct Id {
    int64_t num = 0;
    std::string_view label;
  };
  Id read_id(od::value v);
  void event(od::object obj);
  void emit(std::string_view cat, std::string_view name, int64_t pid, int64_t tid, int64_t ts, int64_t dur,
            const Args& a);
  void metadata(std::string_view name, int64_t pid, int64_t tid, const Args& a);
  void device_properties(od::array arr);
  void distributed_info(od::object obj);
  void events(od::array arr);
  // Counted by name: `what` may view a B/E pair's category, which lives only as long as the pair.
  static void count(std::map<std::string, int64_t, std::less<>>& m, std::string_view what) {
    auto it = m.find(what);
    if (it == m.end()) m.emplace(std::string(what), 1);
    else ++it->second;
  }
  void drop(std::string_view what) { count(dropped_, what); }
  // "name:count,name:count" in name order: the meta form of both counts.
  static std::string join_counts(const std::map<std::string, int64_t, std::less<>>& m) {
    std::string s;
    for (const auto& [k, n] : m) s += (s.empty() ? "" : ",") + k + ":" + std::to_string(n);
    return s;
  }

  const std::string& file_;
  const std::function<void(uint64_t, uint64_t)>& progress_;
  const char* json_ = nullptr;
  size_t size_ = 0;
  size_t n_events_ = 0;
  Trace t_;
  NameHints names_;
  Args args_;
  std::map<std::string, int64_t, std::less<>> label_ids_;
  std::map<std::string, int64_t, std::less<>> dropped_;
  std::map<std::string, int64_t, std::less<>> foreign_;  // ForeignDevice events by category
  std::map<std::pair<int64_t, int64_t>, std::vector<OpenRange>> open_;
  int64_t base_ns_ = 0;
  bool kineto_cats_ = false, legacy_cats_ = false, nsys_cats_ = false, amd_ = false, stepscope_ = false;
  StringId s_profiler_step_ = 0, s_dataloader_ = 0;
};

Parser::Id Parser::read_id(od::value v) {
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
      // A label with no number ("main"): a stable synthetic id far from real pids and tids.
      auto it = label_ids_.find(id.label);
      if (it == label_ids_.end())
        it = label_ids_.emplace(std::string(id.label), (int64_t{1} << 40) + int64_t(label_ids_.size())).first;
      id.num = it->second;
    }
  }
  return id;
}

void Parser::metadata(std::string_view name, int64_t pid, int64_t tid, const Args& a) {
  if (name == "process_name" && !a.name.empty()) names_.process_names[pid] = std::string(a.name);
  else if (name == "thread_name" && !a.name.empty()) names_.thread_names[{pid, tid}] = std::string(a.name);
}

void Parser::emit(std::string_view cat, std::string_view name, int64_t pid, int64_t tid, int64_t ts, int64_t dur,
                  const Args& a) {
  Cat c = classify(cat);
  if (c == Cat::NsysCuda) {
    nsys_cats_ = true;
    if (a.has_grid) c = Cat::Kernel;
    else if (name.find("emcpy") != std::string_view::npos) c = Cat::Memcpy;
    else if (name.find("emset") != std::string_view::npos) c = Cat::Memset;
    else c = Cat::Kernel;
  }
  int64_t start = a.start_ns != INT64_MIN ? a.start_ns : ts;
  int64_t end = a.end_ns != INT64_MIN ? a.end_ns : ts + (dur > 0 ? dur : 0);
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
      if (cat == "Kernel") legacy_cats_ = true;
      else if (cat == "kernel") kineto_cats_ = true;
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
      k.name = t_.intern(name);
      k.graph_id = a.graph_id;
      k.graph_node_id = a.graph_node_id;
      t_.kernels.push_back(k);
      break;
    }
    case Cat::Memcpy: {
      kineto_cats_ |= cat == "gpu_memcpy";
      Memcpy m;
      copy_like(m);
      parse_memcpy_name(name, m.kind, m.src_kind, m.dst_kind);
      if (m.kind == CopyKind::Unknown && !a.kind.empty()) {
        CopyKind k2 = CopyKind::Unknown;
        MemoryKind s2 = MemoryKind::Unknown, d2 = MemoryKind::Unknown;
        parse_memcpy_name(a.kind, k2, s2, d2);
        m.kind = k2;
      }
      t_.memcpys.push_back(m);
      break;
    }
    case Cat::Memset: {
      kineto_cats_ |= cat == "gpu_memset";
      Memset m;
      copy_like(m);
      size_t open = name.find('(');
      m.mem_kind =
          open != std::string_view::npos ? parse_memory_kind(name.substr(open)) : parse_memory_kind(a.kind);
      t_.memsets.push_back(m);
      break;
    }
    case Cat::Runtime:
    case Cat::Driver: {
      if (cat == "Runtime") legacy_cats_ = true;
      else if (cat == "cuda_api") nsys_cats_ = true;
      else kineto_cats_ = true;
      ApiCall x;
      x.start = start;
      x.end = end;
      x.pid = pid;
      x.tid = tid;
      std::string_view n = strip_api_version(name);
      if (starts_with(n, "hip")) amd_ = true;
      x.kind = (c == Cat::Driver || (starts_with(n, "cu") && !starts_with(n, "cuda"))) ? ApiKind::Driver
                                                                                       : ApiKind::Runtime;
      x.name = t_.intern(n);
      x.correlation = a.correlation;
      x.return_code = static_cast<int32_t>(a.return_code);
      t_.api_calls.push_back(x);
      break;
    }
    case Cat::Sync: {
      kineto_cats_ = true;
      Sync s;
      s.start = start;
      s.end = end;
      s.pid = pid;
      s.tid = tid;
      s.type = sync_type_of(a.sync_kind.empty() ? name : a.sync_kind);
      s.device = a.device >= 0 ? a.device : 0;
      s.stream = a.stream != INT64_MIN ? a.stream : -1;
      s.correlation = a.correlation;
      t_.syncs.push_back(s);
      break;
    }
    case Cat::GpuAnnotation:
    case Cat::NvtxGpu: {
      Range r;
      r.start = start;
      r.end = end;
      r.pid = gpu_device();
      r.tid = gpu_stream();
      r.name = t_.intern(name);
      r.domain = c == Cat::NvtxGpu ? t_.intern("nvtx") : t_.intern(a.domain);
      r.source = RangeSource::GpuAnnotation;
      r.correlation = a.correlation;
      t_.ranges.push_back(r);
      break;
    }
    case Cat::CpuOp:
    case Cat::UserAnnotation:
    case Cat::Python:
    case Cat::Nvtx:
    case Cat::Unknown: {
      if (cat == "Operator") legacy_cats_ = true;
      else if (c != Cat::Unknown && c != Cat::Nvtx) kineto_cats_ = true;
      Range r;
      r.start = start;
      r.end = end;
      r.pid = pid;
      r.tid = tid;
      r.name = t_.intern(name);
      r.source = c == Cat::CpuOp ? RangeSource::Op
               : c == Cat::Python ? RangeSource::Python
               : c == Cat::Nvtx   ? RangeSource::Nvtx
                                  : RangeSource::Annotation;
      r.domain = c == Cat::Unknown ? t_.intern(cat) : t_.intern(a.domain);
      t_.ranges.push_back(r);
      if (c != Cat::Python) {
        if (starts_with(name, "ProfilerStep#")) {
          Step st;
          st.index = trailing_number(name);
          st.start = start;
          st.end = end;
          st.source = s_profiler_step_;
          st.pid = pid;
          st.tid = tid;
          t_.steps.push_back(st);
        } else if (starts_with(name, "enumerate(DataLoader)#")) {
          DataWait w;
          w.start = start;
          w.end = end;
          w.pid = pid;
          w.tid = tid;
          w.source = s_dataloader_;
          t_.data_waits.push_back(w);
        }
      }
      break;
    }
    case Cat::StepscopeStep: {
      stepscope_ = true;
      Step st;
      st.index = a.index != INT64_MIN ? a.index : trailing_number(name);
      st.start = start;
      st.end = end;
      st.source = t_.intern(a.source.empty() ? std::string_view("profiler-step") : a.source);
      st.pid = pid;
      st.tid = tid;
      t_.steps.push_back(st);
      break;
    }
    case Cat::StepscopeDataWait: {
      stepscope_ = true;
      DataWait w;
      w.start = start;
      w.end = end;
      w.pid = pid;
      w.tid = tid;
      w.source = t_.intern(a.source.empty() ? std::string_view("dataloader") : a.source);
      t_.data_waits.push_back(w);
      break;
    }
    case Cat::Drop:
    case Cat::NsysCuda:
      drop(cat);
      break;
    case Cat::ForeignDevice:
      count(foreign_, cat);
      break;
  }
}

void Parser::event(od::object obj) {
  std::string_view ph, cat, name;
  Id pid, tid;
  int64_t ts = 0, dur = 0;
  bool have_args = false;
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
      else if (k == "ts") ts = us_text_to_ns(f.value().raw_json_token());
    } else if (k.size() == 3) {
      if (k == "cat") cat = str_of(f.value());
      else if (k == "pid") pid = read_id(f.value());
      else if (k == "tid") tid = read_id(f.value());
      else if (k == "dur") dur = us_text_to_ns(f.value().raw_json_token());
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
          have_args = true;
        }
      }
    }
  }
  (void)have_args;
  if (ph.size() != 1) {
    drop(ph.empty() ? std::string_view("(no ph)") : ph);
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
      open_[{pid.num, tid.num}].push_back(OpenRange{std::string(cat), std::string(name), ts});
      break;
    case 'E': {
      auto it = open_.find({pid.num, tid.num});
      if (it == open_.end() || it->second.empty()) {
        drop("E without B");
        break;
      }
      OpenRange o = std::move(it->second.back());
      it->second.pop_back();
      Args none;
      emit(o.cat, o.name.empty() ? name : std::string_view(o.name), pid.num, tid.num, o.ts, ts - o.ts, none);
      break;
    }
    default:
      drop(cat.empty() ? ph : cat);
      break;
  }
}

void Parser::device_properties(od::array arr) {
  for (od::value v : arr) {
    if (v.type() != od::json_type::object) continue;
    Device d;
    for (od::field f : v.get_object()) {
      std::string_view k = key_of(f);
      od::value x = f.value();
      if (k == "id") d.id = as_int(x);
      else if (k == "name" && x.type() == od::json_type::string) d.name = t_.intern(std::string_view(x.get_string()));
      else if (k == "totalGlobalMem") d.memory_bytes = as_int(x);
      else if (k == "computeMajor") d.cc_major = static_cast<int32_t>(as_int(x));
      else if (k == "computeMinor") d.cc_minor = static_cast<int32_t>(as_int(x));
      else if (k == "numSms") d.sm_count = static_cast<int32_t>(as_int(x));
    }
    const std::string& nm = t_.str(d.name);
    if (nm.find("AMD") != std::string::npos || nm.find("Instinct") != std::string::npos ||
        nm.find("Radeon") != std::string::npos)
      amd_ = true;
    t_.devices.push_back(d);
  }
}

void Parser::distributed_info(od::object obj) {
  for (od::field f : obj) {
    std::string_view k = key_of(f);
    od::value v = f.value();
    od::json_type ty = v.type();
    if (k == "rank" || k == "world_size" || k == "backend" || k == "nccl_version" || k == "pg_count") {
      if (ty == od::json_type::string) t_.meta[std::string(k)] = std::string(std::string_view(v.get_string()));
      else if (ty == od::json_type::number) t_.meta[std::string(k)] = std::to_string(as_int(v));
    }
  }
}

void Parser::events(od::array arr) {
  for (od::value v : arr) {
    if (v.type() != od::json_type::object)
      throw StoreError(file_, "not a trace: traceEvents holds a non-object");
    event(v.get_object());
    if ((++n_events_ & 0x3fff) == 0 && progress_) {
      auto loc = v.current_location();
      if (!loc.error()) progress_(static_cast<uint64_t>(loc.value_unsafe() - json_), size_);
    }
  }
}

Trace Parser::run(const char* json, size_t size) {
  json_ = json;
  size_ = size;
  s_profiler_step_ = t_.intern("profiler-step");
  s_dataloader_ = t_.intern("dataloader");
  od::parser parser;
  bool saw_events = false;
  std::string display_unit;
  try {
    od::document doc = parser.iterate(json, size, size + 64);
    od::json_type top = doc.type();
    if (top == od::json_type::array) {
      saw_events = true;
      events(doc.get_array());
    } else if (top == od::json_type::object) {
      for (od::field f : doc.get_object()) {
        std::string_view k = key_of(f);
        od::value v = f.value();
        od::json_type ty = v.type();
        if (k == "traceEvents") {
          if (ty != od::json_type::array) throw StoreError(file_, "not a trace: traceEvents is not an array");
          saw_events = true;
          events(v.get_array());
        } else if (k == "deviceProperties" && ty == od::json_type::array) {
          device_properties(v.get_array());
        } else if (k == "distributedInfo" && ty == od::json_type::object) {
          distributed_info(v.get_object());
        } else if (k == "baseTimeNanoseconds") {
          base_ns_ = as_int(v);
          t_.meta["baseTimeNanoseconds"] = std::to_string(base_ns_);
        } else if (k == "displayTimeUnit" && ty == od::json_type::string) {
          display_unit = std::string(std::string_view(v.get_string()));
        } else if (k == "stepscopeMeta" && ty == od::json_type::object) {
          stepscope_ = true;
          for (od::field mf : v.get_object()) {
            std::string mk(key_of(mf));
            od::value mv = mf.value();
            if (mv.type() == od::json_type::string) t_.meta[mk] = std::string(std::string_view(mv.get_string()));
          }
        } else if (ty == od::json_type::string || ty == od::json_type::number ||
                   ty == od::json_type::boolean) {
          // Recorder facts (cupti_version, hip_runtime_version, host_name ...): kept as meta.
          if (k == "roctracer_version" || k == "hip_runtime_version" || k == "hip_driver_version") amd_ = true;
          std::string_view text = ty == od::json_type::string ? std::string_view(v.get_string())
                                                              : std::string_view(v.raw_json_token());
          while (!text.empty() && (text.back() == ' ' || text.back() == '\n' || text.back() == '\r' ||
                                   text.back() == '\t'))
            text.remove_suffix(1);
          if (text.size() <= 256) t_.meta["trace." + std::string(k)] = std::string(text);
        }
      }
    } else {
      throw StoreError(file_, "not a trace: JSON top level is neither an object nor an array");
    }
  } catch (const simdjson::simdjson_error& e) {
    throw StoreError(file_, std::string("invalid JSON: ") + simdjson::error_message(e.error()));
  }
  if (!saw_events) throw StoreError(file_, "not a trace: no traceEvents array");
  if (n_events_ == 0) throw StoreError(file_, "not a trace: no trace events");

  // Kineto writes ts relative to baseTimeNanoseconds when present; fold it in so times are absolute ns.
  if (base_ns_) {
    auto shift = [&](auto& v) {
      for (auto& r : v) {
        r.start += base_ns_;
        r.end += base_ns_;
      }
    };
    shift(t_.kernels);
    shift(t_.memcpys);
    shift(t_.memsets);
    shift(t_.syncs);
    shift(t_.api_calls);
    shift(t_.ranges);
    shift(t_.data_waits);
    shift(t_.steps);
  }
  finalize_trace(t_, names_);

  bool kineto = kineto_cats_ || legacy_cats_;
  t_.meta["source_format"] = kineto && !stepscope_ ? "kineto-json" : "chrome-json";
  t_.meta["chrome_dialect"] = stepscope_    ? "stepscope"
                              : nsys_cats_  ? "nsys-chrome"
                              : legacy_cats_ ? "kineto-legacy"
                              : amd_        ? "kineto-hip"
                              : kineto      ? "kineto"
                                            : "generic";
  if (!display_unit.empty()) t_.meta["displayTimeUnit"] = display_unit;
  if (!stepscope_ || !t_.meta.count("clock_domain")) {
    // Kineto timestamps come from the system clock (Unix epoch); nsys-converted traces start near 0.
    auto span = t_.time_span();
    t_.meta["clock_domain"] = span.first > int64_t{946684800} * 1000000000 ? "realtime" : "trace-relative";
  }
  t_.meta["gpu_vendor"] = amd_ ? "amd" : (t_.gpu_event_count() || !t_.devices.empty()) ? "nvidia" : "";
  if (!t_.meta["gpu_vendor"].empty()) {
    StringId vendor = t_.intern(t_.meta["gpu_vendor"]);
    for (auto& d : t_.devices) d.vendor = vendor;
  }
  if (!dropped_.empty()) t_.meta["import.dropped_events"] = join_counts(dropped_);
  if (!foreign_.empty()) t_.meta["import.unread_device_events"] = join_counts(foreign_);
  t_.meta["source_file"] = file_;
  return std::move(t_);
}

}  // namespace

Trace parse_kineto_json(const char* json, size_t size, const std::string& file,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  return Parser(file, progress).run(json, size);
}

}  // namespace stepscope::analyzer::import
