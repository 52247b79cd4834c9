// `stepscope doctor`: what works here (driver, CUPTI, perf events, ptrace, Python hooks) and a self-test
// recording; the logic is in collector/src/launcher/doctor.cpp.
#include <memory>

#include "command.h"

#ifdef HAVE_STEPSCOPE_DOCTOR
#include "stepscope/collector/doctor.h"
#endif

namespace stepscope::cli {
namespace {

CommandRegistration doctor_command(80, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "doctor",
      "What works here: CUDA driver, CUPTI, perf events, ptrace, Python hooks, and a self-test recording");
#ifdef HAVE_STEPSCOPE_DOCTOR
  auto o = std::make_shared<collector::DoctorOptions>();
  cmd->add_option("--duration", o->duration_s, "Length of the self-test recording in seconds")
      ->capture_default_str()
      ->check(CLI::Range(0.5, 60.0));
  auto* python = cmd->add_option("--python", o->pythons, "Also check this Python interpreter (repeatable)")
                     ->check(CLI::ExistingFile);
  cmd->add_flag("--no-python", o->no_python, "Check no Python interpreter")->excludes(python);
  cmd->add_option("--keep", o->keep_dir, "Keep the recordings in DIR (default: a temporary folder, removed)");
  // The self-test records this binary running the workload; hidden from --help (group "").
  auto workload_s = std::make_shared<double>(0);
  auto report = std::make_shared<std::string>();
  cmd->add_option("--self-test-workload", *workload_s, "seconds of the self-test workload")
      ->group("")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--self-test-report", *report, "where the workload writes what it did")->group("");
  cmd->callback([o, workload_s, report, &exit_code]() {
    exit_code = *workload_s > 0 ? collector::doctor_workload(*workload_s, *report) : collector::doctor(*o);
  });
#else
  refuse_without_collector(cmd, exit_code);
#endif
});

}  // namespace
}  // namespace stepscope::cli
