// ptrace injection of a shared library into a running x86-64 process; see injector.h and docs/collector.md.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "injector.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#if !defined(__x86_64__)
#error "stepscope attach injects x86-64 code"
#endif

namespace stepscope::collector::attach {
namespace {

constexpr int kMaxSafePointRounds = 50;     // rounds of "resume 2 ms, stop again" before giving up
constexpr int kStopTimeoutMs = 2000;        // for one thread to reach its ptrace stop
constexpr long kRtldNow = 2;                // RTLD_NOW | RTLD_LOCAL (0): the library's symbols stay private
constexpr long kRtldDlopenFlag = 0x80000000;  // __RTLD_DLOPEN, for __libc_dlopen_mode (glibc < 2.34)
constexpr size_t kXstateBytes = 64 * 1024;  // large enough for AVX-512 and AMX state
constexpr uint64_t kPageBytes = 4096;
// Layout of the injected page.
constexpr uint64_t kCodeOffset = 0, kLibraryOffset = 512, kFunctionOffset = 1536, kArgumentOffset = 1664;
constexpr size_t kMaxArgument = kPageBytes - kArgumentOffset - 1;

bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("STEPSCOPE_ATTACH_DEBUG");
    return v && *v && *v != '0';
  }();
  return on;
}
#define DEBUG(...)                                   \
  do {                                               \
    if (debug_enabled()) {                           \
      std::fprintf(stderr, "stepscope attach: ");    \
      std::fprintf(stderr, __VA_ARGS__);             \
      std::fprintf(stderr, "\n");                    \
    }                                                \
  } while (0)

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string fmt_hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string proc(pid_t pid, const std::string& what) { return "/proc/" + std::to_string(pid) + "/" + what; }

std::string user_name(uid_t uid) {
  passwd pw{}, *res = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &res) == 0 && res) return res->pw_name;
  return "uid " + std::to_string(uid);
}

bool have_cap_sys_ptrace() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> 19) & 1;  // CAP_SYS_PTRACE
  return false;
}

int read_int_file(const std::string& path, int fallback) {
  std::ifstream f(path);
  int v = fallback;
  if (!(f >> v)) return fallback;
  return v;
}

// ------------------------------------------------------------------------------------------------------------
// The target's memory map: where libc and the loader are.

struct Module {
  std::string path;
  uint64_t base = 0;  // start of its mapping at file offset 0
  std::vector<std::pair<uint64_t, uint64_t>> text;
};

struct Maps {
  Module libc, ldso, libdl;
  bool in_libc_or_loader(uint64_t pc) const {
    for (const Module* m : {&libc, &ldso})
      for (auto [lo, hi] : m->text)
        if (pc >= lo && pc < hi) return true;
    return false;
  }
};

bool is_named(const std::string& path, const char* soname, const char* old_prefix) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base == soname || (base.rfind(old_prefix, 0) == 0 && base.size() > 3 && base.substr(base.size() - 3) == ".so");
}

Maps read_maps(pid_t pid) {
  // Reading the map needs the same permission as ptrace: explain a refusal the same way.
  const int fd = open(proc(pid, "maps").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EACCES || errno == EPERM) throw AttachError(explain_ptrace_failure(pid, EPERM));
    throw AttachError("process " + std::to_string(pid) + " exited during attach");
  }
  close(fd);
  std::ifstream f(proc(pid, "maps"));
  if (!f) throw AttachError("process " + std::to_string(pid) + " exited during attach");
  Maps m;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string range, perms, offset, dev, inode, path;
    ls >> range >> perms >> offset >> dev >> inode;
    std::getline(ls >> std::ws, path);
    if (path.empty() || path[0] != '/') continue;
    Module* mod = nullptr;
    if (is_named(path, "libc.so.6", "libc-2."))
      mod = &m.libc;
    else if (is_named(path, "ld-linux-x86-64.so.2", "ld-2."))
      mod = &m.ldso;
    else if (is_named(path, "libdl.so.2", "libdl-2."))
      mod = &m.libdl;
    if (!mod) continue;
    const uint64_t lo = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const uint64_t hi = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (mod->path.empty()) mod->path = path;
    if (std::stoull(offset, nullptr, 16) == 0 && (mod->base == 0 || lo < mod->base)) mod->base = lo;
    if (perms.find('x') != std::string::npos) mod->text.push_back({lo, hi});
  }
  return m;
}

// Address of a dynamic symbol of `mod` in the target: the ELF file is read through /proc/PID/root, so a
// process in another mount namespace (a container) is read from its own files.
uint64_t remote_symbol(pid_t pid, const Module& mod, const char* name) {
  if (mod.path.empty()) return 0;
  const std::string file = proc(pid, "root") + mod.path;
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  uint64_t found = 0, first_load = UINT64_MAX;
  if (elf) {
    size_t nph = 0;
    elf_getphdrnum(elf, &nph);
    for (size_t i = 0; i < nph; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, int(i), &ph) && ph.p_type == PT_LOAD)
        first_load = std::min<uint64_t>(first_load, ph.p_vaddr & ~(ph.p_align ? ph.p_align - 1 : 0));
    }
    Elf_Scn* scn = nullptr;
    while (!found && (scn = elf_nextscn(elf, scn))) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      const size_t n = sh.sh_size / sh.sh_entsize;
      for (size_t i = 0; data && i < n; ++i) {
        GElf_Sym sym;
        if (!gelf_getsym(data, int(i), &sym) || sym.st_value == 0 || GELF_ST_TYPE(sym.st_info) != STT_FUNC) continue;
        const char* s = elf_strptr(elf, sh.sh_link, sym.st_name);
        if (s && std::strcmp(s, name) == 0) {
          found = sym.st_value;
          break;
        }
      }
    }
    elf_end(elf);
  }
  close(fd);
  if (!found || first_load == UINT64_MAX) return 0;
  return mod.base - first_load + found;
}

// ------------------------------------------------------------------------------------------------------------
// Stopping and resuming threads.

struct ProcessExited {};

// Where dlopen, dlsym and dlerror are: offsets in one module of the target (libc, or libdl before glibc 2.34).
struct Entry {
  Module Maps::*module = nullptr;
  std::string path;
  uint64_t dlopen = 0, dlsym = 0, dlerror = 0;
  long flags = 0;
};

struct Tracee {
  pid_t tid = 0;
  int pending_signal = 0;  // a signal it was about to receive when it stopped: delivered at detach
  user_regs_struct regs{};
};

bool in_syscall(const user_regs_struct& r) { return static_cast<long>(r.orig_rax) >= 0; }

// Blocking system calls inside which a thread holds no lock that dlopen needs (it is waiting, not working):
// a thread stopped in one may run the injected call; the call is restarted afterwards.
bool waiting_syscall(long nr) {
  static const std::set<long> kWaiting = {SYS_read,         SYS_poll,         SYS_select,       SYS_pause,
                                          SYS_nanosleep,    SYS_wait4,        SYS_futex,        SYS_epoll_wait,
                                          SYS_clock_nanosleep, SYS_pselect6,  SYS_ppoll,        SYS_epoll_pwait,
                                          SYS_accept,       SYS_accept4,      SYS_recvfrom,     SYS_recvmsg,
                                          SYS_rt_sigtimedwait, SYS_rt_sigsuspend, SYS_waitid,   SYS_sched_yield};
  return kWaiting.count(nr) > 0;
}

class Stopped {
 public:
  explicit Stopped(pid_t pid) : pid_(pid) {}
  ~Stopped() { release_all(); }
  Stopped(const Stopped&) = delete;
  Stopped& operator=(const Stopped&) = delete;

  std::vector<Tracee>& threads() { return threads_; }

  // PTRACE_SEIZE + PTRACE_INTERRUPT every thread, re-listing /proc/PID/task until no new one appears.
  void stop_all() {
    std::set<pid_t> seen;
    for (bool fresh = true; fresh;) {
      fresh = false;
      for (pid_t tid : list_tasks()) {
        if (!seen.insert(tid).second) continue;
        fresh = true;
        if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
          const int err = errno;
          if (err == ESRCH) {
            if (tid == pid_ && !alive()) throw ProcessExited{};
            continue;  // the thread exited meanwhile
          }
          throw AttachError(explain_ptrace_failure(pid_, err));
        }
        threads_.push_back({tid, 0, {}});
        if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0 && errno != ESRCH) {
          threads_.back().tid = -tid;  // seized but not interruptible: detach only
        }
      }
    }
    const int64_t t0 = mono_ns();
    for (auto& t : threads_) {
      if (t.tid < 0) continue;
      if (!wait_stop(t, t0)) t.tid = 0;
    }
    std::erase_if(threads_, [](const Tracee& t) { return t.tid <= 0; });
    if (threads_.empty()) throw ProcessExited{};
    for (auto& t : threads_)
      if (ptrace(PTRACE_GETREGS, t.tid, nullptr, &t.regs) != 0) throw ProcessExited{};
  }

  // Detaches every thread but `keep`, delivering the signals they had pending.
  void release_all(pid_t keep = 0) {
    for (auto& t : threads_)
      if (t.tid != keep) ptrace(PTRACE_DETACH, t.tid, nullptr, reinterpret_cast<void*>(long(t.pending_signal)));
    std::erase_if(threads_, [keep](const Tracee& t) { return t.tid != keep; });
  }

  bool alive() const { return kill(pid_, 0) == 0 || errno == EPERM; }

 private:
  std::vector<pid_t> list_tasks() {
    std::vector<pid_t> tids;
    std::error_code ec;
    const std::string dir = proc(pid_, "task");
    DIR_iterate(dir, tids);
    if (tids.empty()) throw ProcessExited{};
    return tids;
  }
  static void DIR_iterate(const std::string& dir, std::vector<pid_t>& out);

  // Waits for the thread's interrupt stop; a signal that arrived first is remembered and the thread is left
  // in that signal-delivery stop (also a stop). False when the thread exited.
  bool wait_stop(Tracee& t, int64_t t0) {
    for (;;) {
      int st = 0;
      const pid_t r = waitpid(t.tid, &st, __WALL | WNOHANG);
      if (r < 0) return false;
      if (r == 0) {
        if (mono_ns() - t0 > int64_t(kStopTimeoutMs) * 1000000) {
          throw AttachError("thread " + std::to_string(t.tid) + " of process " + std::to_string(pid_) +
                            " did not stop within 2 s (uninterruptible sleep?)");
        }
        timespec ts{0, 100000};
        nanosleep(&ts, nullptr);
        continue;
      }
      if (WIFEXITED(st) || WIFSIGNALED(st)) {
        if (t.tid == pid_) throw ProcessExited{};
        return false;
      }
      if (WIFSTOPPED(st)) {
        if ((st >> 16) == PTRACE_EVENT_STOP) return true;
        t.pending_signal = WSTOPSIG(st);
        return true;
      }
    }
  }

  pid_t pid_;
  std::vector<Tracee> threads_;
};

}  // namespace
}  // namespace stepscope::collector::attach

#include <dirent.h>

namespace stepscope::collector::attach {
namespace {

void Stopped::DIR_iterate(const std::string& dir, std::vector<pid_t>& out) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d))
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atoi(e->d_name));
  closedir(d);
}

// ------------------------------------------------------------------------------------------------------------
// Running code in one stopped thread.

uint64_t peek(pid_t tid, uint64_t addr) {
  errno = 0;
  const long v = ptrace(PTRACE_PEEKDATA, tid, reinterpret_cast<void*>(addr), nullptr);
  if (errno) throw AttachError("cannot read the target's memory at 0x" + fmt_hex(addr) + ": " + std::strerror(errno));
  return static_cast<uint64_t>(v);
}

void poke(pid_t tid, uint64_t addr, uint64_t value) {
  if (ptrace(PTRACE_POKEDATA, tid, reinterpret_cast<void*>(addr), reinterpret_cast<void*>(value)) != 0)
    throw AttachError("cannot write the target's memory: " + std::string(std::strerror(errno)));
}

void write_bytes(pid_t tid, uint64_t addr, const std::vector<uint8_t>& bytes) {
  for (size_t i = 0; i < bytes.size(); i += 8) {
    uint64_t word = 0;
    const size_t n = std::min<size_t>(8, bytes.size() - i);
    if (n < 8) word = peek(tid, addr + i);
    std::memcpy(&word, bytes.data() + i, n);
    poke(tid, addr + i, word);
  }
}

std::string read_string(pid_t tid, uint64_t addr, size_t max) {
  std::string s;
  while (s.size() < max) {
    uint64_t w = 0;
    try {
      w = peek(tid, addr + s.size());
    } catch (const AttachError&) {
      break;
    }
    const char* c = reinterpret_cast<const char*>(&w);
    for (int i = 0; i < 8; ++i) {
      if (!c[i]) return s;
      s.push_back(c[i]);
    }
  }
  return s;
}

// Resumes the thread and waits for its int3 (SIGTRAP). Signals meant for the program meanwhile are delivered
// to it (its handlers run as they would have); interrupt stops are passed over.
void run_until_trap(pid_t pid, Tracee& t, int timeout_ms, int resume_signal = 0) {
  if (ptrace(PTRACE_CONT, t.tid, nullptr, reinterpret_cast<void*>(long(resume_signal))) != 0) throw ProcessExited{};
  const int64_t t0 = mono_ns();
  int64_t sleep_ns = 20000;
  for (;;) {
    int st = 0;
    const pid_t r = waitpid(t.tid, &st, __WALL | WNOHANG);
    if (r < 0) throw ProcessExited{};
    if (r == 0) {
      if (mono_ns() - t0 > int64_t(timeout_ms) * 1000000)
        throw AttachError("the injected call in process " + std::to_string(pid) + " did not return within " +
                          std::to_string(timeout_ms / 1000) + " s");
      timespec ts{0, sleep_ns};
      nanosleep(&ts, nullptr);
      sleep_ns = std::min<int64_t>(sleep_ns * 2, 1000000);
      continue;
    }
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS)
      throw AttachError("process " + std::to_string(pid) + " was killed by its seccomp filter (SIGSYS) while loading the collector");
    if (WIFEXITED(st) || WIFSIGNALED(st)) throw ProcessExited{};
    if (!WIFSTOPPED(st)) continue;
    int sig = WSTOPSIG(st);
    if (debug_enabled()) {
      user_regs_struct at{};
      ptrace(PTRACE_GETREGS, t.tid, nullptr, &at);
      DEBUG("thread %d stopped: signal %d event %d at %llx", int(t.tid), sig, st >> 16, (unsigned long long)at.rip);
    }
    if ((st >> 16) == PTRACE_EVENT_STOP) sig = 0;
    if (sig == SIGTRAP) return;
    if (ptrace(PTRACE_CONT, t.tid, nullptr, reinterpret_cast<void*>(long(sig))) != 0) throw ProcessExited{};
  }
}

// A system call made by the stopped thread: `syscall; int3` written over the bytes at its instruction pointer
// (every thread is stopped, so no other runs them), then put back.
long remote_syscall(pid_t pid, Tracee& t, long nr, std::initializer_list<uint64_t> args) {
  const uint64_t ip = t.regs.rip;
  // The 8-byte word read and written must not run past ip's page: take the one ending at ip + 3 when needed.
  const uint64_t word_at = ((ip & (kPageBytes - 1)) <= kPageBytes - 8) ? ip : ip + 3 - 8;
  const int shift = int(ip - word_at) * 8;
  const uint64_t saved = peek(t.tid, word_at);
  const uint64_t code = 0xcc050fULL;  // syscall; int3
  poke(t.tid, word_at, (saved & ~(0xffffffULL << shift)) | (code << shift));
  user_regs_struct r = t.regs;
  r.rax = static_cast<uint64_t>(nr);
  r.orig_rax = static_cast<uint64_t>(-1);  // not in a system call: the kernel must not rewind rip to restart one
  r.rip = ip;
  unsigned long long* regs[] = {&r.rdi, &r.rsi, &r.rdx, &r.r10, &r.r8, &r.r9};
  int i = 0;
  for (uint64_t a : args) *regs[i++] = a;
  long result = 0;
  try {
    if (ptrace(PTRACE_SETREGS, t.tid, nullptr, &r) != 0) throw ProcessExited{};
    run_until_trap(pid, t, 5000);
    user_regs_struct out{};
    if (ptrace(PTRACE_GETREGS, t.tid, nullptr, &out) != 0) throw ProcessExited{};
    result = static_cast<long>(out.rax);
  } catch (...) {
    ptrace(PTRACE_POKEDATA, t.tid, reinterpret_cast<void*>(word_at), reinterpret_cast<void*>(saved));
    throw;
  }
  poke(t.tid, word_at, saved);
  return result;
}

// The stub: dlopen(library, RTLD_NOW) → dlsym(handle, function) → function(argument), results stored in the
// page, int3; dlerror() instead when a step fails.
class Assembler {
 public:
  std::vector<uint8_t> code;
  void movabs(uint8_t reg_rex_op_hi, uint8_t op, uint64_t imm) {  // 48 b8+r imm64
    code.push_back(reg_rex_op_hi);
    code.push_back(op);
    append(imm);
  }
  void mov_rdi(uint64_t v) { movabs(0x48, 0xbf, v); }
  void mov_rsi(uint64_t v) { movabs(0x48, 0xbe, v); }
  void mov_rax(uint64_t v) { movabs(0x48, 0xb8, v); }
  void call_rax() { code.insert(code.end(), {0xff, 0xd0}); }
  void store_rax(uint8_t slot) {  // mov [rsp + 8*slot], rax: the results live in the stack gap we reserved
    code.insert(code.end(), {0x48, 0x89, 0x44, 0x24, uint8_t(8 * slot)});
  }
  void mov_rdi_rax() { code.insert(code.end(), {0x48, 0x89, 0xc7}); }
  size_t jz_if_rax_zero() {  // test rax, rax; jz rel32 (patched later)
    code.insert(code.end(), {0x48, 0x85, 0xc0, 0x0f, 0x84, 0, 0, 0, 0});
    return code.size();
  }
  void patch(size_t after_jz) {
    const int32_t rel = int32_t(code.size() - after_jz);
    std::memcpy(&code[after_jz - 4], &rel, 4);
  }
  void int3() { code.push_back(0xcc); }

 private:
  void append(uint64_t v) {
    for (int i = 0; i < 8; ++i) code.push_back(uint8_t(v >> (8 * i)));
  }
};

}  // namespace

ProcessStatus read_status(pid_t pid) {
  std::ifstream f(proc(pid, "status"));
  if (!f) throw AttachError("no such process: " + std::to_string(pid));
  ProcessStatus s;
  std::string line;
  while (std::getline(f, line)) {
    auto value = [&](size_t n) { return line.substr(n); };
    if (line.rfind("Name:", 0) == 0)
      s.name = value(5).substr(value(5).find_first_not_of(" \t"));
    else if (line.rfind("Uid:", 0) == 0)
      s.uid = static_cast<uid_t>(std::stoul(value(4)));
    else if (line.rfind("TracerPid:", 0) == 0)
      s.tracer = std::stoi(value(10));
    else if (line.rfind("Seccomp:", 0) == 0)
      s.seccomp = std::stoi(value(8));
  }
  return s;
}

bool read_stat(pid_t pid, ProcessStat& out) {
  std::ifstream f(proc(pid, "stat"));
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream rest(line.substr(paren + 1));
  long pgrp, session, tty, tpgid;  // fields 5-8, between the parent (4) and the flags (9)
  return bool(rest >> out.state >> out.ppid >> pgrp >> session >> tty >> tpgid >> out.flags);
}

std::string explain_ptrace_failure(pid_t pid, int err) {
  const std::string p = "process " + std::to_string(pid);
  if (err == ESRCH) return "no such process: " + std::to_string(pid);
  if (err != EPERM) return "cannot ptrace " + p + ": " + std::strerror(err);
  ProcessStatus st;
  try {
    st = read_status(pid);
  } catch (const AttachError&) {
    return "no such process: " + std::to_string(pid);
  }
  const std::string who = p + " (" + st.name + ")";
  if (st.tracer != 0) {
    std::string tracer_name;
    try {
      tracer_name = " (" + read_status(st.tracer).name + ")";
    } catch (const AttachError&) {
    }
    return who + " is already traced by process " + std::to_string(st.tracer) + tracer_name +
           ": detach the debugger or profiler first";
  }
  const bool cap = have_cap_sys_ptrace();
  const int scope = read_int_file("/proc/sys/kernel/yama/ptrace_scope", -1);
  if (scope == 3) return "ptrace is disabled on this machine (kernel.yama.ptrace_scope = 3; only a reboot resets it)";
  if (scope == 2 && !cap)
    return "ptrace is restricted to CAP_SYS_PTRACE (kernel.yama.ptrace_scope = 2): run stepscope as root, or set "
           "kernel.yama.ptrace_scope = 1";
  if (st.uid != geteuid() && !cap)
    return who + " belongs to " + user_name(st.uid) + " and stepscope runs as " + user_name(geteuid()) +
           " without CAP_SYS_PTRACE: run stepscope as that user or as root";
  if (geteuid() == 0 && !cap)
    return "stepscope runs as root without CAP_SYS_PTRACE (a container?): add the capability (docker run "
           "--cap-add SYS_PTRACE; Kubernetes securityContext.capabilities.add: [SYS_PTRACE])";
  if (scope == 1 && !cap)
    return "kernel.yama.ptrace_scope = 1 lets a process trace only its own descendants: run stepscope as root, "
           "or set kernel.yama.ptrace_scope = 0 (sysctl -w kernel.yama.ptrace_scope=0)";
  return "ptrace of " + who + " is not permitted: the process is not dumpable (setuid, prctl PR_SET_DUMPABLE 0) "
         "or a security module (AppArmor, SELinux) or a seccomp filter on stepscope forbids it";
}

// A kernel thread has no user address space to map into.
static bool is_kernel_thread(pid_t pid) {
  constexpr unsigned long kPfKthread = 0x00200000;
  ProcessStat st;
  return read_stat(pid, st) && (st.flags & kPfKthread) != 0;
}

InjectResult inject(const InjectRequest& req) {
  const pid_t pid = req.pid;
  const std::string p = "process " + std::to_string(pid);
  if (pid <= 0) throw AttachError("no such process: " + std::to_string(pid));
  if (pid == getpid()) throw AttachError("stepscope cannot attach to itself");
  const ProcessStatus st = read_status(pid);
  if (is_kernel_thread(pid))
    throw AttachError(p + " (" + st.name + ") is a kernel thread: it runs no program to load the collector into");
  if (st.seccomp == 1)
    throw AttachError(p + " (" + st.name + ") runs in seccomp strict mode: it may not mmap or open a library");
  if (st.tracer != 0) throw AttachError(explain_ptrace_failure(pid, EPERM));
  if (access((proc(pid, "root") + req.library).c_str(), R_OK) != 0 && access(req.library.c_str(), R_OK) != 0)
    throw AttachError("collector library not found: " + req.library + " (set STEPSCOPE_COLLECTOR_LIB)");
  if (req.argument.size() > kMaxArgument) throw AttachError("attach argument too long");

  InjectResult result;
  auto exited = [&] { return AttachError(p + " exited during attach"); };
  try {
    // dlopen & co. are looked up before stopping anything (libelf over libc's symbols takes milliseconds), as
    // offsets in their module; the map is read again once every thread is stopped: a process that has only just
    // been forked may exec its program meanwhile (then the first map was its parent's image).
    auto resolve = [&](const Maps& maps) {
      if (maps.libc.path.empty())
        throw AttachError(p + " (" + st.name + ") has no libc.so.6 (statically linked?): cannot load the collector");
      Entry e;
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
    };
    // A process that is just starting has no libc yet (the loader maps it first): give it a moment.
    Maps maps = read_maps(pid);
    for (int i = 0; i < kMaxSafePointRounds && maps.libc.path.empty(); ++i) {
      timespec ts{0, 2000000};
      nanosleep(&ts, nullptr);
      maps = read_maps(pid);
    }
    Entry entry = resolve(maps);

    Stopped stopped(pid);
    int64_t t_stop = 0;
    Tracee* caller = nullptr;
    for (int round = 0;; ++round) {
      t_stop = mono_ns();
      stopped.stop_all();
      maps = read_maps(pid);
      const bool starting = maps.libc.path.empty();  // exec'd since, its loader not done yet: try again
      if (!starting && (maps.*entry.module).path != entry.path) entry = resolve(maps);  // exec'd: another image
      // A thread at a safe point: running its own code (so it holds no libc or loader lock), or waiting in a
      // blocking system call. Fewest surprises first: no pending signal, not in a system call, the main thread.
      int best = -1;
      for (auto& t : stopped.threads()) {
        int score = -1;
        if (!in_syscall(t.regs) && !maps.in_libc_or_loader(t.regs.rip))
          score = 4;
        else if (in_syscall(t.regs) && waiting_syscall(static_cast<long>(t.regs.orig_rax)))
          score = 2;
        if (score < 0) continue;
        if (t.pending_signal == 0) score += 1;
        if (t.tid == pid) score = score * 2 + 1;
        else score *= 2;
        if (score > best) {
          best = score;
          caller = &t;
        }
      }
      result.threads = static_cast<int>(stopped.threads().size());
      if (starting) caller = nullptr;
      if (caller) break;
      stopped.release_all();
      if (round + 1 >= kMaxSafePointRounds && starting) resolve(maps);  // throws: no libc
      if (round + 1 >= kMaxSafePointRounds)
        throw AttachError("no thread of " + p + " reached a safe point (outside libc and the loader) in " +
                          std::to_string(kMaxSafePointRounds) + " tries");
      ++result.retries;
      timespec ts{0, 2000000};
      nanosleep(&ts, nullptr);
    }

    const uint64_t module_base = (maps.*entry.module).base;
    const uint64_t dlopen_at = module_base + entry.dlopen, dlsym_at = module_base + entry.dlsym,
                   dlerror_at = entry.dlerror ? module_base + entry.dlerror : 0;
    const long open_flags = entry.flags;
    Tracee& t = *caller;
    DEBUG("dlopen %llx dlsym %llx dlerror %llx; %zu threads, caller %d rip %llx orig_rax %lld rax %lld", (unsigned long long)dlopen_at,
          (unsigned long long)dlsym_at, (unsigned long long)dlerror_at, stopped.threads().size(), int(t.tid),
          (unsigned long long)t.regs.rip, (long long)t.regs.orig_rax, (long long)t.regs.rax);
    const int64_t t_caller = t_stop;
    // Everything the program can see of this thread: general registers and the extended (FPU/SSE/AVX) state.
    const user_regs_struct saved = t.regs;
    std::vector<uint8_t> xstate(kXstateBytes);
    iovec xiov{xstate.data(), xstate.size()};
    const bool have_xstate = ptrace(PTRACE_GETREGSET, t.tid, reinterpret_cast<void*>(NT_X86_XSTATE), &xiov) == 0;
    user_fpregs_struct fpregs{};
    const bool have_fpregs = !have_xstate && ptrace(PTRACE_GETFPREGS, t.tid, nullptr, &fpregs) == 0;

    const pid_t caller_tid = t.tid;
    auto restore = [&] {
      ptrace(PTRACE_SETREGS, caller_tid, nullptr, &saved);
      if (have_xstate) ptrace(PTRACE_SETREGSET, caller_tid, reinterpret_cast<void*>(NT_X86_XSTATE), &xiov);
      if (have_fpregs) ptrace(PTRACE_SETFPREGS, caller_tid, nullptr, &fpregs);
    };
    bool caller_running = false;
    try {
      const long page = remote_syscall(pid, t, SYS_mmap, {0, kPageBytes, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, uint64_t(-1), 0});
      if (page < 0 && page > -4096) {
        if (st.seccomp == 2 && (page == -EPERM || page == -EACCES || page == -ENOSYS))
          throw AttachError(p + " (" + st.name + ") runs under a seccomp filter that forbids mmap (" +
                            std::strerror(int(-page)) + "): cannot load the collector");
        throw AttachError("mmap in " + p + " failed: " + std::strerror(int(-page)));
      }
      result.page = static_cast<uint64_t>(page);
      DEBUG("page %llx", (unsigned long long)result.page);
      std::string argument = req.argument;
      if (auto at = argument.find("{page}"); at != std::string::npos) argument.replace(at, 6, "0x" + fmt_hex(result.page));

      const uint64_t base = result.page;
      user_regs_struct call = saved;
      call.rsp = (saved.rsp - 128 - 256) & ~uint64_t{15};  // below the red zone, 16-byte aligned at each call
      const uint64_t res = call.rsp;  // 4 result words above the stub's stack pointer (inside the reserved gap)
      Assembler a;
      a.mov_rdi(base + kLibraryOffset);
      a.mov_rsi(static_cast<uint64_t>(open_flags));
      a.mov_rax(dlopen_at);
      a.call_rax();
      a.store_rax(0);
      const size_t j1 = a.jz_if_rax_zero();
      a.mov_rdi_rax();
      a.mov_rsi(base + kFunctionOffset);
      a.mov_rax(dlsym_at);
      a.call_rax();
      a.store_rax(1);
      const size_t j2 = a.jz_if_rax_zero();
      a.mov_rdi(base + kArgumentOffset);
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
      std::memcpy(image.data() + kFunctionOffset, req.function.c_str(), std::min<size_t>(req.function.size(), 120));
      std::memcpy(image.data() + kArgumentOffset, argument.c_str(), argument.size());
      write_bytes(t.tid, base, image);

      call.rip = base + kCodeOffset;
      call.orig_rax = static_cast<uint64_t>(-1);
      call.rax = 0;
      call.eflags &= ~uint64_t{0x400};  // DF clear, as the ABI requires at a call
      if (ptrace(PTRACE_SETREGS, t.tid, nullptr, &call) != 0) throw ProcessExited{};
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
        DEBUG("trap at %llx (page+%llx)", (unsigned long long)after.rip, (unsigned long long)(after.rip - base));
      }
      const uint64_t handle = peek(c.tid, res), fn = peek(c.tid, res + 8);
      result.function_result = static_cast<long>(peek(c.tid, res + 16));
      if (handle && fn && result.function_result != 0)
        result.function_message = read_string(c.tid, static_cast<uint64_t>(result.function_result), 300);
      std::string why;
      if (!handle || !fn) {
        const uint64_t msg = dlerror_at ? peek(c.tid, res + 24) : 0;
        why = msg ? read_string(c.tid, msg, 400) : "unknown error";
      }
      c.pending_signal = caller_signal;
      restore();
      stopped.release_all();
      result.stopped_caller_ns = mono_ns() - t_caller;
      if (!handle) throw AttachError(p + " cannot load " + req.library + ": " + why);
      if (!fn) throw AttachError(req.library + " has no " + req.function + ": " + why);
    } catch (const ProcessExited&) {
      throw;
    } catch (...) {
      if (caller_running) {
        // The call did not come back (a lock never released?): stop the thread where it is and put it back.
        // The library may stay half-loaded; the program goes on from where it was interrupted.
        int st = 0;
        if (ptrace(PTRACE_INTERRUPT, caller_tid, nullptr, nullptr) == 0) waitpid(caller_tid, &st, __WALL);
      }
      if (!stopped.threads().empty() && stopped.alive()) restore();
      throw;
    }
  } catch (const ProcessExited&) {
    throw exited();
  }
  return result;
}

}  // namespace stepscope::collector::attach
