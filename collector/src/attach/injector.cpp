// ptrace injection of a shared library into a running x86-64 process: the orchestration of the units (checks,
// the target's map and dlopen, every thread stopped at a safe point, a page allocated in the target, the stub
// written there and run, the thread restored); see injector.h and docs/collector.md.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "injector.h"

#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "attach_support.h"
#include "process_maps.h"
#include "process_status.h"
#include "remote_call.h"
#include "remote_memory.h"
#include "tracee_threads.h"
#include "x86_assembler.h"

#if !defined(__x86_64__)
#error "stepscope attach injects x86-64 code"
#endif

namespace stepscope::collector::attach {
namespace {

constexpr int kMaxSafePointRounds = 50;       // rounds of "resume 2 ms, stop again" before giving up
constexpr long kRtldNow = 2;                  // RTLD_NOW | RTLD_LOCAL (0): the library's symbols stay private
constexpr long kRtldDlopenFlag = 0x80000000;  // __RTLD_DLOPEN, for __libc_dlopen_mode (glibc < 2.34)
// Layout of the injected page.
constexpr uint64_t kCodeOffset = 0, kLibraryOffset = 512, kFunctionOffset = 1536, kArgumentOffset = 1664;
constexpr size_t kMaxArgument = kPageBytes - kArgumentOffset - 1;

std::string process_words(pid_t pid) {
  return "process " + std::to_string(pid);
}

void sleep_2ms() {
  timespec ts{0, 2000000};
  nanosleep(&ts, nullptr);
}

// 1. Checks before anything is touched: the process, the library, the argument.
ProcessStatus check_target(const InjectRequest& req) {
  const pid_t pid = req.pid;
  const std::string p = process_words(pid);
  if (pid <= 0) throw AttachError("no such process: " + std::to_string(pid));
  if (pid == getpid()) throw AttachError("stepscope cannot attach to itself");
  const ProcessStatus st = read_status(pid);
  if (is_kernel_thread(pid))
    throw AttachError(p + " (" + st.name +
                      ") is a kernel thread: it runs no program to load the collector into");
  if (st.seccomp == 1)
    throw AttachError(p + " (" + st.name +
                      ") runs in seccomp strict mode: it may not mmap or open a library");
  if (st.tracer != 0) throw AttachError(explain_ptrace_failure(pid, EPERM));
  if (access((proc(pid, "root") + req.library).c_str(), R_OK) != 0 && access(req.library.c_str(), R_OK) != 0)
    throw AttachError("collector library not found: " + req.library + " (set STEPSCOPE_COLLECTOR_LIB)");
  if (req.argument.size() > kMaxArgument) throw AttachError("attach argument too long");
  return st;
}

// Where dlopen, dlsym and dlerror are: offsets in one module of the target (libc, or libdl before
// glibc 2.34).
struct DlFunctions {
  Module Maps::*module = nullptr;
  std::string path;
  uint64_t dlopen = 0, dlsym = 0, dlerror = 0;
  long flags = 0;
};

// 2. Finding the functions: dlopen & co. in the target's libc (libdl's, or libc's internal entry points,
// before glibc 2.34), as offsets in their module.
DlFunctions find_dl_functions(pid_t pid, const ProcessStatus& st, const Maps& maps) {
  const std::string p = process_words(pid);
  if (maps.libc.path.empty())
    throw AttachError(p + " (" + st.name +
                      ") has no libc.so.6 (statically linked?): cannot load the collector");
  DlFunctions e;
  e.module = &Maps::libc;
  e.dlopen = remote_symbol(pid, maps.libc, "dlopen");
  e.dlsym = remote_symbol(pid, maps.libc, "dlsym");
  e.dlerror = remote_symbol(pid, maps.libc, "dlerror");
  e.flags = kRtldNow;
  if (!e.dlopen && !maps.libdl.path.empty()) {  // glibc < 2.34: libdl, when the program loaded it
    e.module = &Maps::libdl;
    e.dlopen = remote_symbol(pid, maps.libdl, "dlopen");
    e.dlsym = remote_symbol(pid, maps.libdl, "dlsym");
    e.dlerror = remote_symbol(pid, maps.libdl, "dlerror");
  }
  if (!e.dlopen) {  // glibc < 2.34 without libdl: libc's internal entry points
    e.module = &Maps::libc;
    e.dlopen = remote_symbol(pid, maps.libc, "__libc_dlopen_mode");
    e.dlsym = remote_symbol(pid, maps.libc, "__libc_dlsym");
    e.dlerror = 0;
    e.flags = kRtldNow | kRtldDlopenFlag;
  }
  if (!e.dlopen || !e.dlsym) throw AttachError("no dlopen/dlsym in " + maps.libc.path + " of " + p);
  const uint64_t base = (maps.*e.module).base;
  for (uint64_t* a : {&e.dlopen, &e.dlsym, &e.dlerror})
    if (*a) *a -= base;
  e.path = (maps.*e.module).path;
  return e;
}

// The map of a process that is just starting has no libc yet (the loader maps it first): give it a moment.
Maps read_maps_with_libc(pid_t pid) {
  Maps maps = read_maps(pid);
  for (int i = 0; i < kMaxSafePointRounds && maps.libc.path.empty(); ++i) {
    sleep_2ms();
    maps = read_maps(pid);
  }
  return maps;
}

// The thread at the safest point, or null: one running its own code (so it holds no libc or loader lock), or
// waiting in a blocking system call. Fewest surprises first: no pending signal, not in a system call, the
// main thread.
Tracee* safest_thread(std::vector<Tracee>& threads, const Maps& maps, pid_t pid) {
  Tracee* caller = nullptr;
  int best = -1;
  for (auto& t : threads) {
    int score = -1;
    if (!in_syscall(t.regs) && !maps.in_libc_or_loader(t.regs.rip))
      score = 4;
    else if (in_syscall(t.regs) && waiting_syscall(static_cast<long>(t.regs.orig_rax)))
      score = 2;
    if (score < 0) continue;
    if (t.pending_signal == 0) score += 1;
    if (t.tid == pid)
      score = score * 2 + 1;
    else
      score *= 2;
    if (score > best) {
      best = score;
      caller = &t;
    }
  }
  return caller;
}

// 3. Every thread stopped, one of them at a safe point (returned; all stay stopped): when none is, all are
// resumed for 2 ms and stopped again. The map is read again each time: a process that has only just been
// forked may exec its program meanwhile (then the first map was its parent's image).
Tracee& stop_at_safe_point(Stopped& stopped, pid_t pid, const ProcessStatus& st, Maps& maps,
                           DlFunctions& entry, InjectResult& result, int64_t& t_stop) {
  for (int round = 0;; ++round) {
    t_stop = mono_ns();
    stopped.stop_all();
    maps = read_maps(pid);
    const bool starting = maps.libc.path.empty();  // exec'd since, its loader not done yet: try again
    if (!starting && (maps.*entry.module).path != entry.path)
      entry = find_dl_functions(pid, st, maps);  // exec'd: another image
    Tracee* caller = safest_thread(stopped.threads(), maps, pid);
    result.threads = static_cast<int>(stopped.threads().size());
    if (starting) caller = nullptr;
    if (caller) return *caller;
    stopped.release_all();
    if (round + 1 >= kMaxSafePointRounds && starting) find_dl_functions(pid, st, maps);  // throws: no libc
    if (round + 1 >= kMaxSafePointRounds)
      throw AttachError("no thread of " + process_words(pid) +
                        " reached a safe point (outside libc and the loader) in " +
                        std::to_string(kMaxSafePointRounds) + " tries");
    ++result.retries;
    sleep_2ms();
  }
}

// 4. A page in the target (PROT_READ | PROT_EXEC), mapped by the caller thread; a refusal explained.
uint64_t allocate_page(pid_t pid, Tracee& t, const ProcessStatus& st) {
  const long page = remote_mmap(pid, t, kPageBytes, PROT_READ | PROT_EXEC);
  if (page < 0 && page > -4096) {
    const std::string p = process_words(pid);
    if (st.seccomp == 2 && (page == -EPERM || page == -EACCES || page == -ENOSYS))
      throw AttachError(p + " (" + st.name + ") runs under a seccomp filter that forbids mmap (" +
                        std::strerror(int(-page)) + "): cannot load the collector");
    throw AttachError("mmap in " + p + " failed: " + std::strerror(int(-page)));
  }
  return static_cast<uint64_t>(page);
}

// 5. The page's contents: the stub dlopen(library, flags) → dlsym(handle, function) → function(argument),
// each result stored at [rsp + 8*slot], int3; dlerror() instead when a step fails. Then the strings it uses.
std::vector<uint8_t> stub_page(const InjectRequest& req, uint64_t page, uint64_t dlopen_at, uint64_t dlsym_at,
                               uint64_t dlerror_at, long open_flags) {
  std::string argument = req.argument;
  if (auto at = argument.find("{page}"); at != std::string::npos)
    argument.replace(at, 6, "0x" + fmt_hex(page));
  Assembler a;
  a.mov_rdi(page + kLibraryOffset);
  a.mov_rsi(static_cast<uint64_t>(open_flags));
  a.mov_rax(dlopen_at);
  a.call_rax();
  a.store_rax(0);
  const size_t j1 = a.jz_if_rax_zero();
  a.mov_rdi_rax();
  a.mov_rsi(page + kFunctionOffset);
  a.mov_rax(dlsym_at);
  a.call_rax();
  a.store_rax(1);
  const size_t j2 = a.jz_if_rax_zero();
  a.mov_rdi(page + kArgumentOffset);
  a.call_rax();
  a.store_rax(2);
  a.int3();
  a.patch(j1);
  a.patch(j2);
  if (dlerror_at) {
    a.mov_rax(dlerror_at);
    a.call_rax();
    a.store_rax(3);
  }
  a.int3();
  std::vector<uint8_t> image(kPageBytes, 0);
  std::memcpy(image.data() + kCodeOffset, a.code.data(), a.code.size());
  std::memcpy(image.data() + kLibraryOffset, req.library.c_str(), std::min<size_t>(req.library.size(), 1000));
  std::memcpy(image.data() + kFunctionOffset, req.function.c_str(),
              std::min<size_t>(req.function.size(), 120));
  std::memcpy(image.data() + kArgumentOffset, argument.c_str(), argument.size());
  return image;
}

// 6. What the stub stored (at `res`, the stack pointer it ran with): the handle, the function, its result and
// message, dlerror's message when a step failed.
struct StubResults {
  uint64_t handle = 0, fn = 0;
  std::string why;
};
StubResults read_stub_results(pid_t tid, uint64_t res, bool have_dlerror, InjectResult& result) {
  StubResults out;
  out.handle = peek(tid, res);
  out.fn = peek(tid, res + 8);
  result.function_result = static_cast<long>(peek(tid, res + 16));
  if (out.handle && out.fn && result.function_result != 0)
    result.function_message = read_string(tid, static_cast<uint64_t>(result.function_result), 300);
  if (!out.handle || !out.fn) {
    const uint64_t msg = have_dlerror ? peek(tid, res + 24) : 0;
    out.why = msg ? read_string(tid, msg, 400) : "unknown error";
  }
  return out;
}

}  // namespace

InjectResult inject(const InjectRequest& req) {
  const pid_t pid = req.pid;
  const std::string p = process_words(pid);
  const ProcessStatus st = check_target(req);

  InjectResult result;
  auto exited = [&] { return AttachError(p + " exited during attach"); };
  try {
    // dlopen & co. are looked up before stopping anything (libelf over libc's symbols takes milliseconds).
    Maps maps = read_maps_with_libc(pid);
    DlFunctions entry = find_dl_functions(pid, st, maps);

    Stopped stopped(pid);
    int64_t t_stop = 0;
    Tracee& t = stop_at_safe_point(stopped, pid, st, maps, entry, result, t_stop);

    const uint64_t module_base = (maps.*entry.module).base;
    const uint64_t dlopen_at = module_base + entry.dlopen, dlsym_at = module_base + entry.dlsym,
                   dlerror_at = entry.dlerror ? module_base + entry.dlerror : 0;
    STEPSCOPE_ATTACH_DEBUG_LOG(
        "dlopen %llx dlsym %llx dlerror %llx; %zu threads, caller %d rip %llx orig_rax %lld rax %lld",
        (unsigned long long)dlopen_at, (unsigned long long)dlsym_at, (unsigned long long)dlerror_at,
        stopped.threads().size(), int(t.tid), (unsigned long long)t.regs.rip, (long long)t.regs.orig_rax,
        (long long)t.regs.rax);
    const int64_t t_caller = t_stop;
    const SavedRegisters saved = SavedRegisters::save(t);
    const pid_t caller_tid = t.tid;
    bool caller_running = false;
    try {
      result.page = allocate_page(pid, t, st);
      STEPSCOPE_ATTACH_DEBUG_LOG("page %llx", (unsigned long long)result.page);
      const user_regs_struct call = call_registers(saved.regs, result.page + kCodeOffset);
      // The stub's 4 result words: at its stack pointer, inside the gap call_registers reserved.
      const uint64_t res = call.rsp;
      write_bytes(t.tid, result.page,
                  stub_page(req, result.page, dlopen_at, dlsym_at, dlerror_at, entry.flags));
      set_registers(t.tid, call);
      // The other threads run while the library loads: a lock one of them holds (the loader's, malloc's) is
      // released as it would be, instead of deadlocking the call.
      const int caller_signal = t.pending_signal;
      t.pending_signal = 0;
      stopped.release_all(caller_tid);
      result.stopped_all_ns = mono_ns() - t_stop;
      Tracee& c = stopped.threads().front();
      caller_running = true;
      run_until_trap(pid, c, req.timeout_ms);
      caller_running = false;
      {
        user_regs_struct after{};
        ptrace(PTRACE_GETREGS, c.tid, nullptr, &after);
        STEPSCOPE_ATTACH_DEBUG_LOG("trap at %llx (page+%llx)", (unsigned long long)after.rip,
                                   (unsigned long long)(after.rip - result.page));
      }
      const StubResults out = read_stub_results(c.tid, res, dlerror_at != 0, result);
      c.pending_signal = caller_signal;
      saved.restore(caller_tid);
      stopped.release_all();
      result.stopped_caller_ns = mono_ns() - t_caller;
      if (!out.handle) throw AttachError(p + " cannot load " + req.library + ": " + out.why);
      if (!out.fn) throw AttachError(req.library + " has no " + req.function + ": " + out.why);
    } catch (const ProcessExited&) {
      throw;
    } catch (...) {
      if (caller_running) {
        // The call did not come back (a lock never released?): stop the thread where it is and put it back.
        // The library may stay half-loaded; the program goes on from where it was interrupted.
        int wst = 0;
        if (ptrace(PTRACE_INTERRUPT, caller_tid, nullptr, nullptr) == 0) waitpid(caller_tid, &wst, __WALL);
      }
      if (!stopped.threads().empty() && stopped.alive()) saved.restore(caller_tid);
      throw;
    }
  } catch (const ProcessExited&) {
    throw exited();
  }
  return result;
}

}  // namespace stepscope::collector::attach
