// The symbolizer names an address only with a symbol that covers it: a stripped library's local functions,
// which only an unsized `_init` precedes, read module+offset (the H100 Hugging Face recording showed `_init`
// 27 ms). And a program built by clang, which writes no .debug_aranges, gets its file:line.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

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
