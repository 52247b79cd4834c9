// libFuzzer target: Kineto / Chrome trace JSON → store::Trace (the importer behind `stepscope import
// x.json`). Any input must either import or throw StoreError; a crash, hang, leak or sanitizer report is a
// bug. The same input is also parsed in chunks of 64 bytes on two threads (what files of 1 MiB or more get):
// it must give the one pass's trace — every row, string and meta entry — or the one pass's error.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "import/decompress.h"
#include "import/kineto_parser.h"
#include "stepscope/store/store.h"

namespace {

using namespace stepscope;

// Every field the parser fills, as one comparable value per table.
auto rows_of(const store::Trace& t) {
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>> r;
  for (const auto& k : t.kernels) {
    r.emplace_back(1, k.start, k.end, k.device, k.stream, k.correlation, k.name, k.context, k.pid);
    r.emplace_back(12, k.grid_x, k.grid_y, k.grid_z, k.block_x, k.block_y, k.block_z, k.registers,
                   k.shared_memory);
    r.emplace_back(13, k.graph_id, k.graph_node_id, 0, 0, 0, 0, 0, 0);
  }
  for (const auto& m : t.memcpys)
    r.emplace_back(2, m.start, m.end, m.device, m.stream, m.correlation, m.bytes,
                   int64_t(m.kind) * 100 + int64_t(m.src_kind) * 10 + int64_t(m.dst_kind),
                   m.pid ^ m.graph_id ^ m.graph_node_id);
  for (const auto& m : t.memsets)
    r.emplace_back(3, m.start, m.end, m.device, m.stream, m.correlation, m.bytes, int64_t(m.mem_kind),
                   m.pid ^ m.graph_id ^ m.graph_node_id);
  for (const auto& s : t.syncs)
    r.emplace_back(4, s.start, s.end, s.pid, s.tid, s.device, s.stream, int64_t(s.type), s.correlation);
  for (const auto& a : t.api_calls)
    r.emplace_back(5, a.start, a.end, a.pid, a.tid, a.name, a.correlation, int64_t(a.kind), a.return_code);
  for (const auto& x : t.ranges)
    r.emplace_back(6, x.start, x.end, x.pid, x.tid, x.name, x.domain, x.depth,
                   int64_t(x.source) ^ x.correlation);
  for (const auto& w : t.data_waits) r.emplace_back(7, w.start, w.end, w.pid, w.tid, w.source, 0, 0, 0);
  for (const auto& s : t.steps) r.emplace_back(8, s.index, s.start, s.end, s.pid, s.tid, s.source, 0, 0);
  for (const auto& p : t.processes) r.emplace_back(9, p.pid, p.name, 0, 0, 0, 0, 0, 0);
  for (const auto& th : t.threads) r.emplace_back(10, th.pid, th.tid, th.name, 0, 0, 0, 0, 0);
  for (const auto& d : t.devices)
    r.emplace_back(11, d.id, d.name, d.vendor, d.sm_count, d.cc_major, d.cc_minor, d.memory_bytes, 0);
  return r;
}

std::vector<std::string> strings_of(const store::Trace& t) {
  std::vector<std::string> s;
  for (size_t i = 0; i < t.strings.size(); ++i) s.push_back(t.str(store::StringId(i)));
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  analyzer::import::PaddedBuffer json;  // simdjson reads up to 64 bytes past the end
  json.reserve(size);
  json.resize(size);
  if (size) std::memcpy(json.data(), data, size);
  analyzer::import::KinetoParseOptions one_pass, chunked;
  one_pass.chunks = false;
  chunked.threads = 2;
  chunked.chunk_bytes = 64;
  std::string error1, error2;
  store::Trace a, b;
  try {
    a = analyzer::import::parse_kineto_json(json.data(), json.size(), "fuzz.json", {}, one_pass);
  } catch (const store::StoreError& e) {
    error1 = e.what();
  }
  try {
    b = analyzer::import::parse_kineto_json(json.data(), json.size(), "fuzz.json", {}, chunked);
  } catch (const store::StoreError& e) {
    error2 = e.what();
  }
  if (error1 != error2 || rows_of(a) != rows_of(b) || strings_of(a) != strings_of(b) || a.meta != b.meta)
    std::abort();  // the chunked parse and the one pass disagree
  return 0;
}
