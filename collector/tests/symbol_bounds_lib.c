// A library whose local functions have no symbol once stripped: only `_init` (unsized, in .init) precedes them.
__attribute__((noinline)) static int local_square(int x) { __asm__ volatile(""); return x * x + 1; }
__attribute__((noinline)) static int local_cube(int x) { __asm__ volatile(""); return x * x * x + local_square(x); }
int symbol_bounds_exported(int x) { return local_cube(x) + local_square(x + 1); }
