// tracee_threads (issue 28) against a real forked child: every thread of a child with several stopped (they
// stop counting) and resumed (they count again), one kept; a thread blocked in read() seen in that waiting
// system call, which goes on after the release.
#include "attach/tracee_threads.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "attach/attach_support.h"
#include "child_process.h"
#include "attach/process_status.h"
#include "stepscope/collector/attach.h"

using namespace stepscope::collector::attach;
using stepscope::test::ChildProcess;
using stepscope::test::count_forever;
using stepscope::test::eventually;
using stepscope::test::SharedCounters;

TEST_CASE("tracee_threads stops every thread of a child and resumes them") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  constexpr int kThreads = 4;  // the main thread and 3 more
  SharedCounters counters(kThreads);
  ChildProcess child([&] {
    for (int i = 1; i < kThreads; ++i) std::thread([&, i] { count_forever(&counters.at[i]); }).detach();
    count_forever(&counters.at[0]);
  });
  REQUIRE(eventually([&] {
    for (int i = 0; i < kThreads; ++i)
      if (counters[i] == 0) return false;
    return true;
  }));
  {
    Stopped stopped(child.pid());
    stopped.stop_all();
    REQUIRE(stopped.threads().size() == kThreads);
    std::set<pid_t> tids;
    for (const Tracee& t : stopped.threads()) {
      tids.insert(t.tid);
      CHECK(t.regs.rsp != 0);
      CHECK(t.regs.rip != 0);
    }
    CHECK(tids.size() == size_t(kThreads));
    CHECK(tids.count(child.pid()) == 1);
    CHECK(read_status(child.pid()).tracer == getpid());
    CHECK(stopped.alive());

    std::vector<uint64_t> before;
    for (int i = 0; i < kThreads; ++i) before.push_back(counters[i]);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    for (int i = 0; i < kThreads; ++i) CHECK(counters[i] == before[i]);  // nobody runs

    stopped.release_all(child.pid());  // all but the main thread
    REQUIRE(stopped.threads().size() == 1);
    CHECK(stopped.threads().front().tid == child.pid());
    CHECK(eventually(
        [&] { return counters[1] > before[1] && counters[2] > before[2] && counters[3] > before[3]; }));
    CHECK(counters[0] == before[0]);  // still held
  }                                   // the destructor releases the main thread
  const uint64_t main_before = counters[0];
  CHECK(eventually([&] { return counters[0] > main_before; }));
  CHECK(eventually([&] { return read_status(child.pid()).tracer == 0; }));
  CHECK(child.running());
}

TEST_CASE("tracee_threads sees a thread blocked in read in a waiting system call and the read goes on") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  int in[2], out[2];
  REQUIRE(pipe(in) == 0);
  REQUIRE(pipe(out) == 0);
  ChildProcess child([&] {
    char c = 0;
    while (read(in[0], &c, 1) == 1) {
      c = char(c + 1);
      (void)!write(out[1], &c, 1);
    }
  });
  // Blocked in read(): state S.
  REQUIRE(eventually([&] {
    ProcessStat st;
    return read_stat(child.pid(), st) && st.state == 'S';
  }));
  {
    Stopped stopped(child.pid());
    stopped.stop_all();
    REQUIRE(stopped.threads().size() == 1);
    const Tracee& t = stopped.threads().front();
    CHECK(t.pending_signal == 0);
    CHECK(in_syscall(t.regs));
    CHECK(long(t.regs.orig_rax) == SYS_read);
    CHECK(waiting_syscall(long(t.regs.orig_rax)));
  }
  char c = 'a';
  REQUIRE(write(in[1], &c, 1) == 1);
  REQUIRE(read(out[0], &c, 1) == 1);
  CHECK(c == 'b');  // the interrupted read() went on and got the byte
  CHECK(child.running());
}

TEST_CASE("tracee_threads tells waiting system calls from others") {
  user_regs_struct r{};
  r.orig_rax = static_cast<unsigned long long>(-1);
  CHECK_FALSE(in_syscall(r));
  r.orig_rax = SYS_futex;
  CHECK(in_syscall(r));
  for (long nr :
       {SYS_read, SYS_futex, SYS_nanosleep, SYS_clock_nanosleep, SYS_epoll_wait, SYS_poll, SYS_accept})
    CHECK(waiting_syscall(nr));
  for (long nr : {SYS_write, SYS_mmap, SYS_openat, SYS_getpid}) CHECK_FALSE(waiting_syscall(nr));
}

TEST_CASE("tracee_threads on a process that is gone") {
  pid_t gone = -1;
  {
    ChildProcess child([] {});
    gone = child.pid();
  }
  Stopped stopped(gone);
  CHECK_THROWS_AS(stopped.stop_all(), ProcessExited);
}
