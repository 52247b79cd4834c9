// The call instruction before a return address (unwind/call_site.h), decoded from machine code the assembler
// wrote: each form of `call` the stack scan accepts, ending at a label, and code that ends in no call.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>

#include "unwind/call_site.h"

using namespace stepscope::collector::unwind;

// Never run: only its bytes are read. Each `after_*` label is where the call before it returns to.
asm(R"(
  .pushsection .text
  .p2align 4
  .globl call_forms_code, after_direct, after_reg, after_rex_reg, after_disp8, after_disp32, after_rip
  .globl after_sib, after_sib_disp8, after_notrack, after_no_call, after_jump, call_forms_target, plt_like
  .hidden call_forms_code, after_direct, after_reg, after_rex_reg, after_disp8, after_disp32, after_rip
  .hidden after_sib, after_sib_disp8, after_notrack, after_no_call, after_jump, call_forms_target, plt_like
call_forms_code:
  nop; nop; nop; nop; nop; nop; nop; nop
  call call_forms_target
after_direct:
  call *%rax
after_reg:
  call *%r11
after_rex_reg:
  call *0x18(%rbx)
after_disp8:
  call *0x12345(%rbx)
after_disp32:
  call *call_forms_slot(%rip)
after_rip:
  call *(%rax,%rcx,8)
after_sib:
  call *0x40(%rsp)
after_sib_disp8:
  .byte 0x3e
  call *%rdx
after_notrack:
  mov $1, %eax
  add %rdx, %rax
after_no_call:
  jmp *%rax
after_jump:
  ret
call_forms_target:
  ret
plt_like:
  endbr64
  .byte 0xf2
  jmp *call_forms_slot(%rip)
  .popsection
  .pushsection .data
  .p2align 3
  .globl call_forms_slot
  .hidden call_forms_slot
call_forms_slot:
  .quad 0
  .popsection
)");

extern "C" const uint8_t call_forms_code[], after_direct[], after_reg[], after_rex_reg[], after_disp8[],
    after_disp32[], after_rip[], after_sib[], after_sib_disp8[], after_notrack[], after_no_call[],
    after_jump[], call_forms_target[], plt_like[];
extern "C" uint64_t call_forms_slot;

namespace {

struct Decoded {
  int n = 0;
  CallSite sites[2];
};

Decoded decode(const uint8_t* ra) {
  uint8_t before[8];
  std::memcpy(before, ra - 8, 8);
  Decoded d;
  d.n = calls_ending_at(before, reinterpret_cast<uintptr_t>(ra), d.sites);
  return d;
}

}  // namespace

TEST_CASE("each form of call is found ending at its return address, with its length and what it calls") {
  Decoded d = decode(after_direct);
  REQUIRE(d.n == 1);
  CHECK(d.sites[0].kind == CallSite::kDirect);
  CHECK(d.sites[0].length == 5);
  CHECK(d.sites[0].target == reinterpret_cast<uintptr_t>(call_forms_target));

  d = decode(after_rip);
  REQUIRE(d.n == 1);
  CHECK(d.sites[0].kind == CallSite::kRipIndirect);
  CHECK(d.sites[0].length == 6);
  CHECK(d.sites[0].pointer == reinterpret_cast<uintptr_t>(&call_forms_slot));

  const struct {
    const uint8_t* ra;
    int length;
  } indirect[] = {{after_reg, 2}, {after_rex_reg, 3},   {after_disp8, 3},  {after_disp32, 6},
                  {after_sib, 3}, {after_sib_disp8, 4}, {after_notrack, 3}};
  for (const auto& c : indirect) {
    INFO("return address at +" << (c.ra - call_forms_code));
    d = decode(c.ra);
    REQUIRE(d.n == 1);
    CHECK(d.sites[0].kind == CallSite::kIndirect);
    CHECK(d.sites[0].length == c.length);
  }
}

TEST_CASE("code that ends in no call, or in a jump, is no return address") {
  CHECK(decode(after_no_call).n == 0);  // add %rdx,%rax
  CHECK(decode(after_jump).n == 0);     // jmp *%rax: ff /4, not /2
  CHECK(decode(call_forms_target).n == 0);
}

TEST_CASE("a PLT stub names the GOT slot it jumps through") {
  uint8_t code[16];
  std::memcpy(code, plt_like, sizeof code);
  CHECK(plt_slot(code, reinterpret_cast<uintptr_t>(plt_like)) ==
        reinterpret_cast<uintptr_t>(&call_forms_slot));
  std::memcpy(code, call_forms_code, sizeof code);  // nops, then a call: not a stub
  CHECK(plt_slot(code, reinterpret_cast<uintptr_t>(call_forms_code)) == 0);
}
