#include "call_site.h"

#include <cstring>

namespace stepscope::collector::unwind {
namespace {

int32_t le32(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Length of an `ff /2` (call r/m64) whose opcode is at before[k], or 0 when the bytes after it do not make
// one that fits in `before`. `rip` is set for the RIP-relative form.
int ff2_length(const uint8_t (&b)[8], int k, bool& rip) {
  if (k + 1 >= 8) return 0;
  const uint8_t modrm = b[k + 1];
  const int mod = modrm >> 6, reg = (modrm >> 3) & 7, rm = modrm & 7;
  if (reg != 2) return 0;
  rip = false;
  if (mod == 3) return 2;
  int len = 2;
  if (rm == 4) {  // a SIB byte follows
    if (k + 2 >= 8) return 0;
    ++len;
    if (mod == 0 && (b[k + 2] & 7) == 5) len += 4;  // no base: disp32
  } else if (mod == 0 && rm == 5) {
    rip = true;
    len += 4;
  }
  if (mod == 1) len += 1;
  if (mod == 2) len += 4;
  return len;
}

}  // namespace

int calls_ending_at(const uint8_t (&before)[8], uintptr_t ra, CallSite (&out)[2]) {
  int n = 0;
  if (before[3] == 0xe8) {
    CallSite c;
    c.kind = CallSite::kDirect;
    c.length = 5;
    c.target = ra + static_cast<intptr_t>(le32(before + 4));
    out[n++] = c;
  }
  // call r/m64 is 2 to 7 bytes after its prefixes (REX, notrack): its opcode sits 2 to 7 bytes before `ra`.
  // The RIP-relative form, whose target can be read, is preferred where two forms end at `ra`.
  CallSite indirect;
  for (int k = 6; k >= 1; --k) {
    if (before[k] != 0xff) continue;
    bool rip = false;
    const int len = ff2_length(before, k, rip);
    if (len == 0 || k + len != 8) continue;
    if (indirect.kind == CallSite::kRipIndirect) continue;
    indirect.kind = rip ? CallSite::kRipIndirect : CallSite::kIndirect;
    indirect.length = static_cast<uint8_t>(len);
    if (k >= 1 && ((before[k - 1] & 0xf0) == 0x40 || before[k - 1] == 0x3e)) ++indirect.length;
    indirect.pointer = rip ? ra + static_cast<intptr_t>(le32(before + 4)) : 0;
  }
  if (indirect.kind != CallSite::kNone) out[n++] = indirect;
  return n;
}

uintptr_t plt_slot(const uint8_t (&code)[16], uintptr_t at) {
  int i = 0;
  if (code[0] == 0xf3 && code[1] == 0x0f && code[2] == 0x1e && code[3] == 0xfa) i = 4;  // endbr64
  if (code[i] == 0xf2) ++i;                                                             // bnd
  if (code[i] != 0xff || code[i + 1] != 0x25) return 0;
  return at + i + 6 + static_cast<intptr_t>(le32(code + i + 2));
}

}  // namespace stepscope::collector::unwind
