#include "import/nsys_sqlite_importer.h"

#include <sqlite3.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "import/event_counts.h"
#include "import/numbers.h"
#include "import/trace_finalize.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer::import {

using namespace stepscope::store;

namespace {

constexpr int kNvtxPushPop = 59;
constexpr int kNvtxStartEnd = 60;
constexpr int kNvtxDomainCreate = 75;

int64_t pid_of(int64_t global_tid) { return (global_tid >> 24) & 0xFFFFFF; }
int64_t tid_of(int64_t global_tid) { return global_tid & 0xFFFFFF; }

class Db {
 public:
  Db(const std::string& path, const std::string& shown) : shown_(shown) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
      std::string msg = db_ ? sqlite3_errmsg(db_) : "cannot open";
      sqlite3_close(db_);
      throw StoreError(shown, "cannot open SQLite file: " + msg);
    }
    Stmt st(*this, "SELECT name FROM sqlite_master WHERE type IN ('table','view')");
    while (st.step()) tables_.insert(st.text(0));
  }
  ~Db() { sqlite3_close(db_); }
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  class Stmt {
   public:
    Stmt(Db& db, const std::string& sql) : db_(db) {
      if (sqlite3_prepare_v2(db.db_, sql.c_str(), -1, &st_, nullptr) != SQLITE_OK)
        throw StoreError(db.shown_, std::string("SQLite query failed: ") + sqlite3_errmsg(db.db_));
    }
    ~Stmt() { sqlite3_finalize(st_); }
    bool step() {
      int rc = sqlite3_step(st_);
      if (rc == SQLITE_ROW) return true;
      if (rc == SQLITE_DONE) return false;
      throw StoreError(db_.shown_, std::string("SQLite read failed: ") + sqlite3_errmsg(db_.db_));
    }
    int64_t i(int c) const { return sqlite3_column_int64(st_, c); }
    bool null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
    bool integer(int c) const { return sqlite3_column_type(st_, c) == SQLITE_INTEGER; }
    std::string text(int c) const {
      const unsigned char* p = sqlite3_column_text(st_, c);
      return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : std::string();
    }

   private:
    Db& db_;
    sqlite3_stmt* st_ = nullptr;
  };

  bool has_table(const std::string& t) const { return tables_.count(t) > 0; }
  std::set<std::string> columns(const std::string& table) {
    std::set<std::string> cols;
    Stmt st(*this, "PRAGMA table_info(\"" + table + "\")");
    while (st.step()) cols.insert(st.text(1));
    return cols;
  }
  // "col" when the table has it, else `fallback` (e.g. "NULL" or "0"), so one query serves every version.
  std::string col(const std::set<std::string>& cols, const std::string& c, const std::string& fallback = "NULL") {
    return cols.count(c) ? "\"" + c + "\"" : fallback;
  }

 private:
  std::string shown_;
  sqlite3* db_ = nullptr;
  std::set<std::string> tables_;
};

// The graph ids that kernel, memcpy and memset rows end with: graphNodeId, graphId (0 where the export lacks
// them).
std::string graph_id_columns(Db& db, const std::set<std::string>& c) {
  return db.col(c, "graphNodeId", "0") + ", " + db.col(c, "graphId", "0");
}
template <class Row>
void read_graph_ids(const Db::Stmt& st, int first, Row& r) {
  r.graph_node_id = st.null(first) ? 0 : st.i(first);
  r.graph_id = st.null(first + 1) ? 0 : st.i(first + 1);
}

// Kernels and graph replays begin with start, end, deviceId, contextId, streamId, correlationId, globalPid.
Kernel kernel_like_of(const Db::Stmt& st) {
  Kernel k;
  k.start = st.i(0);
  k.end = st.i(1);
  k.device = st.i(2);
  k.context = st.i(3);
  k.stream = st.i(4);
  k.correlation = st.i(5);
  k.pid = st.null(6) ? 0 : pid_of(st.i(6));
  return k;
}

// Copies and memsets: the columns both tables begin with (start, end, deviceId, streamId, correlationId,
// globalPid, bytes); `graph_ids` is where their graph ids begin.
std::string copy_like_columns(Db& db, const std::set<std::string>& c) {
  return "start, end, " + db.col(c, "deviceId", "0") + ", " + db.col(c, "streamId", "0") + ", " +
         db.col(c, "correlationId", "0") + ", " + db.col(c, "globalPid", "0") + ", " +
         db.col(c, "bytes", "0");
}
template <class Op>
Op copy_like_of(const Db::Stmt& st, int graph_ids) {
  Op m;
  m.start = st.i(0);
  m.end = st.i(1);
  m.device = st.i(2);
  m.stream = st.i(3);
  m.correlation = st.i(4);
  m.pid = st.null(5) ? 0 : pid_of(st.i(5));
  m.bytes = st.i(6);
  read_graph_ids(st, graph_ids, m);
  return m;
}

class Importer {
 public:
  Importer(const std::string& db_path, const std::string& shown) : db_(db_path, shown), file_(shown) {}
  Trace run();

 private:
  void strings();
  StringId str(int64_t id) {
    auto it = strmap_.find(id);
    if (it != strmap_.end()) return it->second;
    if (id <= 0) return 0;  // no name
    // An id past StringIds (a damaged export): every such kernel was named "", one name for all (1,312 "steps"
    // found in 9). Each id keeps a name of its own, and the count is kept (meta import.unresolved_string_ids).
    ++unresolved_;
    return strmap_[id] = t_.intern("(string " + std::to_string(id) + " not in StringIds)");
  }
  std::map<int64_t, std::string> enum_labels(const std::string& table);
  void meta();
  void devices();
  void names();
  void kernels();
  void memcpys();
  void memsets();
  void graph_replays();
  void graph_nodes();
  void api_calls();
  void syncs();
  void nvtx();
  void samples();

  // Whether the row's start and end (its first two columns) are integer ns in order within ±kMaxAbsTimeNs; the
  // rest are counted (meta import.dropped_events "(TABLE times not readable)") and left out: text or NULL was read
  // as 0, and times near the ends of int64 wrapped every span after them.
  bool readable_times(const Db::Stmt& st, const std::string& tbl) {
    if (st.integer(0) && st.integer(1)) {
      const int64_t start = st.i(0), end = st.i(1);
      if (start >= -kMaxAbsTimeNs && end >= start && end <= kMaxAbsTimeNs) return true;
    }
    ++dropped_["(" + tbl + " times not readable)"];
    return false;
  }

  Db db_;
  std::string file_;
  Trace t_;
  NameHints names_;
  std::map<std::string, int64_t> dropped_;
  int64_t unresolved_ = 0;  // distinct string ids not in StringIds
  std::unordered_map<int64_t, StringId> strmap_;  // nsys StringIds.id → our id
};

void Importer::strings() {
  Db::Stmt st(db_, "SELECT id, value FROM StringIds");
  while (st.step()) strmap_[st.i(0)] = t_.intern(st.text(1));
}

std::map<int64_t, std::string> Importer::enum_labels(const std::string& table) {
  std::map<int64_t, std::string> out;
  if (!db_.has_table(table)) return out;
  auto cols = db_.columns(table);
  if (!cols.count("id") || !cols.count("name")) return out;
  Db::Stmt st(db_, "SELECT id, name FROM " + table);
  while (st.step()) out[st.i(0)] = st.text(1);
  return out;
}

void Importer::meta() {
  t_.meta["source_format"] = "nsys-sqlite";
  t_.meta["source_file"] = file_;
  t_.meta["clock_domain"] = "nsys-session";
  if (db_.has_table("META_DATA_EXPORT")) {
    Db::Stmt st(db_, "SELECT name, value FROM META_DATA_EXPORT");
    while (st.step()) {
      std::string k = st.text(0);
      if (k == "EXPORT_SCHEMA_VERSION") t_.meta["nsys.schema_version"] = st.text(1);
      else if (k == "EXPORT_PRODUCT_VERSION") t_.meta["nsys.version"] = st.text(1);
    }
  }
  if (db_.has_table("TARGET_INFO_SESSION_START_TIME")) {
    auto cols = db_.columns("TARGET_INFO_SESSION_START_TIME");
    if (cols.count("utcEpochNs")) {
      Db::Stmt st(db_, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1");
      if (st.step() && !st.null(0)) t_.meta["nsys.session_start_utc_ns"] = std::to_string(st.i(0));
    }
  }
}

void Importer::devices() {
  if (!db_.has_table("TARGET_INFO_GPU")) return;
  auto c = db_.columns("TARGET_INFO_GPU");
  if (!c.count("id")) return;
  Db::Stmt st(db_, "SELECT id, " + db_.col(c, "name") + ", " + db_.col(c, "totalMemory", "0") + ", " +
                       db_.col(c, "smCount", "0") + ", " + db_.col(c, "computeMajor", "0") + ", " +
                       db_.col(c, "computeMinor", "0") + " FROM TARGET_INFO_GPU ORDER BY id");
  StringId nvidia = t_.intern("nvidia");
  std::set<int64_t> seen;
  while (st.step()) {
    if (!seen.insert(st.i(0)).second) continue;  // one row per GPU and VM
    Device d;
    d.id = st.i(0);
    d.name = t_.intern(st.text(1));
    d.memory_bytes = st.i(2);
    d.sm_count = static_cast<int32_t>(st.i(3));
    d.cc_major = static_cast<int32_t>(st.i(4));
    d.cc_minor = static_cast<int32_t>(st.i(5));
    d.vendor = nvidia;
    t_.devices.push_back(d);
  }
}

void Importer::names() {
  if (db_.has_table("PROCESSES")) {
    auto c = db_.columns("PROCESSES");
    if (c.count("pid") && c.count("name")) {
      Db::Stmt st(db_, "SELECT pid, name FROM PROCESSES");
      while (st.step()) names_.process_names[st.i(0)] = st.text(1);
    }
  }
  if (db_.has_table("ThreadNames")) {
    auto c = db_.columns("ThreadNames");
    if (c.count("nameId") && c.count("globalTid")) {
      Db::Stmt st(db_, "SELECT nameId, globalTid FROM ThreadNames");
      while (st.step()) {
        int64_t g = st.i(1);
        names_.thread_names[{pid_of(g), tid_of(g)}] = t_.str(str(st.i(0)));
      }
    }
  }
}

void Importer::kernels() {
  const std::string tbl = "CUPTI_ACTIVITY_KIND_KERNEL";
  if (!db_.has_table(tbl)) return;
  auto c = db_.columns(tbl);
  std::string name = c.count("demangledName") ? "demangledName" : c.count("shortName") ? "shortName" : "0";
  std::string shared = c.count("staticSharedMemory") && c.count("dynamicSharedMemory")
                           ? "staticSharedMemory + dynamicSharedMemory"
                           : "0";
  Db::Stmt st(db_, "SELECT start, end, " + db_.col(c, "deviceId", "0") + ", " + db_.col(c, "contextId", "0") +
                       ", " + db_.col(c, "streamId", "0") + ", " + db_.col(c, "correlationId", "0") + ", " +
                       db_.col(c, "globalPid", "0") + ", " + name + ", " + db_.col(c, "gridX", "0") + ", " +
                       db_.col(c, "gridY", "0") + ", " + db_.col(c, "gridZ", "0") + ", " +
                       db_.col(c, "blockX", "0") + ", " + db_.col(c, "blockY", "0") + ", " +
                       db_.col(c, "blockZ", "0") + ", " + db_.col(c, "registersPerThread", "0") + ", " +
                       shared + ", " + graph_id_columns(db_, c) + " FROM " + tbl);
  while (st.step()) {
    if (!readable_times(st, tbl)) continue;
    Kernel k = kernel_like_of(st);
    k.name = str(st.i(7));
    k.grid_x = static_cast<int32_t>(st.i(8));
    k.grid_y = static_cast<int32_t>(st.i(9));
    k.grid_z = static_cast<int32_t>(st.i(10));
    k.block_x = static_cast<int32_t>(st.i(11));
    k.block_y = static_cast<int32_t>(st.i(12));
    k.block_z = static_cast<int32_t>(st.i(13));
    k.registers = static_cast<int32_t>(st.i(14));
    k.shared_memory = st.i(15);
    // --cuda-graph-trace=node: each node a row with its node id; graphId where the export has it (the graph is
    // otherwise found from the replay's launch, finalize_trace).
    read_graph_ids(st, 16, k);
    t_.kernels.push_back(k);
  }
}

MemoryKind mem_kind_from_label(const std::string& label) {
  // ENUM_CUDA_MEM_KIND names: CUDA_MEMOPR_MEMORY_KIND_PAGEABLE, ..._PINNED, ..._DEVICE, ..._MANAGED ...
  if (label.find("PAGEABLE") != std::string::npos) return MemoryKind::Pageable;
  if (label.find("PINNED") != std::string::npos) return MemoryKind::Pinned;
  if (label.find("MANAGED") != std::string::npos) return MemoryKind::Managed;
  if (label.find("DEVICE") != std::string::npos) return MemoryKind::Device;
  return MemoryKind::Unknown;
}

void Importer::memcpys() {
  const std::string tbl = "CUPTI_ACTIVITY_KIND_MEMCPY";
  if (!db_.has_table(tbl)) return;
  auto c = db_.columns(tbl);
  auto kinds = enum_labels("ENUM_CUDA_MEM_KIND");
  auto opers = enum_labels("ENUM_CUDA_MEMCPY_OPER");
  auto mem = [&](int64_t v) -> MemoryKind {
    if (!kinds.empty()) {
      auto it = kinds.find(v);
      return it == kinds.end() ? MemoryKind::Unknown : mem_kind_from_label(it->second);
    }
    switch (v) {  // the values nsys has used since 2021 (ENUM_CUDA_MEM_KIND)
      case 0: return MemoryKind::Pageable;
      case 1: return MemoryKind::Pinned;
      case 2: return MemoryKind::Device;
      case 4: return MemoryKind::Managed;
      default: return MemoryKind::Unknown;
    }
  };
  auto oper = [&](int64_t v) -> CopyKind {
    std::string label;
    if (auto it = opers.find(v); it != opers.end()) label = it->second;
    if (!label.empty()) {
      if (label.find("HTOD") != std::string::npos) return CopyKind::HtoD;
      if (label.find("DTOH") != std::string::npos) return CopyKind::DtoH;
      if (label.find("DTOD") != std::string::npos) return CopyKind::DtoD;
      if (label.find("PTOP") != std::string::npos) return CopyKind::PtoP;
      if (label.find("HTOH") != std::string::npos) return CopyKind::HtoH;
      return CopyKind::Unknown;
    }
    switch (v) {
      case 1: return CopyKind::HtoD;
      case 2: return CopyKind::DtoH;
      case 8: return CopyKind::DtoD;
      case 9: return CopyKind::HtoH;
      case 10: return CopyKind::PtoP;
      default: return CopyKind::Unknown;
    }
  };
  Db::Stmt st(db_, "SELECT " + copy_like_columns(db_, c) + ", " + db_.col(c, "copyKind", "0") + ", " +
                       db_.col(c, "srcKind", "-1") + ", " + db_.col(c, "dstKind", "-1") + ", " +
                       graph_id_columns(db_, c) + " FROM " + tbl);
  while (st.step()) {
    if (!readable_times(st, tbl)) continue;
    auto m = copy_like_of<Memcpy>(st, 10);
    m.kind = oper(st.i(7));
    m.src_kind = st.null(8) ? MemoryKind::Unknown : mem(st.i(8));
    m.dst_kind = st.null(9) ? MemoryKind::Unknown : mem(st.i(9));
    t_.memcpys.push_back(m);
  }
}

void Importer::memsets() {
  const std::string tbl = "CUPTI_ACTIVITY_KIND_MEMSET";
  if (!db_.has_table(tbl)) return;
  auto c = db_.columns(tbl);
  auto kinds = enum_labels("ENUM_CUDA_MEM_KIND");
  Db::Stmt st(db_, "SELECT " + copy_like_columns(db_, c) + ", " + db_.col(c, "memKind", "-1") + ", " +
                       graph_id_columns(db_, c) + " FROM " + tbl);
  while (st.step()) {
    if (!readable_times(st, tbl)) continue;
    auto m = copy_like_of<Memset>(st, 8);
    if (!st.null(7)) {
      auto it = kinds.find(st.i(7));
      m.mem_kind = it != kinds.end() ? mem_kind_from_label(it->second) : MemoryKind::Unknown;
    }
    t_.memsets.push_back(m);
  }
}

// --cuda-graph-trace=graph (nsys's default): one row per replay, from its first node's start to its last node's
// end. Each becomes one kernels row, as the collector's GRAPH_TRACE records do (docs/schema.md, gpu.graph_records).
void Importer::graph_replays() {
  const std::string tbl = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE";
  if (!db_.has_table(tbl)) return;
  auto c = db_.columns(tbl);
  if (!c.count("start") || !c.count("end")) return;
  Db::Stmt st(db_, "SELECT start, end, " + db_.col(c, "deviceId", "0") + ", " + db_.col(c, "contextId", "0") + ", " +
                       db_.col(c, "streamId", "0") + ", " + db_.col(c, "correlationId", "0") + ", " +
                       db_.col(c, "globalPid", "NULL") + ", " + db_.col(c, "graphId", "0") + " FROM " + tbl);
  std::map<int64_t, StringId> names;
  bool any = false;
  while (st.step()) {
    if (!readable_times(st, tbl)) continue;
    Kernel k = kernel_like_of(st);
    k.graph_id = st.i(7);
    auto [n, fresh] = names.emplace(k.graph_id, 0);
    if (fresh) n->second = t_.intern("CUDA graph " + std::to_string(k.graph_id));
    k.name = n->second;
    t_.kernels.push_back(k);
    any = true;
  }
  if (any) t_.meta["gpu.graph_records"] = "graph";
}

// Graph nodes as nsys saw them created (CUDA_GRAPH_NODE_EVENTS; CUDA_GRAPH_EVENTS before 2023): the node, the node
// it was cloned from at instantiation, when. Their graph and kind come from the GPU rows that ran them, if any.
void Importer::graph_nodes() {
  std::string tbl = db_.has_table("CUDA_GRAPH_NODE_EVENTS") ? "CUDA_GRAPH_NODE_EVENTS"
                    : db_.has_table("CUDA_GRAPH_EVENTS")   ? "CUDA_GRAPH_EVENTS"
                                                           : "";
  if (tbl.empty()) return;
  auto c = db_.columns(tbl);
  if (!c.count("graphNodeId")) return;
  std::map<int64_t, std::pair<int64_t, GraphNodeKind>> ran;  // node id → (graph id, kind) from the GPU rows
  for (const auto& k : t_.kernels)
    if (k.graph_node_id) ran.emplace(k.graph_node_id, std::make_pair(k.graph_id, GraphNodeKind::Kernel));
  for (const auto& m : t_.memcpys)
    if (m.graph_node_id) ran.emplace(m.graph_node_id, std::make_pair(m.graph_id, GraphNodeKind::Memcpy));
  for (const auto& m : t_.memsets)
    if (m.graph_node_id) ran.emplace(m.graph_node_id, std::make_pair(m.graph_id, GraphNodeKind::Memset));
  Db::Stmt st(db_, "SELECT " + db_.col(c, "start", "0") + ", " + db_.col(c, "globalTid", "NULL") +
                       ", graphNodeId, " + db_.col(c, "originalGraphNodeId", "NULL") + " FROM " + tbl +
                       " ORDER BY 1");
  std::set<std::pair<int64_t, int64_t>> seen;
  while (st.step()) {
    if (st.null(2)) continue;
    GraphNode n;
    n.created = st.i(0);
    n.pid = st.null(1) ? 0 : pid_of(st.i(1));
    n.node_id = st.i(2);
    n.source_node_id = st.null(3) ? 0 : st.i(3);
    if (!seen.insert({n.pid, n.node_id}).second) continue;  // several events of one node: its creation first
    if (auto it = ran.find(n.node_id); it != ran.end()) {
      n.graph_id = it->second.first;
      n.kind = it->second.second;
    }
    t_.graph_nodes.push_back(n);
  }
}

void Importer::api_calls() {
  auto classes = enum_labels("ENUM_NSYS_EVENT_CLASS");
  for (const std::string tbl : {"CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"}) {
    if (!db_.has_table(tbl)) continue;
    auto c = db_.columns(tbl);
    std::string name = c.count("nameId") ? "nameId" : "0";
    Db::Stmt st(db_, "SELECT start, end, " + db_.col(c, "globalTid", "0") + ", " + db_.col(c, "correlationId", "0") +
                         ", " + name + ", " + db_.col(c, "returnValue", "0") + ", " +
                         db_.col(c, "eventClass", "-1") + ", " + db_.col(c, "name") + " FROM " + tbl);
    std::unordered_map<StringId, StringId> stripped;
    while (st.step()) {
      if (!readable_times(st, tbl)) continue;
      ApiCall a;
      a.start = st.i(0);
      a.end = st.i(1);
      int64_t g = st.i(2);
      a.pid = pid_of(g);
      a.tid = tid_of(g);
      a.correlation = st.i(3);
      StringId raw = st.i(4) ? str(st.i(4)) : t_.intern(st.text(7));
      auto it = stripped.find(raw);
      if (it == stripped.end())
        it = stripped.emplace(raw, t_.intern(std::string(strip_api_version(t_.str(raw))))).first;
      a.name = it->second;
      a.return_code = static_cast<int32_t>(st.i(5));
      const std::string& n = t_.str(a.name);
      bool driver = tbl == "CUPTI_ACTIVITY_KIND_DRIVER";
      if (!st.null(6)) {
        auto cl = classes.find(st.i(6));
        if (cl != classes.end()) driver = driver || cl->second.find("DRIVER") != std::string::npos;
        else driver = driver || (n.rfind("cu", 0) == 0 && n.rfind("cuda", 0) != 0);
      } else {
        driver = driver || (n.rfind("cu", 0) == 0 && n.rfind("cuda", 0) != 0);
      }
      a.kind = driver ? ApiKind::Driver : ApiKind::Runtime;
      t_.api_calls.push_back(a);
    }
  }
}

void Importer::syncs() {
  const std::string tbl = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION";
  if (!db_.has_table(tbl)) return;
  auto c = db_.columns(tbl);
  Db::Stmt st(db_, "SELECT start, end, " + db_.col(c, "deviceId", "0") + ", " + db_.col(c, "streamId", "-1") + ", " +
                       db_.col(c, "correlationId", "0") + ", " + db_.col(c, "globalPid", "0") + ", " +
                       db_.col(c, "syncType", "0") + " FROM " + tbl);
  while (st.step()) {
    if (!readable_times(st, tbl)) continue;
    Sync s;
    s.start = st.i(0);
    s.end = st.i(1);
    s.device = st.i(2);
    // CUPTI reports stream id 0xffffffff for syncs not tied to a stream.
    int64_t stream = st.null(3) ? -1 : st.i(3);
    s.stream = (stream < 0 || stream == 0xffffffffLL) ? -1 : stream;
    s.correlation = st.i(4);
    s.pid = st.null(5) ? 0 : pid_of(st.i(5));
    int64_t ty = st.i(6);  // CUpti_ActivitySynchronizationType: same numbering as store::SyncType
    s.type = (ty >= 1 && ty <= 4) ? static_cast<SyncType>(ty) : SyncType::Unknown;
    t_.syncs.push_back(s);
  }
}

void Importer::nvtx() {
  if (!db_.has_table("NVTX_EVENTS")) return;
  auto c = db_.columns("NVTX_EVENTS");
  std::map<int64_t, StringId> domains;
  std::string text_id = db_.col(c, "textId", "0");
  // Domain names come from domain-create events (eventType 75) whose text is the domain name.
  if (c.count("domainId")) {
    Db::Stmt st(db_, "SELECT domainId, " + db_.col(c, "text") + ", " + text_id +
                         " FROM NVTX_EVENTS WHERE eventType = " + std::to_string(kNvtxDomainCreate));
    while (st.step()) domains[st.i(0)] = st.i(2) ? str(st.i(2)) : t_.intern(st.text(1));
  }
  Db::Stmt st(db_, "SELECT start, end, " + db_.col(c, "globalTid", "0") + ", " + db_.col(c, "text") + ", " + text_id +
                       ", " + db_.col(c, "domainId", "0") + " FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (" +
                       std::to_string(kNvtxPushPop) + "," + std::to_string(kNvtxStartEnd) + ")");
  while (st.step()) {
    if (!readable_times(st, std::string("NVTX_EVENTS"))) continue;
    Range r;
    r.start = st.i(0);
    r.end = st.i(1);
    int64_t g = st.i(2);
    r.pid = pid_of(g);
    r.tid = tid_of(g);
    r.name = st.i(4) ? str(st.i(4)) : t_.intern(st.text(3));
    auto d = domains.find(st.i(5));
    r.domain = d != domains.end() ? d->second : 0;
    r.source = RangeSource::Nvtx;
    t_.ranges.push_back(r);
  }
}

void Importer::samples() {
  if (!db_.has_table("COMPOSITE_EVENTS")) return;
  auto ce = db_.columns("COMPOSITE_EVENTS");
  if (!ce.count("id") || !ce.count("start") || !ce.count("globalTid")) return;
  // Callchains: id → frames leaf-first (stackDepth 0 = leaf).
  std::unordered_map<int64_t, std::vector<int64_t>> chains;
  std::map<std::pair<StringId, StringId>, int64_t> frame_ids;
  if (db_.has_table("SAMPLING_CALLCHAINS")) {
    auto sc = db_.columns("SAMPLING_CALLCHAINS");
    if (sc.count("id") && sc.count("symbol") && sc.count("stackDepth")) {
      Db::Stmt st(db_, "SELECT id, symbol, " + db_.col(sc, "module", "0") +
                           ", stackDepth FROM SAMPLING_CALLCHAINS ORDER BY id, stackDepth");
      while (st.step()) {
        StringId sym = str(st.i(1)), mod = str(st.i(2));
        auto [it, fresh] = frame_ids.emplace(std::make_pair(mod, sym), int64_t(t_.frames.size() + 1));
        if (fresh) {
          Frame f;
          f.id = it->second;
          f.module = mod;
          f.symbol = sym;
          f.kind = FrameKind::Native;
          t_.frames.push_back(f);
        }
        chains[st.i(0)].push_back(it->second);
      }
    }
  }
  // Prefix tree of stacks, root = outermost caller.
  std::map<std::pair<int64_t, int64_t>, int64_t> nodes;  // (parent, frame) → stack id
  auto stack_of = [&](const std::vector<int64_t>& leaf_first) -> int64_t {
    int64_t parent = 0;
    for (auto it = leaf_first.rbegin(); it != leaf_first.rend(); ++it) {
      auto [n, fresh] = nodes.emplace(std::make_pair(parent, *it), int64_t(t_.stacks.size() + 1));
      if (fresh) t_.stacks.push_back(Stack{n->second, parent, *it});
      parent = n->second;
    }
    return parent;
  };
  Db::Stmt st(db_, "SELECT id, start, globalTid, " + db_.col(ce, "threadState", "1") + " FROM COMPOSITE_EVENTS");
  while (st.step()) {
    Sample s;
    s.time = st.i(1);
    int64_t g = st.i(2);
    s.pid = pid_of(g);
    s.tid = tid_of(g);
    auto it = chains.find(st.i(0));
    s.stack = it != chains.end() ? stack_of(it->second) : 0;
    // ENUM_SAMPLING_THREAD_STATE 1 = Running; anything else (or NULL) is a thread seen off-CPU.
    s.on_cpu = st.null(3) || st.i(3) == 1;
    t_.samples.push_back(s);
  }
}

Trace Importer::run() {
  if (!db_.has_table("StringIds"))
    throw StoreError(file_, "an SQLite database that is not an Nsight Systems export (no StringIds table)");
  meta();
  strings();
  devices();
  names();
  kernels();
  memcpys();
  memsets();
  graph_replays();
  api_calls();
  syncs();
  nvtx();
  samples();
  finalize_trace(t_, names_);
  graph_nodes();  // after finalize_trace: the replays' graph ids are known
  if (unresolved_) t_.meta["import.unresolved_string_ids"] = std::to_string(unresolved_);
  if (!dropped_.empty()) t_.meta["import.dropped_events"] = import::join_event_counts(dropped_);
  return std::move(t_);
}

}  // namespace

Trace NsysSqliteImporter::import() {
  Importer imp(db_path_, file_);
  return imp.run();
}

}  // namespace stepscope::analyzer::import
