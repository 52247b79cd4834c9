// A target that abuses its process the way real programs sometimes do; its stdout and exit code are fixed
// by its arguments, so a test can compare them with and without the collector.
//   abuse_target own-sigprof | block-all-signals | vfork-exec | exec-chain N | dlopen-storm | fork-storm |
//                thread-churn | memory-limit [now] | burn
#ifndef ABUSE_STATIC
#include <dlfcn.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {
volatile sig_atomic_t g_ticks = 0;
void on_prof(int) { g_ticks = g_ticks + 1; }

// CPU work with a result that depends only on `n`.
unsigned long burn(unsigned long n) {
  unsigned long x = 1;
  for (unsigned long i = 0; i < n; ++i) x = x * 6364136223846793005ul + 1442695040888963407ul;
  return x;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "burn";
  if (mode == "own-sigprof") {
    // Its own SIGPROF handler and ITIMER_PROF: it must keep receiving its ticks.
    struct sigaction sa {};
    sa.sa_handler = on_prof;
    sigaction(SIGPROF, &sa, nullptr);
    itimerval it{{0, 10000}, {0, 10000}};
    setitimer(ITIMER_PROF, &it, nullptr);
    unsigned long r = burn(400000000ul);
    itimerval off{};
    setitimer(ITIMER_PROF, &off, nullptr);
    std::printf("own-sigprof result %lx ticks %s\n", r, g_ticks > 5 ? "many" : "few");
    return g_ticks > 5 ? 7 : 1;
  }
  if (mode == "block-all-signals") {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, nullptr);
    std::printf("blocked result %lx\n", burn(300000000ul));
    return 5;
  }
  if (mode == "vfork-exec") {
    std::fflush(stdout);
    pid_t pid = vfork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", "echo from the vforked child; exit 9", static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    std::printf("vfork child exited %d\n", WEXITSTATUS(status));
    return 4;
  }
  if (mode == "exec-chain") {
    const int n = argc > 2 ? std::atoi(argv[2]) : 0;
    std::printf("exec-chain %d result %lx\n", n, burn(20000000ul));
    std::fflush(stdout);
    if (n <= 0) return 3;
    const std::string next = std::to_string(n - 1);
    execl("/proc/self/exe", argv[0], "exec-chain", next.c_str(), static_cast<char*>(nullptr));
    return 126;
  }
#ifndef ABUSE_STATIC  // glibc's dlopen in a static binary needs the shared libraries of the same glibc
  if (mode == "dlopen-storm") {
    int opened = 0;
    for (int i = 0; i < 2000; ++i) {
      void* h = dlopen(i % 2 ? "libz.so.1" : "libm.so.6", RTLD_NOW | RTLD_LOCAL);
      if (h) {
        ++opened;
        dlclose(h);
      }
      burn(20000);
    }
    std::printf("dlopen-storm opened %d\n", opened);
    return 6;
  }
#endif
  if (mode == "fork-storm") {
    // 200 children, each exiting with its own code; the parent checks every one.
    int ok = 0;
    for (int round = 0; round < 4; ++round) {
      std::vector<pid_t> kids;
      for (int i = 0; i < 50; ++i) {
        pid_t p = fork();
        if (p == 0) _exit(int(burn(100000) & 0) + i);
        kids.push_back(p);
      }
      for (int i = 0; i < 50; ++i) {
        int status = 0;
        waitpid(kids[size_t(i)], &status, 0);
        ok += WIFEXITED(status) && WEXITSTATUS(status) == i;
      }
    }
    std::printf("fork-storm %d of 200 children exited as expected\n", ok);
    return ok == 200 ? 8 : 1;
  }
  if (mode == "thread-churn") {
    // 1000 threads in waves of 50, each doing a little work.
    unsigned long sum = 0;
    for (int wave = 0; wave < 20; ++wave) {
      std::vector<std::thread> ts;
      std::vector<unsigned long> out(50);
      for (int i = 0; i < 50; ++i) ts.emplace_back([&out, i] { out[size_t(i)] = burn(200000) ^ unsigned(i); });
      for (auto& t : ts) t.join();
      for (auto v : out) sum ^= v;
    }
    std::printf("thread-churn 1000 threads sum %lx\n", sum);
    return 10;
  }
  if (mode == "memory-limit") {
    // Near its memory limit, like a trainer that grew into it: half a second of work first (the collector has
    // committed samples by then), 4 threads started, then RLIMIT_AS 64 MB above what the process maps, 1 MB
    // blocks (touched) until malloc says no, held while the 4 threads compute and exit — the collector samples
    // them, retires them and has to allocate under the same limit. Nothing the target itself needs is left to
    // chance: its threads' stacks are mapped before the limit, since the collector's own thread may take the
    // headroom (glibc reserves 64 MB of address space for a thread's first malloc arena). The output does not
    // depend on how much memory was reached.
    // `memory-limit now` fills memory at once, before the collector has stored anything.
    const unsigned long warm = argc > 2 && std::string(argv[2]) == "now" ? 0ul : burn(400000000ul);
    volatile bool go = false;
    std::vector<unsigned long> out(4);
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i)
      ts.emplace_back([&out, &go, i] {
        while (!go) std::this_thread::yield();
        out[size_t(i)] = burn(150000000ul) ^ unsigned(i);
      });
    std::vector<void*> held;
    held.reserve(1024);  // room for every block under the limit: the loop itself needs no memory
    long pages = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
      std::fclose(f);
    }
    rlimit rl{};
    rl.rlim_cur = rl.rlim_max = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (64ul << 20);
    if (pages <= 0 || setrlimit(RLIMIT_AS, &rl) != 0) return 1;
    while (held.size() < held.capacity()) {
      void* p = std::malloc(1 << 20);
      if (!p) break;
      std::memset(p, 1, 1 << 20);
      held.push_back(p);
    }
    go = true;
    for (auto& t : ts) t.join();
    unsigned long sum = warm;
    for (auto v : out) sum += v;
    for (void* p : held) std::free(p);
    std::printf("memory-limit sum %lx\n", sum);
    return 9;
  }
  if (mode == "burn-forever") {
    // The volatile store keeps the loop: an endless loop without side effects is undefined (clang drops it).
    [[maybe_unused]] volatile unsigned long sink = 0;
    for (;;) sink = burn(1000000ul);
  }
  std::printf("burn %lx\n", burn(100000000ul));
  return 0;
}
