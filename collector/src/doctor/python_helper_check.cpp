#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include "doctor/doctor_check.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace stepscope::collector::checkup {
namespace {

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

}  // namespace

const DoctorCheck kPythonHelperCheck = {"Python helper",
                                        [](Printer& p, DoctorContext&) { check_python_helper(p); }};

}  // namespace stepscope::collector::checkup
