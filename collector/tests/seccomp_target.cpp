// seccomp_target MODE SECONDS: confines itself with seccomp, prints "confined", computes for about SECONDS
// (no system calls), prints "done" and exits 0. MODE strict: SECCOMP_MODE_STRICT (only read, write, exit,
// sigreturn); no-mmap: a filter under which mmap fails with EPERM. What `stepscope attach` must refuse cleanly.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

volatile uint64_t g_sink;

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const bool strict = std::strcmp(argv[1], "strict") == 0;
  const uint64_t iterations = uint64_t(std::atof(argv[2]) * 800000000.0);
  std::fflush(stdout);
  if (strict) {
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT) != 0) return 3;
  } else {
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 1 /* EPERM */),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 3;
  }
  static const char kConfined[] = "confined\n";
  (void)!write(1, kConfined, sizeof kConfined - 1);
  uint64_t x = 88172645463325252ull;
  for (uint64_t i = 0; i < iterations; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  g_sink = x;
  static const char kDone[] = "done\n";
  (void)!write(1, kDone, sizeof kDone - 1);
  syscall(SYS_exit, 0);  // strict mode allows exit, not exit_group
  return 0;
}
