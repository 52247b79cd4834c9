// Whether a word found on a stack can be a return address: the x86-64 call instruction that would have pushed
// it, decoded backwards from the bytes before it. Used by the stack scan that resumes an unwind past code
// without unwind tables (copied_stack_unwinder.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

namespace stepscope::collector::unwind {

struct CallSite {
  enum Kind : uint8_t {
    kNone,         // no call instruction ends at the address
    kDirect,       // call rel32: `target` is the called address
    kRipIndirect,  // call *disp32(%rip): `pointer` holds the called address
    kIndirect,     // call through a register or other memory: the called address is unknown
  };
  Kind kind = kNone;
  uint8_t length = 0;  // of the instruction, prefixes included
  uintptr_t target = 0;
  uintptr_t pointer = 0;
};

// The call instructions that end exactly at `ra`, read from `before` (the 8 bytes at ra - 8 .. ra - 1): up to
// one of each kind, a direct call first. Several can match the same bytes (an `ff d0` that is also the end of
// a rel32); the caller decides with the targets. Returns how many were written to `out` (at most 2).
int calls_ending_at(const uint8_t (&before)[8], uintptr_t ra, CallSite (&out)[2]);

// Where a PLT stub at `code` (16 bytes read from `at`) jumps: the address of the GOT slot it jumps through,
// or 0 when the bytes are not a stub (`jmp *disp32(%rip)`, optionally after endbr64 and a bnd prefix).
uintptr_t plt_slot(const uint8_t (&code)[16], uintptr_t at);

}  // namespace stepscope::collector::unwind
