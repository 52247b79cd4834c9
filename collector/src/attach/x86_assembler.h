// The few x86-64 instructions the injected stub is made of, as bytes: moves of 64-bit constants, an indirect
// call, stores of rax into the stack, a forward jump when rax is zero, int3.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace stepscope::collector::attach {

class Assembler {
 public:
  std::vector<uint8_t> code;

  void movabs(uint8_t rex, uint8_t op, uint64_t imm);  // REX.W b8+r imm64
  void mov_rdi(uint64_t v) { movabs(0x48, 0xbf, v); }
  void mov_rsi(uint64_t v) { movabs(0x48, 0xbe, v); }
  void mov_rax(uint64_t v) { movabs(0x48, 0xb8, v); }
  void call_rax();               // call rax
  void store_rax(uint8_t slot);  // mov [rsp + 8*slot], rax
  void mov_rdi_rax();            // mov rdi, rax
  size_t jz_if_rax_zero();       // test rax, rax; jz rel32: returns the offset after it, for patch()
  void patch(size_t after_jz);   // makes that jz land here (the current end of the code)
  void int3();

 private:
  void append(uint64_t v);
};

}  // namespace stepscope::collector::attach
