// Import speed and peak RSS for the largest JSON trace in the shared traces folder, beside
// `python3 -c 'import json,gzip; json.load(gzip.open(F))'` on the same file in the same run.
// Each measurement runs in a fresh child process so its peak RSS is its own.
//
// Beside them, the limit of the libraries it is built on: libdeflate alone, and libdeflate + simdjson
// On-Demand visiting every field on one thread.
//
// Usage: bench_import [TRACE] [--runs N]
#include <libdeflate.h>
#include <simdjson.h>
#ifdef STEPSCOPE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "stepscope/analyzer/load.h"
#include "stepscope/store/store.h"

namespace fs = std::filesystem;
using namespace stepscope;

namespace {

struct Result {
  double seconds = 0;
  double peak_mb = 0;
  bool ok = false;
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs `work` in a child; returns its wall time (measured inside) and peak RSS.
Result in_child(const std::function<void()>& work) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    double t0 = now();
    try {
      work();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_import: %s\n", e.what());
      _exit(1);
    }
    double dt = now() - t0;
    if (write(fds[1], &dt, sizeof dt) != sizeof dt) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  Result r;
  double dt = 0;
  ssize_t n = read(fds[0], &dt, sizeof dt);
  close(fds[0]);
  int status = 0;
  struct rusage ru{};
  wait4(pid, &status, 0, &ru);
  r.ok = n == sizeof dt && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  r.seconds = dt;
  r.peak_mb = double(ru.ru_maxrss) / 1024.0;
  return r;
}

Result python_json_load(const std::string& file) {
  double t0 = now();
  pid_t pid = fork();
  if (pid == 0) {
    execlp("python3", "python3", "-c", "import json,gzip,sys; json.load(gzip.open(sys.argv[1]))", file.c_str(),
           (char*)nullptr);
    _exit(127);
  }
  int status = 0;
  struct rusage ru{};
  wait4(pid, &status, 0, &ru);
  Result r;
  r.seconds = now() - t0;
  r.peak_mb = double(ru.ru_maxrss) / 1024.0;
  r.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return r;
}

uint64_t gunzipped_size(const std::string& file) {
  gzFile f = gzopen(file.c_str(), "rb");
  if (!f) return 0;
  std::vector<char> buf(1 << 20);
  uint64_t n = 0;
  int r;
  while ((r = gzread(f, buf.data(), unsigned(buf.size()))) > 0) n += uint64_t(r);
  gzclose(f);
  return n;
}

Result best_of(int runs, const std::function<Result()>& f) {
  Result best;
  for (int i = 0; i < runs; ++i) {
    Result r = f();
    if (!r.ok) return r;
    if (!best.ok || r.seconds < best.seconds) best.seconds = r.seconds;
    best.peak_mb = std::max(best.peak_mb, r.peak_mb);
    best.ok = true;
  }
  return best;
}

// The limit rows: what decompressing the file takes (libdeflate, one call into a buffer sized from the gzip
// trailer), and that plus simdjson On-Demand visiting every field of every event on one thread, keeping
// nothing: the floor a one-thread importer built on these libraries cannot go under.
// The output buffer as the importer's: malloc'd (pages touched only when written) and marked for huge pages.
struct Inflated {
  std::unique_ptr<char, decltype(&std::free)> data{nullptr, &std::free};
  size_t size = 0;
};
Inflated limit_inflate(const std::string& file) {
  std::string gz(fs::file_size(file), '\0');
  FILE* f = std::fopen(file.c_str(), "rb");
  if (!f || std::fread(gz.data(), 1, gz.size(), f) != gz.size())
    throw std::runtime_error("cannot read " + file);
  std::fclose(f);
  if (gz.size() < 18) throw std::runtime_error("not gzip");
  uint32_t isize = 0;
  std::memcpy(&isize, gz.data() + gz.size() - 4, 4);
  Inflated out;
  out.data.reset(static_cast<char*>(std::malloc(size_t(isize) + simdjson::SIMDJSON_PADDING)));
  uintptr_t b = (reinterpret_cast<uintptr_t>(out.data.get()) + 0x1fffff) & ~uintptr_t(0x1fffff);
  uintptr_t e = (reinterpret_cast<uintptr_t>(out.data.get()) + isize) & ~uintptr_t(0x1fffff);
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  libdeflate_result r = libdeflate_gzip_decompress(d, gz.data(), gz.size(), out.data.get(), isize, &out.size);
  libdeflate_free_decompressor(d);
  if (r != LIBDEFLATE_SUCCESS) throw std::runtime_error("libdeflate failed (multi-member gzip?)");
  std::memset(out.data.get() + out.size, ' ', simdjson::SIMDJSON_PADDING);
  return out;
}

// ISA-L's streaming inflate into one reused buffer of 1 MiB, the bytes then dropped: what load_trace's
// GzipReader does on the thread that reads a gzip trace into chunk buffers while the parse goes on.
bool limit_isal(const std::string& file) {
#ifdef STEPSCOPE_HAVE_ISAL
  std::string gz(fs::file_size(file), '\0');
  FILE* f = std::fopen(file.c_str(), "rb");
  if (!f || std::fread(gz.data(), 1, gz.size(), f) != gz.size())
    throw std::runtime_error("cannot read " + file);
  std::fclose(f);
  uint32_t isize = 0;
  std::memcpy(&isize, gz.data() + gz.size() - 4, 4);
  std::vector<char> out(size_t{1} << 20);
  auto st = std::make_unique<inflate_state>();
  isal_inflate_init(st.get());
  st->crc_flag = ISAL_GZIP;
  st->next_in = reinterpret_cast<uint8_t*>(gz.data());
  st->avail_in = static_cast<uint32_t>(gz.size());
  size_t total = 0;
  while (st->block_state != ISAL_BLOCK_FINISH) {
    st->next_out = reinterpret_cast<uint8_t*>(out.data());
    st->avail_out = static_cast<uint32_t>(out.size());
    if (isal_inflate(st.get()) < 0) throw std::runtime_error("isal_inflate failed");
    const size_t got = out.size() - st->avail_out;
    total += got;
    if (got == 0 && st->block_state != ISAL_BLOCK_FINISH) break;
  }
  if (total != isize) throw std::runtime_error("isal_inflate: not one member");
  return true;
#else
  (void)file;
  return false;
#endif
}

void limit_walk(const std::string& file) {
  Inflated json = limit_inflate(file);
  namespace od = simdjson::ondemand;
  od::parser parser;
  od::document doc = parser.iterate(json.data.get(), json.size, json.size + simdjson::SIMDJSON_PADDING);
  size_t fields = 0;
  for (od::field top : doc.get_object()) {
    if (std::string_view(top.unescaped_key()) != "traceEvents") continue;
    for (od::value ev : top.value().get_array())
      for (od::field f : ev.get_object()) fields += f.value().raw_json_token().size() > 0;
  }
  if (fields == 0) throw std::runtime_error("no traceEvents");
}

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc) runs = std::max(1, std::atoi(argv[++i]));
    else file = argv[i];
  }
  if (file.empty()) {
    // The largest .json.gz under the shared traces folder.
    std::error_code ec;
    uintmax_t best = 0;
    for (auto& e : fs::recursive_directory_iterator(STEPSCOPE_TRACES_DIR, ec)) {
      std::string p = e.path().string();
      if (p.size() > 8 && p.compare(p.size() - 8, 8, ".json.gz") == 0 && e.file_size() > best) {
        best = e.file_size();
        file = p;
      }
    }
  }
  if (file.empty()) {
    std::fprintf(stderr, "bench_import: no trace given and none found under %s\n", STEPSCOPE_TRACES_DIR);
    return 2;
  }
  double mb = double(gunzipped_size(file)) / 1e6;
  std::string db = (fs::temp_directory_path() / ("bench_import_" + std::to_string(getpid()) + ".db")).string();

  Result py = best_of(runs, [&] { return python_json_load(file); });
  auto load_with = [&](unsigned threads) {
    return best_of(runs, [&] {
      return in_child([&] {
        analyzer::LoadOptions o;
        o.threads = threads;
        store::Trace t = analyzer::load_trace(file, o);
        if (t.kernels.empty() && t.ranges.empty()) throw std::runtime_error("empty trace");
      });
    });
  };
  Result load1 = load_with(1);
  Result load = load_with(0);
  Result full = best_of(runs, [&] {
    return in_child([&] {
      store::Trace t = analyzer::load_trace(file);
      store::write_store_atomically(t, db);
    });
  });
  fs::remove(db);
  // The same JSON as a plain file (read as it is parsed, never whole), written from the gzip once.
  std::string plain =
      (fs::temp_directory_path() / ("bench_import_" + std::to_string(getpid()) + ".json")).string();
  Result load_plain;
  {
    gzFile in = gzopen(file.c_str(), "rb");
    FILE* out = std::fopen(plain.c_str(), "wb");
    std::vector<char> buf(1 << 20);
    int r = 0;
    bool ok = in && out;
    while (ok && (r = gzread(in, buf.data(), unsigned(buf.size()))) > 0)
      ok = std::fwrite(buf.data(), 1, size_t(r), out) == size_t(r);
    if (in) gzclose(in);
    if (out) ok = std::fclose(out) == 0 && ok;
    if (ok) {
      load_plain = best_of(runs, [&] {
        return in_child([&] {
          store::Trace t = analyzer::load_trace(plain);
          if (t.kernels.empty() && t.ranges.empty()) throw std::runtime_error("empty trace");
        });
      });
    }
    fs::remove(plain);
  }
  Result inflate = best_of(runs, [&] { return in_child([&] { limit_inflate(file); }); });
  Result isal = best_of(runs, [&] {
    return in_child([&] {
      if (!limit_isal(file)) throw std::runtime_error("built without ISA-L");
    });
  });
  Result walk = best_of(runs, [&] { return in_child([&] { limit_walk(file); }); });

  std::printf("bench_import: %s (%.1f MB uncompressed JSON), best of %d runs\n\n", file.c_str(), mb, runs);
  std::printf("%-44s %9s %9s %10s %9s %8s\n", "", "seconds", "MB/s", "peak RSS", "RSS/size", "speedup");
  auto row = [&](const char* name, const Result& r) {
    if (!r.ok) {
      std::printf("%-44s   failed\n", name);
      return;
    }
    std::printf("%-44s %9.3f %9.1f %8.0f MB %9.2f %7.1fx\n", name, r.seconds, mb / r.seconds, r.peak_mb,
                r.peak_mb / mb, py.ok ? py.seconds / r.seconds : 0.0);
  };
  unsigned cores = std::min(8u, std::max(1u, std::thread::hardware_concurrency()));
  row("python3 json.load(gzip.open(F)) (peer)", py);
  row("limit: libdeflate alone", inflate);
  row("limit: ISA-L streaming inflate alone", isal);
  row("limit: libdeflate + simdjson walk, 1 thread", walk);
  row("(a) stepscope load into trace model, 1 thread", load1);
  std::string all = "(a) stepscope load into trace model, " + std::to_string(cores) + " thr";
  row(all.c_str(), load);
  row("(b) stepscope import into a store", full);
  std::string plain_row = "(c) the same JSON uncompressed, " + std::to_string(cores) + " thr";
  row(plain_row.c_str(), load_plain);
  std::printf(
      "\ngoals (issue 53): (a) >= 1000 MB/s, (b) >= 8x python, peak RSS <= 2x the uncompressed size\n");
  bool pass = py.ok && load.ok && full.ok && mb / load.seconds >= 1000 && py.seconds / full.seconds >= 8 &&
              load.peak_mb <= 2 * mb && full.peak_mb <= 2 * mb;
  std::printf("%s\n", pass ? "all goals met" : "GOALS NOT MET");
  return 0;
}
