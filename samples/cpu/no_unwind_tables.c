/* no_unwind_tables: hot code without unwind tables (no_unwind_tables_nt.c), as MKL's kernels and JIT code are,
 * under callers that have them. Two threads, each on a stack of its own:
 *   chain:  chain_main -> run_chain -(call through a pointer)-> nt_middle -(call rel32)-> nt_leaf (hot)
 *           run_chain's frame is realigned (its unwind rule needs rbp), and nt_leaf runs with rbp changed.
 *   trap:   trap_main -> nt_trap_middle -> nt_decoy -> nt_decoy_inner (returned), then -> nt_trap_leaf (hot),
 *           whose frame holds nt_decoy's stale return address below its own.
 * The collector's stack scan must recover the chain's callers exactly and name no nt_decoy frame.
 *   no_unwind_tables [--iterations N]
 * Work is counted in iterations, so stdout is deterministic. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t nt_middle(uint64_t n, uint64_t seed);
uint64_t nt_trap_middle(uint64_t n, uint64_t seed);

/* Read at each call: the compiler cannot turn it into a direct call. */
static uint64_t (*volatile middle_through_pointer)(uint64_t, uint64_t) = nt_middle;

static uint64_t g_iterations = 600000000;
static uint64_t g_results[2];

/* A 64-byte aligned local realigns the frame: its unwind rule computes the caller's frame from rbp. */
__attribute__((noinline)) uint64_t run_chain(uint64_t n) {
  _Alignas(64) volatile uint64_t block[8];
  block[0] = 3;
  block[7] = 0;
  const uint64_t r = middle_through_pointer(n, block[0]);
  return r + block[7];
}

__attribute__((noinline)) void* chain_main(void* arg) {
  (void)arg;
  g_results[0] = run_chain(g_iterations) + 1;
  return NULL;
}

__attribute__((noinline)) void* trap_main(void* arg) {
  (void)arg;
  g_results[1] = nt_trap_middle(g_iterations, 5) + 1;
  return NULL;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--iterations") && i + 1 < argc) {
      g_iterations = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "no_unwind_tables: unknown option %s\n", argv[i]);
      return 2;
    }
  }
  pthread_t chain, trap;
  if (pthread_create(&chain, NULL, chain_main, NULL) != 0 || pthread_create(&trap, NULL, trap_main, NULL) != 0) {
    fprintf(stderr, "no_unwind_tables: pthread_create failed\n");
    return 1;
  }
  pthread_join(chain, NULL);
  pthread_join(trap, NULL);
  printf("no_unwind_tables: %llu %llu\n", (unsigned long long)g_results[0], (unsigned long long)g_results[1]);
  return 0;
}
