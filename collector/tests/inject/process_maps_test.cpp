// process_status and process_maps (issue 28) against a real forked child: its status and stat, libc and the
// loader in its map where the parent has them, and getpid's address found in its libc file equal to the
// parent's own getpid (fork keeps the layout).
#include "attach/process_maps.h"

#include <dlfcn.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>

#include "child_process.h"
#include "attach/process_status.h"
#include "stepscope/collector/attach.h"

using namespace stepscope::collector::attach;
using stepscope::test::ChildProcess;

namespace {

void sleep_forever() {
  for (;;) pause();
}

}  // namespace

TEST_CASE("process_status reads a child's status and stat") {
  ChildProcess child(sleep_forever);
  const ProcessStatus own = read_status(getpid());
  const ProcessStatus st = read_status(child.pid());
  CHECK(st.name == own.name);  // the test's own command name, inherited through fork
  CHECK(st.uid == getuid());
  CHECK(st.tracer == 0);
  ProcessStat stat;
  REQUIRE(read_stat(child.pid(), stat));
  CHECK(stat.ppid == getpid());
  CHECK((stat.state == 'S' || stat.state == 'R'));
  CHECK_FALSE(is_kernel_thread(child.pid()));
  CHECK(explain_ptrace_failure(child.pid(), ESRCH) == "no such process: " + std::to_string(child.pid()));
}

TEST_CASE("process_status and process_maps on a process that is gone") {
  pid_t gone = -1;
  {
    ChildProcess child([] {});
    gone = child.pid();
  }  // exited and reaped
  ProcessStat stat;
  CHECK_FALSE(read_stat(gone, stat));
  CHECK_THROWS_WITH(read_status(gone), "no such process: " + std::to_string(gone));
  CHECK_THROWS_WITH(read_maps(gone), "process " + std::to_string(gone) + " exited during attach");
}

TEST_CASE("process_maps finds libc and the loader in a child where the parent has them") {
  ChildProcess child(sleep_forever);
  const Maps own = read_maps(getpid());
  const Maps maps = read_maps(child.pid());
  REQUIRE_FALSE(maps.libc.path.empty());
  REQUIRE_FALSE(maps.ldso.path.empty());
  CHECK(maps.libc.path == own.libc.path);
  CHECK(maps.libc.base == own.libc.base);
  CHECK(maps.ldso.base == own.ldso.base);
  CHECK_FALSE(maps.libc.text.empty());
  CHECK_FALSE(maps.ldso.text.empty());
  for (auto [lo, hi] : maps.libc.text) {
    CHECK(lo >= maps.libc.base);
    CHECK(hi > lo);
  }
  // The test's own code is in neither.
  CHECK_FALSE(maps.in_libc_or_loader(reinterpret_cast<uint64_t>(&sleep_forever)));
}

TEST_CASE("process_maps finds getpid in the child at the address of the parent's getpid") {
  ChildProcess child(sleep_forever);
  const Maps maps = read_maps(child.pid());
  void* libc = dlopen(maps.libc.path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(libc != nullptr);
  const uint64_t own_getpid = reinterpret_cast<uint64_t>(dlsym(libc, "getpid"));
  const uint64_t own_dlopen = reinterpret_cast<uint64_t>(dlsym(libc, "dlopen"));
  dlclose(libc);
  REQUIRE(own_getpid != 0);

  const uint64_t at = remote_symbol(child.pid(), maps.libc, "getpid");
  CHECK(at == own_getpid);
  CHECK(maps.in_libc_or_loader(at));
  // dlopen is where inject() looks first (glibc >= 2.34 has it in libc).
  if (own_dlopen) CHECK(remote_symbol(child.pid(), maps.libc, "dlopen") == own_dlopen);
  CHECK(remote_symbol(child.pid(), maps.libc, "stepscope_no_such_function") == 0);
  CHECK(remote_symbol(child.pid(), Module{}, "getpid") == 0);  // a module the process does not have
}
