/* guard_selftest MODE: a program whose own SIGUSR1 handler calls malloc (MODE "malloc") or only counts
 * (MODE "clean"), raised 100 times. Run with the handler guard preloaded and STEPSCOPE_HANDLER_GUARD_MATCH
 * naming this program, the "malloc" mode must die of the guard's abort: proof the guard is not vacuous. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile sig_atomic_t g_count;
static int g_allocate;

static void on_usr1(int sig, siginfo_t* info, void* uc) {
  (void)sig;
  (void)info;
  (void)uc;
  if (g_allocate) {
    void* volatile p = malloc(64);
    free(p);
  }
  g_count = g_count + 1;
}

int main(int argc, char** argv) {
  g_allocate = argc > 1 && strcmp(argv[1], "malloc") == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_usr1;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return 3;
  for (int i = 0; i < 100; ++i) raise(SIGUSR1);
  printf("handled %d\n", (int)g_count);
  return 0;
}
