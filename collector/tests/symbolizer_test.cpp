// The symbolizer names an address only with a symbol that covers it: a stripped library's local functions,
// which only an unsized `_init` precedes, read module+offset (the H100 Hugging Face recording showed `_init`
// 27 ms). And a program built by clang, which writes no .debug_aranges, gets its file:line.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "stepscope/collector/launcher.h"
#include "stepscope/store/records.h"
#include "test_support.h"

using namespace stepscope;

namespace {

// Symbol → address in the unstripped copy of the library (nm's view, the same addresses as the stripped one).
std::map<std::string, long long> symbols_of(const std::string& lib) {
  std::map<std::string, long long> out;
  FILE* p = popen(("nm " + lib).c_str(), "r");
  REQUIRE(p);
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    unsigned long long addr = 0;
    char type = 0, name[400] = {0};
    if (std::sscanf(line, "%llx %c %399s", &addr, &type, name) == 3) out[name] = static_cast<long long>(addr);
  }
  pclose(p);
  return out;
}

// The GNU build-id of `file`, as readelf prints it (40 hex digits).
std::string build_id_of(const std::string& file) {
  std::string id = test::run_shell("readelf -n " + test::shell_quote(file) + " | sed -n 's/.*Build ID: //p'").output;
  while (!id.empty() && id.back() == '\n') id.pop_back();
  return id;
}

}  // namespace

TEST_CASE("an unsized symbol covers only its own section: a stripped library's local functions read module+offset") {
  setenv("STEPSCOPE_SYMBOL_CACHE", "off", 1);
  const auto full = symbols_of(SYMBOL_LIB_FULL);
  REQUIRE(full.count("local_square"));
  REQUIRE(full.count("_init"));
  // The stripped copy's symbol table keeps only `_init` (in .init, size 0) ahead of the local functions and `_fini`
  // after them: before the fix every address between the two read `_init+0x…`.
  const auto stripped = symbols_of(SYMBOL_LIB);
  REQUIRE(stripped.count("_init"));
  REQUIRE(stripped.count("_fini"));
  REQUIRE(!stripped.count("local_square"));
  REQUIRE(full.at("_fini") > full.at("local_square"));

  store::Trace t;
  const auto module = t.intern(SYMBOL_LIB);
  const long long in_local = full.at("local_square") + 2, in_fini = full.at("_fini") + 2, in_init = full.at("_init") + 2;
  t.frames.push_back({1, module, 0, 0, 0, store::FrameKind::Native, in_local});
  t.frames.push_back({2, module, 0, 0, 0, store::FrameKind::Native, in_fini});
  t.frames.push_back({3, module, 0, 0, 0, store::FrameKind::Native, in_init});
  t.stacks.push_back({1, 0, 1});
  t.stacks.push_back({2, 0, 2});
  t.stacks.push_back({3, 0, 3});
  collector::Symbolizer s;
  s.symbolize(t);
  std::map<long long, std::string> by_address;
  for (const auto& f : t.frames) by_address[f.address] = t.str(f.symbol);
  char expected[64];
  std::snprintf(expected, sizeof expected, "libsymbol_bounds.so+0x%llx", in_local);
  CHECK(by_address.at(in_local) == expected);
  CHECK(by_address.at(in_fini) == "_fini");
  CHECK(by_address.at(in_init) == "_init");
}

TEST_CASE("a clang-built program, which has no .debug_aranges, gets file:line as addr2line reads it") {
  setenv("STEPSCOPE_SYMBOL_CACHE", "off", 1);
  if (test::run_shell("command -v clang >/dev/null 2>&1").status != 0) STEPSCOPE_SKIP("no clang on PATH");
  test::ScratchDir dir("symbolizer_clang");
  const std::string src = dir.file("clang_lines.c"), prog = dir.file("clang_lines");
  std::ofstream(src) << "__attribute__((noinline)) int scaled(int x) {\n"
                        "  return x * 3 + 1;\n"
                        "}\n"
                        "int main(int argc, char** argv) { (void)argv; return scaled(argc); }\n";
  REQUIRE(
      test::run_shell("clang -O1 -g -o " + test::shell_quote(prog) + " " + test::shell_quote(src) + " 2>&1")
          .status == 0);
  // What made libdw find no compile unit (and so no line) for any of its addresses:
  REQUIRE(test::run_shell("readelf -S " + test::shell_quote(prog)).output.find(".debug_aranges") ==
          std::string::npos);
  const auto symbols = symbols_of(prog);
  REQUIRE(symbols.count("scaled"));
  const long long address = symbols.at("scaled");
  // binutils' own reading of the line table, independent of libdw: "path:line".
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", address);
  std::string expected = test::run_shell("addr2line -e " + test::shell_quote(prog) + " " + hex).output;
  while (!expected.empty() && expected.back() == '\n') expected.pop_back();
  REQUIRE(expected.rfind(src + ":", 0) == 0);

  store::Trace t;
  const auto module = t.intern(prog);
  t.frames.push_back({1, module, 0, 0, 0, store::FrameKind::Native, address});
  t.stacks.push_back({1, 0, 1});
  collector::Symbolizer s;
  s.symbolize(t);
  REQUIRE(t.frames.size() == 1);
  const auto& f = t.frames[0];
  CHECK(t.str(f.symbol) == "scaled");
  CHECK(t.str(f.file) + ":" + std::to_string(f.line) == expected);
  CHECK((f.line == 1 || f.line == 2));  // the function's own lines, not main's
}

TEST_CASE(
    "the per-build-id cache answers from its lines, kept in address order: a malformed or cut-short line is looked up again") {
  test::ScratchDir dir("symbolizer_cache");
  const std::string cache = dir.file("symbols");
  std::filesystem::create_directories(cache);
  const std::string lib = SYMBOL_LIB_FULL;
  const std::string build_id = build_id_of(lib);
  REQUIRE(build_id.size() == 40);
  const auto full = symbols_of(lib);
  const long long cached = full.at("local_square") + 2, malformed = full.at("_fini") + 2, cut = full.at("_init") + 2;
  char lines[512];
  // An inlined call written as two frames, outermost first; a line with two fields; a last line without its end.
  std::snprintf(lines, sizeof lines,
                "stepscope-symbols 1\n%llx\touter_from_cache\touter.cc\t7\tinner_from_cache\tinner.cc\t9\n"
                "%llx\tonly\ttwo\n%llx\tcut_short",
                cached, malformed, cut);
  std::ofstream(cache + "/" + build_id + ".3") << lines;
  setenv("STEPSCOPE_SYMBOL_CACHE", cache.c_str(), 1);

  auto symbolized = [&](int64_t& hits) {
    store::Trace t;
    const auto module = t.intern(lib);
    t.modules.push_back({1, module, t.intern(build_id), 0, 0, 0});
    t.frames.push_back({1, module, 0, 0, 0, store::FrameKind::Native, cached});
    t.frames.push_back({2, module, 0, 0, 0, store::FrameKind::Native, malformed});
    t.frames.push_back({3, module, 0, 0, 0, store::FrameKind::Native, cut});
    for (int64_t id = 1; id <= 3; ++id) t.stacks.push_back({id, 0, id});
    collector::Symbolizer s;
    s.symbolize(t);
    hits = s.cache_hits();
    std::vector<std::string> out;
    for (const auto& f : t.frames)
      out.push_back(t.str(f.symbol) + (f.file ? " " + t.str(f.file) + ":" + std::to_string(f.line) : ""));
    return out;
  };
  int64_t hits = 0;
  const std::vector<std::string> expected{"outer_from_cache outer.cc:7", "inner_from_cache inner.cc:9", "_fini",
                                          "_init"};
  CHECK(symbolized(hits) == expected);
  CHECK(hits == 1);
  // Written back when the Symbolizer ended, one line per address in address order: the cached one as it was,
  // the two resolved in place of the malformed and the cut-short one.
  std::ifstream written(cache + "/" + build_id + ".3");
  std::vector<unsigned long long> addresses;
  std::string line;
  REQUIRE(std::getline(written, line));
  CHECK(line == "stepscope-symbols 1");
  while (std::getline(written, line)) addresses.push_back(std::stoull(line, nullptr, 16));
  std::vector<unsigned long long> sorted{(unsigned long long)cached, (unsigned long long)malformed,
                                         (unsigned long long)cut};
  std::sort(sorted.begin(), sorted.end());
  CHECK(addresses == sorted);
  CHECK(symbolized(hits) == expected);
  CHECK(hits == 3);
  unsetenv("STEPSCOPE_SYMBOL_CACHE");
}

TEST_CASE("stacks renumbered by symbolization: a graph's and a node's capture stack follow, as a sample's does") {
  test::ScratchDir dir("symbolizer_renumber");
  const std::string cache = dir.file("symbols");
  std::filesystem::create_directories(cache);
  const std::string lib = SYMBOL_LIB_FULL;
  const std::string build_id = build_id_of(lib);
  REQUIRE(build_id.size() == 40);
  const auto full = symbols_of(lib);
  const long long inlined = full.at("local_square") + 2, leaf = full.at("_fini") + 2;
  // The first address is an inlined call: two frames, so every stack node below it moves up by one.
  char lines[256];
  std::snprintf(lines, sizeof lines, "stepscope-symbols 1\n%llx\touter_fn\touter.cc\t7\tinner_fn\tinner.cc\t9\n",
                inlined);
  std::ofstream(cache + "/" + build_id + ".3") << lines;
  setenv("STEPSCOPE_SYMBOL_CACHE", cache.c_str(), 1);
  store::Trace t;
  const auto module = t.intern(lib);
  t.modules.push_back({7, module, t.intern(build_id), 0, 0, 0});
  t.frames.push_back({1, module, 0, 0, 0, store::FrameKind::Native, inlined});
  t.frames.push_back({2, module, 0, 0, 0, store::FrameKind::Native, leaf});
  t.stacks.push_back({1, 0, 1});  // → outer_fn (1), inner_fn (2)
  t.stacks.push_back({2, 1, 2});  // → _fini under inner_fn (3)
  t.samples.push_back({100, 7, 7, 2, true});
  t.api_calls.push_back({100, 200, 7, 7, store::ApiKind::Runtime, t.intern("cudaStreamBeginCapture"), 1, 0, 2});
  t.graphs.push_back({7, 5, store::GraphKind::Capture, 0, 150, 2});
  t.graph_nodes.push_back({7, 5, 11, 0, store::GraphNodeKind::Kernel, 160, 2});
  t.graph_nodes.push_back({7, 5, 12, 0, store::GraphNodeKind::Kernel, 170, 0});
  collector::Symbolizer s;
  s.symbolize(t);
  unsetenv("STEPSCOPE_SYMBOL_CACHE");
  REQUIRE(t.stacks.size() == 3);
  REQUIRE(t.samples[0].stack == 3);
  CHECK(t.str(t.frames[t.stacks[2].frame - 1].symbol) == "_fini");
  CHECK(t.api_calls[0].stack == 3);
  CHECK(t.graphs[0].stack == 3);
  CHECK(t.graph_nodes[0].stack == 3);
  CHECK(t.graph_nodes[1].stack == 0);
}
