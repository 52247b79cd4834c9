// Bytes of the injected stub's instructions; see x86_assembler.h.
#include "x86_assembler.h"

#include <cstring>

namespace stepscope::collector::attach {

void Assembler::movabs(uint8_t rex, uint8_t op, uint64_t imm) {
  code.push_back(rex);
  code.push_back(op);
  append(imm);
}

void Assembler::call_rax() {
  code.insert(code.end(), {0xff, 0xd0});
}

void Assembler::store_rax(uint8_t slot) {  // the results live in the stack gap the caller reserved
  code.insert(code.end(), {0x48, 0x89, 0x44, 0x24, uint8_t(8 * slot)});
}

void Assembler::mov_rdi_rax() {
  code.insert(code.end(), {0x48, 0x89, 0xc7});
}

size_t Assembler::jz_if_rax_zero() {  // the rel32 is patched later
  code.insert(code.end(), {0x48, 0x85, 0xc0, 0x0f, 0x84, 0, 0, 0, 0});
  return code.size();
}

void Assembler::patch(size_t after_jz) {
  const int32_t rel = int32_t(code.size() - after_jz);
  std::memcpy(&code[after_jz - 4], &rel, 4);
}

void Assembler::int3() {
  code.push_back(0xcc);
}

void Assembler::append(uint64_t v) {
  for (int i = 0; i < 8; ++i) code.push_back(uint8_t(v >> (8 * i)));
}

}  // namespace stepscope::collector::attach
