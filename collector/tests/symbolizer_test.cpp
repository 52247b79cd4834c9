// The symbolizer names an address only with a symbol that covers it: a stripped library's local functions, which
// only an unsized `_init` precedes, read module+offset (the H100 Hugging Face recording showed `_init` 27 ms).
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "stepscope/collector/launcher.h"
#include "stepscope/store/records.h"

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
