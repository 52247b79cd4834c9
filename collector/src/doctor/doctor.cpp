// `stepscope doctor` (docs/collector.md, "stepscope doctor"): what recording needs on this machine, one line
// per check, then a self-test recording of this very binary (the hidden `doctor --self-test-workload`) under
// the collector, read back from its store. Everything is looked at from outside the collector: the doctor
// never loads libstepscope_collector.so itself (its constructor would start recording in the doctor).
// The checks are one file each behind doctor_check.h; this file runs them in order.
#include "stepscope/collector/doctor.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "doctor/doctor_check.h"
#include "stepscope/store/store.h"

namespace fs = std::filesystem;

namespace stepscope::collector {

using namespace checkup;

int doctor(const DoctorOptions& o, std::FILE* out) {
  Printer p(out);
  // Recordings go to a private folder (they hold command lines), removed at the end unless --keep names one.
  std::string dir = o.keep_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // `kept/` names the folder `kept`
  std::error_code ec;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/stepscope-doctor-XXXXXX";
    if (!mkdtemp(templ.data()))
      throw store::StoreError(templ, std::string("cannot create: ") + std::strerror(errno));
    dir = templ;
  } else if (!fs::is_directory(dir, ec)) {
    store::require_output_folder(
        dir);  // its own folder only, 0700: a mistyped parent is refused, not created
    if (::mkdir(dir.c_str(), S_IRWXU) != 0 || ::chmod(dir.c_str(), S_IRWXU) != 0)
      throw store::StoreError(dir, std::string("cannot create: ") + std::strerror(errno));
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

  DoctorContext ctx{o, dir, false, GpuState{}, false};
  try {
    p.section("stepscope doctor: what recording needs here");
    for (const DoctorCheck* check : {&kCollectorLibraryCheck, &kPythonHelperCheck, &kLibunwindCheck,
                                     &kCudaCheck, &kPerfEventsCheck, &kPtraceCheck})
      check->run(p, ctx);
    stop_if_asked();
    ctx.records = ctx.collector_ok;
    if (!o.no_python) {
      p.section("Python interpreters (each records a 0.5 s loop under the collector)");
      kPythonInterpretersCheck.run(p, ctx);
    }
    p.section(strf("self-test (a %g s recording of stepscope itself)", o.duration_s));
    if (!ctx.collector_ok)
      p.line(Verdict::Skip, kSelfTestCheck.name, "not run", "needs the collector library (above)");
    else
      kSelfTestCheck.run(p, ctx);
  } catch (const Interrupted&) {
    std::fprintf(out, "doctor: interrupted\n");
    return 128 + int(g_stop);
  }
  if (!o.keep_dir.empty()) std::fprintf(out, "recordings kept in %s\n", dir.c_str());
  if (p.parts().empty()) {
    std::fprintf(out, "doctor: recording works fully\n");
    return 0;
  }
  std::fprintf(out, "doctor: recording %s: %s\n", ctx.records ? "works partly" : "does not work",
               join(p.parts(), "; ").c_str());
  return 1;
}

}  // namespace stepscope::collector
