// The Kineto importer's chunked parse (several threads, each on a run of whole events) gives the one pass's
// trace exactly — rows, their order, string ids, labels' ids, meta — on the shared traces and on files built
// to make its guesses wrong; a cut it cannot prove sends the file to the one pass.
#include <sqlite3.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "import/decompress.h"
#include "import/kineto_parser.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using namespace stepscope::analyzer::import;
namespace fs = std::filesystem;

namespace {

// Every table of a store written as rows, in rowid order, one line a row.
std::vector<std::string> dump(const std::string& path) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  std::vector<std::string> tables, lines;
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name", -1, &st,
                             nullptr) == SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW)
    tables.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  sqlite3_finalize(st);
  for (const auto& t : tables) {
    REQUIRE(sqlite3_prepare_v2(db, ("SELECT * FROM \"" + t + "\"").c_str(), -1, &st, nullptr) == SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::string line = t;
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* v = sqlite3_column_text(st, c);
        line += "|" + (v ? std::string(reinterpret_cast<const char*>(v)) : std::string("NULL"));
      }
      lines.push_back(std::move(line));
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return lines;
}

// The same trace, row for row: both written as stores of rows and read back table by table.
void require_same(const store::Trace& a, const store::Trace& b, const std::string& what) {
  test::ScratchDir dir("kineto_chunked_parse_" + std::to_string(::getpid()));  // ctest runs cases at once
  std::string pa = (fs::path(dir.path()) / "a.db").string(), pb = (fs::path(dir.path()) / "b.db").string();
  store::write_store_atomically(a, pa, false);
  store::write_store_atomically(b, pb, false);
  std::vector<std::string> da = dump(pa), db = dump(pb);
  INFO(what);
  REQUIRE(da.size() == db.size());
  for (size_t i = 0; i < da.size(); ++i) {
    if (da[i] != db[i]) FAIL_CHECK("row " << i << ": one pass " << da[i] << " | chunked " << db[i]);
  }
}

// The text in a buffer with simdjson's padding, as the loader gives it.
PaddedBuffer padded(const std::string& json) {
  PaddedBuffer buf;
  buf.reserve(json.size());
  buf.resize(json.size());
  std::copy(json.begin(), json.end(), buf.data());
  return buf;
}

store::Trace parse(const std::string& json, const KinetoParseOptions& o, KinetoParseReport* r = nullptr) {
  PaddedBuffer buf = padded(json);
  return parse_kineto_json(buf.data(), buf.size(), "mem.json", {}, o, r);
}

// The text read in order as a decompressor gives it, `stop` bytes of it at most (a source that fails there).
store::Trace streamed(const std::string& json, const KinetoParseOptions& o, KinetoParseReport* r = nullptr,
                      size_t stop = SIZE_MAX, const std::function<void(uint64_t, uint64_t)>& progress = {},
                      const std::string& file = "mem.json") {
  size_t at = 0;
  auto read = [&](char* dst, size_t n) {
    const size_t k = std::min({n, json.size() - at, stop - std::min(stop, at)});
    std::memcpy(dst, json.data() + at, k);
    at += k;
    return k;
  };
  return parse_kineto_stream(json.size(), read, file, progress, o, r);
}

// Every progress call, and whether one came from a thread other than the one that made the log.
struct ProgressLog {
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  bool other_thread = false;
  std::thread::id me = std::this_thread::get_id();
  std::function<void(uint64_t, uint64_t)> callback() {
    return [this](uint64_t done, uint64_t total) {
      other_thread |= std::this_thread::get_id() != me;
      calls.emplace_back(done, total);
    };
  }
};

// `text` as one gzip member (zlib, level 6).
std::string gzip_of(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

KinetoParseOptions one_pass() {
  KinetoParseOptions o;
  o.chunks = false;
  return o;
}

KinetoParseOptions cut(unsigned threads, size_t bytes) {
  KinetoParseOptions o;
  o.threads = threads;
  o.chunk_bytes = bytes;
  return o;
}

// A Kineto-like trace: kernels with their launches, host ops, a labelled pid ("Spans"), names whose text
// look like a cut ("}, {"), escapes, and `extra` events appended.
std::string synthetic(int events, const std::string& extra = "", bool events_first = false) {
  std::string ev;
  for (int i = 0; i < events; ++i) {
    int64_t ts = 1700000000000000 + i * 10;
    std::string n = std::to_string(i);
    if (!ev.empty()) ev += ",\n  ";
    switch (i % 5) {
      case 0:
        ev += R"({"ph": "X", "cat": "kernel", "name": "gemm_)" + n + R"(", "pid": 0, "tid": 7, "ts": )" +
              std::to_string(ts) + R"(.125, "dur": 3.5, "args": {"device": 0, "stream": 7, "correlation": )" +
              n + R"(, "grid": [1, 2, 3], "block": [128, 1, 1]}})";
        break;
      case 1:
        ev +=
            R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 42, "tid": 43, "ts": )" +
            std::to_string(ts) + R"(, "dur": 2, "args": {"correlation": )" + n + "}}";
        break;
      case 2:
        ev += R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm \"q\" }, {)" + n +
              R"(", "pid": 42, "tid": 43, "ts": )" + std::to_string(ts) +
              R"(, "dur": 9, "args": {"Input Dims": [[2, 3], [3, 4]], "x": [{"a": 1}, {"b": 2}]}})";
        break;
      case 3:
        ev += R"({"ph": "M", "name": "thread_name", "pid": "Spans", "tid": ")" +
              std::string(i % 2 ? "" : "main") + R"(", "args": {"name": "spans )" + n + R"("}})";
        break;
      default:
        ev += R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#)" + n +
              R"(", "pid": "Spans", "tid": "", "ts": )" + std::to_string(ts) + R"(, "dur": 5})";
        break;
    }
  }
  if (!extra.empty()) ev += ",\n  " + extra;
  std::string devices = R"("deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],)";
  std::string events_key = "\"traceEvents\": [\n  " + ev + "\n  ]";
  if (events_first) return "{\n  " + events_key + ",\n  " + devices + "\n  \"traceName\": \"a]b}, {c\"\n}\n";
  return "{\n  \"schemaVersion\": 1,\n  " + devices + "\n  " + events_key +
         ",\n  \"traceName\": \"x\",\n  \"baseTimeNanoseconds\": 1000\n}\n";
}

// Host ops on labelled pids and tids, nothing that looks like a cut: the array's elements only.
std::string labelled_ops(int n) {
  std::string ops;
  for (int i = 0; i < n; ++i) {
    if (!ops.empty()) ops += ",\n";
    ops += R"({"ph": "X", "cat": "cpu_op", "name": "op)" + std::to_string(i % 7) + R"(", "pid": ")" +
           std::string(i % 3 ? "main" : "Spans") + R"(", "tid": ")" + std::string(i % 2 ? "" : "worker") +
           R"(", "ts": )" + std::to_string(1000 + i) + R"(, "dur": 1})";
  }
  return ops;
}

}  // namespace

TEST_CASE("chunked parse: the one pass's trace on the shared traces, at any cut and thread count") {
  if (!test::have_traces()) {
    WARN("SKIPPED: shared traces not present: " << test::traces_dir());
    return;
  }
  // Kineto with labels ("Spans", ""), the events array before the device table, a top-level array (nsys's
  // Chrome dialect), a CPU-only trace, and the bench's largest.
  for (const char* rel : {"param/dlrm_8gpu_worker2.json.gz", "tracelens/h100_bert_small_inference.json.gz",
                          "nsys/nsys_chrome_dialect_vllm.json.gz", "hta/cpu_only.json.gz",
                          "hta/trace_diff_control_a100.json.gz"}) {
    std::string path = test::trace_path(rel);
    PaddedBuffer raw = read_file(path);
    PaddedBuffer json = decompress(path, raw.view(), compression_of(raw.view()));
    store::Trace a = parse_kineto_json(json.data(), json.size(), path, {}, one_pass());
    for (auto [threads, bytes] : {std::pair{2u, size_t{4096}}, std::pair{3u, size_t{300000}}}) {
      KinetoParseReport r;
      store::Trace b = parse_kineto_json(json.data(), json.size(), path, {}, cut(threads, bytes), &r);
      INFO(rel << " threads " << threads << " chunk bytes " << bytes);
      CHECK(r.chunked);
      CHECK(r.chunks >= 2);
      require_same(a, b, rel);
    }
  }
}

// A gzip trace parsed as it is inflated (GzipReader into parse_kineto_stream): the one pass's trace and the
// whole text's cuts, the text held in a few chunk buffers, never whole; a source that stops says NotStreamed.
TEST_CASE(
    "streamed parse: a text parsed as it is inflated gives the one pass's trace and cuts in a few buffers") {
  if (!test::have_traces()) {
    WARN("SKIPPED: shared traces not present: " << test::traces_dir());
    return;
  }
  for (const char* rel : {"param/dlrm_8gpu_worker2.json.gz", "nsys/nsys_chrome_dialect_vllm.json.gz",
                          "hta/trace_diff_control_a100.json.gz"}) {
    std::string path = test::trace_path(rel);
    PaddedBuffer raw = read_file(path);
    PaddedBuffer json = decompress(path, raw.view(), compression_of(raw.view()));
    const std::string text(json.view());
    store::Trace a = parse_kineto_json(json.data(), json.size(), path, {}, one_pass());
    INFO(rel << ", " << json.size() << " bytes");
    // The cuts a parse of the whole text makes, for each setting below.
    auto whole_chunks = [&](const KinetoParseOptions& o) {
      KinetoParseReport r;
      parse_kineto_json(json.data(), json.size(), path, {}, o, &r);
      REQUIRE(r.chunked);
      return r.chunks;
    };
    // At most three chunks a thread read and not yet back for reuse, and the two being cut, each at most
    // twice a chunk (a long event at the cut); and the head.
    auto held = [](unsigned threads, size_t chunk_bytes) {
      return (3 * threads + 2) * 2 * (chunk_bytes + 4096) + (size_t{256} << 10);
    };
    if (GzipReader::usable(raw.view())) {
      GzipReader reader(raw.view());
      REQUIRE(reader.size() == json.size());
      KinetoParseOptions o = cut(2, 256 << 10);
      KinetoParseReport r;
      store::Trace b = parse_kineto_stream(
          reader.size(), [&](char* dst, size_t n) { return reader.read(dst, n); }, path, {}, o, &r);
      CHECK(reader.finish());
      CHECK(r.chunked);
      CHECK(r.chunks == whole_chunks(o));
      CHECK(r.streamed_buffer_bytes <= held(2, 256 << 10));
      require_same(a, b, std::string(rel) + " (GzipReader)");
    } else {
      WARN("this build has no ISA-L: GzipReader not tested on " << rel);
    }
    for (unsigned threads : {2u, 3u}) {
      KinetoParseOptions o = cut(threads, 100000);
      KinetoParseReport r;
      store::Trace b = streamed(text, o, &r, SIZE_MAX, {}, path);
      CHECK(r.chunked);
      CHECK(r.chunks == whole_chunks(o));
      CHECK(r.streamed_buffer_bytes <= held(threads, 100000));
      if (json.size() > (size_t{8} << 20)) CHECK(r.streamed_buffer_bytes < json.size() / 4);
      require_same(a, b, std::string(rel) + " (streamed), threads " + std::to_string(threads));
    }
    // Bytes that stop coming half way (a damaged file): NotStreamed, whoever read the last of them.
    for (size_t stop : {size_t{1000}, json.size() / 2, json.size() - 1})
      CHECK_THROWS_AS(streamed(text, cut(2, 100000), nullptr, stop), NotStreamed);
  }
}

TEST_CASE("streamed parse: a long tail after the array, cut like events, is rebuilt from the kept chunks") {
  // The events array first, then a device table of 400 entries ("}, {" all along: cuts after the array's
  // end, chunks that parse as whole "events" and chunks that do not parse) and a name that looks like a cut.
  std::string devices;
  for (int i = 0; i < 400; ++i)
    devices += (i ? ", " : "") + std::string(R"({"id": )") + std::to_string(i) + R"(, "name": "gpu )" +
               std::to_string(i) + R"(", "numSms": 132})";
  std::string json = synthetic(600, "", true);
  const size_t at = json.find("\"deviceProperties\": [") + 21;
  json.replace(at, json.find(']', at) - at, devices);
  store::Trace a = parse(json, one_pass());
  REQUIRE(a.devices.size() == 400);
  for (size_t bytes : {size_t{700}, size_t{3000}}) {
    KinetoParseReport r;
    store::Trace b = streamed(json, cut(2, bytes), &r);
    CHECK(r.chunked);
    require_same(a, b, "chunks of " + std::to_string(bytes) + " bytes");
  }
}

TEST_CASE("streamed parse: what cannot be parsed so says NotStreamed, never another trace") {
  // Guesses inside strings and nested values; an "E" whose "B" is in an earlier chunk; bad files.
  std::string json = synthetic(400);
  CHECK_THROWS_AS(streamed(json, cut(2, 1)), NotStreamed);
  std::string end = R"({"ph": "E", "pid": 1, "tid": 1, "ts": 999999999})";
  std::string begin_end = synthetic(200, end);
  begin_end.replace(
      begin_end.find("\"traceEvents\": [\n  ") + 19, 0,
      R"({"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 1000},)");
  CHECK_THROWS_AS(streamed(begin_end, cut(2, 2000)), NotStreamed);
  std::string good = synthetic(300, "", true);
  for (const std::string& bad : {good.substr(0, good.size() / 2), good.substr(0, good.find("\n  ],")),
                                 std::string(good).replace(good.find("\"ph\""), 4, "\"ph"),
                                 std::string(good).insert(good.find("[\n  {") + 4, "7, "),
                                 std::string("{\"traceEvents\": 5}"), std::string("{\"x\": [1, 2]}")})
    CHECK_THROWS_AS(streamed(bad, cut(2, 500)), NotStreamed);
  // Where it can, the same trace as the one pass: labels, a top-level array, the array after other keys.
  std::string plain = labelled_ops(300);
  for (const std::string& ok :
       {"[" + plain + "]\n", "{\"traceName\": \"a]}, {b\", \"traceEvents\": [" + plain + "]}"}) {
    KinetoParseReport r;
    store::Trace b = streamed(ok, cut(3, 1000), &r);
    CHECK(r.chunked);
    require_same(parse(ok, one_pass()), b, ok.substr(0, 40));
  }
}

TEST_CASE("streamed parse: progress on the calling thread, in order, and a cancel is the caller's, once") {
  std::string json = "{\"traceEvents\": [" + labelled_ops(20000) + "]}";
  ProgressLog log;
  auto& calls = log.calls;
  KinetoParseReport r;
  streamed(json, cut(3, 4096), &r, SIZE_MAX, log.callback());
  CHECK(r.chunked);
  CHECK_FALSE(log.other_thread);
  REQUIRE(calls.size() >= 2);
  // Every chunk's text, the last to the end of the file: all but the ",\n" between chunks.
  CHECK(calls.back().first == json.size() - 2 * (r.chunks - 1));
  for (size_t i = 0; i < calls.size(); ++i) {
    CHECK(calls[i].second == json.size());
    if (i) CHECK(calls[i].first >= calls[i - 1].first);
  }
  int cancels = 0;
  std::function<void(uint64_t, uint64_t)> cancel = [&](uint64_t, uint64_t) {
    ++cancels;
    throw std::runtime_error("cancelled");
  };
  CHECK_THROWS_WITH(streamed(json, cut(2, 4096), nullptr, SIZE_MAX, cancel), "cancelled");
  CHECK(cancels == 1);
  // A cancel at the very end (the call that reports the whole parse, often the calling thread's only one
  // once the others took the last chunks) is the caller's too, in the streamed and the in-memory parse.
  const uint64_t last = calls.back().first;
  std::function<void(uint64_t, uint64_t)> cancel_at_end = [&](uint64_t done, uint64_t) {
    if (done == last) throw std::runtime_error("cancelled at the end");
  };
  PaddedBuffer buf = padded(json);
  uint64_t whole_last = 0;
  std::function<void(uint64_t, uint64_t)> note = [&](uint64_t done, uint64_t) { whole_last = done; };
  parse_kineto_json(buf.data(), buf.size(), "mem.json", note, cut(4, 4096));
  std::function<void(uint64_t, uint64_t)> cancel_whole_at_end = [&](uint64_t done, uint64_t) {
    if (done == whole_last) throw std::runtime_error("cancelled at the end");
  };
  for (int i = 0; i < 50; ++i) {
    CHECK_THROWS_WITH(streamed(json, cut(4, 4096), nullptr, SIZE_MAX, cancel_at_end), "cancelled at the end");
    CHECK_THROWS_WITH(
        parse_kineto_json(buf.data(), buf.size(), "mem.json", cancel_whole_at_end, cut(4, 4096)),
        "cancelled at the end");
  }
}

// load_trace streams a one-member gzip file; what the stream cannot take is decompressed whole, with the same
// result or the same one-line error as before.
TEST_CASE(
    "chunked parse: load_trace of gzip files the stream cannot take: two members, a forged size, damage") {
  if (!test::have_traces()) {
    WARN("SKIPPED: shared traces not present: " << test::traces_dir());
    return;
  }
  test::ScratchDir dir("kineto_chunked_gzip_" + std::to_string(::getpid()));
  const std::string path = test::trace_path("hta/trace_diff_control_a100.json.gz");
  PaddedBuffer raw = read_file(path);
  PaddedBuffer json = decompress(path, raw.view(), compression_of(raw.view()));
  const store::Trace one = parse_kineto_json(json.data(), json.size(), path, {}, one_pass());
  auto write = [&](const std::string& name, const std::string& bytes) {
    const std::string p = dir.file(name);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  };
  const std::string gz(raw.data(), raw.size());
  auto meta_free = [](store::Trace t) {
    t.meta.erase("source_file");
    return t;
  };
  // As it is: streamed (where ISA-L is), the one pass's trace.
  // As it is: parsed as it is inflated (where ISA-L is), its text never whole, the one pass's trace.
  analyzer::LoadReport report;
  analyzer::LoadOptions reported;
  reported.report = &report;
  require_same(meta_free(one), meta_free(analyzer::load_trace(path, reported)), "streamed");
  if (GzipReader::usable(raw.view())) {
    CHECK(report.streamed);
    CHECK(report.text_buffer_bytes > 0);
    CHECK(report.text_buffer_bytes < json.size() / 4);
  } else {
    CHECK_FALSE(report.streamed);
  }
  // The same text as a plain file: parsed as it is read, never whole; cut short, the one pass's error.
  report = {};
  const std::string plain = write("plain.json", std::string(json.view()));
  require_same(meta_free(one), meta_free(analyzer::load_trace(plain, reported)), "read as parsed");
  CHECK(report.streamed);
  CHECK(report.text_buffer_bytes < json.size() / 4);
  report = {};
  const std::string cut_short = write("cut_short.json", std::string(json.view().substr(0, json.size() / 2)));
  std::string one_pass_error;
  try {
    parse_kineto_json(json.data(), json.size() / 2, cut_short, {}, one_pass());
  } catch (const store::StoreError& e) {
    one_pass_error = e.what();
  }
  CHECK_FALSE(one_pass_error.empty());
  CHECK_THROWS_WITH(analyzer::load_trace(cut_short, reported), one_pass_error);
  CHECK_FALSE(report.streamed);
  // As zstd: with its frame's size, parsed as it is inflated; without (a stream the tool did not size),
  // decompressed whole. The same trace both ways.
  std::string zst(ZSTD_compressBound(json.size()), '\0');
  zst.resize(ZSTD_compress(zst.data(), zst.size(), json.data(), json.size(), 1));
  REQUIRE_FALSE(ZSTD_isError(zst.size()));
  report = {};
  require_same(meta_free(one), meta_free(analyzer::load_trace(write("sized.json.zst", zst), reported)),
               "zstd");
  CHECK(report.streamed);
  CHECK(report.text_buffer_bytes < json.size() / 4);
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  REQUIRE(ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 0) == 0);
  std::string unsized(ZSTD_compressBound(json.size()), '\0');
  unsized.resize(ZSTD_compress2(cctx, unsized.data(), unsized.size(), json.data(), json.size()));
  ZSTD_freeCCtx(cctx);
  REQUIRE_FALSE(ZSTD_isError(unsized.size()));
  report = {};
  require_same(meta_free(one), meta_free(analyzer::load_trace(write("unsized.json.zst", unsized), reported)),
               "zstd, no size");
  CHECK_FALSE(report.streamed);
  // A zstd file cut short: refused as the whole-file path refuses it.
  CHECK_THROWS_WITH(analyzer::load_trace(write("short.json.zst", zst.substr(0, zst.size() - 100))),
                    Catch::Contains("zstd data"));
  // The text whole and parsed, its gzip not: 5,000 blanks more than the forged trailer says. The parse
  // succeeds, the reader's end says no, and the whole-file path refuses the file.
  const std::string padded_text = std::string(json.view()) + std::string(5000, ' ');
  std::string longer = gzip_of(padded_text);
  const uint32_t text_size = static_cast<uint32_t>(json.size());
  std::memcpy(longer.data() + longer.size() - 4, &text_size, 4);
  CHECK_THROWS_WITH(analyzer::load_trace(write("longer.json.gz", longer)),
                    Catch::Contains("truncated or corrupt gzip data"));
  // A forged trailer size: the stream stops short, and the whole-file path refuses the file as it did.
  std::string forged = gz;
  const uint32_t smaller = static_cast<uint32_t>(json.size() - 4096);
  std::memcpy(forged.data() + forged.size() - 4, &smaller, 4);
  CHECK_THROWS_WITH(analyzer::load_trace(write("forged.json.gz", forged)),
                    Catch::Contains("truncated or corrupt gzip data"));
  // Two members (gzip a >> b): the reader's end finds the second, the whole file is two JSON documents,
  // said as before.
  const std::string two = write("two.json.gz", gz + gz);
  std::string whole_error, load_error;
  report = {};
  try {
    PaddedBuffer both = decompress(two, std::string_view(gz + gz), Compression::Gzip);
    parse_kineto_json(both.data(), both.size(), two, {}, one_pass());
  } catch (const store::StoreError& e) {
    whole_error = e.what();
  }
  try {
    analyzer::load_trace(two, reported);
  } catch (const store::StoreError& e) {
    load_error = e.what();
  }
  CHECK(load_error == whole_error);
  CHECK_FALSE(report.streamed);
  // A bit flipped in the deflate data, and a reserved header flag: one line, as the whole-file path says.
  std::string flipped = gz;
  flipped[gz.size() / 2] = static_cast<char>(flipped[gz.size() / 2] ^ 0x5a);
  CHECK_THROWS_WITH(analyzer::load_trace(write("flipped.json.gz", flipped)),
                    Catch::Contains("truncated or corrupt gzip data"));
  std::string reserved = gz;
  reserved[3] = static_cast<char>(reserved[3] | 0x20);
  CHECK_FALSE(GzipReader::usable(reserved));
  CHECK_THROWS_WITH(analyzer::load_trace(write("reserved.json.gz", reserved)),
                    Catch::Contains("truncated or corrupt gzip data"));
}

TEST_CASE("chunked parse: guesses inside strings and nested values send the file to the one pass") {
  std::string json = synthetic(400);
  store::Trace a = parse(json, one_pass());
  REQUIRE(a.kernels.size() == 80);
  REQUIRE(a.steps.size() == 80);
  KinetoParseReport r;
  // Cut everywhere: some guesses fall inside a name ("}, {") or inside args' [{...}, {...}].
  store::Trace b = parse(json, cut(2, 1), &r);
  CHECK_FALSE(r.chunked);
  require_same(a, b, "cut at every guess");
}

TEST_CASE("chunked parse: labels, the events array first and a top-level array keep their ids") {
  std::string plain = labelled_ops(300);
  for (const std::string& json :
       {"{\"traceEvents\": [" + plain + "], \"deviceProperties\": [{\"id\": 0, \"name\": \"B200\"}]}",
        "[" + plain + "]\n", "{\"traceName\": \"a]}, {b\", \"traceEvents\": [" + plain + "]}"}) {
    store::Trace a = parse(json, one_pass());
    REQUIRE(a.ranges.size() == 300);
    for (size_t bytes : {size_t{100}, size_t{1000}}) {
      KinetoParseReport r;
      store::Trace b = parse(json, cut(3, bytes), &r);
      CHECK(r.chunked);
      require_same(a, b, json.substr(0, 40));
    }
  }
}

TEST_CASE("chunked parse: what a chunk cannot know alone goes to the one pass") {
  // An "E" whose "B" is in an earlier chunk; a pid equal to the ids chunks give their labels.
  std::string begin_end =
      R"({"ph": "B", "name": "outer", "cat": "user_annotation", "pid": 1, "tid": 1, "ts": 1000})";
  std::string end = R"({"ph": "E", "pid": 1, "tid": 1, "ts": 999999999})";
  std::string json = synthetic(200, end);
  json.replace(json.find("\"traceEvents\": [\n  ") + 19, 0, begin_end + ",\n  ");
  store::Trace a = parse(json, one_pass());
  KinetoParseReport r;
  store::Trace b = parse(json, cut(2, 2000), &r);
  CHECK_FALSE(r.chunked);
  require_same(a, b, "B and E in different chunks");
  REQUIRE(a.ranges.size() > 0);

  // A number equal to the id one pass gives the first label (2^40): one key there, two in a chunk.
  std::string collide =
      R"({"traceEvents": [{"ph": "B", "cat": "user_annotation", "name": "first", "pid": "Spans", "tid": 1, "ts": 1},)"
      R"({"ph": "B", "cat": "user_annotation", "name": "second", "pid": 1099511627776, "tid": 1, "ts": 2},)"
      R"({"ph": "M", "name": "process_name", "pid": "Spans", "args": {"name": "A"}},)"
      R"({"ph": "M", "name": "process_name", "pid": 1099511627776, "args": {"name": "B"}},)"
      R"({"ph": "E", "pid": "Spans", "tid": 1, "ts": 5}]})";
  store::Trace e = parse(collide, one_pass());
  store::Trace f = parse(collide, cut(2, 100000), &r);
  CHECK_FALSE(r.chunked);
  require_same(e, f, "a pid among one pass's label ids");
  REQUIRE(e.ranges.size() == 1);
  CHECK(e.str(e.ranges[0].name) == "second");

  std::string big_pid = R"({"ph": "X", "cat": "cpu_op", "name": "x", "pid": 8070450532247928832, "tid": 1,)"
                        R"( "ts": 5, "dur": 1})";
  std::string json2 = synthetic(200, big_pid);
  store::Trace c = parse(json2, one_pass());
  store::Trace d = parse(json2, cut(2, 2000), &r);
  CHECK_FALSE(r.chunked);
  require_same(c, d, "a pid in the chunks' label ids");
}

TEST_CASE("chunked parse: bad files say what the one pass says") {
  std::string good = synthetic(300, "", true);
  std::vector<std::string> bad = {
      good.substr(0, good.size() / 2),                            // truncated mid-array
      good.substr(0, good.find("\n  ],")),                        // the array never closes
      std::string(good).replace(good.find("\"ph\""), 4, "\"ph"),  // an unclosed string
      std::string(good).insert(good.find("[\n  {") + 4, "7, "),   // a number among the events
  };
  for (const auto& json : bad) {
    std::string serial_error, chunked_error;
    try {
      parse(json, one_pass());
    } catch (const std::exception& e) {
      serial_error = e.what();
    }
    try {
      parse(json, cut(2, 500));
    } catch (const std::exception& e) {
      chunked_error = e.what();
    }
    CHECK_FALSE(serial_error.empty());
    CHECK(chunked_error == serial_error);
  }
}

TEST_CASE("chunked parse: progress is reported on the calling thread, in order, within the file") {
  // Chunked through, and a file whose last "E" closes the first "B": chunked, then parsed again in one pass
  // (70,000 events: the one pass reports every 16,384), with progress that never goes back.
  std::string ops = labelled_ops(70000);
  for (const std::string& json :
       {"{\"traceEvents\": [" + labelled_ops(3500) + "]}",
        R"({"traceEvents": [{"ph": "B", "name": "all", "pid": 1, "tid": 1, "ts": 1},)" + ops +
            R"(,{"ph": "E", "pid": 1, "tid": 1, "ts": 999999}]})"}) {
    PaddedBuffer buf = padded(json);
    ProgressLog log;
    auto& calls = log.calls;
    KinetoParseReport r;
    parse_kineto_json(buf.data(), buf.size(), "mem.json", log.callback(), cut(3, 4096), &r);
    CHECK(r.chunked == (json.size() < ops.size()));
    CHECK_FALSE(log.other_thread);
    REQUIRE_FALSE(calls.empty());
    for (size_t i = 0; i < calls.size(); ++i) {
      CHECK(calls[i].second == json.size());
      CHECK(calls[i].first <= json.size());
      if (i) CHECK(calls[i].first >= calls[i - 1].first);
    }
  }
}

TEST_CASE("chunked parse: an exception from the progress callback (a cancel) is the caller's") {
  std::string json = "{\"traceEvents\": [" + labelled_ops(20000) + "]}";
  PaddedBuffer buf = padded(json);
  int calls = 0;
  std::function<void(uint64_t, uint64_t)> cancel = [&](uint64_t, uint64_t) {
    ++calls;
    throw std::runtime_error("cancelled");
  };
  CHECK_THROWS_WITH(parse_kineto_json(buf.data(), buf.size(), "mem.json", cancel, cut(2, 4096)), "cancelled");
  CHECK(calls == 1);  // not parsed again in one pass after the cancel
}

// Every table a chunk merges has fields that take the file's string and label ids (ChunkIds): kernels and
// copies their device and stream from labelled pids and tids, syncs and API calls their pid and tid, data
// waits and steps their source too. One pass, chunked and streamed give the same rows.
TEST_CASE("chunked parse: labels and names on every table a chunk merges") {
  const char* labels[] = {"Spans", "Traces", "GPU A", "", "zz"};
  std::string events;
  for (int i = 0; i < 3000; ++i) {
    const std::string ts = std::to_string(1000 + (i * 37) % 5000);
    const std::string pid = labels[(i * 3 + i / 400) % 5], tid = labels[(i + i / 700) % 5];
    const std::string where =
        "\"pid\": \"" + pid + "\", \"tid\": \"" + tid + "\", \"ts\": " + ts + ", \"dur\": 2";
    const std::string n = std::to_string((i * 7 + i / 500) % 23);  // names first seen in different chunks
    std::string e;
    switch (i % 8) {
      case 0:
        e = R"({"ph": "X", "cat": "kernel", "name": "k)" + n + "\", " + where +
            R"(, "args": {"correlation": )" + std::to_string(i) + "}}";
        break;
      case 1:
        e = R"x({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", )x" + where +
            "}";
        break;
      case 2:
        e = R"x({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", )x" + where + "}";
        break;
      case 3:
        e = R"({"ph": "X", "cat": "cuda_sync", "name": "Event Sync", )" + where + "}";
        break;
      case 4:
        e = R"({"ph": "X", "cat": "cuda_runtime", "name": "api)" + n + "\", " + where +
            R"(, "args": {"correlation": )" + std::to_string(i - 4) + "}}";
        break;
      case 5:
        e = R"({"ph": "X", "cat": "stepscope_data_wait", "name": "w", )" + where +
            R"(, "args": {"source": "src)" + n + "\"}}";
        break;
      case 6:
        e = R"({"ph": "X", "cat": "stepscope_step", "name": "s", )" + where + R"(, "args": {"source": "st)" +
            n + R"(", "index": 3}})";
        break;
      default:
        e = R"({"ph": "X", "cat": "gpu_user_annotation", "name": "g)" + n + "\", " + where + "}";
        break;
    }
    events += (events.empty() ? "" : ",\n") + e;
  }
  const std::string json = "{\"traceEvents\": [" + events + "]}";
  const store::Trace a = parse(json, one_pass());
  // Each table has rows, some with a label's id (2^40 on) and, where it has one, a source not every chunk
  // has.
  auto labelled = [](int64_t x) { return x >= (int64_t{1} << 40); };
  auto any = [](const auto& rows, auto pred) { return std::any_of(rows.begin(), rows.end(), pred); };
  CHECK(any(a.kernels, [&](const auto& k) { return labelled(k.device) && labelled(k.stream); }));
  CHECK(any(a.memcpys, [&](const auto& m) { return labelled(m.device) && labelled(m.stream); }));
  CHECK(any(a.memsets, [&](const auto& m) { return labelled(m.device) && labelled(m.stream); }));
  CHECK(any(a.syncs, [&](const auto& s) { return labelled(s.pid) && labelled(s.tid); }));
  CHECK(any(a.api_calls, [&](const auto& c) { return labelled(c.pid) && labelled(c.tid); }));
  CHECK(any(a.data_waits, [&](const auto& w) { return labelled(w.pid) && a.str(w.source) == "src22"; }));
  CHECK(any(a.steps, [&](const auto& s) { return labelled(s.tid) && a.str(s.source) == "st22"; }));
  CHECK(any(a.ranges, [&](const auto& r) { return labelled(r.pid) && a.str(r.name) == "g22"; }));
  for (unsigned threads : {1u, 2u, 4u})
    for (size_t bytes : {size_t{500}, size_t{7000}}) {
      const std::string what =
          std::to_string(threads) + " threads, chunks of " + std::to_string(bytes) + " bytes";
      KinetoParseReport r;
      require_same(a, parse(json, cut(threads, bytes), &r), "chunked, " + what);
      CHECK(r.chunked);
      KinetoParseReport s;
      require_same(a, streamed(json, cut(threads, bytes), &s), "streamed, " + what);
      CHECK(s.chunked);
    }
}
