#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>

#include "stepscope/analyzer/export.h"
#include "stepscope/store/store.h"

#ifdef STEPSCOPE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

namespace stepscope::analyzer {

using namespace stepscope::store;

namespace {

class Out {
 public:
  explicit Out(std::string& s) : s_(s) {}
  void raw(std::string_view v) { s_.append(v); }
  void ch(char c) { s_.push_back(c); }
  void num(int64_t v) {
    char buf[24];
    int n = std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    s_.append(buf, n);
  }
  // ns → µs with exactly three decimals, so re-import gives back the same integer ns.
  void us(int64_t ns) {
    if (ns < 0) {
      ch('-');
      ns = -ns;
    }
    num(ns / 1000);
    int64_t f = ns % 1000;
    if (f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, ".%03d", static_cast<int>(f));
      s_.append(buf);
    }
  }
  void str(std::string_view v) {
    ch('"');
    for (unsigned char c : v) {
      switch (c) {
        case '"': raw("\\\""); break;
        case '\\': raw("\\\\"); break;
        case '\n': raw("\\n"); break;
        case '\r': raw("\\r"); break;
        case '\t': raw("\\t"); break;
        default:
          if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            raw(buf);
          } else {
            s_.push_back(static_cast<char>(c));
          }
      }
    }
    ch('"');
  }
  void key(std::string_view k) {
    str(k);
    ch(':');
  }

 private:
  std::string& s_;
};

const char* copy_kind_text(CopyKind k) {
  switch (k) {
    case CopyKind::HtoD: return "HtoD";
    case CopyKind::DtoH: return "DtoH";
    case CopyKind::DtoD: return "DtoD";
    case CopyKind::PtoP: return "PtoP";
    case CopyKind::HtoH: return "HtoH";
    default: return "Unknown";
  }
}

const char* mem_kind_text(MemoryKind k) {
  switch (k) {
    case MemoryKind::Pageable: return "Pageable";
    case MemoryKind::Pinned: return "Pinned";
    case MemoryKind::Device: return "Device";
    case MemoryKind::Managed: return "Managed";
    default: return "Unknown";
  }
}

const char* sync_text(SyncType t) {
  switch (t) {
    case SyncType::Event: return "Event Sync";
    case SyncType::StreamWaitEvent: return "Stream Wait Event";
    case SyncType::Stream: return "Stream Sync";
    case SyncType::Context: return "Context Sync";
    default: return "Unknown Sync";
  }
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::string to_chrome_json(const Trace& t) {
  std::string s;
  s.reserve(256 * (t.kernels.size() + t.api_calls.size() + t.ranges.size() + t.memcpys.size()) + 4096);
  Out o(s);
  auto [t0, t1] = t.time_span();
  (void)t1;
  // Like Kineto: ts relative to a whole-second base, so µs values stay short and exact.
  int64_t base = t0 > 0 ? (t0 / 1000000000) * 1000000000 : 0;
  bool first = true;
  auto begin_event = [&](const char* ph, std::string_view cat, std::string_view name, int64_t pid, int64_t tid) {
    o.raw(first ? "\n{" : ",\n{");
    first = false;
    o.key("ph");
    o.str(ph);
    if (!cat.empty()) {
      o.raw(",");
      o.key("cat");
      o.str(cat);
    }
    o.raw(",");
    o.key("name");
    o.str(name);
    o.raw(",\"pid\":");
    o.num(pid);
    o.raw(",\"tid\":");
    o.num(tid);
  };
  auto times = [&](int64_t start, int64_t end) {
    o.raw(",\"ts\":");
    o.us(start - base);
    o.raw(",\"dur\":");
    o.us(end > start ? end - start : 0);
  };
  auto arg = [&](std::string_view k, int64_t v) {
    o.raw(",");
    o.key(k);
    o.num(v);
  };

  o.raw("{\"schemaVersion\":1,\"displayTimeUnit\":\"ns\",\"baseTimeNanoseconds\":");
  o.num(base);
  o.raw(",\n\"stepscopeMeta\":{");
  bool mfirst = true;
  for (const auto& [k, v] : t.meta) {
    if (!mfirst) o.ch(',');
    mfirst = false;
    o.key(k);
    o.str(v);
  }
  o.raw("}");
  if (t.meta.count("rank") || t.meta.count("world_size")) {
    o.raw(",\n\"distributedInfo\":{");
    bool f = true;
    for (const char* k : {"rank", "world_size"}) {
      auto it = t.meta.find(k);
      if (it == t.meta.end()) continue;
      if (!f) o.ch(',');
      f = false;
      o.key(k);
      char* end = nullptr;
      long long v = std::strtoll(it->second.c_str(), &end, 10);
      if (end && *end == 0 && !it->second.empty()) o.num(v);
      else o.str(it->second);
    }
    if (auto it = t.meta.find("backend"); it != t.meta.end()) {
      if (!f) o.ch(',');
      o.key("backend");
      o.str(it->second);
    }
    o.raw("}");
  }
  o.raw(",\n\"deviceProperties\":[");
  for (size_t i = 0; i < t.devices.size(); ++i) {
    const Device& d = t.devices[i];
    o.raw(i ? ",{" : "{");
    o.key("id");
    o.num(d.id);
    o.raw(",");
    o.key("name");
    o.str(t.str(d.name));
    arg("totalGlobalMem", d.memory_bytes);
    arg("computeMajor", d.cc_major);
    arg("computeMinor", d.cc_minor);
    arg("numSms", d.sm_count);
    o.raw("}");
  }
  o.raw("],\n\"traceEvents\":[");

  // Names for the rows Perfetto shows: host processes and threads, then one process per GPU.
  for (const Process& p : t.processes) {
    begin_event("M", "", "process_name", p.pid, 0);
    o.raw(",\"args\":{\"name\":");
    o.str(t.str(p.name));
    o.raw("}}");
  }
  for (const Thread& th : t.threads) {
    if (!th.name) continue;
    begin_event("M", "", "thread_name", th.pid, th.tid);
    o.raw(",\"args\":{\"name\":");
    o.str(t.str(th.name));
    o.raw("}}");
  }
  std::set<int64_t> gpus;
  for (const auto& d : t.devices) gpus.insert(d.id);
  for (int64_t g : gpus) {
    begin_event("M", "", "process_name", g, 0);
    o.raw(",\"args\":{\"name\":\"GPU ");
    o.num(g);
    o.raw("\"}}");
    begin_event("M", "", "process_labels", g, 0);
    o.raw(",\"args\":{\"labels\":\"GPU ");
    o.num(g);
    o.raw("\"}}");
  }

  for (const Kernel& k : t.kernels) {
    begin_event("X", "kernel", t.str(k.name), k.device, k.stream);
    times(k.start, k.end);
    o.raw(",\"args\":{\"device\":");
    o.num(k.device);
    arg("context", k.context);
    arg("stream", k.stream);
    arg("correlation", k.correlation);
    arg("registers per thread", k.registers);
    arg("shared memory", k.shared_memory);
    o.raw(",\"grid\":[");
    o.num(k.grid_x), o.ch(','), o.num(k.grid_y), o.ch(','), o.num(k.grid_z);
    o.raw("],\"block\":[");
    o.num(k.block_x), o.ch(','), o.num(k.block_y), o.ch(','), o.num(k.block_z);
    o.raw("]");
    if (k.graph_id) arg("graph_id", k.graph_id);
    if (k.graph_node_id) arg("graph_node_id", k.graph_node_id);
    o.raw("}}");
  }
  // A copy or a memset: the same event and arguments, as Kineto writes them.
  auto copy_like_event = [&](std::string_view cat, std::string_view name, const auto& m) {
    begin_event("X", cat, name, m.device, m.stream);
    times(m.start, m.end);
    o.raw(",\"args\":{\"device\":");
    o.num(m.device);
    arg("stream", m.stream);
    arg("correlation", m.correlation);
    arg("bytes", m.bytes);
    if (m.graph_id) arg("graph_id", m.graph_id);
    if (m.graph_node_id) arg("graph_node_id", m.graph_node_id);
    o.raw("}}");
  };
  for (const Memcpy& m : t.memcpys) {
    std::string name = std::string("Memcpy ") + copy_kind_text(m.kind) + " (" + mem_kind_text(m.src_kind) + " -> " +
                       mem_kind_text(m.dst_kind) + ")";
    copy_like_event("gpu_memcpy", name, m);
  }
  for (const Memset& m : t.memsets) {
    std::string name = std::string("Memset (") + mem_kind_text(m.mem_kind) + ")";
    copy_like_event("gpu_memset", name, m);
  }
  for (const ApiCall& a : t.api_calls) {
    begin_event("X", a.kind == ApiKind::Driver ? "cuda_driver" : "cuda_runtime", t.str(a.name), a.pid, a.tid);
    times(a.start, a.end);
    o.raw(",\"args\":{\"correlation\":");
    o.num(a.correlation);
    if (a.return_code) arg("return_code", a.return_code);
    o.raw("}}");
  }
  for (const Sync& y : t.syncs) {
    begin_event("X", "cuda_sync", sync_text(y.type), y.pid, y.tid);
    times(y.start, y.end);
    o.raw(",\"args\":{\"cuda_sync_kind\":");
    o.str(sync_text(y.type));
    arg("device", y.device);
    arg("stream", y.stream);
    arg("correlation", y.correlation);
    o.raw("}}");
  }
  // Steps and data waits that a range already stands for (ProfilerStep#N, enumerate(DataLoader)#...) come back
  // from that range on import; only the others are written as stepscope_step / stepscope_data_wait events.
  std::set<std::tuple<int64_t, int64_t, int64_t, int64_t>> step_ranges, wait_ranges;
  for (const Range& r : t.ranges) {
    const char* cat = "user_annotation";
    std::string_view domain = t.str(r.domain);
    switch (r.source) {
      case RangeSource::Op: cat = "cpu_op"; break;
      case RangeSource::Python: cat = "python_function"; break;
      case RangeSource::Nvtx: cat = "nvtx"; break;
      case RangeSource::GpuAnnotation: cat = "gpu_user_annotation"; break;
      case RangeSource::Annotation: break;
    }
    // Chrome categories stepscope has no name for were kept as annotation ranges with the category as domain.
    bool generic = r.source == RangeSource::Annotation && !domain.empty();
    const std::string& name = t.str(r.name);
    begin_event("X", generic ? domain : std::string_view(cat), name, r.pid, r.tid);
    times(r.start, r.end);
    o.raw(",\"args\":{");
    bool afirst = true;
    auto sep = [&] {
      if (!afirst) o.ch(',');
      afirst = false;
    };
    if (r.source == RangeSource::GpuAnnotation) {
      sep();
      o.key("device");
      o.num(r.pid);
      o.raw(",");
      o.key("stream");
      o.num(r.tid);
    }
    if (!domain.empty() && !generic) {
      sep();
      o.key("domain");
      o.str(domain);
    }
    if (r.correlation) {
      sep();
      o.key("correlation");
      o.num(r.correlation);
    }
    o.raw("}}");
    if (r.source != RangeSource::Python && r.source != RangeSource::GpuAnnotation) {
      if (starts_with(name, "ProfilerStep#")) step_ranges.insert({r.start, r.end, r.pid, r.tid});
      else if (starts_with(name, "enumerate(DataLoader)#")) wait_ranges.insert({r.start, r.end, r.pid, r.tid});
    }
  }
  for (const Step& st : t.steps) {
    if (step_ranges.count({st.start, st.end, st.pid, st.tid}) && t.str(st.source) == "profiler-step") continue;
    begin_event("X", "stepscope_step", "Step " + std::to_string(st.index), st.pid, st.tid);
    times(st.start, st.end);
    o.raw(",\"args\":{\"index\":");
    o.num(st.index);
    o.raw(",\"source\":");
    o.str(t.str(st.source));
    o.raw("}}");
  }
  for (const DataWait& w : t.data_waits) {
    if (wait_ranges.count({w.start, w.end, w.pid, w.tid}) && t.str(w.source) == "dataloader") continue;
    begin_event("X", "stepscope_data_wait", "data wait (" + t.str(w.source) + ")", w.pid, w.tid);
    times(w.start, w.end);
    o.raw(",\"args\":{\"source\":");
    o.str(t.str(w.source));
    o.raw("}}");
  }
  o.raw("\n]}\n");
  return s;
}

namespace {

std::string gzip_bytes(const std::string& in) {
#ifdef STEPSCOPE_HAVE_LIBDEFLATE
  libdeflate_compressor* c = libdeflate_alloc_compressor(6);
  if (!c) throw std::bad_alloc();
  std::string out(libdeflate_gzip_compress_bound(c, in.size()), '\0');
  size_t n = libdeflate_gzip_compress(c, in.data(), in.size(), out.data(), out.size());
  libdeflate_free_compressor(c);
  out.resize(n);
  return out;
#else
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
#endif
}

}  // namespace

void export_chrome_trace(const Trace& t, const std::string& path) {
  std::string json = to_chrome_json(t);
  bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) json = gzip_bytes(json);
  store::write_file_atomically(path, json);
}

}  // namespace stepscope::analyzer
