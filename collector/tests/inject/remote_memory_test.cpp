// remote_memory (issue 28) against a real forked child: a known global read, words and a partial word
// written, strings read back, and the child seeing the writes once released.
#include "attach/remote_memory.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "child_process.h"
#include "stepscope/collector/attach.h"
#include "attach/tracee_threads.h"

using namespace stepscope::collector::attach;
using stepscope::test::ChildProcess;

namespace {

// The same addresses in the forked child.
alignas(8) volatile uint64_t g_word = 0x1122334455667788;
alignas(8) volatile uint64_t g_go = 0;
alignas(8) char g_text[64] = "stepscope remote memory";

uint64_t addr(const volatile void* p) {
  return reinterpret_cast<uint64_t>(p);
}

}  // namespace

TEST_CASE("remote_memory reads and writes a forked child's globals") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  int out[2];
  REQUIRE(pipe(out) == 0);
  ChildProcess child([&] {
    while (!g_go) usleep(200);
    const uint64_t word = g_word;
    const std::string text = std::string(g_text) + "|" + (g_text + 13);
    (void)!write(out[1], &word, sizeof word);
    (void)!write(out[1], text.c_str(), text.size() + 1);
    for (;;) pause();
  });
  close(out[1]);
  {
    Stopped stopped(child.pid());
    stopped.stop_all();
    const pid_t tid = stopped.threads().front().tid;
    CHECK(peek(tid, addr(&g_word)) == 0x1122334455667788);
    CHECK(read_string(tid, addr(g_text), 64) == "stepscope remote memory");
    CHECK(read_string(tid, addr(g_text), 8) == "stepscop");
    CHECK(read_string(tid, addr(g_text), 9) == "stepscope remote");  // whole words: max rounded up to 8 bytes

    poke(tid, addr(&g_word), 42);
    CHECK(peek(tid, addr(&g_word)) == 42);
    const std::string hello = "hello, child";  // 13 bytes with its NUL: a whole word and 5 bytes of the next
    write_bytes(tid, addr(g_text), std::vector<uint8_t>(hello.c_str(), hello.c_str() + hello.size() + 1));
    CHECK(read_string(tid, addr(g_text), 64) == "hello, child");
    CHECK(read_string(tid, addr(g_text) + 13, 64) == "ote memory");  // the bytes after the write are kept
    CHECK(g_word == 0x1122334455667788);                             // the parent's own copy is untouched
    poke(tid, addr(&g_go), 1);
  }  // released

  uint64_t word = 0;
  REQUIRE(read(out[0], &word, sizeof word) == sizeof word);
  CHECK(word == 42);
  char text[128] = {};
  size_t got = 0;
  while (got < sizeof text - 1) {
    const ssize_t n = read(out[0], text + got, sizeof text - 1 - got);
    if (n <= 0) break;
    got += size_t(n);
    if (text[got - 1] == '\0') break;
  }
  CHECK(std::string(text) == "hello, child|ote memory");
  close(out[0]);
  CHECK(child.running());
}

TEST_CASE("remote_memory on an unmapped address: an error for peek and poke, an empty string") {
  if (const std::string why = stepscope::test::ptrace_refusal(); !why.empty()) STEPSCOPE_SKIP(why.c_str());
  ChildProcess child([] {
    for (;;) pause();
  });
  Stopped stopped(child.pid());
  stopped.stop_all();
  const pid_t tid = stopped.threads().front().tid;
  CHECK_THROWS_WITH(peek(tid, 0x10), "cannot read the target's memory at 0x10: Input/output error");
  CHECK_THROWS_WITH(poke(tid, 0x10, 1), "cannot write the target's memory: Input/output error");
  CHECK(read_string(tid, 0x10, 64).empty());
  CHECK_THROWS_AS(write_bytes(tid, 0x10, {1, 2, 3}), stepscope::collector::AttachError);
}
