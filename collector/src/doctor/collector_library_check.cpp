#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "stepscope/collector/launcher.h"

namespace fs = std::filesystem;

namespace stepscope::collector::checkup {
namespace {

// The collector library exists and its dependencies resolve. The loader lists them the way ldd does
// (LD_TRACE_LOADED_OBJECTS): it maps them and stops before any constructor runs.
bool check_collector_library(Printer& p) {
  const std::string lib = collector_library_path();
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

}  // namespace

const DoctorCheck kCollectorLibraryCheck = {"collector library", [](Printer& p, DoctorContext& ctx) {
                                              ctx.collector_ok = check_collector_library(p);
                                            }};

}  // namespace stepscope::collector::checkup
