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
  std::string where, dir;  // dir: what PYTHONPATH needs for `import stepscope` (none for a pip install)
  if (fs::is_regular_file(bin / "../share/stepscope/python/stepscope/__init__.py", ec)) {
    dir = fs::weakly_canonical(bin / "../share/stepscope/python", ec).string();
    where = "installed copy in " + dir;
  }
  // pip install: the package in <env>/lib/pythonX.Y/site-packages, stepscope in <env>/bin.
  for (const auto& e : fs::directory_iterator(bin / "../lib", ec)) {
    if (!where.empty()) break;
    const fs::path pkg = e.path() / "site-packages/stepscope/__init__.py";
    if (e.path().filename().string().rfind("python", 0) == 0 && fs::is_regular_file(pkg, ec))
      where = "installed in " + fs::weakly_canonical(pkg.parent_path().parent_path(), ec).string() + " (pip)";
  }
  if (where.empty() &&
      fs::is_regular_file(fs::path(STEPSCOPE_SOURCE_PYTHON_DIR) / "stepscope/__init__.py", ec)) {
    dir = STEPSCOPE_SOURCE_PYTHON_DIR;
    where = "source tree " + dir +
            " (this stepscope runs from its build tree; `cmake --install` puts it in PREFIX/share/stepscope/python)";
  }
  // A program that imports stepscope itself (stepscope.step(), the trainer callbacks) under `record --paused` or
  // outside stepscope gets nothing of stepscope's in its Python: say what it needs (it died on the import).
  const std::string hooks =
      "the hooks are compiled into the collector: record and attach need no PYTHONPATH" +
      (dir.empty() ? std::string()
                   : "; a program that imports stepscope under `record --paused` or outside stepscope needs "
                     "PYTHONPATH=" + dir) +
      " (docs/python.md)";
  if (where.empty()) {
    p.line(Verdict::Warn, "Python helper",
           "`import stepscope` is not installed beside this stepscope; " + hooks,
           "only programs that import stepscope outside stepscope or under `record --paused` need it: pip install "
           ". or cmake --install");
    return;
  }
  p.line(Verdict::Ok, "Python helper", where + "; " + hooks);
}

}  // namespace

const DoctorCheck kPythonHelperCheck = {"Python helper",
                                        [](Printer& p, DoctorContext&) { check_python_helper(p); }};

}  // namespace stepscope::collector::checkup
