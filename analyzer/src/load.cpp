// load_trace(): any input stepscope understands → store::Trace, detected by content.
#include "stepscope/analyzer/load.h"

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <new>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "import/decompress.h"
#include "import/event_counts.h"
#include "import/kineto_importer.h"
#include "import/nsys_sqlite_importer.h"

namespace stepscope::analyzer {

using store::StoreError;
using store::Trace;

namespace {

// A decompressed SQLite file in the temp folder, removed when this goes out of scope.
class TempFile {
 public:
  TempFile() {
    std::string dir = std::filesystem::temp_directory_path().string();
    std::string tmpl = dir + "/stepscope-import-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    int fd = ::mkstemp(buf.data());
    if (fd < 0) throw StoreError(dir, "cannot create a temporary file");
    ::close(fd);
    path_ = buf.data();
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Stores of the 0.1 collector wrote each synchronization with thread 0: it belongs to the thread of the API call
// with its correlation id (what the collector does now), so a blocking wait joins the stack that blocked.
void give_syncs_their_threads(Trace& t) {
  std::unordered_map<int64_t, size_t> api_of;
  for (const auto& y : t.syncs)
    if (y.tid == 0 && y.correlation) api_of.emplace(y.correlation, SIZE_MAX);
  if (api_of.empty()) return;
  for (size_t i = 0; i < t.api_calls.size(); ++i)
    if (auto it = api_of.find(t.api_calls[i].correlation); it != api_of.end()) it->second = i;
  for (auto& y : t.syncs) {
    if (y.tid != 0 || !y.correlation) continue;
    if (auto it = api_of.find(y.correlation); it != api_of.end() && it->second != SIZE_MAX) {
      y.pid = t.api_calls[it->second].pid;
      y.tid = t.api_calls[it->second].tid;
    }
  }
}

Trace load_sqlite(const std::string& db_path, const std::string& shown) {
  switch (store::sniff_file(db_path)) {
    case store::FileKind::Store:
      return load_store(store::StoreReader(db_path));
    case store::FileKind::NsysSqlite:
      return import::NsysSqliteImporter(db_path, shown).import();
    default:
      throw StoreError(shown, "an SQLite database that is neither a stepscope store nor an Nsight Systems export");
  }
}

bool looks_like_json(std::string_view s) {
  size_t i = 0;
  if (s.size() >= 3 && static_cast<unsigned char>(s[0]) == 0xef && static_cast<unsigned char>(s[1]) == 0xbb &&
      static_cast<unsigned char>(s[2]) == 0xbf)
    i = 3;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t')) ++i;
  return i < s.size() && (s[i] == '{' || s[i] == '[');
}

// Gzip and zstd files from this size are parsed as they are inflated (GzipReader, ZstdReader), plain JSON
// files from this size as they are read (FileReader): smaller ones gain nothing from the threads.
constexpr size_t kStreamedCompressedBytes = size_t{64} << 10;
constexpr size_t kStreamedJsonBytes = size_t{1} << 20;

// (A line that starts with "import::" reads as a C++20 import to clang-format: hence `auto`.)
auto importer_for(const std::string& path, const LoadOptions& options) -> import::KinetoImporter {
  auto importer = import::KinetoImporter(path);
  if (options.progress) importer.set_progress(options.progress);
  importer.set_threads(options.threads);
  return importer;
}

// A JSON trace parsed as `read` gives its `size` bytes, never held whole; nothing when it cannot be (then the
// whole text is read and parsed, which says what is wrong with a bad one). `whole()`: the source gave exactly
// its bytes, intact.
std::optional<Trace> import_streamed(const std::string& path, size_t size,
                                     const std::function<size_t(char*, size_t)>& read,
                                     const std::function<bool()>& whole, const LoadOptions& options) {
  try {
    import::KinetoParseReport report;
    Trace t = importer_for(path, options).import_stream(size, read, &report);
    if (whole()) {
      if (options.report) {
        options.report->streamed = true;
        options.report->text_buffer_bytes = report.streamed_buffer_bytes;
      }
      return t;
    }
  } catch (const import::NotStreamed&) {
  } catch (const StoreError&) {
    // The whole text parsed and is no trace: said, unless the source is what is wrong.
    if (whole()) throw;
  }
  return std::nullopt;
}

// A gzip (one member) or zstd trace parsed as it is inflated.
template <class Reader>
std::optional<Trace> import_inflating(const std::string& path, std::string_view compressed,
                                      const LoadOptions& options) {
  Reader reader(compressed);
  return import_streamed(
      path, reader.size(), [&](char* dst, size_t n) { return reader.read(dst, n); },
      [&] { return reader.finish(); }, options);
}

// A plain JSON trace parsed as it is read from its file.
std::optional<Trace> import_reading(const std::string& path, const LoadOptions& options) {
  import::FileReader file(path);
  if (file.size() < kStreamedJsonBytes) return std::nullopt;
  return import_streamed(
      path, file.size(), [&](char* dst, size_t n) { return file.read(dst, n); },
      [&] { return file.finish(); }, options);
}

constexpr const char* kUnknownFormat =
    "unrecognized format (expected a stepscope store, Kineto/Chrome trace JSON or an Nsight Systems SQLite "
    "export; plain, .gz or .zst)";

// A compression stepscope does not read, by its magic bytes: what to run first (the H100 recordings ship as
// .db.xz, and opening one said only "unrecognized format").
std::string unknown_format(std::string_view head) {
  struct Magic {
    std::string_view bytes, what;
  };
  static constexpr Magic kOther[] = {
      {"\xFD"
       "7zXZ\0",
       "xz-compressed: decompress it first (xz -dk FILE)"},
      {"BZh", "bzip2-compressed: decompress it first (bzip2 -dk FILE)"},
      {"PK\x03\x04", "a zip archive: extract its files first (unzip FILE)"},
      {"\x04\x22\x4D\x18", "lz4-compressed: decompress it first (lz4 -d FILE)"}};
  for (const auto& m : kOther)
    if (head.substr(0, m.bytes.size()) == m.bytes) return std::string(m.what);
  return kUnknownFormat;
}

}  // namespace

Trace load_store(const store::StoreReader& store, bool kernels) {
  Trace t = store.load({.bulk = false});
  // Reserved at their counts (grown by doubling, 10M kernels' rows would peak at half as much again while
  // copied), but never past a row a byte of the file (real packed rows take 5 to 17 bytes): what a damaged
  // store claims stays a hint, never an allocation of its choosing (a sanitizer's allocator aborts rather
  // than throw).
  std::error_code ec;
  const uint64_t file_bytes = std::filesystem::file_size(store.path(), ec);
  auto hint = [&](uint64_t rows) { return size_t(std::min(rows, ec ? 0 : file_bytes)); };
  if (kernels) t.kernels.reserve(hint(store.kernel_count()));
  t.api_calls.reserve(hint(store.api_call_count()));
  t.samples.reserve(hint(store.sample_count()));
  if (kernels) store.each_kernel([&](const store::Kernel& k) { t.kernels.push_back(k); });
  store.each_api_call([&](const store::ApiCall& a) { t.api_calls.push_back(a); });
  store.each_sample([&](const store::Sample& s) { t.samples.push_back(s); });
  store::check_references(t, store.path());
  give_syncs_their_threads(t);
  return t;
}

Trace load_trace(const std::string& path, const LoadOptions& options) {
  store::FileKind kind = store::sniff_file(path);
  if (kind == store::FileKind::Missing) throw StoreError(path, store::missing_file_reason(path));
  if (kind == store::FileKind::Store || kind == store::FileKind::NsysSqlite || kind == store::FileKind::OtherSqlite)
    return load_sqlite(path, path);

  if (kind == store::FileKind::Json && options.threads != 1)
    if (std::optional<Trace> t = import_reading(path, options)) return std::move(*t);

  import::PaddedBuffer raw = import::read_file(path);
  if (raw.size() == 0) throw StoreError(path, "empty file");
  import::Compression comp = import::compression_of(raw.view());
  import::PaddedBuffer json;
  if (comp != import::Compression::None) {
    const std::string head = import::peek_decompressed(raw.view(), comp, 4096);
    if (head.size() >= 16 && std::memcmp(head.data(), "SQLite format 3", 16) == 0) {
      TempFile tmp;
      import::decompress_to_file(path, raw.view(), comp, tmp.path());
      raw.clear();
      return load_sqlite(tmp.path(), path);
    }
    // JSON is parsed as it is inflated where it can be; anything the readers cannot take (concatenated gzip
    // members, zstd frames without their sizes, a damaged file) is decompressed whole, the usual way.
    if (options.threads != 1 && raw.size() >= kStreamedCompressedBytes && looks_like_json(head)) {
      std::optional<Trace> t;
      if (comp == import::Compression::Gzip && import::GzipReader::usable(raw.view()))
        t = import_inflating<import::GzipReader>(path, raw.view(), options);
      else if (comp == import::Compression::Zstd && import::ZstdReader::usable(raw.view()))
        t = import_inflating<import::ZstdReader>(path, raw.view(), options);
      if (t) return std::move(*t);
    }
    json = import::decompress(path, raw.view(), comp, options.progress);
    raw.clear();
  } else {
    json = std::move(raw);
  }
  if (!looks_like_json(json.view().substr(0, 4096)))
    throw StoreError(path, unknown_format(json.view().substr(0, 8)));
  return importer_for(path, options).import(json.data(), json.size());
}

// "f:55,s:55" + "(ts not a time):3,f:2" = "(ts not a time):3,f:57,s:55": the importers' counts of what they left
// out, over every file merged (the first file's alone were kept, and a second file's malformed events went unsaid).
static std::string add_counts(const std::string& a, const std::string& b) {
  std::map<std::string, int64_t> n;
  for (const std::string* text : {&a, &b})
    for (const auto& [what, count] : import::parse_event_counts(*text))
      if (count >= 0) n[what] += count;
  return import::join_event_counts(n);
}

void merge_into(Trace& into, const Trace& from) {
  // String ids of `from` → ids in `into`, interned lazily.
  std::vector<store::StringId> map(from.strings.size(), -1);
  auto s = [&](store::StringId id) -> store::StringId {
    if (id <= 0 || static_cast<size_t>(id) >= map.size()) return 0;
    if (map[id] < 0) map[id] = into.intern(from.str(id));
    return map[id];
  };
  for (const auto& [k, v] : from.meta)
    if (!into.meta.count(k)) into.meta[k] = v;
    else if (k == "import.dropped_events" || k == "import.unread_device_events") into.meta[k] = add_counts(into.meta[k], v);
  int64_t frame_base = 0, stack_base = 0;
  for (const auto& f : into.frames) frame_base = std::max(frame_base, f.id);
  for (const auto& st : into.stacks) stack_base = std::max(stack_base, st.id);
  store::visit_remapped(from, s, frame_base, stack_base, [&into](const auto& row) { into.add(row); });
}

Trace load_traces(const std::vector<std::string>& paths, const LoadOptions& options) {
  if (paths.size() == 1) return load_trace(paths[0], options);
  // One file given twice is every row twice, merged without a word (`analyze` of the pair refused it, `import` did
  // not): the same file by any path, hard links included.
  for (size_t i = 0; i < paths.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      if (std::filesystem::equivalent(paths[i], paths[j], ec))
        throw StoreError(paths[i], "given twice (as " + paths[j] + "): each file once");
    }
  Trace all;
  for (size_t i = 0; i < paths.size(); ++i) {
    Trace t = load_trace(paths[i], options);
    if (i == 0) {
      all = std::move(t);
      continue;
    }
    merge_into(all, t);
  }
  if (paths.size() > 1) {
    std::string files;
    for (const auto& p : paths) files += (files.empty() ? "" : ";") + p;
    all.meta["source_file"] = files;
  }
  sort_by_time(all);
  return all;
}

void sort_by_time(store::Trace& all) {
  auto by_start = [](const auto& a, const auto& b) { return a.start < b.start; };
  std::stable_sort(all.kernels.begin(), all.kernels.end(), by_start);
  std::stable_sort(all.memcpys.begin(), all.memcpys.end(), by_start);
  std::stable_sort(all.memsets.begin(), all.memsets.end(), by_start);
  std::stable_sort(all.syncs.begin(), all.syncs.end(), by_start);
  std::stable_sort(all.api_calls.begin(), all.api_calls.end(), by_start);
  std::stable_sort(all.ranges.begin(), all.ranges.end(), by_start);
  std::stable_sort(all.data_waits.begin(), all.data_waits.end(), by_start);
  std::stable_sort(all.steps.begin(), all.steps.end(), by_start);
  std::stable_sort(all.samples.begin(), all.samples.end(),
                   [](const auto& a, const auto& b) { return a.time < b.time; });
}

}  // namespace stepscope::analyzer
