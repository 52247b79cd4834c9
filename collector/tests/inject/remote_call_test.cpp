// remote_call (issue 28) against a real forked child: a getpid system call made by the child, an mmap that
// allocates a page the child can use, machine code written there that calls the child's getpid and stops on
// int3, a call that never returns timed out and taken back; each time the registers restored and the child
// going on counting.
#include "attach/remote_call.h"

#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

#include "attach/attach_support.h"
#include "child_process.h"
#include "attach/process_maps.h"
#include "attach/remote_memory.h"
#include "stepscope/collector/attach.h"
#include "attach/tracee_threads.h"
#include "attach/x86_assembler.h"

using namespace stepscope::collector::attach;
using stepscope::test::ChildProcess;
using stepscope::test::count_forever;
using stepscope::test::eventually;
using stepscope::test::SharedCounters;

namespace {

// A counting child, every thread stopped; the test then uses its main thread.
struct StoppedChild {
  SharedCounters counter{1};
  ChildProcess child{[this] { count_forever(&counter.at[0]); }};
  Stopped stopped{child.pid()};

  StoppedChild() {
    REQUIRE(eventually([&] { return counter[0] > 0; }));
    stopped.stop_all();
    REQUIRE(stopped.threads().size() == 1);
  }
  Tracee& main() { return stopped.threads().front(); }
  // Releases the child and checks that it counts on.
  void release_and_check_it_runs() {
    const uint64_t before = counter[0];
    stopped.release_all();
    CHECK(eventually([&] { return counter[0] > before; }));
    CHECK(child.running());
  }
};

user_regs_struct registers_of(pid_t tid) {
  user_regs_struct r{};
  REQUIRE(ptrace(PTRACE_GETREGS, tid, nullptr, &r) == 0);
  return r;
}

bool maps_list(pid_t pid, uint64_t address) {
  std::ifstream f(proc(pid, "maps"));
  std::string line;
  while (std::getline(f, line))
    if (std::stoull(line.substr(0, line.find('-')), nullptr, 16) == address) return true;
  return false;
}

}  // namespace

TEST_CASE("remote_call runs a getpid system call in the child and restores its registers") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  StoppedChild c;
  Tracee& t = c.main();
  const SavedRegisters saved = SavedRegisters::save(t);
  CHECK((saved.have_xstate || saved.have_fpregs));
  const uint64_t code_word = peek(t.tid, t.regs.rip);

  CHECK(remote_syscall(c.child.pid(), t, SYS_getpid, {}) == c.child.pid());
  CHECK(remote_syscall(c.child.pid(), t, SYS_getppid, {}) == getpid());
  CHECK(peek(t.tid, t.regs.rip) == code_word);  // the `syscall; int3` written there is gone

  saved.restore(t.tid);
  const user_regs_struct now = registers_of(t.tid);
  CHECK(now.rip == saved.regs.rip);
  CHECK(now.rsp == saved.regs.rsp);
  CHECK(now.rax == saved.regs.rax);
  CHECK(now.orig_rax == saved.regs.orig_rax);
  c.release_and_check_it_runs();
}

TEST_CASE("remote_call allocates a page in the child with mmap") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  StoppedChild c;
  Tracee& t = c.main();
  const SavedRegisters saved = SavedRegisters::save(t);
  const long page = remote_mmap(c.child.pid(), t, kPageBytes, PROT_READ | PROT_WRITE);
  REQUIRE(page > 0);
  CHECK(page % kPageBytes == 0);
  CHECK(maps_list(c.child.pid(), uint64_t(page)));
  CHECK(peek(t.tid, uint64_t(page)) == 0);  // fresh anonymous memory
  write_bytes(t.tid, uint64_t(page), {'p', 'a', 'g', 'e', 0});
  CHECK(read_string(t.tid, uint64_t(page), 16) == "page");
  // A refused mmap returns -errno.
  CHECK(remote_syscall(c.child.pid(), t, SYS_mmap,
                       {0, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, uint64_t(-1), 0}) == -EINVAL);
  saved.restore(t.tid);
  c.release_and_check_it_runs();
}

TEST_CASE("remote_call executes machine code written into the child until its int3") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  StoppedChild c;
  const pid_t pid = c.child.pid();
  Tracee& t = c.main();
  const uint64_t getpid_at = remote_symbol(pid, read_maps(pid).libc, "getpid");
  REQUIRE(getpid_at != 0);
  const SavedRegisters saved = SavedRegisters::save(t);
  const long page = remote_mmap(pid, t, kPageBytes, PROT_READ | PROT_EXEC);
  REQUIRE(page > 0);

  // [rsp] = a constant; [rsp + 8] = getpid(), called in the child through libc; int3.
  Assembler a;
  a.mov_rax(0x5354455053434f50);
  a.store_rax(0);
  a.mov_rax(getpid_at);
  a.call_rax();
  a.store_rax(1);
  a.int3();
  write_bytes(t.tid, uint64_t(page), a.code);  // through the page's protection, as a debugger writes
  const user_regs_struct call = call_registers(saved.regs, uint64_t(page));
  CHECK(call.rip == uint64_t(page));
  CHECK(call.rsp % 16 == 0);
  CHECK(call.rsp <= saved.regs.rsp - 128 - 256);  // below the red zone and the results' gap
  CHECK(call.orig_rax == static_cast<unsigned long long>(-1));
  CHECK((call.eflags & 0x400) == 0);
  set_registers(t.tid, call);
  run_until_trap(pid, t, 5000);

  const user_regs_struct after = registers_of(t.tid);
  CHECK(after.rip == uint64_t(page) + a.code.size());  // just past the int3
  CHECK(peek(t.tid, call.rsp) == 0x5354455053434f50);
  CHECK(peek(t.tid, call.rsp + 8) == uint64_t(pid));
  saved.restore(t.tid);
  CHECK(registers_of(t.tid).rip == saved.regs.rip);
  c.release_and_check_it_runs();
}

TEST_CASE("remote_call times out on code that never traps and the thread is taken back") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  StoppedChild c;
  const pid_t pid = c.child.pid();
  Tracee& t = c.main();
  const SavedRegisters saved = SavedRegisters::save(t);
  const long page = remote_mmap(pid, t, kPageBytes, PROT_READ | PROT_EXEC);
  REQUIRE(page > 0);
  write_bytes(t.tid, uint64_t(page), {0xeb, 0xfe});  // jmp $
  set_registers(t.tid, call_registers(saved.regs, uint64_t(page)));
  // On a busy machine the spinning thread also waits for a CPU, which the message adds and the wait allows.
  CHECK_THROWS_WITH(run_until_trap(pid, t, 1000),
                    Catch::StartsWith("the injected call in process " + std::to_string(pid) + " did not return within 1 s"));
  // As inject() does: interrupt it where it is and put it back.
  int st = 0;
  REQUIRE(ptrace(PTRACE_INTERRUPT, t.tid, nullptr, nullptr) == 0);
  REQUIRE(waitpid(t.tid, &st, __WALL) == t.tid);
  CHECK(registers_of(t.tid).rip == uint64_t(page));
  saved.restore(t.tid);
  c.release_and_check_it_runs();
}
