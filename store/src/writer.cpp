#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <type_traits>
#include <vector>

#include "packed.h"
#include "schema.h"
#include "sqlite_util.h"
#include "stepscope/store/store.h"

namespace stepscope::store {

using detail::Statement;

namespace {
enum Table {
  kStrings, kMeta, kProcesses, kThreads, kDevices, kKernels, kMemcpys, kMemsets, kSyncs, kApiCalls,
  kRanges, kFrames, kStacks, kSamples, kDataWaits, kSteps, kFindings, kModules, kGpuWindows, kGraphs, kGraphNodes,
  kTableCount
};
const char* const kInsertSql[kTableCount] = {
    "INSERT INTO strings(id, value) VALUES (?,?)",
    "INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)",
    "INSERT INTO processes VALUES (?,?,?)",
    "INSERT INTO threads VALUES (?,?,?,?)",
    "INSERT INTO devices VALUES (?,?,?,?,?,?,?)",
    "INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO memcpys VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO memsets VALUES (?,?,?,?,?,?,?,?,?,?)",
    "INSERT INTO syncs VALUES (?,?,?,?,?,?,?,?)",
    "INSERT INTO api_calls VALUES (?,?,?,?,?,?,?,?,?)",
    "INSERT INTO ranges VALUES (?,?,?,?,?,?,?,?,?)",
    "INSERT INTO frames VALUES (?,?,?,?,?,?,?)",
    "INSERT INTO stacks VALUES (?,?,?)",
    "INSERT INTO samples VALUES (?,?,?,?,?,?)",
    "INSERT INTO data_waits VALUES (?,?,?,?,?)",
    "INSERT INTO steps VALUES (?,?,?,?,?,?)",
    "INSERT INTO findings VALUES (?,?,?,?,?,?,?)",
    "INSERT INTO modules VALUES (?,?,?,?,?,?)",
    "INSERT INTO gpu_windows VALUES (?,?,?)",
    "INSERT INTO graphs VALUES (?,?,?,?,?,?)",
    "INSERT INTO graph_nodes VALUES (?,?,?,?,?,?,?)",
};

// The tables a packing writer keeps in blocks, and their layouts.
const packed::Layout* packed_layout(Table t) {
  switch (t) {
    case kKernels:
      return &packed::kernels();
    case kApiCalls:
      return &packed::api_calls();
    case kSamples:
      return &packed::samples();
    case kStacks:
      return &packed::stacks();
    case kRanges:
      return &packed::ranges();
    default:
      return nullptr;
  }
}

// Rows of one packed table not yet written: row-major values, and the block's bounds.
struct PendingBlock {
  const packed::Layout* layout = nullptr;
  std::vector<int64_t> values;
  size_t rows = 0;
  int64_t lo = 0, hi = 0;
  Statement insert;
};
}  // namespace

struct StoreWriter::Impl {
  std::string path;
  WriterOptions options;
  sqlite3* db = nullptr;
  Statement insert[kTableCount];
  StringTable strings;
  size_t rows_in_txn = 0;
  bool in_txn = false;
  int64_t max_frame_id = 0;
  int64_t max_stack_id = 0;
  PendingBlock pending[kTableCount];  // packed tables only
  std::vector<int64_t> stack_ids;     // packed: ids written (8 bytes a node), each once

  void begin() {
    if (!in_txn) {
      detail::exec(db, "BEGIN", path);
      in_txn = true;
    }
  }
  void commit() {
    for (PendingBlock& b : pending)  // only a packed table's ever holds rows
      if (b.rows > 0) write_block(b);
    if (in_txn) {
      detail::exec(db, "COMMIT", path);
      in_txn = false;
      rows_in_txn = 0;
    }
  }
  void write_block(PendingBlock& b) {
    begin();
    std::string data;
    try {
      data = packed::encode(*b.layout, b.values.data(), b.rows);
    } catch (const StoreError& e) {
      throw StoreError(path, e.reason());
    }
    b.insert.bind(1, b.lo);
    b.insert.bind(2, b.hi);
    b.insert.bind(3, int64_t(b.rows));
    sqlite3_bind_blob(b.insert.get(), 4, data.data(), int(data.size()), SQLITE_STATIC);
    const int rc = b.insert.run();
    if (rc != SQLITE_DONE) throw StoreError(path, std::string("SQLite insert failed: ") + sqlite3_errmsg(db));
    b.values.clear();
    b.rows = 0;
  }
  // Binds `values` in order to the table's insert statement and runs it; or, for a packed table, adds them to
  // the table's next block.
  template <class... V>
  void row(Table t, const V&... values) {
    if constexpr ((std::is_integral_v<V> && ...)) {
      if (PendingBlock& b = pending[t]; b.layout) {
        if (sizeof...(V) != b.layout->columns.size())
          throw StoreError(path,
                           std::string("a row of ") + b.layout->table + " does not fit its packed layout");
        const int64_t lo = first_of(values...), hi = b.layout->hi_column == 1 ? second_of(values...) : lo;
        if (b.rows == 0 || lo < b.lo) b.lo = lo;
        if (b.rows == 0 || hi > b.hi) b.hi = hi;
        (b.values.push_back(int64_t(values)), ...);
        if (++b.rows >= packed::kBlockRows) write_block(b);
        if (++rows_in_txn >= options.batch_rows) commit();
        return;
      }
    }
    if (pending[t].layout)  // a packed table's row of other than integers: there is no statement to run
      throw StoreError(path, "a row of " + std::string(pending[t].layout->table) + " that cannot be packed");
    begin();
    Statement& s = insert[t];
    int i = 0;
    (s.bind(++i, values), ...);
    int rc = s.run();
    if (rc != SQLITE_DONE) throw StoreError(path, std::string("SQLite insert failed: ") + sqlite3_errmsg(db));
    if (++rows_in_txn >= options.batch_rows) commit();
  }
  template <class A, class... R>
  static int64_t first_of(const A& a, const R&...) {
    return int64_t(a);
  }
  template <class A, class B, class... R>
  static int64_t second_of(const A&, const B& b, const R&...) {
    return int64_t(b);
  }
  template <class A>
  static int64_t second_of(const A& a) {
    return int64_t(a);
  }
  StringId intern(std::string_view v) {
    size_t before = strings.size();
    StringId id = strings.intern(v);
    if (strings.size() != before) row(kStrings, int64_t(id), strings.get(id));
    return id;
  }
};

StoreWriter::StoreWriter(const std::string& path, WriterOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.packed && !packed::available())
    throw StoreError(path, "this part of stepscope writes rows only (WriterOptions::packed = false)");
  impl_->path = path;
  impl_->options = options;
  std::error_code ec;
  std::filesystem::remove(path, ec);
  std::filesystem::remove(path + "-wal", ec);
  std::filesystem::remove(path + "-shm", ec);
  std::filesystem::remove(path + "-journal", ec);
  // Stores hold command lines, paths and source lines: create the file 0600 whatever the umask (SQLite then
  // gives its -wal/-shm/-journal files the main file's mode), so only the owner can read a recording.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
  if (fd < 0) throw StoreError(path, std::string("cannot create store: ") + std::strerror(errno));
  const bool private_mode = ::fchmod(fd, S_IRUSR | S_IWUSR) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!private_mode) {
    std::filesystem::remove(path, ec);
    throw StoreError(path, std::string("cannot make the store private (chmod 0600): ") + std::strerror(saved_errno));
  }
  // One writer is one thread's at a time (StoreWriter has no locks of its own): SQLite's per-call mutex is
  // ~12% of writing an imported trace, so the connection goes without it.
  if (sqlite3_open_v2(path.c_str(), &impl_->db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    std::string msg = impl_->db ? sqlite3_errmsg(impl_->db) : "cannot open";
    sqlite3_close(impl_->db);
    impl_->db = nullptr;
    throw StoreError(path, "cannot create store: " + msg);
  }
  sqlite3* db = impl_->db;
  // Identity first, in the main file's header, so even a store killed before its first checkpoint is
  // recognised from its first 100 bytes.
  detail::exec(db, ("PRAGMA application_id=" + std::to_string(kApplicationId)).c_str(), path);
  const int version = options.packed ? kSchemaVersion : kRowsSchemaVersion;
  detail::exec(db, ("PRAGMA user_version=" + std::to_string(version)).c_str(), path);
  if (!options.durable) {
    detail::exec(db, "PRAGMA journal_mode=OFF", path);
    detail::exec(db, "PRAGMA synchronous=OFF", path);
  } else {
    detail::exec(db, options.wal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE", path);
    detail::exec(db, !options.fsync                ? "PRAGMA synchronous=OFF"
                     : options.synchronous_normal ? "PRAGMA synchronous=NORMAL"
                                                  : "PRAGMA synchronous=FULL",
                 path);
  }
  detail::exec(db, "PRAGMA cache_size=-65536", path);
  detail::exec(db, "BEGIN", path);
  detail::exec(db, schema::kCreateTables, path);
  detail::exec(db, options.packed ? schema::kCreatePackedTables : schema::kCreateRowTables, path);
  detail::exec(db, "COMMIT", path);
  for (int t = 0; t < kTableCount; ++t) {
    const packed::Layout* layout = options.packed ? packed_layout(Table(t)) : nullptr;
    if (!layout) {
      impl_->insert[t] = Statement(db, kInsertSql[t], path);
      continue;
    }
    impl_->pending[t].layout = layout;
    impl_->pending[t].insert =
        Statement(db, std::string("INSERT INTO ") + layout->packed_table + " VALUES (?,?,?,?)", path);
  }
  impl_->row(kStrings, int64_t(0), std::string());
  set_meta("schema_version", std::to_string(version));
  set_meta("tool_version", STEPSCOPE_VERSION_STRING);
  set_meta("clock_domain", "CLOCK_MONOTONIC");
  flush();
}

StoreWriter::~StoreWriter() {
  try {
    close();
  } catch (...) {
  }
}

const std::string& StoreWriter::path() const { return impl_->path; }

void StoreWriter::set_meta(const std::string& key, const std::string& value) { impl_->row(kMeta, key, value); }

StringId StoreWriter::intern(std::string_view s) { return impl_->intern(s); }

using I = int64_t;

void StoreWriter::add(const Process& r) { impl_->row(kProcesses, r.pid, r.name, r.parent_pid); }
void StoreWriter::add(const Thread& r) { impl_->row(kThreads, r.pid, r.tid, r.name, I(r.collector)); }
void StoreWriter::add(const Device& r) {
  impl_->row(kDevices, r.id, r.name, I(r.cc_major), I(r.cc_minor), I(r.sm_count), r.memory_bytes, r.vendor);
}
void StoreWriter::add(const Kernel& r) {
  impl_->row(kKernels, r.start, r.end, r.device, r.context, r.stream, r.correlation, I(r.grid_x), I(r.grid_y),
             I(r.grid_z), I(r.block_x), I(r.block_y), I(r.block_z), I(r.registers), r.shared_memory, r.name,
             r.graph_id, r.pid, r.graph_node_id);
}
void StoreWriter::add(const Memcpy& r) {
  impl_->row(kMemcpys, r.start, r.end, r.device, r.stream, r.correlation, r.bytes, I(r.kind), I(r.src_kind),
             I(r.dst_kind), r.pid, r.graph_id, r.graph_node_id);
}
void StoreWriter::add(const Memset& r) {
  impl_->row(kMemsets, r.start, r.end, r.device, r.stream, r.correlation, r.bytes, I(r.mem_kind), r.pid,
             r.graph_id, r.graph_node_id);
}
void StoreWriter::add(const Sync& r) {
  impl_->row(kSyncs, r.start, r.end, r.pid, r.tid, I(r.type), r.device, r.stream, r.correlation);
}
void StoreWriter::add(const ApiCall& r) {
  impl_->row(kApiCalls, r.start, r.end, r.pid, r.tid, I(r.kind), r.name, r.correlation, I(r.return_code),
             r.stack);
}
void StoreWriter::add(const Range& r) {
  impl_->row(kRanges, r.start, r.end, r.pid, r.tid, r.domain, r.name, I(r.depth), I(r.source), r.correlation);
}
void StoreWriter::add(const Frame& r) {
  impl_->row(kFrames, r.id, r.module, r.symbol, r.file, I(r.line), I(r.kind), r.address);
  impl_->max_frame_id = std::max(impl_->max_frame_id, r.id);
}
void StoreWriter::add(const Stack& r) {
  // A packed table has no key to refuse a second node of one id, as the rows' INTEGER PRIMARY KEY does.
  if (impl_->options.packed) {
    auto& ids = impl_->stack_ids;  // sorted; writers add ids in increasing order, so this appends
    if (ids.empty() || r.id > ids.back()) {
      ids.push_back(r.id);
    } else {
      const auto at = std::lower_bound(ids.begin(), ids.end(), r.id);
      if (*at == r.id) throw StoreError(impl_->path, "stack id " + std::to_string(r.id) + " written twice");
      ids.insert(at, r.id);
    }
  }
  impl_->row(kStacks, r.id, r.parent, r.frame);
  impl_->max_stack_id = std::max(impl_->max_stack_id, r.id);
}
void StoreWriter::add(const Sample& r) {
  impl_->row(kSamples, r.time, r.pid, r.tid, r.stack, I(r.on_cpu), r.periods);
}
void StoreWriter::add(const DataWait& r) { impl_->row(kDataWaits, r.start, r.end, r.pid, r.tid, r.source); }
void StoreWriter::add(const Step& r) { impl_->row(kSteps, r.index, r.start, r.end, r.source, r.pid, r.tid); }
void StoreWriter::add(const Finding& r) {
  impl_->row(kFindings, r.rule, I(r.severity), r.first_step, r.last_step, r.est_savings_ns, r.message,
             r.evidence_json);
}
void StoreWriter::add(const Module& r) {
  impl_->row(kModules, r.pid, r.path, r.build_id, r.start, r.end, r.file_offset);
}

void StoreWriter::add(const GpuWindow& r) { impl_->row(kGpuWindows, r.start, r.end, r.pid); }
void StoreWriter::add(const Graph& r) {
  impl_->row(kGraphs, r.pid, r.graph_id, I(r.kind), r.source_graph_id, r.created, r.stack);
}
void StoreWriter::add(const GraphNode& r) {
  impl_->row(kGraphNodes, r.pid, r.graph_id, r.node_id, r.source_node_id, I(r.kind), r.created, r.stack);
}

void StoreWriter::append(const Trace& t) {
  append(t, nullptr, {});
}

void StoreWriter::append(const Trace& t, const StoreReader& bulk,
                         const std::function<int64_t(int64_t)>& stack_of) {
  append(t, &bulk, stack_of);
}

void StoreWriter::append(const Trace& t, const StoreReader* bulk,
                         const std::function<int64_t(int64_t)>& stack_of) {
  // String ids of `t` → this writer's ids, interned on first use.
  std::vector<StringId> map(t.strings.size(), -1);
  auto s = [&](StringId id) -> StringId {
    if (id <= 0 || static_cast<size_t>(id) >= map.size()) return 0;
    if (map[id] < 0) map[id] = impl_->intern(t.strings.get(id));
    return map[id];
  };
  for (const auto& [k, v] : t.meta)
    if (k != "schema_version") set_meta(k, v);  // this store's layout, not the one `t` was read from
  const int64_t stack_base = impl_->max_stack_id;
  visit_remapped(t, s, impl_->max_frame_id, stack_base, [this](const auto& row) { add(row); });
  if (!bulk) return;
  auto stack = [&](int64_t id) {
    if (id && stack_of) id = stack_of(id);
    return id ? id + stack_base : 0;
  };
  bulk->each_kernel([&](Kernel k) {
    k.name = s(k.name);
    add(k);
  });
  bulk->each_api_call([&](ApiCall a) {
    a.name = s(a.name);
    a.stack = stack(a.stack);
    add(a);
  });
  bulk->each_sample([&](Sample r) {
    r.stack = stack(r.stack);
    add(r);
  });
}

void StoreWriter::replace_findings(const std::vector<Finding>& findings, const StringTable& strings) {
  impl_->begin();
  detail::exec(impl_->db, "DELETE FROM findings", impl_->path);
  for (auto f : findings) {
    f.rule = impl_->intern(strings.get(f.rule));
    f.message = impl_->intern(strings.get(f.message));
    add(f);
  }
}

void StoreWriter::flush() { impl_->commit(); }

void StoreWriter::close() {
  if (!impl_ || !impl_->db) return;
  impl_->commit();
  detail::exec(impl_->db, schema::kCreateIndexes, impl_->path);
  if (!impl_->options.packed) detail::exec(impl_->db, schema::kCreateRowIndexes, impl_->path);
  for (auto& s : impl_->insert) s = Statement();
  for (auto& b : impl_->pending) b.insert = Statement();
  // Leave a single self-contained file: readers may sit in read-only folders.
  if (impl_->options.durable) sqlite3_wal_checkpoint_v2(impl_->db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
  detail::exec(impl_->db, "PRAGMA journal_mode=DELETE", impl_->path);
  sqlite3_close_v2(impl_->db);
  impl_->db = nullptr;
}

}  // namespace stepscope::store
