// `stepscope doctor` (docs/collector.md, "stepscope doctor"): what recording needs on this machine, one line
// per check, then a self-test recording of this very binary (the hidden `doctor --self-test-workload`) under
// the collector, read back from its store. Everything is looked at from outside the collector: the doctor
// never loads libstepscope_collector.so itself (its constructor would start recording in the doctor).
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "stepscope/collector/doctor.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <libunwind.h>
#include <link.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "launcher/launcher_clock.h"
#include "stepscope/collector/launcher.h"
#include "stepscope/store/store.h"

#ifdef STEPSCOPE_DOCTOR_CUDA
#include <cuda.h>
#include <cupti.h>

#include "gpu/cupti_library.h"
#endif

extern char** environ;

namespace fs = std::filesystem;

namespace stepscope::collector {
namespace {

constexpr const char* kCpuThreadNames[] = {"ss-doctor-cpu0", "ss-doctor-cpu1"};
constexpr const char* kCudaThreadName = "ss-doctor-cuda";
constexpr const char* kKernelName = "stepscope_doctor_empty";
// The same one-instruction kernel as the collector's launch-cost calibration (cupti_calibration.cpp).
constexpr const char* kPtx =
    ".version 6.0\n.target sm_50\n.address_size 64\n.visible .entry stepscope_doctor_empty()\n{\n  ret;\n}\n";
constexpr const char* kPythonSpinFunction = "stepscope_doctor_spin";
// Busy for half a second in a named function: enough samples at 1 kHz to see Python frames in them.
constexpr const char* kPythonSpin =
    "import time\n"
    "def stepscope_doctor_spin(seconds):\n"
    "    end = time.time() + seconds\n"
    "    n = 0\n"
    "    while time.time() < end:\n"
    "        n += 1\n"
    "    return n\n"
    "stepscope_doctor_spin(0.5)\n";
// Version, sys.executable and where `import stepscope` comes from without the collector (Python 2 parses it
// too).
constexpr const char* kPythonQuery =
    "import sys\n"
    "print(sys.version.split()[0])\n"
    "print(sys.executable or '')\n"
    "try:\n"
    "    import stepscope\n"
    "    print(getattr(stepscope, '__file__', None) or '(namespace package)')\n"
    "except Exception:\n"
    "    print('')\n";

std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* format, ...) {
  va_list ap, again;
  va_start(ap, format);
  va_copy(again, ap);
  char buf[512];
  const int n = std::vsnprintf(buf, sizeof buf, format, ap);
  std::string s = n < 0 ? std::string() : std::string(size_t(n), '\0');
  if (n >= 0) std::vsnprintf(s.data(), size_t(n) + 1, format, again);
  va_end(again);
  va_end(ap);
  return s;
}

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

std::string read_trimmed(const std::string& path, bool* exists = nullptr) {
  std::ifstream f(path);
  if (exists) *exists = bool(f);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string first_line(const std::string& s) {
  const auto start = s.find_first_not_of(" \t\n");
  if (start == std::string::npos) return {};
  return s.substr(start, s.find('\n', start) - start);
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// Effective capability `bit` of this process (/proc/self/status CapEff), as the attach injector reads it.
bool have_capability(int bit) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> bit) & 1;
  return false;
}

// The path the loader found a dlopen'ed shared object at.
std::string loaded_path(void* handle) {
  link_map* lm = nullptr;
  if (handle && dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
    return lm->l_name;
  return "?";
}

// --- one line per check

enum class Verdict { Ok, Warn, Fail, Skip };

// Ctrl-C (or SIGTERM/SIGHUP) stops the doctor between two checks, and its temp folder is removed. While a
// recording runs, record() handles these signals itself and says so in RecordSummary::launcher_signal.
struct Interrupted {};
volatile sig_atomic_t g_stop = 0;
void on_stop(int sig) {
  g_stop = sig;
}
void stop_if_asked(int launcher_signal = 0) {
  if (launcher_signal) g_stop = launcher_signal;
  if (g_stop) throw Interrupted{};
}

class Printer {
 public:
  explicit Printer(std::FILE* out) : out_(out) {}
  void section(const std::string& title) {
    std::fprintf(out_, "%s\n", title.c_str());
    std::fflush(out_);
  }
  // `todo` (warn, FAIL, skip): what to do. `part` (FAIL): what does not work, for the final line.
  void line(Verdict v, const std::string& what, const std::string& detail, const std::string& todo = {},
            const std::string& part = {}) {
    static const char* const tags[] = {"ok", "warn", "FAIL", "skip"};
    std::string l = strf("  %-6s", tags[int(v)]) + what + ": " + detail;
    if (v != Verdict::Ok && !todo.empty()) l += " \u2014 " + todo;
    std::fprintf(out_, "%s\n", l.c_str());
    std::fflush(out_);
    if (v == Verdict::Fail &&
        std::find(parts_.begin(), parts_.end(), part.empty() ? what : part) == parts_.end())
      parts_.push_back(part.empty() ? what : part);
  }
  const std::vector<std::string>& parts() const { return parts_; }

 private:
  std::FILE* out_;
  std::vector<std::string> parts_;
};

// --- child processes

struct Captured {
  int status = -1;  // exit code, 128 + signal, -1 when it could not be started
  std::string out;  // stdout and stderr together
};

// Runs argv (no shell) with `env_add` ("K=V") over this environment, stdin from /dev/null; killed after
// timeout_ms (an interpreter that hangs must not hang the doctor).
Captured capture(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                 int timeout_ms) {
  Captured r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return r;
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    bool replaced = false;
    for (const auto& a : env_add) replaced |= s.compare(0, a.find('=') + 1, a, 0, a.find('=') + 1) == 0;
    if (!replaced) env.push_back(s);
  }
  env.insert(env.end(), env_add.begin(), env_add.end());
  std::vector<char*> envp, args;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& a : argv_copy) args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return r;
  }
  if (pid == 0) {
    const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  const int64_t deadline = mono_ns() + int64_t(timeout_ms) * 1000000;
  bool killed = false;
  for (;;) {
    const int64_t left_ms = (deadline - mono_ns()) / 1000000;
    if (left_ms <= 0 && !killed) {
      kill(pid, SIGKILL);
      killed = true;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, killed ? 1000 : int(std::min<int64_t>(left_ms, 1000))) < 0 && errno != EINTR) break;
    if (!(p.revents & (POLLIN | POLLHUP))) {
      if (killed) break;
      continue;
    }
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (r.out.size() < (1 << 16)) r.out.append(buf, size_t(n));
  }
  close(fds[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
  if (killed) r.out = strf("killed after %d s without finishing", timeout_ms / 1000);
  return r;
}

// The first executable file called `name` on PATH, as execvp would run it; "" when none.
std::string on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string c = (dir.empty() ? "." : dir) + "/" + name;
    std::error_code ec;
    if (fs::is_regular_file(c, ec) && access(c.c_str(), X_OK) == 0) return c;
  }
  return {};
}

// The dynamic loader this process runs under (its PT_INTERP), found by its load address.
std::string dynamic_loader() {
  struct Ctx {
    uintptr_t base;
    std::string name;
  } ctx{uintptr_t(getauxval(AT_BASE)), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* c = static_cast<Ctx*>(data);
        if (c->base && info->dlpi_addr == c->base && info->dlpi_name && *info->dlpi_name)
          c->name = info->dlpi_name;
        return 0;
      },
      &ctx);
  return ctx.name.empty() ? "/lib64/ld-linux-x86-64.so.2" : ctx.name;
}

std::string self_exe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// --- environment checks

// The collector library exists and its dependencies resolve. The loader lists them the way ldd does
// (LD_TRACE_LOADED_OBJECTS): it maps them and stops before any constructor runs.
bool check_collector(Printer& p, std::string& lib) {
  lib = collector_library_path();
  const char* env = std::getenv("STEPSCOPE_COLLECTOR_LIB");
  const bool from_env = env && *env;
  const std::string from = from_env ? " (from STEPSCOPE_COLLECTOR_LIB)" : "";
  const std::string where_todo =
      from_env ? "point STEPSCOPE_COLLECTOR_LIB at libstepscope_collector.so, or unset it"
               : "reinstall stepscope (the collector belongs in ../lib beside the stepscope binary) or set "
                 "STEPSCOPE_COLLECTOR_LIB to libstepscope_collector.so";
  std::error_code ec;
  if (!fs::is_regular_file(lib, ec)) {
    p.line(Verdict::Fail, "collector library", lib + " not found" + from, where_todo,
           "collector library (not found)");
    return false;
  }
  if (access(lib.c_str(), R_OK) != 0) {
    p.line(Verdict::Fail, "collector library", lib + from + " is not readable: " + std::strerror(errno),
           "make it readable by this user", "collector library (unreadable)");
    return false;
  }
  const Captured c = capture({dynamic_loader(), lib}, {"LD_TRACE_LOADED_OBJECTS=1"}, 20000);
  std::vector<std::string> missing;
  int deps = 0;
  std::istringstream lines(c.out);
  for (std::string l; std::getline(lines, l);) {
    if (l.find("=>") != std::string::npos) ++deps;
    if (l.find("=> not found") == std::string::npos) continue;
    std::string name = first_line(l.substr(0, l.find("=>")));
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    missing.push_back(name);
  }
  if (c.status != 0) {
    p.line(Verdict::Fail, "collector library",
           lib + from + ": the dynamic loader cannot load it: " + first_line(c.out), where_todo,
           "collector library (does not load)");
    return false;
  }
  if (!missing.empty()) {
    p.line(Verdict::Fail, "collector library",
           lib + from + ": unresolved dependencies: " + join(missing, ", "),
           "install the packages that provide them (scripts/install-deps.sh lists stepscope's)",
           "collector library (unresolved dependencies)");
    return false;
  }
  p.line(Verdict::Ok, "collector library", lib + from + strf("; its %d dependencies resolve", deps));
  return true;
}

// Where `import stepscope` (the marker API) is installed beside this stepscope; the hooks need none of it.
void check_python_helper(Printer& p) {
  const fs::path bin = fs::path(self_exe()).parent_path();
  std::error_code ec;
  std::string where;
  if (fs::is_regular_file(bin / "../share/stepscope/python/stepscope/__init__.py", ec)) {
    const std::string dir = fs::weakly_canonical(bin / "../share/stepscope/python", ec).string();
    where = "installed copy in " + dir + " (PYTHONPATH=" + dir + " for programs run without stepscope)";
  }
  // pip install: the package in <env>/lib/pythonX.Y/site-packages, stepscope in <env>/bin.
  for (const auto& e : fs::directory_iterator(bin / "../lib", ec)) {
    if (!where.empty()) break;
    const fs::path pkg = e.path() / "site-packages/stepscope/__init__.py";
    if (e.path().filename().string().rfind("python", 0) == 0 && fs::is_regular_file(pkg, ec))
      where = "installed in " + fs::weakly_canonical(pkg.parent_path().parent_path(), ec).string() + " (pip)";
  }
  if (where.empty() &&
      fs::is_regular_file(fs::path(STEPSCOPE_SOURCE_PYTHON_DIR) / "stepscope/__init__.py", ec))
    where = std::string("source tree ") + STEPSCOPE_SOURCE_PYTHON_DIR +
            " (this stepscope runs from its build tree; `cmake --install` puts it in "
            "PREFIX/share/stepscope/python)";
  const std::string hooks =
      "the hooks are compiled into the collector: record and attach need no PYTHONPATH (docs/python.md)";
  if (where.empty()) {
    p.line(Verdict::Warn, "Python helper",
           "`import stepscope` is not installed beside this stepscope; " + hooks,
           "only programs that import stepscope outside stepscope need it: pip install . or cmake --install");
    return;
  }
  p.line(Verdict::Ok, "Python helper", where + "; " + hooks);
}

// The libunwind the collector unwinds copied stacks with: its headers at build time, the library it dlopens.
void check_libunwind(Printer& p) {
  const std::string built =
      strf("built against %d.%d.%d", UNW_VERSION_MAJOR, UNW_VERSION_MINOR, UNW_VERSION_EXTRA);
  void* h = dlopen("libunwind-x86_64.so.8", RTLD_LAZY | RTLD_LOCAL);
  if (!h) {
    const char* err = dlerror();
    p.line(Verdict::Fail, "libunwind",
           built + ", but libunwind-x86_64.so.8 does not load: " + (err ? err : "?"),
           "install libunwind 1.6 or later (Debian: apt install libunwind8)", "native stacks (no libunwind)");
    return;
  }
  std::vector<std::string> lacking;
  for (const char* s : {"_Ux86_64_create_addr_space", "_Ux86_64_init_remote", "_Ux86_64_step"})
    if (!dlsym(h, s)) lacking.push_back(s);
  const std::string path = loaded_path(h);
  dlclose(h);
  if (!lacking.empty()) {
    p.line(Verdict::Fail, "libunwind", built + "; " + path + " lacks " + join(lacking, ", "),
           "install Debian's libunwind8 (the remote unwinding API)",
           "native stacks (libunwind lacks its remote API)");
    return;
  }
  p.line(Verdict::Ok, "libunwind", built + "; the collector loads " + path);
}

struct GpuState {
  // A driver, a device, CUPTI loaded and subscribing: the self-test exercises the GPU path.
  bool usable = false;
  std::string why_not;  // for the self-test's skip line
};

#ifdef STEPSCOPE_DOCTOR_CUDA
std::string cuda_version(int v) {
  return strf("%d.%d", v / 1000, (v % 1000) / 10);
}

void CUPTIAPI no_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

GpuState check_cuda(Printer& p) {
  GpuState g;
  bool driver_ok = false;
  int driver_version = 0;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cuda) {
    p.line(Verdict::Fail, "CUDA driver",
           "no CUDA driver (libcuda.so.1 not found): stepscope records CPU data only",
           "install the NVIDIA driver / run on a GPU machine", "CUDA activity (no driver)");
    g.why_not = "no CUDA driver";
  } else {
    // The driver stays loaded: unloading it after cuInit is not safe.
    auto get_version = reinterpret_cast<decltype(&cuDriverGetVersion)>(dlsym(cuda, "cuDriverGetVersion"));
    auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(cuda, "cuInit"));
    auto count = reinterpret_cast<decltype(&cuDeviceGetCount)>(dlsym(cuda, "cuDeviceGetCount"));
    auto device = reinterpret_cast<decltype(&cuDeviceGet)>(dlsym(cuda, "cuDeviceGet"));
    auto name = reinterpret_cast<decltype(&cuDeviceGetName)>(dlsym(cuda, "cuDeviceGetName"));
    auto error_name = reinterpret_cast<decltype(&cuGetErrorName)>(dlsym(cuda, "cuGetErrorName"));
    const std::string path = loaded_path(cuda);
    auto err = [&](CUresult r) {
      const char* n = nullptr;
      if (error_name) error_name(r, &n);
      return strf("%s (%d)", n ? n : "CUDA error", int(r));
    };
    if (!get_version || !init || !count || !device || !name) {
      p.line(Verdict::Fail, "CUDA driver", path + " lacks the driver API entry points stepscope needs",
             "reinstall the NVIDIA driver", "CUDA activity (broken driver)");
      g.why_not = "the CUDA driver is incomplete";
    } else {
      get_version(&driver_version);
      const std::string ver = cuda_version(driver_version) + " (" + path + ")";
      int n = 0;
      if (CUresult r = init(0); r != CUDA_SUCCESS) {
        const std::string todo =
            r == CUDA_ERROR_NO_DEVICE
                ? "no GPU is visible: check nvidia-smi, CUDA_VISIBLE_DEVICES, and --gpus all in "
                  "a container"
                : "check nvidia-smi; a driver/kernel-module mismatch needs a reboot or reloading "
                  "the nvidia module";
        p.line(Verdict::Fail, "CUDA driver", ver + "; cuInit: " + err(r), todo,
               "CUDA activity (cuInit failed)");
        g.why_not = "cuInit failed: " + err(r);
      } else if (CUresult c = count(&n); c != CUDA_SUCCESS || n == 0) {
        p.line(Verdict::Fail, "CUDA driver",
               ver + "; no CUDA device" + (c != CUDA_SUCCESS ? ": " + err(c) : ""),
               "check nvidia-smi and CUDA_VISIBLE_DEVICES", "CUDA activity (no device)");
        g.why_not = "no CUDA device";
      } else {
        std::vector<std::string> names;
        for (int i = 0; i < n; ++i) {
          CUdevice d = 0;
          char buf[256] = {};
          names.push_back(device(&d, i) == CUDA_SUCCESS && name(buf, sizeof buf, d) == CUDA_SUCCESS ? buf
                                                                                                    : "?");
        }
        p.line(Verdict::Ok, "CUDA driver",
               ver + strf("; cuInit ok; %d device%s: ", n, n == 1 ? "" : "s") + join(names, ", "));
        driver_ok = true;
      }
    }
  }

  // The runtime is the program's business (PyTorch and JAX bring their own): reported, never a failure.
  void* rt = nullptr;
  for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so"})
    if ((rt = dlopen(n, RTLD_LAZY | RTLD_LOCAL))) break;
  if (!rt) {
    p.line(Verdict::Warn, "CUDA runtime", "no libcudart.so.13, .12 or libcudart.so on the loader path",
           "nothing to do for PyTorch or JAX (they bring their own); CUDA C++ programs need the toolkit's");
  } else {
    using RuntimeVersion = int (*)(int*);
    auto get = reinterpret_cast<RuntimeVersion>(dlsym(rt, "cudaRuntimeGetVersion"));
    int v = 0;
    if (get) get(&v);
    const std::string detail =
        (v ? cuda_version(v) : std::string("version unknown")) + " (" + loaded_path(rt) + ")";
    if (driver_ok && v > driver_version)
      p.line(Verdict::Warn, "CUDA runtime",
             detail + " is newer than the driver supports (" + cuda_version(driver_version) + ")",
             "programs built with it fail with cudaErrorInsufficientDriver: update the driver");
    else
      p.line(Verdict::Ok, "CUDA runtime", detail + "; programs may bring their own (PyTorch does)");
    dlclose(rt);
  }

  // libcupti exactly as the collector finds it (cupti_library.h).
  void* cupti = nullptr;
  std::vector<std::string> tried;
  for (const char* n : cupti::kLibraryNames) {
    if ((cupti = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
    tried.push_back(n);
  }
  if (!cupti) {
    p.line(Verdict::Fail, "CUPTI", "cannot load libcupti (tried " + join(tried, ", ") + ")",
           "install the CUDA toolkit's CUPTI or the nvidia-cuda-cupti wheel and put its lib folder on "
           "LD_LIBRARY_PATH",
           "CUDA activity (no CUPTI)");
    if (g.why_not.empty()) g.why_not = "no CUPTI";
    return g;
  }
  auto get_version = reinterpret_cast<decltype(&cuptiGetVersion)>(dlsym(cupti, "cuptiGetVersion"));
  auto subscribe = reinterpret_cast<decltype(&cuptiSubscribe)>(dlsym(cupti, "cuptiSubscribe"));
  auto unsubscribe = reinterpret_cast<decltype(&cuptiUnsubscribe)>(dlsym(cupti, "cuptiUnsubscribe"));
  auto result_string =
      reinterpret_cast<decltype(&cuptiGetResultString)>(dlsym(cupti, "cuptiGetResultString"));
  uint32_t api_version = 0;
  if (get_version) get_version(&api_version);
  p.line(Verdict::Ok, "CUPTI", strf("API version %u (", api_version) + loaded_path(cupti) + ")");
  if (!subscribe || !unsubscribe) {
    p.line(Verdict::Fail, "CUPTI subscription", "this libcupti has no cuptiSubscribe",
           "use the CUPTI of a CUDA toolkit", "CUDA activity (CUPTI cannot subscribe)");
    if (g.why_not.empty()) g.why_not = "CUPTI cannot subscribe";
    return g;
  }
  CUpti_SubscriberHandle sub{};
  const CUptiResult r = subscribe(&sub, no_callback, nullptr);
  const char* rs = nullptr;
  if (result_string) result_string(r, &rs);
  const std::string result = rs ? rs : strf("CUPTI result %d", int(r));
  if (r == CUPTI_SUCCESS) {
    unsubscribe(sub);
    p.line(Verdict::Ok, "CUPTI subscription", "cuptiSubscribe succeeds (then cuptiUnsubscribe)");
    if (driver_ok) g.usable = true;
  } else if (!driver_ok) {
    // Without a working driver CUPTI cannot subscribe (CUPTI_ERROR_UNKNOWN here): part of the driver's
    // result.
    p.line(Verdict::Skip, "CUPTI subscription",
           "cuptiSubscribe returns " + result +
               ", as expected without a working CUDA driver (see the driver line)");
  } else {
    std::string todo;
    if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)
      todo =
          "profiling is restricted to administrators: run as root or load the nvidia module with "
          "NVreg_RestrictProfilingToAdminUsers=0";
    else if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      todo =
          "another profiler holds CUPTI in this process (CUDA_INJECTION64_PATH is set?): run doctor "
          "outside it";
    else
      todo = strf(
          "this CUPTI (API version %u) may not match the driver (CUDA %s): use the CUPTI of the driver's "
          "CUDA version (LD_LIBRARY_PATH)",
          api_version, cuda_version(driver_version).c_str());
    p.line(Verdict::Fail, "CUPTI subscription", "cuptiSubscribe returns " + result, todo,
           "CUDA activity (CUPTI cannot subscribe)");
    g.why_not = "CUPTI cannot subscribe";
  }
  return g;
}
#else
GpuState check_cuda(Printer& p) {
  p.line(Verdict::Fail, "CUDA",
         "this stepscope was built without CUPTI (STEPSCOPE_WITH_CUDA=OFF): it records CPU data only",
         "rebuild with the CUDA toolkit's CUPTI (or the nvidia-cuda-cupti wheel, scripts/install-deps.sh)",
         "CUDA activity (built without CUPTI)");
  return GpuState{false, "built without CUPTI"};
}
#endif

// The collector samples with perf_event_open(PERF_COUNT_SW_TASK_CLOCK) per thread (timers.cpp) and falls back
// to timer_create on the thread's CPU clock where that is refused: the same call is tried here.
void check_perf_events(Printer& p) {
  bool exists = false;
  const std::string value = read_trimmed("/proc/sys/kernel/perf_event_paranoid", &exists);
  const std::string what = "perf_event_paranoid";
  const std::string shown = exists ? value : "absent (a kernel without perf events?)";
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.sample_period = 1000000;
  a.disabled = 1;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  const int fd = int(syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC));
  const int err = errno;
  if (fd >= 0) {
    close(fd);
    p.line(Verdict::Ok, what,
           shown +
               ": stepscope's per-thread task-clock perf events are allowed here (sampling at the "
               "asked --cpu-hz)" +
               (exists && std::atoi(value.c_str()) > 2 ? "; this process is privileged (CAP_PERFMON or root)"
                                                       : ""));
    return;
  }
  const std::string fallback = strf(
      "perf_event_open is refused (%s): stepscope falls back to timer_create on each thread's CPU clock, "
      "which fires on the scheduler tick (often 250 Hz) whatever --cpu-hz asks",
      std::strerror(err));
  if (exists && std::atoi(value.c_str()) <= 2)
    p.line(Verdict::Warn, what, shown + ": " + fallback,
           "a seccomp profile or security module forbids perf_event_open (containers: --cap-add PERFMON or a "
           "seccomp profile that allows it)");
  else
    p.line(
        Verdict::Warn, what, shown + ": " + fallback,
        "sudo sysctl kernel.perf_event_paranoid=2 (or run as root / grant CAP_PERFMON) for the asked rate");
}

// `stepscope attach` needs ptrace; the same rules as the injector's error messages (attach/injector.cpp).
void check_ptrace(Printer& p) {
  bool exists = false;
  const std::string value = read_trimmed("/proc/sys/kernel/yama/ptrace_scope", &exists);
  const bool cap = have_capability(19);  // CAP_SYS_PTRACE
  const std::string what = "ptrace_scope";
  if (geteuid() == 0 && !cap) {
    p.line(
        Verdict::Warn, what,
        (exists ? value : std::string("absent (no Yama module)")) +
            ": stepscope runs as root without CAP_SYS_PTRACE (a container?): attach fails",
        "add the capability (docker run --cap-add SYS_PTRACE; Kubernetes securityContext.capabilities.add: "
        "[SYS_PTRACE])");
    return;
  }
  const std::string capped = cap ? "; this process has CAP_SYS_PTRACE" : "";
  if (!exists) {
    p.line(Verdict::Ok, what,
           "absent (no Yama module): `stepscope attach` may attach to any process of the same user" + capped);
    return;
  }
  const int scope = std::atoi(value.c_str());
  if (scope == 0) {
    p.line(Verdict::Ok, what,
           value + ": `stepscope attach` may attach to any process of the same user" + capped);
  } else if (scope == 1 && cap) {
    p.line(Verdict::Ok, what,
           value + ": attach is limited to descendants, but this process has CAP_SYS_PTRACE");
  } else if (scope == 1) {
    p.line(Verdict::Warn, what, value + ": `stepscope attach` works only on stepscope's own descendants",
           "sudo sysctl kernel.yama.ptrace_scope=0, or run stepscope as root (record --paused with "
           "start/stop needs no ptrace)");
  } else if (scope == 2 && cap) {
    p.line(Verdict::Ok, what, value + ": attach needs CAP_SYS_PTRACE, which this process has");
  } else if (scope == 2) {
    p.line(
        Verdict::Warn, what, value + ": `stepscope attach` needs CAP_SYS_PTRACE",
        "run stepscope as root, or sudo sysctl kernel.yama.ptrace_scope=1 to attach to its own descendants");
  } else {
    p.line(Verdict::Warn, what,
           value + ": ptrace is disabled: `stepscope attach` is impossible until a reboot",
           "use stepscope record (record --paused with start/stop needs no ptrace); only a reboot lowers it");
  }
}

// --- Python interpreters

struct Interpreter {
  std::vector<std::string> names;  // how it was found: "python3", a --python path
  std::string path;                // what was run to ask it
  bool asked = false;              // --python: a failure to run counts
  std::string executable, real, version, import_file;
  std::string error;  // does not run: why
};

int python_minor(const std::string& version, int* major) {
  int ma = 0, mi = 0;
  std::sscanf(version.c_str(), "%d.%d", &ma, &mi);
  *major = ma;
  return mi;
}

// Interpreters to check: --python first, then python3, python, python3.8 … python3.14 on PATH, one per real
// executable (pyenv shims and venv links lead to the same interpreter).
std::vector<Interpreter> find_interpreters(const DoctorOptions& o, std::vector<Interpreter>& not_running) {
  std::vector<Interpreter> found;
  std::vector<std::pair<std::string, bool>> candidates;
  for (const auto& p : o.pythons) candidates.push_back({p, true});
  std::vector<std::string> names = {"python3", "python"};
  for (int minor = 8; minor <= 14; ++minor) names.push_back(strf("python3.%d", minor));
  for (const auto& n : names) candidates.push_back({n, false});
  for (const auto& [name, asked] : candidates) {
    stop_if_asked();
    Interpreter in;
    in.asked = asked;
    in.names = {name};
    in.path = asked ? fs::absolute(name).string() : on_path(name);
    if (in.path.empty()) continue;
    const Captured c = capture({in.path, "-c", kPythonQuery}, {}, 20000);
    std::istringstream out(c.out);
    std::getline(out, in.version);
    std::getline(out, in.executable);
    std::getline(out, in.import_file);
    if (c.status != 0 || in.executable.empty()) {
      in.error = c.status < 0 ? "cannot be started" : first_line(c.out);
      if (in.error.empty()) in.error = strf("exit status %d", c.status);
      not_running.push_back(in);
      continue;
    }
    std::error_code ec;
    in.real = fs::canonical(in.executable, ec).string();
    if (ec) in.real = in.executable;
    auto same =
        std::find_if(found.begin(), found.end(), [&](const Interpreter& f) { return f.real == in.real; });
    if (same != found.end()) {
      same->names.push_back(name);
      continue;
    }
    found.push_back(in);
  }
  return found;
}

// Stacks (ids) that hold a frame satisfying `want`, computed once per stack along the parent chain.
template <class Want>
std::vector<char> stacks_with(const store::Trace& t, Want want) {
  std::unordered_map<int64_t, const store::Frame*> frame_of;
  for (const auto& f : t.frames) frame_of[f.id] = &f;
  int64_t max_id = 0;
  for (const auto& s : t.stacks) max_id = std::max(max_id, s.id);
  std::vector<const store::Stack*> by_id(size_t(max_id + 1), nullptr);
  for (const auto& s : t.stacks) by_id[size_t(s.id)] = &s;
  std::vector<char> memo(size_t(max_id + 1), -1);
  for (int64_t id = 1; id <= max_id; ++id) {
    std::vector<int64_t> chain;
    int64_t cur = id;
    char result = 0;
    while (cur > 0 && cur <= max_id && by_id[size_t(cur)]) {
      if (memo[size_t(cur)] >= 0) {
        result = memo[size_t(cur)];
        break;
      }
      chain.push_back(cur);
      auto f = frame_of.find(by_id[size_t(cur)]->frame);
      if (f != frame_of.end() && want(*f->second)) {
        result = 1;
        break;
      }
      cur = by_id[size_t(cur)]->parent;
    }
    for (int64_t c : chain) memo[size_t(c)] = result;
  }
  return memo;
}

bool has(const std::vector<char>& memo, int64_t stack) {
  return stack > 0 && size_t(stack) < memo.size() && memo[size_t(stack)] == 1;
}

void check_python(Printer& p, const DoctorOptions& o, const std::string& dir, bool collector_ok) {
  std::vector<Interpreter> not_running;
  const auto interpreters = find_interpreters(o, not_running);
  for (const auto& in : not_running) {
    if (!in.asked) continue;
    p.line(Verdict::Fail, in.names[0], "does not run: " + in.error, "check the path given to --python",
           "Python hooks (" + in.names[0] + " does not run)");
  }
  std::vector<std::string> idle;
  std::string idle_why;
  for (const auto& in : not_running)
    if (!in.asked) {
      idle.push_back(in.names[0]);
      if (idle_why.empty()) idle_why = in.error;
    }
  if (interpreters.empty() && o.pythons.empty())
    p.line(Verdict::Skip, "Python", "no python3, python or python3.8 \u2026 python3.14 runs from PATH",
           "stepscope doctor --python /path/to/python checks one");
  int index = 0;
  for (const auto& in : interpreters) {
    stop_if_asked();
    std::vector<std::string> also(in.names.begin() + 1, in.names.end());
    const std::string label = in.names[0] + " " + in.version + " (" + in.executable +
                              (also.empty() ? "" : "; also " + join(also, ", ")) + ")";
    const std::string imported = in.import_file.empty() ? "not importable without stepscope"
                                                        : "imports " + in.import_file + " without stepscope";
    if (!collector_ok) {
      p.line(Verdict::Skip, label, "not recorded", "needs the collector library (above)");
      continue;
    }
    RecordOptions ro;
    ro.output = (fs::path(dir) / strf("python-%d.db", index++)).string();
    ro.command = {in.executable, "-c", kPythonSpin};
    ro.no_gpu = true;  // the hooks and Python frames are the question here
    ro.print_summary = false;
    int major = 0;
    const int minor = python_minor(in.version, &major);
    const bool supported = major > 3 || (major == 3 && minor >= 8);
    const std::string part = "Python hooks (" + in.names[0] + " " + in.version + ")";
    try {
      const RecordSummary s = record(ro);
      stop_if_asked(s.launcher_signal);
      store::StoreReader reader(ro.output);
      const store::Trace t = reader.load();
      auto meta = [&](const char* k) {
        auto it = t.meta.find(k);
        return it == t.meta.end() ? std::string() : it->second;
      };
      const auto py =
          stacks_with(t, [](const store::Frame& f) { return f.kind == store::FrameKind::Python; });
      const auto spin = stacks_with(t, [&](const store::Frame& f) {
        return f.kind == store::FrameKind::Python && t.str(f.symbol) == kPythonSpinFunction;
      });
      int64_t with_py = 0, with_spin = 0;
      for (const auto& sm : t.samples) {
        with_py += has(py, sm.stack);
        with_spin += has(spin, sm.stack);
      }
      const std::string hooks = meta("python.hooks").empty() ? "no python.hooks line" : meta("python.hooks");
      const int64_t installed = std::atoll(meta("python.hooks_installed").c_str());
      const int64_t processes = std::atoll(meta("python.processes").c_str());
      const std::string frames =
          strf("%lld samples, %lld with Python frames, %lld in %s", (long long)t.samples.size(),
               (long long)with_py, (long long)with_spin, kPythonSpinFunction);
      const std::string detail = "hooks " + hooks + "; " + frames + "; " + imported;
      if (s.exit_code != 0) {
        p.line(supported ? Verdict::Fail : Verdict::Warn, label,
               strf("exited with status %d under the collector; ", s.exit_code) + frames,
               supported ? "run it under `stepscope record` by hand to see why" : "use CPython 3.8 or newer",
               part);
      } else if (processes > 0 && installed == processes && with_spin > 0) {
        p.line(Verdict::Ok, label, detail);
      } else if (!supported) {
        // CPython before 3.8 has no audit hooks (docs/python.md): reported, not counted against recording.
        p.line(Verdict::Warn, label, detail, "stepscope's hooks and Python frames need CPython 3.8 or newer");
      } else if (processes > 0 && installed == processes) {
        p.line(Verdict::Fail, label, detail,
               "the hooks are in, but no sample shows the spinning Python function: stepscope reads the "
               "frames of CPython 3.9 to 3.13 (docs/python.md); train with one of those for Python stacks",
               "Python frames (" + in.names[0] + " " + in.version + ")");
      } else {
        p.line(Verdict::Fail, label, detail,
               "see docs/python.md, \"How the hooks get in\"; STEPSCOPE_PYTHON_DEBUG=1 stepscope record -- " +
                   in.executable + " -c 'pass' says why",
               part);
      }
    } catch (const std::exception& e) {
      p.line(Verdict::Fail, label, std::string("recording failed: ") + e.what(), "see the error", part);
    }
  }
  if (!idle.empty())
    p.line(Verdict::Skip, join(idle, ", "), "on PATH but do not run here (" + idle_why + ")");
}

// --- the self-test

struct WorkloadReport {
  int64_t pid = 0;
  struct Thread {
    int64_t tid = 0;
    double cpu_s = 0;
    std::string name;
  };
  std::vector<Thread> threads;
  int64_t cuda_tid = 0, launches = 0, syncs = 0;
  std::string cuda = "not reported";  // "ok", "skipped: …", "failed: …"
};

bool read_report(const std::string& path, WorkloadReport& r) {
  std::ifstream f(path);
  if (!f) return false;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "pid") {
      in >> r.pid;
    } else if (key == "thread") {
      WorkloadReport::Thread t;
      in >> t.tid >> t.cpu_s >> t.name;
      r.threads.push_back(t);
    } else if (key == "cuda") {
      in >> r.cuda_tid >> r.launches >> r.syncs;
      std::getline(in >> std::ws, r.cuda);
    }
  }
  return r.pid > 0;
}

// A stepscope built with AddressSanitizer or ThreadSanitizer (scripts/test.sh --sanitize) cannot be the
// self-test's workload: the collector's stack copies read the sanitizer's redzones through its intercepted
// memcpy, and its runtime must come first in the library list. Real builds are never instrumented.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizedBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizedBuild = true;
#else
constexpr bool kSanitizedBuild = false;
#endif
#else
constexpr bool kSanitizedBuild = false;
#endif

// Returns false when nothing records at all.
bool self_test(Printer& p, const DoctorOptions& o, const std::string& dir, const GpuState& gpu) {
  if (kSanitizedBuild) {
    p.line(
        Verdict::Skip, "self-test",
        "not run: this stepscope is built with a sanitizer, and the collector cannot record an instrumented "
        "program",
        "use a build without STEPSCOPE_SANITIZE");
    return true;
  }
  const std::string report_path = (fs::path(dir) / "self-test-workload.txt").string();
  RecordOptions ro;
  ro.output = (fs::path(dir) / "self-test.db").string();
  ro.command = {self_exe(),           "doctor",   "--self-test-workload", strf("%g", o.duration_s),
                "--self-test-report", report_path};
  ro.no_gpu = !gpu.usable;  // also keeps record's own "no CUDA driver" warning out of the doctor's output
  ro.gpu_window = "all";
  ro.print_summary = false;
  RecordSummary s;
  store::Trace t;
  try {
    s = record(ro);
    stop_if_asked(s.launcher_signal);
    t = store::StoreReader(ro.output).load();
  } catch (const std::exception& e) {
    p.line(Verdict::Fail, "self-test", std::string("recording failed: ") + e.what(), "see the error",
           "CPU sampling (the self-test did not record)");
    return false;
  }
  WorkloadReport w;
  if (s.exit_code != 0 || !read_report(report_path, w)) {
    p.line(Verdict::Fail, "self-test",
           s.exit_code != 0 ? strf("the workload exited with status %d", s.exit_code)
                            : std::string("the workload left no report"),
           "run it by hand: stepscope doctor --self-test-workload 3",
           "CPU sampling (the self-test workload failed)");
    return false;
  }
  auto meta = [&](const char* k) {
    auto it = t.meta.find(k);
    return it == t.meta.end() ? std::string() : it->second;
  };
  const int cpu_hz = RecordOptions{}.cpu_hz;

  // CPU: samples on each thread that burned CPU, against what its CPU time should have given.
  std::map<int64_t, int64_t> samples_of;
  std::map<int64_t, std::vector<int64_t>> stacks_of;
  for (const auto& sm : t.samples)
    if (sm.pid == w.pid) {
      ++samples_of[sm.tid];
      stacks_of[sm.tid].push_back(sm.stack);
    }
  std::map<int64_t, std::string> stored_name;
  for (const auto& th : t.threads)
    if (th.pid == w.pid) stored_name[th.tid] = t.str(th.name);
  const auto burn = stacks_with(
      t, [&](const store::Frame& f) { return t.str(f.symbol).find("doctor_burn_cpu") != std::string::npos; });
  std::unordered_map<int64_t, int64_t> parent_of;
  for (const auto& st : t.stacks) parent_of[st.id] = st.parent;
  auto depth = [&](int64_t stack) {
    int64_t d = 0;
    for (int64_t c = stack; c > 0 && d < 10000; ++d) c = parent_of.count(c) ? parent_of[c] : 0;
    return d;
  };
  std::vector<std::string> per_thread, misnamed, unsampled, slow;
  int64_t burning = 0, named_burn = 0, leaf_only = 0;
  for (const auto& th : w.threads) {
    const int64_t n = samples_of.count(th.tid) ? samples_of[th.tid] : 0;
    const double expected = double(cpu_hz) * th.cpu_s;
    const double share = expected > 0 ? double(n) / expected : 0;
    per_thread.push_back(
        strf("%s %lld samples / %.2f CPU-s (%.0f%%)", th.name.c_str(), (long long)n, th.cpu_s, share * 100));
    if (n == 0) unsampled.push_back(th.name);
    if (n > 0 && share < 0.5) slow.push_back(th.name);
    if (th.name != "main" && stored_name[th.tid] != th.name)
      misnamed.push_back(th.name + " stored as '" + stored_name[th.tid] + "'");
    for (int64_t st : stacks_of[th.tid]) {
      ++burning;
      named_burn += has(burn, st);
      leaf_only += depth(st) <= 1;
    }
  }
  const std::string timer = meta("collector.timer").empty() ? "timer unknown" : meta("collector.timer");
  const int64_t dropped = std::atoll(meta("collector.dropped_samples").c_str());
  std::string detail = strf("%lld samples in %.1f s (%s, %d Hz asked): ", (long long)s.samples,
                            s.command_wall_s, timer.c_str(), cpu_hz) +
                       join(per_thread, ", ") + strf("; %lld dropped", (long long)dropped);
  if (burning > 0)
    detail += strf("; stacks: %.0f%% reach doctor_burn_cpu, %.0f%% leaf-only",
                   100.0 * double(named_burn) / double(burning), 100.0 * double(leaf_only) / double(burning));
  bool cpu_ok = true;
  if (!unsampled.empty()) {
    p.line(Verdict::Fail, "CPU sampling", detail + "; no samples on " + join(unsampled, ", "),
           "look at collector.threads_unsampled in `stepscope info` of a recording (--keep DIR keeps it)",
           "CPU sampling (threads without samples)");
    cpu_ok = false;
  } else if (!slow.empty()) {
    p.line(
        Verdict::Warn, "CPU sampling", detail + "; below half the asked rate on " + join(slow, ", "),
        timer.find("perf_event") == std::string::npos
            ? "perf events are refused (see perf_event_paranoid above): the fallback timer fires on the tick"
            : "a loaded machine delays the sampling signal; rerun when it is idle");
  } else if (dropped > 0 || burning == 0 || leaf_only * 2 > burning || !misnamed.empty()) {
    p.line(Verdict::Warn, "CPU sampling",
           detail + (misnamed.empty() ? "" : "; thread names: " + join(misnamed, ", ")),
           dropped > 0 ? "samples were dropped (full rings): a loaded machine or a slow disk"
                       : "stacks are not unwound (libunwind above) or threads not named");
  } else {
    p.line(Verdict::Ok, "CPU sampling", detail);
  }

  // GPU: kernels arrive, every API and sync row has its thread, launches and syncs on the thread that made
  // them.
  if (!gpu.usable) {
    p.line(Verdict::Skip, "GPU", "skipped \u2014 " + gpu.why_not);
    return cpu_ok || s.samples > 0;
  }
  if (w.cuda != "ok") {
    p.line(Verdict::Fail, "CUDA activity", "the self-test's CUDA thread " + w.cuda,
           "run it by hand: stepscope doctor --self-test-workload 3",
           "CUDA activity (the self-test's kernel loop failed)");
    return true;
  }
  const std::string cupti_status = meta("cupti.status");
  std::set<std::pair<int64_t, int64_t>> known;
  for (const auto& th : t.threads) known.insert({th.pid, th.tid});
  int64_t kernels = 0, api_rows = 0, orphan_rows = 0, launch_rows = 0, misplaced = 0, sync_rows = 0;
  for (const auto& k : t.kernels)
    if (k.pid == w.pid && t.str(k.name).find(kKernelName) != std::string::npos) ++kernels;
  for (const auto& a : t.api_calls) {
    if (a.pid != w.pid) continue;
    ++api_rows;
    if (!a.tid || !known.count({a.pid, a.tid})) ++orphan_rows;
    const std::string& name = t.str(a.name);
    if (name.find("LaunchKernel") != std::string::npos || name.find("Synchronize") != std::string::npos) {
      ++launch_rows;
      if (a.tid != w.cuda_tid) ++misplaced;
    }
  }
  for (const auto& sy : t.syncs) {
    if (sy.pid != w.pid) continue;
    ++sync_rows;
    if (!sy.tid || !known.count({sy.pid, sy.tid})) ++orphan_rows;
    if (sy.tid != w.cuda_tid) ++misplaced;
  }
  const std::string gpu_detail =
      strf(
          "%lld launches, %lld kernels recorded; %lld API rows (%lld without a thread row), %lld syncs; %lld "
          "launch/sync rows, %lld not on %s",
          (long long)w.launches, (long long)kernels, (long long)api_rows, (long long)orphan_rows,
          (long long)sync_rows, (long long)launch_rows, (long long)misplaced, kCudaThreadName) +
      (cupti_status.empty() ? "" : "; CUPTI: " + cupti_status) +
      (meta("cupti.thread_ids").empty() ? "" : "; thread ids: " + meta("cupti.thread_ids"));
  if (kernels == 0 || launch_rows == 0 || orphan_rows > 0 || misplaced > 0) {
    p.line(Verdict::Fail, "CUDA activity", gpu_detail,
           kernels == 0 || launch_rows == 0
               ? "CUPTI recorded nothing: see the CUPTI lines above and cupti.status"
               : "rows on the wrong thread: please report it with the kept recording "
                 "(--keep DIR)",
           "CUDA activity (self-test)");
  } else if (kernels * 10 < w.launches * 9) {
    p.line(Verdict::Warn, "CUDA activity",
           gpu_detail + "; " + meta("cupti.dropped_records") + " GPU records dropped",
           "fewer kernels than launches: CUPTI dropped records (a loaded machine)");
  } else {
    p.line(Verdict::Ok, "CUDA activity", gpu_detail);
  }
  const std::string cost = meta("cupti.launch_cost_ns");
  if (!cost.empty())
    p.line(Verdict::Ok, "launch cost",
           strf("per-launch cost measured by the collector: %.2f \u00b5s", std::atof(cost.c_str()) / 1000.0) +
               (meta("cupti.calibration").empty() ? "" : " (" + meta("cupti.calibration") + ")"));
  else
    p.line(Verdict::Warn, "launch cost",
           "not measured: " + (meta("cupti.calibration").empty()
                                   ? std::string("the collector had not calibrated when the run ended")
                                   : meta("cupti.calibration")),
           "a longer --duration gives the calibration time to run");
  return true;
}

// --- the workload

// Named so the self-test can find it in the stacks; noinline keeps it a frame of its own.
[[gnu::noinline]] uint64_t doctor_burn_cpu(int64_t until_ns) {
  uint64_t x = 88172645463325252ULL;
  while (mono_ns() < until_ns)
    for (int i = 0; i < 20000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
    }
  return x;
}

std::atomic<uint64_t> g_sink{0};

struct CudaLoop {
  int64_t tid = 0, launches = 0, syncs = 0;
  std::string status = "skipped: libcuda.so.1 not found";
};

#ifdef STEPSCOPE_DOCTOR_CUDA
// Runs on ss-doctor-cuda: every driver call of the workload is made here, so the API rows must carry its tid.
void cuda_loop(void* cuda, int64_t until_ns, CudaLoop& r) {
  pthread_setname_np(pthread_self(), kCudaThreadName);
  r.tid = gettid();
#define STEPSCOPE_SYM(name) auto name##_fn = reinterpret_cast<decltype(&name)>(dlsym(cuda, #name))
  STEPSCOPE_SYM(cuInit);
  STEPSCOPE_SYM(cuDeviceGet);
  STEPSCOPE_SYM(cuDevicePrimaryCtxRetain);
  STEPSCOPE_SYM(cuCtxSetCurrent);
  STEPSCOPE_SYM(cuModuleLoadData);
  STEPSCOPE_SYM(cuModuleGetFunction);
  STEPSCOPE_SYM(cuModuleUnload);
  STEPSCOPE_SYM(cuStreamCreate);
  STEPSCOPE_SYM(cuLaunchKernel);
  STEPSCOPE_SYM(cuStreamSynchronize);
  STEPSCOPE_SYM(cuGetErrorName);
#undef STEPSCOPE_SYM
  // Versioned exports: the unversioned names are the CUDA 3.x ABI.
  auto release_fn =
      reinterpret_cast<decltype(&cuDevicePrimaryCtxRelease_v2)>(dlsym(cuda, "cuDevicePrimaryCtxRelease_v2"));
  auto stream_destroy_fn = reinterpret_cast<decltype(&cuStreamDestroy_v2)>(dlsym(cuda, "cuStreamDestroy_v2"));
  if (!cuInit_fn || !cuDeviceGet_fn || !cuDevicePrimaryCtxRetain_fn || !cuCtxSetCurrent_fn ||
      !cuModuleLoadData_fn || !cuModuleGetFunction_fn || !cuModuleUnload_fn || !cuStreamCreate_fn ||
      !cuLaunchKernel_fn || !cuStreamSynchronize_fn || !release_fn || !stream_destroy_fn) {
    r.status = "failed: libcuda.so.1 lacks a driver entry point";
    return;
  }
  auto ok = [&](CUresult res, const char* call) {
    if (res == CUDA_SUCCESS) return true;
    const char* n = nullptr;
    if (cuGetErrorName_fn) cuGetErrorName_fn(res, &n);
    r.status = strf("failed: %s returned %s (%d)", call, n ? n : "an error", int(res));
    return false;
  };
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule mod = nullptr;
  CUfunction fn = nullptr;
  CUstream stream = nullptr;
  if (ok(cuInit_fn(0), "cuInit") && ok(cuDeviceGet_fn(&dev, 0), "cuDeviceGet") &&
      ok(cuDevicePrimaryCtxRetain_fn(&ctx, dev), "cuDevicePrimaryCtxRetain") &&
      ok(cuCtxSetCurrent_fn(ctx), "cuCtxSetCurrent") &&
      ok(cuModuleLoadData_fn(&mod, kPtx), "cuModuleLoadData") &&
      ok(cuModuleGetFunction_fn(&fn, mod, kKernelName), "cuModuleGetFunction") &&
      ok(cuStreamCreate_fn(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate")) {
    r.status = "ok";
    // Batches of 100 launches and a sync, 10 ms apart: tens of thousands of kernels, not millions of rows.
    while (r.status == "ok" && mono_ns() < until_ns) {
      for (int i = 0; i < 100; ++i) {
        if (!ok(cuLaunchKernel_fn(fn, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr), "cuLaunchKernel"))
          break;
        ++r.launches;
      }
      if (r.status == "ok" && ok(cuStreamSynchronize_fn(stream), "cuStreamSynchronize")) ++r.syncs;
      timespec pause{0, 10000000};
      nanosleep(&pause, nullptr);
    }
  }
  if (stream) stream_destroy_fn(stream);
  if (mod) cuModuleUnload_fn(mod);
  if (ctx) {
    cuCtxSetCurrent_fn(nullptr);
    release_fn(dev);
  }
}
#endif

}  // namespace

int doctor_workload(double seconds, const std::string& report_path) {
  const int64_t until = mono_ns() + int64_t(seconds * 1e9);
  struct Burner {
    int64_t tid = 0;
    double cpu_s = 0;
  };
  Burner burners[2];
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([i, until, &burners] {
      pthread_setname_np(pthread_self(), kCpuThreadNames[i]);
      burners[i].tid = gettid();
      g_sink += doctor_burn_cpu(until);
      burners[i].cpu_s = thread_cpu_s();
    });
  CudaLoop cuda;
#ifdef STEPSCOPE_DOCTOR_CUDA
  if (void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))
    threads.emplace_back([h, until, &cuda] { cuda_loop(h, until, cuda); });
#else
  cuda.status = "skipped: built without CUPTI";
#endif
  g_sink += doctor_burn_cpu(until);
  const double main_cpu = thread_cpu_s();
  for (auto& t : threads) t.join();
  std::FILE* f = stdout;
  if (!report_path.empty()) {  // private, like the recordings beside it
    const int fd = open(report_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || !(f = fdopen(fd, "w"))) return 1;
  }
  std::fprintf(f, "pid %d\n", int(getpid()));
  std::fprintf(f, "thread %d %.6f main\n", int(getpid()), main_cpu);
  for (int i = 0; i < 2; ++i)
    std::fprintf(f, "thread %lld %.6f %s\n", (long long)burners[i].tid, burners[i].cpu_s, kCpuThreadNames[i]);
  std::fprintf(f, "cuda %lld %lld %lld %s\n", (long long)cuda.tid, (long long)cuda.launches,
               (long long)cuda.syncs, cuda.status.c_str());
  if (f != stdout) std::fclose(f);
  return 0;
}

int doctor(const DoctorOptions& o, std::FILE* out) {
  Printer p(out);
  // Recordings go to a private folder (they hold command lines), removed at the end unless --keep names one.
  std::string dir = o.keep_dir;
  std::error_code ec;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/stepscope-doctor-XXXXXX";
    if (!mkdtemp(templ.data()))
      throw store::StoreError(templ, std::string("cannot create: ") + std::strerror(errno));
    dir = templ;
  } else if (fs::create_directories(dir, ec)) {
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  } else if (ec) {
    throw store::StoreError(dir, "cannot create: " + ec.message());
  }
  dir = fs::absolute(dir).lexically_normal().string();
  struct RemoveTemp {  // on every way out, exceptions included
    std::string dir;
    ~RemoveTemp() {
      std::error_code ignored;
      if (!dir.empty()) fs::remove_all(dir, ignored);
    }
  } remove_temp{o.keep_dir.empty() ? dir : std::string()};

  struct sigaction stop {
  }, old[3];
  stop.sa_handler = on_stop;
  stop.sa_flags = SA_RESTART;
  sigemptyset(&stop.sa_mask);
  const int stop_signals[3] = {SIGINT, SIGTERM, SIGHUP};
  g_stop = 0;
  for (int i = 0; i < 3; ++i) sigaction(stop_signals[i], &stop, &old[i]);
  struct RestoreSignals {
    const int* signals;
    struct sigaction* old;
    ~RestoreSignals() {
      for (int i = 0; i < 3; ++i) sigaction(signals[i], &old[i], nullptr);
    }
  } restore_signals{stop_signals, old};

  bool records = false;
  try {
    p.section("stepscope doctor: what recording needs here");
    std::string lib;
    const bool collector_ok = check_collector(p, lib);
    check_python_helper(p);
    check_libunwind(p);
    const GpuState gpu = check_cuda(p);
    check_perf_events(p);
    check_ptrace(p);
    stop_if_asked();
    records = collector_ok;
    if (!o.no_python) {
      p.section("Python interpreters (each records a 0.5 s loop under the collector)");
      check_python(p, o, dir, collector_ok);
    }
    p.section(strf("self-test (a %g s recording of stepscope itself)", o.duration_s));
    if (!collector_ok)
      p.line(Verdict::Skip, "self-test", "not run", "needs the collector library (above)");
    else
      records = self_test(p, o, dir, gpu);
  } catch (const Interrupted&) {
    std::fprintf(out, "doctor: interrupted\n");
    return 128 + int(g_stop);
  }
  if (!o.keep_dir.empty()) std::fprintf(out, "recordings kept in %s\n", dir.c_str());
  if (p.parts().empty()) {
    std::fprintf(out, "doctor: recording works fully\n");
    return 0;
  }
  std::fprintf(out, "doctor: recording %s: %s\n", records ? "works partly" : "does not work",
               join(p.parts(), "; ").c_str());
  return 1;
}

}  // namespace stepscope::collector
