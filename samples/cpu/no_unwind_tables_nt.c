/* The part of no_unwind_tables compiled without unwind tables (-fno-asynchronous-unwind-tables -fno-unwind-tables
 * -fomit-frame-pointer): what MKL's kernels and JIT code look like to an unwinder. Each function keeps its own
 * frame (noinline, results used after each call, so no call becomes a jump). */
#include <stdint.h>

#define NT __attribute__((noinline))

/* The hot loop, in rax, rcx and rdx only. `n` > 0. */
#define XORSHIFT_LOOP(before, after, x, n)                                        \
  __asm__ volatile(before "1:\n\t"                                                \
                   "mov %%rax, %%rdx\n\tshl $13, %%rdx\n\txor %%rdx, %%rax\n\t" \
                   "mov %%rax, %%rdx\n\tshr $7, %%rdx\n\txor %%rdx, %%rax\n\t"  \
                   "mov %%rax, %%rdx\n\tshl $17, %%rdx\n\txor %%rdx, %%rax\n\t" \
                   "dec %%rcx\n\tjnz 1b\n\t" after                              \
                   : "+a"(x), "+c"(n)                                              \
                   :                                                               \
                   : "rdx", "cc", "memory")

/* While the loop runs, rbp holds garbage and its caller's value is pushed below (JIT kernels use rbp as a
 * general register): the unwind must find it there for run_chain, whose frame is addressed through rbp. */
NT uint64_t nt_leaf(uint64_t n, uint64_t x) {
  x |= 1;
  if (n == 0) return x;
  XORSHIFT_LOOP("push %%rbp\n\tmovabs $0x5afe5afe5afe5afe, %%rbp\n\t", "pop %%rbp\n\t", x, n);
  return x;
}

/* Calls nt_leaf directly (call rel32): the scan can check that the call's target is the function it finds. */
NT uint64_t nt_middle(uint64_t n, uint64_t seed) { return nt_leaf(n, seed + 1) * 3 + 1; }

/* The trap: nt_decoy calls nt_decoy_inner directly from deep in its frame, and nt_trap_leaf's frame, larger
 * and mostly never written, covers that slot afterwards: a stale return address into nt_decoy lies between
 * nt_trap_leaf's stack pointer and its real return address. A scan that took the first return address it
 * finds would name nt_decoy as nt_trap_leaf's caller. */
NT uint64_t nt_decoy_inner(uint64_t x) { return x * 7 + 3; }

NT uint64_t nt_decoy(uint64_t x) {
  volatile uint64_t pad[48];
  pad[0] = x;
  pad[47] = 1;
  return nt_decoy_inner(pad[0]) + pad[47];
}

NT uint64_t nt_trap_leaf(uint64_t n, uint64_t x) {
  volatile uint64_t big[128];
  big[0] = x | 1;
  x = big[0];
  if (n == 0) return x;
  XORSHIFT_LOOP("", "", x, n);
  return x + big[0];
}

/* Clears what the thread's start left below (libc's return addresses), so that nt_decoy's is the first one
 * between nt_trap_leaf's stack pointer and its return address. */
NT uint64_t nt_scrub(uint64_t x) {
  volatile uint64_t area[256];
  for (int i = 0; i < 256; ++i) area[i] = 0;
  return x + area[255];
}

NT uint64_t nt_trap_middle(uint64_t n, uint64_t seed) {
  seed = nt_scrub(seed);
  const uint64_t d = nt_decoy(seed);
  return nt_trap_leaf(n, seed + d) * 5 + 2;
}
