// The stepscope store: one SQLite file per recording (schema documented in docs/schema.md).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "stepscope/store/records.h"

namespace stepscope::store {

// 2: threads.collector, api_calls.stack, gpu_windows. 3: samples.periods. 4: graph ids and node ids of
// kernels, memcpys and memsets; the tables graphs and graph_nodes. 5: kernels, api_calls, samples and stacks
// packed in blocks (packed_*; the same columns). 6: ranges packed too. Readers still read 1 to 5 (new columns
// read as their defaults, new tables as empty); a writer that does not pack writes 4 (kRowsSchemaVersion),
// which any SQL reads.
inline constexpr int kSchemaVersion = 6;
inline constexpr int kRowsSchemaVersion = 4;
inline constexpr const char* kApplicationIdHex = "0x53545053";  // 'STPS', in PRAGMA application_id
inline constexpr int32_t kApplicationId = 0x53545053;

// Bad input or I/O failure. what() is one line: "FILE: reason". Commands print it and exit 2.
class StoreError : public std::runtime_error {
 public:
  StoreError(const std::string& file, const std::string& reason)
      : std::runtime_error(file + ": " + reason), file_(file), reason_(reason) {}
  const std::string& file() const { return file_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_, reason_;
};

// What kind of file is at `path`, judged by content. Never throws for unreadable files: returns Missing/Other.
enum class FileKind { Missing, Store, NsysSqlite, OtherSqlite, Gzip, Zstd, Json, Other };
FileKind sniff_file(const std::string& path);
// Why sniff_file said Missing, in words for a one-line error: "is a directory", "no such file", "cannot read: …".
std::string missing_file_reason(const std::string& path);

// What SQLite cannot know of a trace loaded from `file`: every stack a sample or an API call names, every frame
// and parent a stack node names, exists (frames and stacks in id order, as a load gives them); steps and data
// waits end after they start. Throws StoreError "corrupt store: …" naming the first that does not. The reader
// itself reads rows as they are (its tests store rows that break these on purpose); the analyzer's load_trace
// checks every store it loads.
void check_references(const Trace& t, const std::string& file);

struct WriterOptions {
  bool wal = true;             // WAL while writing; close() checkpoints and switches back to DELETE
  size_t batch_rows = 65536;   // rows per transaction for add_*() before an automatic commit
  bool synchronous_normal = true;
  // false: no journal and no syncs — for a temporary file that is renamed into place only when complete
  // (write_store_atomically); a crash then leaves only the temporary file, never a half-written store.
  bool durable = true;
  // false: keep WAL (rows survive the writing process being killed) but never fsync: for scratch stores
  // that need not survive a machine crash, such as the collector's per-process parts.
  bool fsync = true;
  // true: kernels, API calls, samples and stacks in compressed blocks (schema v5, a few bytes a row); false:
  // as rows (schema v4) — what SQL reads without stepscope (`export --format sqlite`) and what the
  // collector's per-process parts use, where a row committed must survive the process being killed.
  bool packed = true;
};

class StoreReader;

// Writes a store. Rows added with add_*() use this writer's string ids (intern()). append() takes a whole
// Trace with its own string table and remaps. Rows become durable at each commit (flush(), every batch_rows
// rows, close()); a process killed in between loses only the uncommitted rows.
class StoreWriter {
 public:
  // Creates (truncates) `path` and writes the schema. Throws StoreError.
  explicit StoreWriter(const std::string& path, WriterOptions options = {});
  ~StoreWriter();  // close() if not closed; never throws
  StoreWriter(const StoreWriter&) = delete;
  StoreWriter& operator=(const StoreWriter&) = delete;

  const std::string& path() const;

  void set_meta(const std::string& key, const std::string& value);
  StringId intern(std::string_view s);

  void add(const Process& r);
  void add(const Thread& r);
  void add(const Device& r);
  void add(const Kernel& r);
  void add(const Memcpy& r);
  void add(const Memset& r);
  void add(const Sync& r);
  void add(const ApiCall& r);
  void add(const Range& r);
  void add(const Frame& r);  // r.id must be set (1-based, unique)
  void add(const Stack& r);  // r.id must be set (1-based, unique)
  void add(const Sample& r);
  void add(const DataWait& r);
  void add(const Step& r);
  void add(const Finding& r);
  void add(const Module& r);
  void add(const GpuWindow& r);
  void add(const Graph& r);
  void add(const GraphNode& r);

  // Appends every row of `t` (and its meta), remapping string ids; frames and stacks are renumbered
  // after those already written so several traces (e.g. per-process partial stores) merge into one.
  void append(const Trace& t);
  // The same for a trace read without its bulk (StoreReader::load(LoadOptions{.bulk = false})) from `bulk`:
  // its kernels, API calls and samples are streamed from that reader one row at a time and remapped as `t`'s
  // rows are, so a merge holds none of them. `t` may have interned strings since (ids of `bulk` keep their
  // meaning in it). `stack_of`, when given, first maps the streamed rows' stack ids (a renumbered trie).
  void append(const Trace& t, const StoreReader& bulk, const std::function<int64_t(int64_t)>& stack_of = {});

  // Replaces the findings table with `findings` (string ids of `strings`).
  void replace_findings(const std::vector<Finding>& findings, const StringTable& strings);

  void flush();  // commit the open transaction
  void close();  // flush, checkpoint WAL, close; idempotent

 private:
  void append(const Trace& t, const StoreReader* bulk, const std::function<int64_t(int64_t)>& stack_of);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct TableCount {
  std::string table;
  int64_t rows = 0;
};

// Rows of one table that break the invariant of docs/schema.md: their pid is not in `processes`, their
// (pid, tid) not in `threads`, or (API calls and syncs) their tid is 0. One example row's ids.
struct InvariantBreak {
  std::string table;
  std::string problem;  // "pid not in processes", "(pid, tid) not in threads", "tid 0"
  int64_t rows = 0;
  int64_t example_pid = 0, example_tid = 0;
};

// Reads a store. Opening validates: an SQLite file, a stepscope store, a schema version this build reads.
class StoreReader {
 public:
  // Throws StoreError("FILE: not an SQLite database" | "not a stepscope store" | "schema version N is newer
  // than this stepscope reads (5)" | "no such file" | ...).
  explicit StoreReader(const std::string& path);
  ~StoreReader();
  StoreReader(const StoreReader&) = delete;
  StoreReader& operator=(const StoreReader&) = delete;

  const std::string& path() const;
  int schema_version() const;
  std::map<std::string, std::string> meta() const;
  std::vector<TableCount> counts() const;
  std::pair<int64_t, int64_t> time_span() const;  // over kernels, memcpys, memsets, api_calls, ranges, samples

  Trace load() const;  // everything
  // From now on every read sees the file as it is now (one read transaction until the reader is destroyed),
  // even while another process goes on writing it: a merge reads a part's tables and then streams its rows.
  void hold_snapshot();
  struct LoadOptions {
    bool bulk = true;  // false: kernels, API calls and samples are left out (stream them with each_*)
  };
  Trace load(const LoadOptions& options) const;
  // Every kernel, API call or sample in load()'s order, one row at a time: memory that does not grow with
  // them.
  void each_kernel(const std::function<void(const Kernel&)>& fn) const;
  void each_api_call(const std::function<void(const ApiCall&)>& fn) const;
  void each_sample(const std::function<void(const Sample&)>& fn) const;
  // The kernels (API calls) as load() and each_kernel() (each_api_call()) number them: how many, and row i
  // read alone (a packed store decodes the one block holding it and keeps it for the next call). Throws
  // StoreError for an i past the end or a damaged block. Not for two threads at once: the reader keeps that
  // block.
  uint64_t kernel_count() const;
  Kernel kernel_at(uint64_t i) const;
  uint64_t api_call_count() const;
  ApiCall api_call_at(uint64_t i) const;
  uint64_t sample_count() const;

  // Typed range queries: rows overlapping [t0, t1). Their string ids refer to strings().
  const StringTable& strings() const;
  std::vector<Kernel> kernels(int64_t t0, int64_t t1) const;
  std::vector<Memcpy> memcpys(int64_t t0, int64_t t1) const;
  std::vector<Memset> memsets(int64_t t0, int64_t t1) const;
  std::vector<ApiCall> api_calls(int64_t t0, int64_t t1) const;
  std::vector<Range> ranges(int64_t t0, int64_t t1) const;
  std::vector<Sample> samples(int64_t t0, int64_t t1) const;
  std::vector<DataWait> data_waits(int64_t t0, int64_t t1) const;
  std::vector<Step> steps() const;
  std::vector<Device> devices() const;
  std::vector<Process> processes() const;
  std::vector<Thread> threads() const;
  std::vector<Finding> findings() const;
  std::vector<GpuWindow> gpu_windows() const;  // empty for v1 stores and whole-run tracing
  std::vector<Graph> graphs() const;           // empty before v4
  std::vector<GraphNode> graph_nodes() const;  // empty before v4
  // Every row naming a pid / thread that processes / threads lack (pid 0 = unknown is allowed, as is tid 0 outside
  // api_calls and syncs). Empty when the invariant holds.
  std::vector<InvariantBreak> invariant_breaks() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes `t` to `path` atomically: a temporary file beside it, renamed over `path` when complete. `packed`:
// WriterOptions::packed.
void write_store_atomically(const Trace& t, const std::string& path, bool packed = true);

// Writes `content` to `path` as write_store_atomically does a store: a temporary file beside it, created 0600
// whatever the umask (reports and exports carry what a store does: paths, source lines, the command line),
// flushed to disk and renamed over `path` when complete; on any failure it is removed and StoreError("PATH:
// cannot create|write|replace …: reason") thrown, so `path` is either the old file or the whole new one.
void write_file_atomically(const std::string& path, std::string_view content);

// Several outputs of one command, all or none: each written as write_file_atomically writes one, to its
// temporary beside it, and renamed only by commit() once every one is whole; the temporaries of a failed or
// abandoned set are removed. (A diff whose third output could not be written left the first two behind.)
class StagedFiles {
 public:
  StagedFiles() = default;
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;
  ~StagedFiles();
  // Throws StoreError("PATH: cannot create|write …: reason"), its temporary removed.
  void add(const std::string& path, std::string_view content);
  // Renames every staged file over its path; throws StoreError("PATH: cannot replace …") where one fails.
  void commit();

 private:
  std::vector<std::pair<std::string, std::string>> staged_;  // (temporary, path)
};

// Removes a store file and the -wal, -shm and -journal files SQLite may have left beside it; never throws.
void remove_store_files(const std::string& path);

// "A path beside `path`" for temporary output: same directory, unique name.
std::string temp_path_beside(const std::string& path);

// A store named `output` goes into a folder that exists: stores live 0600 in 0700 folders, so no command
// creates one for them (record, attach, import; docs/collector.md). Throws StoreError("OUT: no such folder
// DIR (create it first)" | "OUT: DIR is not a folder" | "OUT: is a folder: name a file in it").
void require_output_folder(const std::string& output);
// Throws StoreError(output, "is an input of this command ...") when `output` is one of `inputs` (the same file by
// device and inode, or by path where one does not exist yet): the atomic write would replace a store or trace
// being read with a report (`report r.db -o r.db`, a diff's --md over its baseline exited 0).
void require_not_an_input(const std::string& output, const std::vector<std::string>& inputs);

}  // namespace stepscope::store
