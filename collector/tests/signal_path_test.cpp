// The signal path's primitives that are easy to get wrong (issue 28): telling a thread blocked in a system
// call from one running, and the fault-safe reads of the stack copy — on real pages with holes in them and on
// real threads interrupted by a real signal.
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "sampling/interrupted.h"
#include "unwind/safe_copy.h"
#include "unwind/stack_capture.h"

using namespace stepscope::collector;

namespace {

constexpr size_t kPage = 4096;

// `n` pages, readable and writable; unmap() turns page i into a hole (PROT_NONE: mapped, unreadable).
struct Pages {
  explicit Pages(size_t n) : n(n) {
    base = static_cast<uint8_t*>(
        mmap(nullptr, n * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(base != MAP_FAILED);
    for (size_t i = 0; i < n * kPage; ++i) base[i] = static_cast<uint8_t>(i * 7 + 3);
  }
  ~Pages() { munmap(base, n * kPage); }
  void hole(size_t i) { REQUIRE(mprotect(base + i * kPage, kPage, PROT_NONE) == 0); }
  uintptr_t at(size_t offset) const { return reinterpret_cast<uintptr_t>(base) + offset; }
  uint8_t* base = nullptr;
  size_t n;
};

ucontext_t context_at(uintptr_t ip, long rax) {
  ucontext_t uc;
  std::memset(&uc, 0, sizeof uc);
  uc.uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(ip);
  uc.uc_mcontext.gregs[REG_RAX] = static_cast<greg_t>(rax);
  return uc;
}

std::atomic<int> g_verdict{-1};
void record_verdict(int, siginfo_t*, void* ctx) {
  g_verdict.store(interrupted_in_syscall(static_cast<ucontext_t*>(ctx)));
}

// Signals `t` (a thread id) and waits for the handler's verdict.
int verdict_of(pid_t tid) {
  g_verdict.store(-1);
  syscall(SYS_tgkill, getpid(), tid, SIGUSR1);
  for (int i = 0; i < 2000 && g_verdict.load() < 0; ++i) usleep(1000);
  return g_verdict.load();
}

}  // namespace

TEST_CASE("interrupted_in_syscall reads the syscall instruction at or just before ip, never across a page") {
  Pages p(2);
  p.hole(0);  // nothing before page 1 may be read
  uint8_t* code = p.base + kPage;
  std::memset(code, 0x90, kPage);  // nops
  // Restarted (SA_RESTART): ip rewound onto `syscall` (0f 05), whatever rax holds.
  code[100] = 0x0f, code[101] = 0x05;
  auto uc = context_at(p.at(kPage + 100), 0);
  CHECK(interrupted_in_syscall(&uc));
  // Returned -EINTR: ip just after `syscall`.
  uc = context_at(p.at(kPage + 102), -EINTR);
  CHECK(interrupted_in_syscall(&uc));
  uc = context_at(p.at(kPage + 102), 0);  // after a syscall that returned normally: running again
  CHECK_FALSE(interrupted_in_syscall(&uc));
  code[200] = 0x0f, code[201] = 0x1f;  // a two-byte nop, not a syscall
  uc = context_at(p.at(kPage + 200), 0);
  CHECK_FALSE(interrupted_in_syscall(&uc));
  // ip at the first two bytes of its page: the bytes before it are another page (here unreadable) and are not
  // read — a fault there would kill the sampled program.
  for (size_t off : {size_t(0), size_t(1)}) {
    uc = context_at(p.at(kPage + off), -EINTR);
    CHECK_FALSE(interrupted_in_syscall(&uc));
  }
}

TEST_CASE(
    "interrupted_in_syscall on real threads: blocked in read() with and without SA_RESTART, or spinning") {
  for (int flags : {SA_SIGINFO | SA_RESTART, SA_SIGINFO}) {
    INFO("SA_RESTART " << ((flags & SA_RESTART) != 0));
    struct sigaction sa {
    }, old{};
    sa.sa_sigaction = record_verdict;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    REQUIRE(sigaction(SIGUSR1, &sa, &old) == 0);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    std::atomic<pid_t> reader_tid{0};
    std::atomic<bool> stop{false};
    std::thread reader([&] {
      reader_tid = static_cast<pid_t>(syscall(SYS_gettid));
      char c;
      while (!stop.load()) {
        if (read(fds[0], &c, 1) == 1 && c == 'q') break;  // EINTR without SA_RESTART: read again
      }
    });
    std::atomic<pid_t> spinner_tid{0};
    std::thread spinner([&] {
      spinner_tid = static_cast<pid_t>(syscall(SYS_gettid));
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x + 1;
    });
    while (!reader_tid.load() || !spinner_tid.load()) usleep(1000);
    usleep(50000);  // the reader is inside read() by now
    int blocked = 0, running = 0;
    for (int i = 0; i < 20; ++i) {
      blocked += verdict_of(reader_tid.load()) == 1;
      running += verdict_of(spinner_tid.load()) == 0;
    }
    CHECK(blocked == 20);
    CHECK(running == 20);
    stop = true;
    REQUIRE(write(fds[1], "q", 1) == 1);
    reader.join();
    spinner.join();
    close(fds[0]);
    close(fds[1]);
    sigaction(SIGUSR1, &old, nullptr);
  }
}

TEST_CASE("copy_stack: a plain copy inside known bounds, page by page without them, stopping at a hole") {
  using namespace stepscope::collector::unwind;
  Pages p(4);
  std::vector<uint8_t> dst(4 * kPage, 0xee);
  SECTION("known bounds: the copy stops at the window or at the stack's top") {
    const StackBounds b{p.at(0), p.at(2 * kPage)};
    StackCopy c = copy_stack(p.at(1000), b, dst.data(), 1024);
    CHECK(c.bytes == 1024);
    CHECK(c.capped);
    CHECK_FALSE(c.faulted);
    CHECK(std::memcmp(dst.data(), p.base + 1000, 1024) == 0);
    c = copy_stack(p.at(1000), b, dst.data(), 3 * kPage);
    CHECK(c.bytes == 2 * kPage - 1000);
    CHECK_FALSE(c.capped);
    CHECK(std::memcmp(dst.data(), p.base + 1000, c.bytes) == 0);
  }
  SECTION("unknown bounds: every readable byte up to the first hole, none after it") {
    p.hole(2);
    const StackCopy c = copy_stack(p.at(100), StackBounds{}, dst.data(), 3 * kPage);
    CHECK(c.bytes == 2 * kPage - 100);
    CHECK_FALSE(c.capped);
    CHECK_FALSE(c.faulted);
    CHECK(std::memcmp(dst.data(), p.base + 100, c.bytes) == 0);
    CHECK(dst[c.bytes] == 0xee);  // nothing written past what was read
    const StackCopy capped = copy_stack(p.at(100), StackBounds{}, dst.data(), 512);
    CHECK(capped.bytes == 512);
    CHECK(capped.capped);
  }
  SECTION("a stack pointer in a hole: nothing read, faulted, no crash") {
    p.hole(1);
    const StackCopy c = copy_stack(p.at(kPage + 8), StackBounds{}, dst.data(), 2 * kPage);
    CHECK(c.bytes == 0);
    CHECK(c.faulted);
  }
}

TEST_CASE("read_own_memory: true only when every byte is readable") {
  using stepscope::collector::unwind::read_own_memory;
  Pages p(3);
  p.hole(2);
  uint8_t buf[256];
  CHECK(read_own_memory(buf, p.at(kPage - 128), sizeof buf));  // across two readable pages
  CHECK(std::memcmp(buf, p.base + kPage - 128, sizeof buf) == 0);
  CHECK_FALSE(read_own_memory(buf, p.at(2 * kPage - 128), sizeof buf));  // into the hole
  CHECK_FALSE(read_own_memory(buf, p.at(2 * kPage + 16), 16));           // inside it
  CHECK_FALSE(read_own_memory(buf, 0, 8));                               // null
}

namespace {

// In a child: `body`, then how the child ended (exit status, or 128 + the signal that ended it).
template <class F>
int in_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);  // Catch's own handler is inherited: the program here starts at the default
    signal(SIGBUS, SIG_DFL);
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

void exit_42(int) {
  _exit(42);
}

}  // namespace

TEST_CASE(
    "the fault guard: guarded copies stop at the first unreadable byte, and every other fault is the "
    "program's") {
  using namespace stepscope::collector::unwind;
  SECTION("guarded copies inside a scope: exact counts at holes, no system call, no crash") {
    CHECK(in_child([] {
            Pages p(3);
            p.hole(2);
            if (!install_fault_guard()) _exit(10);
            uint8_t buf[2 * kPage];
            const FaultGuardScope guard;
            if (!guard.active() || !fault_guard_active()) _exit(11);
            if (read_memory(buf, p.at(kPage - 100), 300) != 300) _exit(12);  // across two readable pages
            if (std::memcmp(buf, p.base + kPage - 100, 300) != 0) _exit(13);
            if (read_memory(buf, p.at(2 * kPage - 64), 300) != 64) _exit(14);  // up to the hole, exactly
            if (std::memcmp(buf, p.base + 2 * kPage - 64, 64) != 0) _exit(15);
            if (read_memory(buf, p.at(2 * kPage + 8), 8) != 0) _exit(16);  // inside it
            if (read_memory(buf, 0, 8) != 0) _exit(17);                    // null
            // copy_stack without bounds goes through the same copy.
            const StackCopy c = copy_stack(p.at(100), StackBounds{}, buf, sizeof buf);
            if (c.bytes != 2 * kPage - 100 || c.faulted || c.capped) _exit(18);
          }) == 0);
  }
  SECTION(
      "a stack of unknown bounds: the first copy faults at its end, later ones stop there without a fault") {
    CHECK(in_child([] {
            Pages p(6);
            p.hole(3);
            p.hole(5);
            if (!install_fault_guard()) _exit(10);
            uint8_t buf[4 * kPage];
            const FaultGuardScope guard;
            SeenStackTop seen;
            const uint64_t f0 = guarded_read_faults();
            StackCopy c = copy_stack(p.at(2 * kPage + 100), StackBounds{}, buf, sizeof buf, &seen);
            if (c.bytes != kPage - 100 || c.capped || guarded_read_faults() != f0 + 1) _exit(20);
            if (seen.top.load() != p.at(3 * kPage)) _exit(21);
            // Deeper on the same stack: every byte up to the remembered end, and no fault.
            c = copy_stack(p.at(100), StackBounds{}, buf, sizeof buf, &seen);
            if (c.bytes != 3 * kPage - 100 || c.capped || c.faulted || guarded_read_faults() != f0 + 1)
              _exit(22);
            if (std::memcmp(buf, p.base + 100, c.bytes) != 0) _exit(23);
            // A window that ends below the end: capped by the window, the end kept.
            c = copy_stack(p.at(100), StackBounds{}, buf, kPage, &seen);
            if (c.bytes != kPage || !c.capped || seen.top.load() != p.at(3 * kPage) ||
                guarded_read_faults() != f0 + 1)
              _exit(24);
            // A stack pointer above the end (another stack): read as unknown, and its own end remembered.
            c = copy_stack(p.at(4 * kPage + 8), StackBounds{}, buf, sizeof buf, &seen);
            if (c.bytes != kPage - 8 || guarded_read_faults() != f0 + 2 || seen.top.load() != p.at(5 * kPage))
              _exit(25);
            // Memory below the remembered end turned unreadable: the copy stops at it, and the end moves
            // down.
            seen.top.store(p.at(3 * kPage));
            p.hole(1);
            c = copy_stack(p.at(100), StackBounds{}, buf, sizeof buf, &seen);
            if (c.bytes != kPage - 100 || guarded_read_faults() != f0 + 3 || seen.top.load() != p.at(kPage))
              _exit(26);
            // Memory above the remembered end became readable: copies stop at the old end until the next
            // recheck, which reads past it (here up to the next hole, remembered instead).
            if (mprotect(p.base + kPage, kPage, PROT_READ | PROT_WRITE) != 0) _exit(27);
            c = copy_stack(p.at(100), StackBounds{}, buf, sizeof buf, &seen);
            if (c.bytes != kPage - 100 || guarded_read_faults() != f0 + 3) _exit(28);
            seen.copies.store(kSeenTopRecheck - 1);
            c = copy_stack(p.at(100), StackBounds{}, buf, sizeof buf, &seen);
            if (c.bytes != 3 * kPage - 100 || guarded_read_faults() != f0 + 4 ||
                seen.top.load() != p.at(3 * kPage))
              _exit(29);
            // A recheck whose window ends above the remembered end without a fault forgets it.
            seen.top.store(p.at(kPage));
            seen.copies.store(kSeenTopRecheck - 1);
            c = copy_stack(p.at(100), StackBounds{}, buf, 2 * kPage, &seen);
            if (c.bytes != 2 * kPage || !c.capped || seen.top.load() != 0 || guarded_read_faults() != f0 + 4)
              _exit(30);
          }) == 0);
  }
  SECTION("outside a scope, reads are process_vm_readv's, with the same counts") {
    CHECK(in_child([] {
            Pages p(3);
            p.hole(2);
            if (!install_fault_guard()) _exit(10);
            uint8_t buf[300];
            if (fault_guard_active()) _exit(11);
            if (read_memory(buf, p.at(kPage - 100), 300) != 300) _exit(12);
            if (read_memory(buf, p.at(2 * kPage - 64), 300) != 64) _exit(13);
            if (read_memory(buf, p.at(2 * kPage + 8), 8) != 0) _exit(14);
          }) == 0);
  }
  // The program's faults are stores into a PROT_NONE page: a null store would be UBSan's to report first.
  SECTION("a real fault of the program still ends it with SIGSEGV") {
    CHECK(in_child([] {
            Pages p(1);
            p.hole(0);
            if (!install_fault_guard()) _exit(10);
            *reinterpret_cast<volatile int*>(p.base) = 1;
          }) == 128 + SIGSEGV);
  }
  SECTION("a handler the program had installed before still gets its faults") {
    CHECK(in_child([] {
            Pages p(1);
            p.hole(0);
            signal(SIGSEGV, exit_42);
            if (!install_fault_guard()) _exit(10);
            *reinterpret_cast<volatile int*>(p.base) = 1;
          }) == 42);
  }
  SECTION("a handler the program installs later replaces the guard: scopes are inactive, reads still safe") {
    CHECK(in_child([] {
            Pages p(3);
            p.hole(2);
            if (!install_fault_guard()) _exit(10);
            signal(SIGSEGV, exit_42);
            const FaultGuardScope guard;
            if (guard.active() || fault_guard_active()) _exit(11);
            uint8_t buf[300];
            if (read_memory(buf, p.at(2 * kPage - 64), 300) != 64) _exit(12);  // the system call, no fault
          }) == 0);
  }
}
