#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <dlfcn.h>
#include <libunwind.h>

#include <vector>

namespace stepscope::collector::checkup {
namespace {

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

}  // namespace

const DoctorCheck kLibunwindCheck = {"libunwind", [](Printer& p, DoctorContext&) { check_libunwind(p); }};

}  // namespace stepscope::collector::checkup
