#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include "packed.h"
#include "sqlite_util.h"
#include "stepscope/store/store.h"

namespace stepscope::store {

using detail::Statement;

namespace {

constexpr int kBusyTimeoutMs = 5000;  // a writer closing its store: index creation, the WAL checkpoint
const char* const kTimedTables[] = {"kernels", "memcpys", "memsets", "syncs", "api_calls", "ranges", "data_waits"};

// Reads every row of `sql` with `fn(stmt)`.
template <class Fn>
void each_row(sqlite3* db, const std::string& file, const std::string& sql, Fn&& fn,
              int64_t a = std::numeric_limits<int64_t>::min(), int64_t b = 0, int nbind = 0) {
  Statement s(db, sql, file);
  if (nbind >= 1) s.bind(1, a);
  if (nbind >= 2) s.bind(2, b);
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) fn(s);
  if (rc != SQLITE_DONE) throw StoreError(file, std::string("corrupt or truncated store (") + sqlite3_errmsg(db) + ")");
}

template <class Row>
Kernel kernel_of(const Row& s) {
  Kernel k;
  k.start = s.col_int(0);
  k.end = s.col_int(1);
  k.device = s.col_int(2);
  k.context = s.col_int(3);
  k.stream = s.col_int(4);
  k.correlation = s.col_int(5);
  k.grid_x = int32_t(s.col_int(6));
  k.grid_y = int32_t(s.col_int(7));
  k.grid_z = int32_t(s.col_int(8));
  k.block_x = int32_t(s.col_int(9));
  k.block_y = int32_t(s.col_int(10));
  k.block_z = int32_t(s.col_int(11));
  k.registers = int32_t(s.col_int(12));
  k.shared_memory = s.col_int(13);
  k.name = s.col_int(14);
  k.graph_id = s.col_int(15);
  k.pid = s.col_int(16);
  k.graph_node_id = s.col_int(17);
  return k;
}
// Copies and memsets begin with the same columns (start_ns,end_ns,device,stream,correlation,bytes) and end
// with pid,graph_id,graph_node_id; `tail` is where that end begins.
template <class Op>
Op copy_like_of(const Statement& s, int tail) {
  Op m;
  m.start = s.col_int(0);
  m.end = s.col_int(1);
  m.device = s.col_int(2);
  m.stream = s.col_int(3);
  m.correlation = s.col_int(4);
  m.bytes = s.col_int(5);
  m.pid = s.col_int(tail);
  m.graph_id = s.col_int(tail + 1);
  m.graph_node_id = s.col_int(tail + 2);
  return m;
}
Memcpy memcpy_of(const Statement& s) {
  auto m = copy_like_of<Memcpy>(s, 9);
  m.kind = CopyKind(s.col_int(6));
  m.src_kind = MemoryKind(s.col_int(7));
  m.dst_kind = MemoryKind(s.col_int(8));
  return m;
}
Memset memset_of(const Statement& s) {
  auto m = copy_like_of<Memset>(s, 7);
  m.mem_kind = MemoryKind(s.col_int(6));
  return m;
}
// Syncs, API calls and ranges begin with the host thread's span: start_ns,end_ns,pid,tid.
template <class Row, class Src>
Row host_span_of(const Src& s) {
  Row r;
  r.start = s.col_int(0);
  r.end = s.col_int(1);
  r.pid = s.col_int(2);
  r.tid = s.col_int(3);
  return r;
}
Sync sync_of(const Statement& s) {
  auto y = host_span_of<Sync>(s);
  y.type = SyncType(s.col_int(4));
  y.device = s.col_int(5);
  y.stream = s.col_int(6);
  y.correlation = s.col_int(7);
  return y;
}
template <class Row>
ApiCall api_of(const Row& s) {
  auto a = host_span_of<ApiCall>(s);
  a.kind = ApiKind(s.col_int(4));
  a.name = s.col_int(5);
  a.correlation = s.col_int(6);
  a.return_code = int32_t(s.col_int(7));
  a.stack = s.col_int(8);
  return a;
}
template <class Row>
Range range_of(const Row& s) {
  auto r = host_span_of<Range>(s);
  r.domain = s.col_int(4);
  r.name = s.col_int(5);
  r.depth = int32_t(s.col_int(6));
  r.source = RangeSource(s.col_int(7));
  r.correlation = s.col_int(8);
  return r;
}
template <class Row>
Sample sample_of(const Row& s) {
  // A damaged count never weighs a sample below one period or without bound (a day of 1 kHz periods at most).
  return Sample{s.col_int(0), s.col_int(1),      s.col_int(2),
                s.col_int(3), s.col_int(4) != 0, std::clamp<int64_t>(s.col_int(5), 1, 86'400'000)};
}
DataWait wait_of(const Statement& s) {
  return DataWait{s.col_int(0), s.col_int(1), s.col_int(2), s.col_int(3), s.col_int(4)};
}
Step step_of(const Statement& s) {
  return Step{s.col_int(0), s.col_int(1), s.col_int(2), s.col_int(3), s.col_int(4), s.col_int(5)};
}
Finding finding_of(const Statement& s) {
  Finding f;
  f.rule = s.col_int(0);
  f.severity = Severity(s.col_int(1));
  f.first_step = s.col_int(2);
  f.last_step = s.col_int(3);
  f.est_savings_ns = s.col_double(4);
  f.message = s.col_int(5);
  f.evidence_json = s.col_text(6);
  return f;
}

// One decoded row of a packed table, read like a statement's columns.
struct PackedRow {
  const int64_t* v;
  int64_t col_int(int i) const { return v[i]; }
};

}  // namespace

struct StoreReader::Impl {
  std::string path;
  sqlite3* db = nullptr;
  int version = 0;
  StringTable strings;
  std::map<std::string, int64_t> max_duration;  // per timed table, for overlap queries

  const char* api_cols() const;
  const char* sample_cols() const;
  const char* kernel_cols() const;
  const char* memcpy_cols() const;
  const char* memset_cols() const;
  bool packed() const { return version >= 5; }
  // The layout of `table` where this store packs it, else null (v5 packed all but ranges).
  const packed::Layout* packed_layout(std::string_view table) const {
    for (const packed::Layout* l : packed::layouts())
      if (table == l->table && version >= l->since) return l;
    return nullptr;
  }

  // Every row of a packed table in the order written (blocks by rowid), or, for a window, only those of the
  // blocks whose [lo, hi] meets [from, to]: `fn(PackedRow)`. A block's lo and hi must be integers and the
  // bounds of its rows (they decide which blocks a window reads): anything else is damage, said as such.
  template <class Fn>
  void each_packed(const packed::Layout& layout, Fn&& fn,
                   std::optional<std::pair<int64_t, int64_t>> window = {}) const {
    Statement s(db,
                std::string("SELECT rows, data, lo, hi FROM ") + layout.packed_table +
                    (window ? " WHERE hi >= ?1 AND lo <= ?2 ORDER BY rowid" : " ORDER BY rowid"),
                path);
    if (window) {
      s.bind(1, window->first);
      s.bind(2, window->second);
    }
    std::vector<int64_t> values;
    const size_t cols = layout.columns.size();
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      decode_block(layout, s, values);
      for (size_t i = 0; i < values.size(); i += cols) fn(PackedRow{values.data() + i});
    }
    if (rc != SQLITE_DONE)
      throw StoreError(path, std::string("corrupt or truncated store (") + sqlite3_errmsg(db) + ")");
  }
  // The block in the current row of `s` (SELECT rows, data, lo, hi) into `values` (row-major, replaced).
  void decode_block(const packed::Layout& layout, const Statement& s, std::vector<int64_t>& values) const {
    auto corrupt = [&](const char* why) {
      return StoreError(path, std::string("corrupt store: a block of ") + layout.packed_table + " " + why);
    };
    if (sqlite3_column_type(s.get(), 1) != SQLITE_BLOB) throw corrupt("holds no data");
    if (sqlite3_column_type(s.get(), 2) != SQLITE_INTEGER ||
        sqlite3_column_type(s.get(), 3) != SQLITE_INTEGER)
      throw corrupt("has bounds that are no integers");
    const auto* data = static_cast<const char*>(sqlite3_column_blob(s.get(), 1));
    const std::string_view blob(data ? data : "", size_t(sqlite3_column_bytes(s.get(), 1)));
    values.clear();
    packed::decode(layout, blob, s.col_int(0), values, path);
    const size_t cols = layout.columns.size(), hi_col = size_t(layout.hi_column);
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (size_t i = 0; i < values.size(); i += cols) {
      lo = std::min(lo, values[i]);
      hi = std::max(hi, values[i + hi_col]);
    }
    if (lo != s.col_int(2) || hi != s.col_int(3)) throw corrupt("has bounds that are not its rows'");
  }

  // kernel_at() and api_call_at(): where row i of a bulk table is. Packed: each block's rowid and the rows
  // before it; rows: the rowids' least value when they are dense (rowid = least + i), else every rowid. Built
  // on first use; the last block read stays decoded (a click's neighbours are in it).
  struct RowIndex {
    bool built = false;
    uint64_t count = 0;
    std::vector<std::pair<uint64_t, int64_t>> blocks;  // (rows before, rowid), by rowid
    std::optional<int64_t> dense_from;
    std::vector<int64_t> rowids;  // a rows table with gaps: each row's rowid
    int64_t cached_rowid = 0;
    uint64_t cached_first = 0;
    std::vector<int64_t> cached;
  };
  RowIndex kernel_index, api_index, sample_index;
  uint64_t count_rows(const packed::Layout& layout, RowIndex& x);
  // Row i of `layout`'s table (`what`: "kernel"), as `conv` makes it of a block's row or a statement.
  template <class Row, class Conv>
  Row row_at(const packed::Layout& layout, RowIndex& x, const std::string& cols, const char* what, uint64_t i,
             Conv conv);
  // Each row of one of the bulk tables in load()'s order: from its blocks, or as rows.
  template <class Row, class Conv>
  void each_bulk(const packed::Layout& layout, const char* cols, Conv conv,
                 const std::function<void(const Row&)>& fn) const {
    if (packed_layout(layout.table)) return each_packed(layout, [&](const PackedRow& r) { fn(conv(r)); });
    each_row(db, path, std::string("SELECT ") + cols + " FROM " + layout.table + " ORDER BY rowid",
             [&](const Statement& s) { fn(conv(s)); });
  }
  // Rows of a packed timed table overlapping [t0, t1), by start.
  template <class Row, class Conv>
  std::vector<Row> overlapping_packed(const packed::Layout& layout, int64_t t0, int64_t t1, Conv conv) const {
    std::vector<Row> out;
    if (t1 <= std::numeric_limits<int64_t>::min()) return out;
    each_packed(
        layout,
        [&](const PackedRow& r) {
          if (r.v[0] < t1 && r.v[1] > t0) out.push_back(conv(r));
        },
        std::pair<int64_t, int64_t>{t0 == std::numeric_limits<int64_t>::max() ? t0 : t0 + 1, t1 - 1});
    std::stable_sort(out.begin(), out.end(), [](const Row& a, const Row& b) { return a.start < b.start; });
    return out;
  }

  int64_t scalar(const std::string& sql) const {
    Statement s(db, sql, path);
    int rc = sqlite3_step(s.get());
    if (rc == SQLITE_ROW) return s.col_int(0);
    if (rc != SQLITE_DONE)
      throw StoreError(path, std::string("corrupt or truncated store (") + sqlite3_errmsg(db) + ")");
    return 0;
  }
  // Rows of `table` overlapping [t0, t1): start < t1 and end > t0. The index on start bounds the scan from
  // below by t0 - (longest duration in the table).
  template <class Row, class Conv>
  std::vector<Row> overlapping(const std::string& table, const char* cols, int64_t t0, int64_t t1,
                               Conv conv) {
    auto it = max_duration.find(table);
    if (it == max_duration.end())
      it = max_duration.emplace(table, scalar("SELECT coalesce(max(end_ns - start_ns), 0) FROM " + table)).first;
    int64_t lo;
    // A duration past int64 (start near its least, end near its greatest) is REAL in SQL, read back
    // saturated.
    if (it->second == std::numeric_limits<int64_t>::max() || __builtin_sub_overflow(t0, it->second, &lo))
      lo = std::numeric_limits<int64_t>::min();
    std::vector<Row> out;
    Statement s(db,
                std::string("SELECT ") + cols + " FROM " + table +
                    " WHERE start_ns >= ?1 AND start_ns < ?2 AND end_ns > ?3 ORDER BY start_ns",
                path);
    s.bind(1, lo);
    s.bind(2, t1);
    s.bind(3, t0);
    while (s.step_row()) out.push_back(conv(s));
    return out;
  }
};

namespace {
const char* kKernelCols =
    "start_ns,end_ns,device,context,stream,correlation,grid_x,grid_y,grid_z,block_x,block_y,block_z,registers,"
    "shared_memory,name,graph_id,pid,graph_node_id";
const char* kMemcpyCols =
    "start_ns,end_ns,device,stream,correlation,bytes,copy_kind,src_kind,dst_kind,pid,graph_id,graph_node_id";
const char* kMemsetCols = "start_ns,end_ns,device,stream,correlation,bytes,mem_kind,pid,graph_id,graph_node_id";
// v1 to v3 stores have no graph node ids and no graph ids on copies and memsets: they read as 0.
const char* kKernelColsV3 =
    "start_ns,end_ns,device,context,stream,correlation,grid_x,grid_y,grid_z,block_x,block_y,block_z,registers,"
    "shared_memory,name,graph_id,pid,0";
const char* kMemcpyColsV3 = "start_ns,end_ns,device,stream,correlation,bytes,copy_kind,src_kind,dst_kind,pid,0,0";
const char* kMemsetColsV3 = "start_ns,end_ns,device,stream,correlation,bytes,mem_kind,pid,0,0";
const char* kSyncCols = "start_ns,end_ns,pid,tid,type,device,stream,correlation";
// v1 stores have no api_calls.stack: it reads as 0.
const char* kApiCols = "start_ns,end_ns,pid,tid,kind,name,correlation,return_code,stack";
const char* kApiColsV1 = "start_ns,end_ns,pid,tid,kind,name,correlation,return_code,0";
const char* kRangeCols = "start_ns,end_ns,pid,tid,domain,name,depth,source,correlation";
const char* kWaitCols = "start_ns,end_ns,pid,tid,source";
// v1 and v2 stores have no samples.periods: each sample is one period.
const char* kSampleCols = "time_ns,pid,tid,stack,on_cpu,periods";
const char* kSampleColsV2 = "time_ns,pid,tid,stack,on_cpu,1";
}  // namespace

const char* StoreReader::Impl::api_cols() const { return version >= 2 ? kApiCols : kApiColsV1; }
const char* StoreReader::Impl::sample_cols() const {
  return version >= 3 ? kSampleCols : kSampleColsV2;
}
const char* StoreReader::Impl::kernel_cols() const { return version >= 4 ? kKernelCols : kKernelColsV3; }
const char* StoreReader::Impl::memcpy_cols() const { return version >= 4 ? kMemcpyCols : kMemcpyColsV3; }
const char* StoreReader::Impl::memset_cols() const { return version >= 4 ? kMemsetCols : kMemsetColsV3; }

StoreReader::StoreReader(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  switch (sniff_file(path)) {
    case FileKind::Missing: throw StoreError(path, missing_file_reason(path));
    case FileKind::Store: break;
    case FileKind::NsysSqlite:
      throw StoreError(path, "an Nsight Systems SQLite export, not a stepscope store (use `stepscope import`)");
    case FileKind::OtherSqlite: throw StoreError(path, "an SQLite database, but not a stepscope store");
    case FileKind::Gzip:
    case FileKind::Zstd:
    case FileKind::Json: throw StoreError(path, "a trace file, not a stepscope store (use `stepscope import`)");
    case FileKind::Other: {
      std::error_code ec;
      if (std::filesystem::file_size(path, ec) == 0 && !ec) throw StoreError(path, "empty file, not a stepscope store");
      throw StoreError(path, "not an SQLite database");
    }
  }
  if (sqlite3_open_v2(path.c_str(), &impl_->db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = impl_->db ? sqlite3_errmsg(impl_->db) : "cannot open";
    sqlite3_close(impl_->db);
    impl_->db = nullptr;
    throw StoreError(path, "cannot open: " + msg);
  }
  // A store whose writer is finishing it (indexes, leaving WAL mode) is locked for a moment: wait, not fail.
  sqlite3_busy_timeout(impl_->db, kBusyTimeoutMs);
  try {
    impl_->version = int(impl_->scalar("PRAGMA user_version"));
    if (impl_->version > kSchemaVersion)
      throw StoreError(path, "schema version " + std::to_string(impl_->version) +
                                 " is newer than this stepscope reads (" + std::to_string(kSchemaVersion) + ")");
    if (impl_->version < 1) throw StoreError(path, "not a stepscope store (no schema version)");
    // Ids are dense from 0 in a store we wrote: an id past the row count is damage, and padding up to it
    // would allocate without bound.
    const int64_t string_rows = impl_->scalar("SELECT count(*) FROM strings");
    each_row(impl_->db, path, "SELECT id, value FROM strings ORDER BY id", [&](const Statement& s) {
      // Intern in order keeps the ids identical.
      int64_t id = s.col_int(0);
      if (id < 0 || id >= string_rows)
        throw StoreError(path, "corrupt store: string id " + std::to_string(id) + " outside 0.." +
                                   std::to_string(string_rows - 1));
      while (static_cast<int64_t>(impl_->strings.size()) < id) impl_->strings.intern("\x01missing#" + std::to_string(impl_->strings.size()));
      if (id > 0) impl_->strings.intern(s.col_text(1));
    });
  } catch (const StoreError& e) {
    sqlite3_close(impl_->db);
    impl_->db = nullptr;
    if (e.reason().rfind("SQLite: ", 0) == 0)
      throw StoreError(path, "corrupt or truncated store (" + e.reason().substr(8) + ")");
    throw;
  }
}

StoreReader::~StoreReader() {
  if (impl_ && impl_->db) sqlite3_close_v2(impl_->db);
}

const std::string& StoreReader::path() const { return impl_->path; }
int StoreReader::schema_version() const { return impl_->version; }
const StringTable& StoreReader::strings() const { return impl_->strings; }

std::map<std::string, std::string> StoreReader::meta() const {
  std::map<std::string, std::string> m;
  each_row(impl_->db, impl_->path, "SELECT key, value FROM meta",
           [&](const Statement& s) { m[s.col_text(0)] = s.col_text(1); });
  return m;
}

std::vector<TableCount> StoreReader::counts() const {
  static const char* const tables[] = {"processes", "threads", "devices", "kernels", "memcpys", "memsets",
                                       "syncs", "api_calls", "ranges", "frames", "stacks", "samples",
                                       "data_waits", "steps", "findings", "modules", "gpu_windows", "graphs",
                                       "graph_nodes", "strings"};
  std::vector<TableCount> out;
  for (const char* t : tables) {
    if (impl_->version < 2 && std::string_view(t) == "gpu_windows") continue;
    if (impl_->version < 4 && (std::string_view(t) == "graphs" || std::string_view(t) == "graph_nodes")) continue;
    if (const packed::Layout* l = impl_->packed_layout(t)) {
      out.push_back({t, impl_->scalar(std::string("SELECT coalesce(sum(rows), 0) FROM ") + l->packed_table)});
      continue;
    }
    out.push_back({t, impl_->scalar(std::string("SELECT count(*) FROM ") + t)});
  }
  return out;
}

std::pair<int64_t, int64_t> StoreReader::time_span() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const char* t : kTimedTables) {
    const packed::Layout* l = impl_->packed_layout(t);
    Statement s(impl_->db,
                l ? std::string("SELECT min(lo), max(hi), count(*) FROM ") + l->packed_table
                  : std::string("SELECT min(start_ns), max(end_ns), count(*) FROM ") + t,
                impl_->path);
    if (s.step_row() && s.col_int(2) > 0) {
      lo = std::min(lo, s.col_int(0));
      hi = std::max(hi, s.col_int(1));
    }
  }
  Statement s(impl_->db,
              impl_->packed() ? "SELECT min(lo), max(hi), count(*) FROM packed_samples"
                              : "SELECT min(time_ns), max(time_ns), count(*) FROM samples",
              impl_->path);
  if (s.step_row() && s.col_int(2) > 0) {
    lo = std::min(lo, s.col_int(0));
    hi = std::max(hi, s.col_int(1));
  }
  if (lo > hi) return {0, 0};
  return {lo, hi};
}

void StoreReader::each_kernel(const std::function<void(const Kernel&)>& fn) const {
  impl_->each_bulk<Kernel>(
      packed::kernels(), impl_->kernel_cols(), [](const auto& r) { return kernel_of(r); }, fn);
}
void StoreReader::each_api_call(const std::function<void(const ApiCall&)>& fn) const {
  impl_->each_bulk<ApiCall>(
      packed::api_calls(), impl_->api_cols(), [](const auto& r) { return api_of(r); }, fn);
}
void StoreReader::each_sample(const std::function<void(const Sample&)>& fn) const {
  impl_->each_bulk<Sample>(
      packed::samples(), impl_->sample_cols(), [](const auto& r) { return sample_of(r); }, fn);
}

uint64_t StoreReader::Impl::count_rows(const packed::Layout& layout, RowIndex& x) {
  if (x.built) return x.count;
  if (packed_layout(layout.table)) {
    each_row(db, path, std::string("SELECT rowid, rows FROM ") + layout.packed_table + " ORDER BY rowid",
             [&](const Statement& s) {
               // As decoding says it (a block holds 1 to kMaxBlockRows rows): no count can wrap.
               if (s.col_int(1) < 1 || s.col_int(1) > packed::kMaxBlockRows)
                 throw StoreError(path, std::string("corrupt store: a block of ") + layout.packed_table +
                                            " claims " + std::to_string(s.col_int(1)) + " rows");
               x.blocks.emplace_back(x.count, s.col_int(0));
               x.count += uint64_t(s.col_int(1));
             });
  } else {
    Statement s(db, std::string("SELECT min(rowid), max(rowid), count(*) FROM ") + layout.table, path);
    if (s.step_row() && s.col_int(2) > 0) {
      x.count = uint64_t(s.col_int(2));
      if (uint64_t(s.col_int(1)) - uint64_t(s.col_int(0)) == x.count - 1) x.dense_from = s.col_int(0);
    }
  }
  x.built = true;
  return x.count;
}

template <class Row, class Conv>
Row StoreReader::Impl::row_at(const packed::Layout& layout, RowIndex& x, const std::string& cols,
                              const char* what, uint64_t i, Conv conv) {
  const uint64_t n = count_rows(layout, x);
  if (i >= n)
    throw StoreError(path, std::string("no ") + what + " row " + std::to_string(i) + " (the store holds " +
                               std::to_string(n) + ")");
  if (const packed::Layout* l = packed_layout(layout.table)) {
    auto b = std::upper_bound(x.blocks.begin(), x.blocks.end(), i,
                              [](uint64_t v, const std::pair<uint64_t, int64_t>& e) { return v < e.first; });
    --b;  // blocks[0] starts at row 0, so some block starts at or before i
    const size_t ncols = l->columns.size();
    if (x.cached.empty() || x.cached_rowid != b->second) {
      Statement s(db, std::string("SELECT rows, data, lo, hi FROM ") + l->packed_table + " WHERE rowid = ?1",
                  path);
      s.bind(1, b->second);
      if (!s.step_row())
        throw StoreError(
            path, std::string("corrupt or truncated store (a block of ") + l->packed_table + " went away)");
      x.cached.clear();
      decode_block(*l, s, x.cached);
      x.cached_rowid = b->second;
      x.cached_first = b->first;
    }
    const uint64_t k = i - x.cached_first;
    if ((k + 1) * ncols > x.cached.size())
      throw StoreError(path, std::string("corrupt store: a block of ") + l->packed_table +
                                 " holds fewer rows than its count");
    return conv(PackedRow{x.cached.data() + k * ncols});
  }
  // Gaps (rows deleted): every rowid in order, read at the first row asked for (8 bytes a row), so a row is
  // one lookup, not an OFFSET scan.
  if (!x.dense_from && x.rowids.empty()) {
    x.rowids.reserve(size_t(n));
    each_row(db, path, std::string("SELECT rowid FROM ") + layout.table + " ORDER BY rowid",
             [&](const Statement& s) { x.rowids.push_back(s.col_int(0)); });
  }
  const auto changed = [&] {
    return StoreError(
        path, std::string("no ") + what + " row " + std::to_string(i) + " (the store changed while read)");
  };
  if (!x.dense_from && i >= x.rowids.size()) throw changed();
  Statement s(db, "SELECT " + cols + " FROM " + layout.table + " WHERE rowid = ?1", path);
  s.bind(1, x.dense_from ? *x.dense_from + int64_t(i) : x.rowids[i]);
  if (!s.step_row()) throw changed();
  return conv(s);
}

uint64_t StoreReader::kernel_count() const {
  return impl_->count_rows(packed::kernels(), impl_->kernel_index);
}
uint64_t StoreReader::api_call_count() const {
  return impl_->count_rows(packed::api_calls(), impl_->api_index);
}
uint64_t StoreReader::sample_count() const {
  return impl_->count_rows(packed::samples(), impl_->sample_index);
}

Kernel StoreReader::kernel_at(uint64_t i) const {
  return impl_->row_at<Kernel>(packed::kernels(), impl_->kernel_index, impl_->kernel_cols(), "kernel", i,
                               [](const auto& r) { return kernel_of(r); });
}
ApiCall StoreReader::api_call_at(uint64_t i) const {
  return impl_->row_at<ApiCall>(packed::api_calls(), impl_->api_index, impl_->api_cols(), "API call", i,
                                [](const auto& r) { return api_of(r); });
}

void StoreReader::hold_snapshot() {
  detail::exec(impl_->db, "BEGIN", impl_->path);
  (void)impl_->scalar("SELECT count(*) FROM sqlite_master");  // a read begins the snapshot
}

// What SQLite cannot know of a loaded trace: every stack a sample or a call points at, every frame and parent a
// stack node points at, exists; a step and a data wait end after they start. Damage there was read as an
// "[unknown]" function, a step source that never was ("No step markers in this trace") or a 0% input wait.
void check_references(const Trace& t, const std::string& file) {
  auto corrupt = [&file](const std::string& why) { return StoreError(file, "corrupt store: " + why); };
  // Ids are dense from 1 in a store we wrote (one compare each); otherwise a binary search.
  auto member = [](const auto& rows) {
    const bool dense = !rows.empty() && rows.front().id == 1 && rows.back().id == int64_t(rows.size());
    return [&rows, dense](int64_t id) {
      if (dense) return id >= 1 && id <= int64_t(rows.size());
      auto it = std::lower_bound(rows.begin(), rows.end(), id, [](const auto& r, int64_t v) { return r.id < v; });
      return it != rows.end() && it->id == id;
    };
  };
  const auto frame = member(t.frames);
  const auto stack = member(t.stacks);
  for (const Stack& n : t.stacks) {
    if (!frame(n.frame))
      throw corrupt("stack node " + std::to_string(n.id) + " names frame " + std::to_string(n.frame) +
                    ", which is not in frames");
    if (n.parent != 0 && !stack(n.parent))
      throw corrupt("stack node " + std::to_string(n.id) + " names parent " + std::to_string(n.parent) +
                    ", which is not in stacks");
  }
  for (const Sample& x : t.samples)
    if (x.stack != 0 && !stack(x.stack))
      throw corrupt("a sample at " + std::to_string(x.time) + " ns names stack " + std::to_string(x.stack) +
                    ", which is not in stacks");
  for (const ApiCall& a : t.api_calls)
    if (a.stack != 0 && !stack(a.stack))
      throw corrupt("an API call at " + std::to_string(a.start) + " ns names stack " + std::to_string(a.stack) +
                    ", which is not in stacks");
  for (const Step& x : t.steps)
    if (x.end < x.start) throw corrupt("step " + std::to_string(x.index) + " ends before it starts");
  for (const DataWait& w : t.data_waits)
    if (w.end < w.start) throw corrupt("a data wait at " + std::to_string(w.start) + " ns ends before it starts");
}

Trace StoreReader::load() const {
  return load(LoadOptions{});
}

Trace StoreReader::load(const LoadOptions& options) const {
  Trace t;
  t.strings = impl_->strings;
  t.meta = meta();
  sqlite3* db = impl_->db;
  const std::string& f = impl_->path;
  t.processes = processes();
  t.threads = threads();
  t.devices = devices();
  auto all = [](const char* cols, const char* table) {
    return std::string("SELECT ") + cols + " FROM " + table + " ORDER BY rowid";
  };
  const bool packed = impl_->packed();
  if (options.bulk) each_kernel([&](const Kernel& k) { t.kernels.push_back(k); });
  each_row(db, f, all(impl_->memcpy_cols(), "memcpys"), [&](const Statement& s) { t.memcpys.push_back(memcpy_of(s)); });
  each_row(db, f, all(impl_->memset_cols(), "memsets"), [&](const Statement& s) { t.memsets.push_back(memset_of(s)); });
  each_row(db, f, all(kSyncCols, "syncs"), [&](const Statement& s) { t.syncs.push_back(sync_of(s)); });
  if (options.bulk) each_api_call([&](const ApiCall& a) { t.api_calls.push_back(a); });
  impl_->each_bulk<Range>(
      packed::ranges(), kRangeCols, [](const auto& r) { return range_of(r); },
      [&](const Range& r) { t.ranges.push_back(r); });
  each_row(db, f, "SELECT id, module, symbol, file, line, kind, address FROM frames ORDER BY id",
           [&](const Statement& s) {
             t.frames.push_back({s.col_int(0), s.col_int(1), s.col_int(2), s.col_int(3), int32_t(s.col_int(4)),
                                 FrameKind(s.col_int(5)), s.col_int(6)});
           });
  if (packed) {
    impl_->each_packed(packed::stacks(), [&](const PackedRow& r) {
      t.stacks.push_back({r.v[0], r.v[1], r.v[2]});
    });
    // Rows read by id, as SQL's ORDER BY id gives them: a writer adds them in id order, so this seldom sorts.
    if (!std::is_sorted(t.stacks.begin(), t.stacks.end(),
                        [](const Stack& a, const Stack& b) { return a.id < b.id; }))
      std::stable_sort(t.stacks.begin(), t.stacks.end(),
                       [](const Stack& a, const Stack& b) { return a.id < b.id; });
  } else {
    each_row(db, f, "SELECT id, parent, frame FROM stacks ORDER BY id", [&](const Statement& s) {
      t.stacks.push_back({s.col_int(0), s.col_int(1), s.col_int(2)});
    });
  }
  if (options.bulk) each_sample([&](const Sample& s) { t.samples.push_back(s); });
  each_row(db, f, all(kWaitCols, "data_waits"), [&](const Statement& s) { t.data_waits.push_back(wait_of(s)); });
  each_row(db, f, "SELECT step_index, start_ns, end_ns, source, pid, tid FROM steps ORDER BY rowid",
           [&](const Statement& s) { t.steps.push_back(step_of(s)); });
  each_row(db, f, "SELECT rule, severity, first_step, last_step, est_savings_ns, message, evidence FROM findings",
           [&](const Statement& s) { t.findings.push_back(finding_of(s)); });
  each_row(db, f, "SELECT pid, path, build_id, start_address, end_address, file_offset FROM modules",
           [&](const Statement& s) {
             t.modules.push_back({s.col_int(0), s.col_int(1), s.col_int(2), s.col_int(3), s.col_int(4), s.col_int(5)});
           });
  t.gpu_windows = gpu_windows();
  t.graphs = graphs();
  t.graph_nodes = graph_nodes();
  return t;
}

std::vector<Kernel> StoreReader::kernels(int64_t t0, int64_t t1) const {
  if (impl_->packed())
    return impl_->overlapping_packed<Kernel>(packed::kernels(), t0, t1, kernel_of<PackedRow>);
  return impl_->overlapping<Kernel>("kernels", impl_->kernel_cols(), t0, t1, kernel_of<Statement>);
}
std::vector<Memcpy> StoreReader::memcpys(int64_t t0, int64_t t1) const {
  return impl_->overlapping<Memcpy>("memcpys", impl_->memcpy_cols(), t0, t1, memcpy_of);
}
std::vector<Memset> StoreReader::memsets(int64_t t0, int64_t t1) const {
  return impl_->overlapping<Memset>("memsets", impl_->memset_cols(), t0, t1, memset_of);
}
std::vector<ApiCall> StoreReader::api_calls(int64_t t0, int64_t t1) const {
  if (impl_->packed())
    return impl_->overlapping_packed<ApiCall>(packed::api_calls(), t0, t1, api_of<PackedRow>);
  return impl_->overlapping<ApiCall>("api_calls", impl_->api_cols(), t0, t1, api_of<Statement>);
}
std::vector<Range> StoreReader::ranges(int64_t t0, int64_t t1) const {
  if (impl_->packed_layout("ranges"))
    return impl_->overlapping_packed<Range>(packed::ranges(), t0, t1, range_of<PackedRow>);
  return impl_->overlapping<Range>("ranges", kRangeCols, t0, t1, range_of<Statement>);
}
std::vector<DataWait> StoreReader::data_waits(int64_t t0, int64_t t1) const {
  return impl_->overlapping<DataWait>("data_waits", kWaitCols, t0, t1, wait_of);
}
std::vector<Sample> StoreReader::samples(int64_t t0, int64_t t1) const {
  std::vector<Sample> out;
  if (impl_->packed()) {
    if (t1 <= t0) return out;
    impl_->each_packed(
        packed::samples(),
        [&](const PackedRow& r) {
          if (r.v[0] >= t0 && r.v[0] < t1) out.push_back(sample_of(r));
        },
        std::pair<int64_t, int64_t>{t0, t1 - 1});
    std::stable_sort(out.begin(), out.end(),
                     [](const Sample& a, const Sample& b) { return a.time < b.time; });
    return out;
  }
  Statement s(impl_->db,
              std::string("SELECT ") + impl_->sample_cols() +
                  " FROM samples WHERE time_ns >= ?1 AND time_ns < ?2 ORDER BY time_ns",
              impl_->path);
  s.bind(1, t0);
  s.bind(2, t1);
  while (s.step_row()) out.push_back(sample_of<Statement>(s));
  return out;
}
std::vector<Step> StoreReader::steps() const {
  std::vector<Step> out;
  each_row(impl_->db, impl_->path,
           "SELECT step_index, start_ns, end_ns, source, pid, tid FROM steps ORDER BY step_index",
           [&](const Statement& s) { out.push_back(step_of(s)); });
  return out;
}
std::vector<Finding> StoreReader::findings() const {
  std::vector<Finding> out;
  each_row(impl_->db, impl_->path,
           "SELECT rule, severity, first_step, last_step, est_savings_ns, message, evidence FROM findings",
           [&](const Statement& s) { out.push_back(finding_of(s)); });
  return out;
}

}  // namespace stepscope::store

namespace stepscope::store {
std::vector<Process> StoreReader::processes() const {
  std::vector<Process> out;
  each_row(impl_->db, impl_->path, "SELECT pid, name, parent_pid FROM processes",
           [&](const Statement& s) { out.push_back({s.col_int(0), s.col_int(1), s.col_int(2)}); });
  return out;
}
std::vector<Thread> StoreReader::threads() const {
  std::vector<Thread> out;
  each_row(impl_->db, impl_->path,
           impl_->version >= 2 ? "SELECT pid, tid, name, collector FROM threads" : "SELECT pid, tid, name, 0 FROM threads",
           [&](const Statement& s) { out.push_back({s.col_int(0), s.col_int(1), s.col_int(2), s.col_int(3) != 0}); });
  return out;
}
std::vector<InvariantBreak> StoreReader::invariant_breaks() const {
  struct Check {
    const char* table;
    bool has_tid;
    bool tid_required;
  };
  std::vector<Check> checks = {{"samples", true, false},   {"api_calls", true, true}, {"syncs", true, true},
                               {"ranges", true, false},    {"data_waits", true, false}, {"steps", true, false},
                               {"kernels", false, false},  {"memcpys", false, false}, {"memsets", false, false},
                               {"threads", false, false},  {"modules", false, false}};
  if (impl_->version >= 2) checks.push_back({"gpu_windows", false, false});
  if (impl_->version >= 4) {
    checks.push_back({"graphs", false, false});
    checks.push_back({"graph_nodes", false, false});
  }
  std::vector<InvariantBreak> out;
  auto run = [&](const std::string& table, const std::string& problem, const std::string& where) {
    Statement s(impl_->db, "SELECT count(*), min(pid), min(" + std::string(problem == "pid not in processes" ? "pid" : "tid") +
                               ") FROM " + table + " x WHERE " + where,
                impl_->path);
    if (s.step_row() && s.col_int(0) > 0) {
      InvariantBreak b{table, problem, s.col_int(0), s.col_int(1), 0};
      if (problem != "pid not in processes") b.example_tid = s.col_int(2);
      out.push_back(b);
    }
  };
  // Packed tables: the same checks over their decoded rows.
  std::set<int64_t> pids;
  std::set<std::pair<int64_t, int64_t>> tids;
  if (impl_->packed()) {
    for (const auto& p : processes()) pids.insert(p.pid);
    for (const auto& t : threads()) tids.insert({t.pid, t.tid});
  }
  auto check_packed = [&](const Check& c, const packed::Layout& l) {
    int pid_col = -1, tid_col = -1, source_col = -1;
    for (size_t i = 0; i < l.columns.size(); ++i) {
      if (std::string_view(l.columns[i].name) == "pid") pid_col = int(i);
      if (std::string_view(l.columns[i].name) == "tid") tid_col = int(i);
      if (std::string_view(l.columns[i].name) == "source" && std::string_view(c.table) == "ranges")
        source_col = int(i);
    }
    InvariantBreak no_pid{c.table, "pid not in processes"}, no_thread{c.table, "(pid, tid) not in threads"},
        no_tid{c.table, "tid 0"};
    auto note = [](InvariantBreak& b, int64_t pid, int64_t tid) {
      // SQL's min() per column, as the row tables report their example.
      b.example_pid = b.rows == 0 ? pid : std::min(b.example_pid, pid);
      b.example_tid = b.rows == 0 ? tid : std::min(b.example_tid, tid);
      ++b.rows;
    };
    impl_->each_packed(l, [&](const PackedRow& r) {
      // GPU annotations (range source 5) lie on a GPU timeline: their pid is the device, their tid the
      // stream.
      if (source_col >= 0 && r.v[source_col] == int64_t(RangeSource::GpuAnnotation)) return;
      const int64_t pid = r.v[pid_col], tid = tid_col >= 0 ? r.v[tid_col] : 0;
      if (pid != 0 && !pids.count(pid)) note(no_pid, pid, 0);
      if (c.has_tid && tid != 0 && !tids.count({pid, tid})) note(no_thread, pid, tid);
      if (c.tid_required && tid == 0) note(no_tid, pid, tid);
    });
    no_pid.example_tid = 0;
    for (auto* b : {&no_pid, &no_thread, &no_tid})
      if (b->rows > 0) out.push_back(*b);
  };
  for (const auto& c : checks) {
    if (const packed::Layout* l = impl_->packed_layout(c.table)) {
      check_packed(c, *l);
      continue;
    }
    // gpu_annotation ranges (source 5) lie on a GPU timeline: their pid is the device, their tid the stream.
    const std::string host = std::string(c.table) == "ranges" ? " AND x.source != 5" : "";
    run(c.table, "pid not in processes",
        "x.pid != 0 AND NOT EXISTS (SELECT 1 FROM processes p WHERE p.pid = x.pid)" + host);
    if (c.has_tid)
      run(c.table, "(pid, tid) not in threads",
          "x.tid != 0 AND NOT EXISTS (SELECT 1 FROM threads t WHERE t.pid = x.pid AND t.tid = x.tid)" + host);
    if (c.tid_required) run(c.table, "tid 0", "x.tid = 0");
  }
  return out;
}

std::vector<GpuWindow> StoreReader::gpu_windows() const {
  std::vector<GpuWindow> out;
  if (impl_->version < 2) return out;
  each_row(impl_->db, impl_->path, "SELECT start_ns, end_ns, pid FROM gpu_windows ORDER BY start_ns",
           [&](const Statement& s) { out.push_back({s.col_int(0), s.col_int(1), s.col_int(2)}); });
  return out;
}
std::vector<Graph> StoreReader::graphs() const {
  std::vector<Graph> out;
  if (impl_->version < 4) return out;
  each_row(impl_->db, impl_->path,
           "SELECT pid, graph_id, kind, source_graph_id, created_ns, stack FROM graphs ORDER BY rowid",
           [&](const Statement& s) {
             out.push_back({s.col_int(0), s.col_int(1), GraphKind(s.col_int(2)), s.col_int(3), s.col_int(4),
                            s.col_int(5)});
           });
  return out;
}
std::vector<GraphNode> StoreReader::graph_nodes() const {
  std::vector<GraphNode> out;
  if (impl_->version < 4) return out;
  each_row(impl_->db, impl_->path,
           "SELECT pid, graph_id, node_id, source_node_id, kind, created_ns, stack FROM graph_nodes ORDER BY rowid",
           [&](const Statement& s) {
             out.push_back({s.col_int(0), s.col_int(1), s.col_int(2), s.col_int(3), GraphNodeKind(s.col_int(4)),
                            s.col_int(5), s.col_int(6)});
           });
  return out;
}
std::vector<Device> StoreReader::devices() const {
  std::vector<Device> out;
  each_row(impl_->db, impl_->path, "SELECT id, name, cc_major, cc_minor, sm_count, memory_bytes, vendor FROM devices",
           [&](const Statement& s) {
             out.push_back({s.col_int(0), s.col_int(1), int32_t(s.col_int(2)), int32_t(s.col_int(3)),
                            int32_t(s.col_int(4)), s.col_int(5), s.col_int(6)});
           });
  return out;
}
}  // namespace stepscope::store
