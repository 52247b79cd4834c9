// x86_assembler (issue 28): each instruction's exact bytes (Intel SDM encodings), the forward jump patched to
// the current end, and the injected stub's shape.
#include "attach/x86_assembler.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

using stepscope::collector::attach::Assembler;
using Bytes = std::vector<uint8_t>;

TEST_CASE("x86_assembler encodes each instruction exactly") {
  Assembler a;
  a.mov_rdi(0x1122334455667788);
  CHECK(a.code == Bytes{0x48, 0xbf, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11});  // movabs rdi, imm64
  a.code.clear();
  a.mov_rsi(2);
  CHECK(a.code == Bytes{0x48, 0xbe, 2, 0, 0, 0, 0, 0, 0, 0});  // movabs rsi, 2
  a.code.clear();
  a.mov_rax(0x00007f0012345678);
  CHECK(a.code == Bytes{0x48, 0xb8, 0x78, 0x56, 0x34, 0x12, 0x00, 0x7f, 0, 0});  // movabs rax, imm64
  a.code.clear();
  a.call_rax();
  CHECK(a.code == Bytes{0xff, 0xd0});  // call rax
  a.code.clear();
  a.store_rax(0);
  a.store_rax(3);
  CHECK(a.code == Bytes{0x48, 0x89, 0x44, 0x24, 0x00, 0x48, 0x89, 0x44, 0x24, 0x18});  // mov [rsp+0/24], rax
  a.code.clear();
  a.mov_rdi_rax();
  CHECK(a.code == Bytes{0x48, 0x89, 0xc7});  // mov rdi, rax
  a.code.clear();
  a.int3();
  CHECK(a.code == Bytes{0xcc});
}

TEST_CASE("x86_assembler patches a jz to land at the current end") {
  Assembler a;
  a.int3();
  const size_t after = a.jz_if_rax_zero();
  CHECK(after == 10);
  CHECK(a.code ==
        Bytes{0xcc, 0x48, 0x85, 0xc0, 0x0f, 0x84, 0, 0, 0, 0});  // test rax, rax; jz rel32 (0 for now)
  a.call_rax();
  a.int3();
  a.patch(after);  // jumps over call rax; int3 (3 bytes)
  CHECK(a.code == Bytes{0xcc, 0x48, 0x85, 0xc0, 0x0f, 0x84, 3, 0, 0, 0, 0xff, 0xd0, 0xcc});
}

TEST_CASE("x86_assembler builds the injected stub's shape") {
  // dlopen(lib, flags) -> store 0; jz fail; dlsym(handle, name) -> store 1; jz fail; fn(arg) -> store 2;
  // int3; fail: dlerror() -> store 3; int3 (as inject() writes it).
  Assembler a;
  a.mov_rdi(0x1000);
  a.mov_rsi(2);
  a.mov_rax(0x2000);
  a.call_rax();
  a.store_rax(0);
  const size_t j1 = a.jz_if_rax_zero();
  a.mov_rdi_rax();
  a.mov_rsi(0x3000);
  a.mov_rax(0x4000);
  a.call_rax();
  a.store_rax(1);
  const size_t j2 = a.jz_if_rax_zero();
  a.mov_rdi(0x5000);
  a.call_rax();
  a.store_rax(2);
  a.int3();
  a.patch(j1);
  a.patch(j2);
  a.mov_rax(0x6000);
  a.call_rax();
  a.store_rax(3);
  a.int3();
  // 3 movabs + call + store + jz = 30 + 2 + 5 + 9; then mov rdi,rax + 2 movabs + call + store + jz = 3 + 20 +
  // 2 + 5 + 9; then movabs + call + store + int3 = 10 + 2 + 5 + 1; dlerror: 10 + 2 + 5 + 1.
  REQUIRE(a.code.size() == 46 + 39 + 18 + 18);
  const size_t fail = 46 + 39 + 18;
  int32_t rel1 = 0, rel2 = 0;
  std::memcpy(&rel1, &a.code[j1 - 4], 4);
  std::memcpy(&rel2, &a.code[j2 - 4], 4);
  CHECK(j1 + rel1 == fail);
  CHECK(j2 + rel2 == fail);
  CHECK(a.code[fail - 1] == 0xcc);
  CHECK(a.code.back() == 0xcc);
}
