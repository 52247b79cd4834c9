// What the importers take from each dialect, checked against facts read from the real traces themselves,
// Nsight Systems exports against SELECT count(*), and bad input.
#include <catch2/catch.hpp>
#include <sqlite3.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "import/numbers.h"
#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "test_support.h"

using namespace stepscope;
namespace fs = std::filesystem;

namespace {

// Each trace is loaded once per executable.
const store::Trace& trace(const std::string& rel) {
  static std::map<std::string, store::Trace> cache;
  auto it = cache.find(rel);
  if (it == cache.end()) it = cache.emplace(rel, analyzer::load_trace(test::trace_path(rel))).first;
  return it->second;
}

size_t count_api(const store::Trace& t, const std::string& name) {
  return size_t(std::count_if(t.api_calls.begin(), t.api_calls.end(),
                              [&](const store::ApiCall& a) { return t.str(a.name) == name; }));
}

std::string gunzip_to(const std::string& gz, const std::string& out) {
  gzFile in = gzopen(gz.c_str(), "rb");
  std::ofstream o(out, std::ios::binary);
  char buf[1 << 16];
  int n;
  while ((n = gzread(in, buf, sizeof buf)) > 0) o.write(buf, n);
  gzclose(in);
  return out;
}

int64_t scalar(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

std::string text(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  std::string v = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  sqlite3_finalize(st);
  return v;
}

// Points TMPDIR at a folder of this test's own while it lives: other tests running at the same time
// decompress traces into the shared temp folder, and their temporaries must not count as ours.
class PrivateTempDir {
 public:
  explicit PrivateTempDir(const std::string& name) : dir_(name) {
    if (const char* t = std::getenv("TMPDIR")) saved_ = t, had_ = true;
    ::setenv("TMPDIR", dir_.path().c_str(), 1);
  }
  ~PrivateTempDir() {
    if (had_)
      ::setenv("TMPDIR", saved_.c_str(), 1);
    else
      ::unsetenv("TMPDIR");
  }

 private:
  test::ScratchDir dir_;
  std::string saved_;
  bool had_ = false;
};

std::set<std::string> temp_imports() {
  std::set<std::string> out;
  std::error_code ec;
  for (auto& e : fs::directory_iterator(fs::temp_directory_path(), ec))
    if (e.path().filename().string().rfind("stepscope-import-", 0) == 0) out.insert(e.path().string());
  return out;
}

std::string load_error(const std::string& path) {
  try {
    analyzer::load_trace(path);
  } catch (const store::StoreError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("µs text becomes exact integer ns") {
  using analyzer::import::us_text_to_ns;
  CHECK(us_text_to_ns("1712195495505583.0") == 1712195495505583000);
  CHECK(us_text_to_ns("1712195495505583.2") == 1712195495505583200);
  CHECK(us_text_to_ns("4.928") == 4928);
  CHECK(us_text_to_ns("0.0005") == 1);    // half away from zero
  CHECK(us_text_to_ns("0.00049") == 0);
  CHECK(us_text_to_ns("-2.5") == -2500);
  CHECK(us_text_to_ns("1.5e3") == 1500000);
  CHECK(us_text_to_ns("21.200001") == 21200);
  CHECK(us_text_to_ns("1623142623460111") == 1623142623460111000);
  CHECK(analyzer::import::trailing_number("stream 7") == 7);
  CHECK(analyzer::import::trailing_number("CUDA API Thread 169") == 169);
}

TEST_CASE("Nsight Systems SQLite: counts equal SELECT count(*), names resolve through StringIds") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("import_nsys");
  PrivateTempDir tmp("import_nsys_tmp");
  auto before = temp_imports();
  const store::Trace& t = trace("nsys/cloverleaf_a100.sqlite.gz");
  CHECK(temp_imports() == before);  // the decompressed temporary is gone

  std::string plain = gunzip_to(test::trace_path("nsys/cloverleaf_a100.sqlite.gz"), dir.file("clover.sqlite"));
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open_v2(plain.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  CHECK(int64_t(t.kernels.size()) == scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"));
  CHECK(int64_t(t.memcpys.size()) == scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"));
  CHECK(int64_t(t.api_calls.size()) == scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"));
  CHECK(int64_t(t.syncs.size()) == scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"));
  CHECK(int64_t(t.samples.size()) == scalar(db, "SELECT count(*) FROM COMPOSITE_EVENTS"));
  std::string first = text(db,
                           "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                           "ORDER BY k.start LIMIT 1");
  REQUIRE(!t.kernels.empty());
  CHECK(t.str(t.kernels.front().name) == first);
  CHECK(t.kernels.front().start == scalar(db, "SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL"));
  CHECK(int64_t(count_api(t, "cudaLaunchKernel")) ==
        scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                   "WHERE s.value LIKE 'cudaLaunchKernel%'"));
  // globalTid decoding: every launch comes from the cloverleaf process.
  int64_t pid = scalar(db, "SELECT pid FROM PROCESSES WHERE name = 'cuda-cloverleaf'");
  for (const auto& k : t.kernels) REQUIRE(k.pid == pid);
  CHECK(std::count_if(t.memcpys.begin(), t.memcpys.end(), [](const store::Memcpy& m) {
          return m.kind == store::CopyKind::HtoD && m.src_kind == store::MemoryKind::Pageable &&
                 m.dst_kind == store::MemoryKind::Device;
        }) == scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 AND srcKind = 0"));
  // Sync types keep CUPTI's numbering (1 = event sync, the only kind this file has); each sync is joined to
  // the host process that waited.
  CHECK(std::count_if(t.syncs.begin(), t.syncs.end(), [](const store::Sync& s) {
          return s.type == store::SyncType::Event;
        }) == scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION WHERE syncType = 1"));
  CHECK(std::all_of(t.syncs.begin(), t.syncs.end(), [&](const store::Sync& s) { return s.pid == pid; }));
  // Samples carry stacks: leaf frames resolve to symbols.
  size_t with_stack = 0;
  for (const auto& s : t.samples) with_stack += s.stack != 0;
  CHECK(with_stack == size_t(scalar(db, "SELECT count(DISTINCT id) FROM SAMPLING_CALLCHAINS")));
  CHECK(t.meta.at("source_format") == "nsys-sqlite");
  CHECK(t.meta.at("nsys.schema_version") == "3.13.2");
  REQUIRE(!t.devices.empty());
  CHECK(t.str(t.devices[0].name) == "NVIDIA A100-SXM4-80GB");
  sqlite3_close(db);

  // The plain SQLite file gives the same trace.
  store::Trace p = analyzer::load_trace(plain);
  CHECK(p.kernels.size() == t.kernels.size());
  CHECK(p.samples.size() == t.samples.size());
}

TEST_CASE("legacy Kineto categories (Kernel, Runtime, Operator, string tids)") {
  STEPSCOPE_REQUIRE_TRACES();
  const store::Trace& t = trace("kineto/resnet50_num_workers_0.json.gz");
  CHECK(t.meta.at("source_format") == "kineto-json");
  CHECK(t.meta.at("chrome_dialect") == "kineto-legacy");
  CHECK(t.meta.at("clock_domain") == "realtime");
  REQUIRE(t.steps.size() == 6);
  for (size_t i = 1; i < t.steps.size(); ++i) CHECK(t.steps[i].index == t.steps[i - 1].index + 1);
  CHECK(t.data_waits.size() == 6);
  // "tid": "stream 7" and args.stream agree.
  CHECK(std::all_of(t.kernels.begin(), t.kernels.end(), [](const store::Kernel& k) { return k.stream == 7; }));
  CHECK(std::all_of(t.kernels.begin(), t.kernels.end(), [](const store::Kernel& k) { return k.correlation > 0; }));
  CHECK(count_api(t, "cudaLaunchKernel") > 8000);
  CHECK(std::count_if(t.memcpys.begin(), t.memcpys.end(), [](const store::Memcpy& m) {
          return m.kind == store::CopyKind::HtoD && m.src_kind == store::MemoryKind::Pageable;
        }) > 0);
  // Kernels are linked to the launching process (pid 25738 in the file).
  CHECK(t.kernels.front().pid == 25738);
  // Ranges nest: a ProfilerStep range is outermost, ops inside it deeper.
  bool step_at_0 = false, deeper = false;
  for (const auto& r : t.ranges) {
    if (t.str(r.name).rfind("ProfilerStep#", 0) == 0 && r.depth == 0) step_at_0 = true;
    if (r.source == store::RangeSource::Op && r.depth >= 2) deeper = true;
  }
  CHECK(step_at_0);
  CHECK(deeper);
  REQUIRE(!t.devices.empty());
  CHECK(t.str(t.devices[0].name) == "Tesla V100-DGXS-32GB");
  CHECK(t.devices[0].cc_major == 7);
}

TEST_CASE("timestamps: ns-resolution fractions and baseTimeNanoseconds are exact") {
  STEPSCOPE_REQUIRE_TRACES();
  const store::Trace& v = trace("hta/v100_resnet_gpu_bound_ns.json.gz");
  // First kernel in the file: "ts": 1712195495505582.988, "dur": 4.928 (through a double, the ts would
  // read 1712195495505583.0: 12 ns off).
  bool found = std::any_of(v.kernels.begin(), v.kernels.end(), [](const store::Kernel& k) {
    return k.start == 1712195495505582988 && k.end - k.start == 4928 && k.correlation == 135071;
  });
  CHECK(found);
  const store::Trace& b = trace("tracelens/b200_eager.json.gz");
  // First memcpy: "ts": 1365627865398.728 (µs after baseTimeNanoseconds 1767189312000000000), "dur": 1.6.
  int64_t want = 1767189312000000000 + 1365627865398728;
  bool got = std::any_of(b.memcpys.begin(), b.memcpys.end(), [&](const store::Memcpy& m) {
    return m.start == want && m.end - m.start == 1600 && m.bytes == 2048 && m.kind == store::CopyKind::HtoD &&
           m.src_kind == store::MemoryKind::Pinned;
  });
  CHECK(got);
  CHECK(b.meta.at("baseTimeNanoseconds") == "1767189312000000000");
  CHECK(count_api(b, "cuLaunchKernelEx") > 0);
}

TEST_CASE("cuda_sync events become syncs of the right type") {
  STEPSCOPE_REQUIRE_TRACES();
  const store::Trace& a = trace("hta/alexnet_a100.json.gz");
  CHECK(a.syncs.size() == 41);
  const store::Trace& m = trace("hta/cuda_event_sync_multi_stream.json.gz");
  std::map<store::SyncType, int> types;
  for (const auto& s : m.syncs) types[s.type]++;
  CHECK(types[store::SyncType::Event] > 0);
  CHECK(types[store::SyncType::StreamWaitEvent] > 0);
  CHECK(types[store::SyncType::Context] > 0);
  // A stream-wait sync names its stream; event syncs are not stream-specific (-1 in the file).
  for (const auto& s : m.syncs) {
    if (s.type == store::SyncType::StreamWaitEvent) CHECK(s.stream == 24);
    if (s.type == store::SyncType::Event) CHECK(s.stream == -1);
  }
  // Syncs are joined to the host call that waited.
  CHECK(std::any_of(m.syncs.begin(), m.syncs.end(), [](const store::Sync& s) { return s.pid > 0; }));
}

TEST_CASE("driver-API launches, HIP traces, distributedInfo and the nsys Chrome dialect") {
  STEPSCOPE_REQUIRE_TRACES();
  const store::Trace& tr = trace("hta/triton_driver_launch.json.gz");
  REQUIRE(tr.kernels.size() == 1);
  auto launch = std::find_if(tr.api_calls.begin(), tr.api_calls.end(),
                             [&](const store::ApiCall& a) { return tr.str(a.name) == "cuLaunchKernel"; });
  REQUIRE(launch != tr.api_calls.end());
  CHECK(launch->kind == store::ApiKind::Driver);
  CHECK(launch->correlation == tr.kernels[0].correlation);

  const store::Trace& amd = trace("tracelens/mi300x_ddp_resnet18.json.gz");
  CHECK(amd.meta.at("gpu_vendor") == "amd");
  CHECK(amd.meta.at("chrome_dialect") == "kineto-hip");
  CHECK(count_api(amd, "hipLaunchKernel") + count_api(amd, "hipExtModuleLaunchKernel") > 0);
  REQUIRE(!amd.devices.empty());
  CHECK(amd.str(amd.devices[0].vendor) == "amd");

  const store::Trace& r0 = trace("hta/a100_rank0_many_small_kernels.json.gz");
  CHECK(r0.meta.at("rank") == "0");
  CHECK(r0.meta.at("world_size") == "16");
  CHECK(r0.meta.at("backend") == "nccl");

  const store::Trace& ns = trace("nsys/nsys_chrome_dialect_vllm.json.gz");
  CHECK(ns.meta.at("chrome_dialect") == "nsys-chrome");
  CHECK(ns.meta.at("source_format") == "chrome-json");
  CHECK(count_api(ns, "cudaMemcpyAsync") > 0);  // "_v3020" suffix stripped
  CHECK(std::all_of(ns.api_calls.begin(), ns.api_calls.end(),
                    [](const store::ApiCall& a) { return a.pid == 169 && a.tid == 169; }));  // raw_pid / raw_tid
  CHECK(std::all_of(ns.kernels.begin(), ns.kernels.end(),
                    [](const store::Kernel& k) { return k.device == 0 && k.stream == 7 && k.correlation > 0; }));
  CHECK(std::any_of(ns.ranges.begin(), ns.ranges.end(),
                    [](const store::Range& r) { return r.source == store::RangeSource::GpuAnnotation; }));

  const store::Trace& cpu = trace("hta/cpu_only.json.gz");
  CHECK(cpu.gpu_event_count() == 0);
  CHECK(cpu.steps.size() == 5);
  CHECK(cpu.ranges.size() > 7000);
}

TEST_CASE("several ranks load into one trace") {
  STEPSCOPE_REQUIRE_TRACES();
  std::vector<std::string> files;
  size_t kernels = 0;
  for (int i = 0; i < 8; ++i) {
    std::string rel = "param/dlrm_8gpu_worker" + std::to_string(i) + ".json.gz";
    files.push_back(test::trace_path(rel));
    kernels += trace(rel).kernels.size();
  }
  store::Trace all = analyzer::load_traces(files);
  CHECK(all.kernels.size() == kernels);
  CHECK(all.steps.size() == 8);
  CHECK(std::is_sorted(all.kernels.begin(), all.kernels.end(),
                       [](const store::Kernel& a, const store::Kernel& b) { return a.start < b.start; }));
  // Names survive the string-table merge.
  for (const auto& k : all.kernels) REQUIRE(!all.str(k.name).empty());
}

TEST_CASE("bad input: one-line errors naming the file and the reason, no temporaries left") {
  test::ScratchDir dir("import_bad");
  PrivateTempDir tmp("import_bad_tmp");
  auto before = temp_imports();
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(dir.file(name), std::ios::binary) << bytes;
    return dir.file(name);
  };
  auto check = [](const std::string& path, const std::string& reason) {
    std::string e = load_error(path);
    INFO(e);
    CHECK(e.rfind(path + ": ", 0) == 0);
    CHECK(e.find(reason) != std::string::npos);
    CHECK(e.find('\n') == std::string::npos);
  };
  check(dir.file("missing.json"), "no such file");
  check(write("invalid.json", "{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"a\""), "invalid JSON");
  check(write("notrace.json", "{\"hello\": [1, 2, 3]}"), "not a trace");
  check(write("numbers.json", "[1, 2, 3]"), "not a trace");
  check(write("text.txt", "hello world\n"), "unrecognized format");
  // A compression stepscope does not read: what to run first (the H100 recordings ship as .db.xz).
  check(write("run.db.xz", std::string("\xFD"
                                       "7zXZ\0\0\x04\xE6\xD6\xB4\x46",
                                       12)),
        "xz-compressed: decompress it first (xz -dk FILE)");
  check(write("trace.json.bz2", "BZh91AY&SY"), "bzip2-compressed: decompress it first (bzip2 -dk FILE)");
  check(write("empty.json", ""), "empty file");
  // Two traces written into one file: the first was read as if it were the file.
  const std::string one = R"({"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":2}]})";
  check(write("two.json", one + "\n" + one), "invalid JSON: more text after the trace's document");
  CHECK(analyzer::load_trace(write("spaces_after.json", one + "\n \n")).ranges.size() == 1);
  // Text that is no JSON after it: simdjson said "document ended early in the middle of an object or array".
  check(write("log_after.json", one + "\ngarbage here\n"),
        "invalid JSON: more text after the trace's document, at offset " + std::to_string(one.size() + 1) +
            " of the JSON text");
  // A stray closing bracket inside is simdjson's to name, not text after the document.
  CHECK(load_error(write("stray.json", one.substr(0, one.size() - 2) + "}}]}")).find("more text") ==
        std::string::npos);
  check(write("cut.json", one.substr(0, one.size() - 2)),
        "invalid JSON: The JSON document has an improper structure");
  if (test::have_traces()) {
    // A gzip stream cut in the middle (JSON and SQLite inside).
    for (const char* rel : {"hta/alexnet_a100.json.gz", "nsys/cloverleaf_a100.sqlite.gz"}) {
      std::ifstream in(test::trace_path(rel), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      check(write(std::string("cut_") + fs::path(rel).filename().string(), bytes.substr(0, bytes.size() / 2)),
            "truncated or corrupt gzip data");
      // Another file's bytes after the gzip data (they were read past in silence); zeros after it are
      // padding.
      check(write(std::string("junk_after_") + fs::path(rel).filename().string(),
                  bytes + "{\"traceEvents\":[]}\n"),
            "19 bytes after the end of the gzip data are not gzip");
      if (fs::path(rel).string().find(".json") != std::string::npos)
        CHECK(analyzer::load_trace(write("zeros_after.json.gz", bytes + std::string(512, '\0')))
                  .kernels.size() == trace(rel).kernels.size());
    }
  }
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(dir.file("other.sqlite").c_str(), &db) == SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    check(dir.file("other.sqlite"), "neither a stepscope store nor an Nsight Systems export");
  }
  CHECK(temp_imports() == before);
}

TEST_CASE("Nsight Systems schema 2.9 (nsys 2022.2): a database built from its DDL imports") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("import_nsys29");
  std::ifstream in(test::trace_path("nsys/schemas/nsys-2022.2-schema-2.9.sql"));
  REQUIRE(in.good());
  std::string ddl((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string path = dir.file("v29.sqlite");
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  REQUIRE(sqlite3_exec(db, ddl.c_str(), nullptr, nullptr, &err) == SQLITE_OK);
  // One process (pid 4242, tid 4243): globalTid = pid << 24 | tid. Two launches, a copy, a memset, a sync,
  // an NVTX push/pop range.
  const int64_t gtid = (int64_t(4242) << 24) | 4243, gpid = int64_t(4242) << 24;
  std::string rows =
      "INSERT INTO StringIds VALUES (1,'cudaLaunchKernel_v7000'),(2,'my_kernel(float*)'),(3,'my_kernel'),"
      "(4,'cudaMemcpyAsync_v3020'),(5,'train step'),(6,'cuLaunchKernel');"
      "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start,end,eventClass,globalTid,correlationId,nameId,returnValue) VALUES "
      "(100,110,0," + std::to_string(gtid) + ",1,1,0),(120,130,0," + std::to_string(gtid) + ",2,1,0),"
      "(140,150,0," + std::to_string(gtid) + ",3,4,0),(160,170,1," + std::to_string(gtid) + ",5,6,0);"
      "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start,end,deviceId,contextId,streamId,correlationId,globalPid,"
      "demangledName,shortName,registersPerThread,gridX,gridY,gridZ,blockX,blockY,blockZ,staticSharedMemory,"
      "dynamicSharedMemory,localMemoryPerThread,localMemoryTotal,gridId) VALUES "
      "(200,300,0,1,7,1," + std::to_string(gpid) + ",2,3,32,4,1,1,128,1,1,16,48,0,0,1),"
      "(300,450,0,1,7,2," + std::to_string(gpid) + ",2,3,32,4,1,1,128,1,1,16,48,0,0,2);"
      "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start,end,deviceId,contextId,streamId,correlationId,globalPid,bytes,"
      "copyKind,srcKind,dstKind) VALUES (500,600,0,1,7,3," + std::to_string(gpid) + ",4096,2,2,0);"
      "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start,end,deviceId,contextId,streamId,correlationId,globalPid,value,"
      "bytes,memKind) VALUES (610,620,0,1,7,0," + std::to_string(gpid) + ",0,256,2);"
      "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (650,700,0,1,4294967295,3," + std::to_string(gpid) +
      ",3,0);"
      "INSERT INTO NVTX_EVENTS (start,end,eventType,text,globalTid) VALUES (90,710,59,'train step'," +
      std::to_string(gtid) + ");";
  REQUIRE(sqlite3_exec(db, rows.c_str(), nullptr, nullptr, &err) == SQLITE_OK);
  sqlite3_close(db);

  store::Trace t = analyzer::load_trace(path);
  REQUIRE(t.kernels.size() == 2);
  CHECK(t.str(t.kernels[0].name) == "my_kernel(float*)");
  CHECK(t.kernels[0].pid == 4242);
  CHECK(t.kernels[0].stream == 7);
  CHECK(t.kernels[0].shared_memory == 64);
  CHECK(t.kernels[1].end == 450);
  REQUIRE(t.api_calls.size() == 4);
  CHECK(count_api(t, "cudaLaunchKernel") == 2);
  CHECK(t.api_calls[0].pid == 4242);
  CHECK(t.api_calls[0].tid == 4243);
  CHECK(t.api_calls[3].kind == store::ApiKind::Driver);  // cuLaunchKernel
  REQUIRE(t.memcpys.size() == 1);
  // Without ENUM tables in the file, the documented default numbering applies: 2 DtoH, 2 device → 0 pageable.
  CHECK(t.memcpys[0].kind == store::CopyKind::DtoH);
  CHECK(t.memcpys[0].src_kind == store::MemoryKind::Device);
  CHECK(t.memcpys[0].dst_kind == store::MemoryKind::Pageable);
  REQUIRE(t.memsets.size() == 1);
  CHECK(t.memsets[0].bytes == 256);
  REQUIRE(t.syncs.size() == 1);
  CHECK(t.syncs[0].type == store::SyncType::Stream);
  CHECK(t.syncs[0].stream == -1);
  CHECK(t.syncs[0].tid == 4243);
  REQUIRE(t.ranges.size() == 1);
  CHECK(t.ranges[0].source == store::RangeSource::Nvtx);
  CHECK(t.str(t.ranges[0].name) == "train step");
}

TEST_CASE("zstd-compressed and plain JSON load the same as gzip") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("import_zstd");
  const store::Trace& gz = trace("hta/alexnet_a100.json.gz");
  std::string plain = gunzip_to(test::trace_path("hta/alexnet_a100.json.gz"), dir.file("alexnet.json"));
  std::ifstream in(plain, std::ios::binary);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string z(ZSTD_compressBound(json.size()), '\0');
  size_t n = ZSTD_compress(z.data(), z.size(), json.data(), json.size(), 3);
  REQUIRE(!ZSTD_isError(n));
  std::ofstream(dir.file("alexnet.json.zst"), std::ios::binary).write(z.data(), std::streamsize(n));
  for (const std::string& f : {plain, dir.file("alexnet.json.zst")}) {
    INFO(f);
    store::Trace t = analyzer::load_trace(f);
    CHECK(t.kernels.size() == gz.kernels.size());
    CHECK(t.syncs.size() == gz.syncs.size());
    CHECK(t.ranges.size() == gz.ranges.size());
    CHECK(t.kernels.front().start == gz.kernels.front().start);
  }
}

TEST_CASE("another accelerator's events and CUPTI range-profiler metrics are counted and said, never a timeline") {
  test::ScratchDir dir("import_foreign_device");
  // The shapes of a Kineto trace from an MTIA host (its device events in mtia_* categories) and of kernels traced
  // under CUPTI's range profiler (category cuda_profiler_range).
  const std::string mtia = dir.file("mtia.json");
  std::ofstream(mtia) << R"({"traceEvents":[
    {"ph":"X","cat":"cpu_op","name":"aten::mm","pid":10,"tid":11,"ts":100,"dur":50},
    {"ph":"X","cat":"mtia_runtime","name":"mtiaLaunchKernel","pid":10,"tid":11,"ts":110,"dur":5},
    {"ph":"X","cat":"mtia_runtime","name":"mtiaLaunchKernel","pid":10,"tid":11,"ts":130,"dur":5},
    {"ph":"X","cat":"mtia_ccp_events","name":"gemm_kernel","pid":1,"tid":2,"ts":120,"dur":30},
    {"ph":"X","cat":"mtia_ccp_events","name":"gemm_kernel","pid":1,"tid":2,"ts":160,"dur":30},
    {"ph":"X","cat":"mtia_ccp_events","name":"relu_kernel","pid":1,"tid":2,"ts":200,"dur":10}]})";
  const auto t = analyzer::load_trace(mtia);
  CHECK(t.kernels.empty());
  CHECK(t.ranges.size() == 1);  // aten::mm only: the device events are not host annotations
  CHECK(t.meta.at("import.unread_device_events") == "mtia_ccp_events:3,mtia_runtime:2");
  const auto a = analyzer::analyze(t);
  CHECK_FALSE(a.summary.has_gpu);
  CHECK(analyzer::no_gpu_note(a.summary) ==
        "The trace holds device activity stepscope cannot read (3 mtia_ccp_events, 2 mtia_runtime): no GPU breakdown "
        "or GPU finding is possible; what follows covers host time only.");

  // A B/E pair's category lives only as long as the pair: the count must keep its own copy of the name.
  const std::string pairs = dir.file("mtia_pairs.json");
  std::ofstream(pairs) << R"({"traceEvents":[
    {"ph":"B","cat":"mtia_runtime","name":"mtiaLaunchKernel","pid":10,"tid":11,"ts":100},
    {"ph":"E","cat":"mtia_runtime","name":"mtiaLaunchKernel","pid":10,"tid":11,"ts":105},
    {"ph":"B","cat":"xpu_runtime_call","name":"urEnqueueKernelLaunch","pid":10,"tid":11,"ts":110},
    {"ph":"E","cat":"xpu_runtime_call","name":"urEnqueueKernelLaunch","pid":10,"tid":11,"ts":115}]})";
  CHECK(analyzer::load_trace(pairs).meta.at("import.unread_device_events") == "mtia_runtime:1,xpu_runtime_call:1");

  // Kineto's range-profiler events carry made-up times (the span split evenly among the ranges): not kernels.
  const std::string ranged = dir.file("range_profiler.json");
  std::ofstream(ranged) << R"J({"traceEvents":[
    {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":11,"ts":100,"dur":5,"args":{"correlation":7}},
    {"ph":"X","cat":"cuda_profiler_range","name":"void gemm<float>(int)","pid":0,"tid":0,"ts":100,"dur":50,
     "args":{"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum":1024}},
    {"ph":"X","cat":"cuda_profiler_range","name":"void relu<float>(int)","pid":0,"tid":0,"ts":150,"dur":50,
     "args":{"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum":0}}]})J";
  const auto r = analyzer::load_trace(ranged);
  CHECK(r.kernels.empty());
  CHECK(r.meta.at("import.unread_device_events") == "cuda_profiler_range:2");
  const auto ra = analyzer::analyze(r);
  CHECK_FALSE(ra.summary.has_gpu);
  CHECK(analyzer::no_gpu_note(ra.summary).find("CUPTI range-profiler metrics whose times Kineto makes up") !=
        std::string::npos);
}

TEST_CASE("events whose times or kinds cannot be read are left out, counted and said, never read as 0") {
  test::ScratchDir dir("import_malformed");
  // Two good kernels 1 ms apart, and kernels whose ts or dur is a string, null, a bare NaN, past int64, negative;
  // one whose cat is a number. Read as 0 (strtod of a string) a "ts":"1000" kernel put the GPU span at 1.67e9 s.
  const std::string f = dir.file("malformed.json");
  std::ofstream(f) << R"({"traceEvents":[
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1672876800000000,"dur":500,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1672876800001000,"dur":500.5,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":"1000","dur":500,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":null,"dur":500,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1e300,"dur":500,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1672876800002000,"dur":-5,"args":{"device":0,"stream":7}},
    {"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1672876800003000,"dur":"abc","args":{"device":0,"stream":7}},
    {"ph":"X","cat":7,"name":"k","pid":0,"tid":7,"ts":1672876800004000,"dur":5,"args":{"device":0,"stream":7}},
    {"ph":7,"cat":"kernel","name":"k","pid":0,"tid":7,"ts":1672876800005000,"dur":5}]})";
  const auto t = analyzer::load_trace(f);
  REQUIRE(t.kernels.size() == 2);
  CHECK(t.kernels[1].end - t.kernels[0].start == 1'500'500);
  CHECK(t.meta.at("import.dropped_events") == "(cat not a string):1,(dur not a duration):2,(no ph):1,(ts not a time):3");
  const auto a = analyzer::analyze(t);
  CHECK(a.summary.malformed_events == "(cat not a string):1,(dur not a duration):2,(no ph):1,(ts not a time):3");
  CHECK(a.summary.gpu_span_us == Approx(1500.5));
  const std::string note =
      "The file held 7 events that could not be read and were left out (1 cat not a string, 2 dur not a duration, 1 "
      "no ph, 3 ts not a time): every figure here is over the rest.";
  CHECK(analyzer::malformed_events_note(a.summary) == note);
  // Flows and instants the importer does not keep are no loss: only the events in parentheses are said.
  store::Trace flows = t;
  flows.meta["import.dropped_events"] = "f:12,s:12,(ts not a time):1";
  CHECK(analyzer::analyze(flows).summary.malformed_events == "(ts not a time):1");
  flows.meta["import.dropped_events"] = "f:12,s:12";
  const auto clean = analyzer::analyze(flows);
  CHECK(clean.summary.malformed_events.empty());
  CHECK(analyzer::malformed_events_note(clean.summary).empty());

  // A B whose ts cannot be read still opens its pair: its E closes it, not the range around it (the outer range
  // ended at the inner one's end), and the pair is left out.
  const std::string pairs = dir.file("pairs.json");
  std::ofstream(pairs) << R"({"traceEvents":[
    {"ph":"B","cat":"user_annotation","name":"outer","pid":1,"tid":1,"ts":10},
    {"ph":"B","cat":"user_annotation","name":"inner","pid":1,"tid":1,"ts":"20"},
    {"ph":"E","cat":"user_annotation","name":"inner","pid":1,"tid":1,"ts":30},
    {"ph":"E","cat":"user_annotation","name":"outer","pid":1,"tid":1,"ts":900}]})";
  const auto p = analyzer::load_trace(pairs);
  REQUIRE(p.ranges.size() == 1);
  CHECK(p.str(p.ranges[0].name) == "outer");
  CHECK(p.ranges[0].end - p.ranges[0].start == 890'000);
  CHECK(p.meta.at("import.dropped_events") == "(ts not a time):1");
  // Files imported together count what each left out (the first file's counts alone were kept).
  CHECK(analyzer::load_traces({f, pairs}).meta.at("import.dropped_events") ==
        "(cat not a string):1,(dur not a duration):2,(no ph):1,(ts not a time):4");

  int64_t ns = 0;
  CHECK(analyzer::import::us_token_to_ns("12.5 ", ns));
  CHECK(ns == 12500);
  CHECK(analyzer::import::us_token_to_ns("-3", ns));
  CHECK(ns == -3000);
  for (const char* bad : {"\"12\"", "null", "true", "NaN", "Infinity", "1e300", "-1e16", "12abc", "0x10", "abc", "",
                          "{}"})
    CHECK_FALSE(analyzer::import::us_token_to_ns(bad, ns));
}

TEST_CASE("Nsight Systems rows whose times are no integer ns in order are left out, counted and said") {
  STEPSCOPE_REQUIRE_TRACES();
  test::ScratchDir dir("import_nsys_malformed");
  const std::string db_path = gunzip_to(test::trace_path("nsys/cloverleaf_a100.sqlite.gz"), dir.file("clover.sqlite"));
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(db_path.c_str(), &db) == SQLITE_OK);
  const int64_t kernels = scalar(db, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL");
  // Text read as 0 made one step of 875.7 ms where there are 9; times at the end of int64 wrapped every span.
  REQUIRE(sqlite3_exec(db,
                       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid IN (1, 2);"
                       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 WHERE rowid = 3;"
                       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854775000, end = 9223372036854775807 "
                       "WHERE rowid = 4;"
                       "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = 'x' WHERE rowid = 1;",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(db);
  const auto t = analyzer::load_trace(db_path);
  CHECK(int64_t(t.kernels.size()) == kernels - 4);
  CHECK(t.meta.at("import.dropped_events") ==
        "(CUPTI_ACTIVITY_KIND_KERNEL times not readable):4,(CUPTI_ACTIVITY_KIND_RUNTIME times not readable):1");
  const auto a = analyzer::analyze(t);
  CHECK(analyzer::malformed_events_note(a.summary) ==
        "The file held 5 events that could not be read and were left out (4 CUPTI_ACTIVITY_KIND_KERNEL times not "
        "readable, 1 CUPTI_ACTIVITY_KIND_RUNTIME times not readable): every figure here is over the rest.");
  CHECK(a.summary.steps == 9);

  // Kernel names past StringIds: each id a name of its own, counted (all were "", one name: 1,312 periodic "steps").
  sqlite3* db2 = nullptr;
  REQUIRE(sqlite3_open(db_path.c_str(), &db2) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db2,
                       "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 99999999 + demangledName, "
                       "shortName = 99999999 + shortName",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  const int64_t names = scalar(db2,  // over the rows read (the four damaged above are left out)
                              "SELECT count(DISTINCT demangledName) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE "
                              "typeof(start) = 'integer' AND typeof(end) = 'integer' AND end >= start AND "
                              "end <= 4000000000000000000");
  sqlite3_close(db2);
  const auto u = analyzer::load_trace(db_path);
  CHECK(u.meta.at("import.unresolved_string_ids") == std::to_string(names));
  std::set<std::string> seen;
  for (const auto& k : u.kernels) seen.insert(u.str(k.name));
  CHECK(int64_t(seen.size()) == names);
  CHECK(seen.count("") == 0);
  CHECK(analyzer::analyze(u).summary.steps == 9);
}

TEST_CASE("a UTF-8 byte order mark before the JSON is skipped, small or streamed") {
  test::ScratchDir dir("import_bom");
  for (int events : {3, 20000}) {  // 20,000 events: over 1 MiB, read in pieces (the streamed parse)
    std::string json = "{\"traceEvents\":[";
    for (int i = 0; i < events; ++i)
      json += std::string(i ? "," : "") + "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":" +
              std::to_string(1000 + 10 * i) + ",\"dur\":5,\"args\":{\"device\":0,\"stream\":7}}";
    json += "]}";
    const std::string plain = dir.file("plain.json"), bom = dir.file("bom.json");
    std::ofstream(plain, std::ios::binary) << json;
    std::ofstream(bom, std::ios::binary) << "\xEF\xBB\xBF" << json;
    const auto a = analyzer::load_trace(plain), b = analyzer::load_trace(bom);
    INFO(events << " events");
    REQUIRE(b.kernels.size() == size_t(events));  // was "invalid JSON: … improper structure"
    CHECK(b.kernels.front().start == a.kernels.front().start);
    CHECK(b.kernels.back().end == a.kernels.back().end);
  }
}
