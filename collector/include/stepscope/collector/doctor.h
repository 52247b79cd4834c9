// `stepscope doctor`: what recording needs on this machine (collector, CUDA driver and CUPTI, perf events,
// ptrace, Python interpreters), then a short self-test recording that checks the data really arrives.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace stepscope::collector {

struct DoctorOptions {
  double duration_s = 3;             // length of the self-test recording
  std::vector<std::string> pythons;  // --python: interpreters checked before those found on PATH
  bool no_python = false;            // --no-python: no interpreter is checked
  std::string keep_dir;  // --keep: the recordings go here and stay; else a private temp dir, removed
};

// Prints one line per check to `out` and a final verdict line. Returns 0 when recording works fully (CPU
// sampling, the Python hooks in every interpreter checked, the CUDA path verified by the self-test), 1 when
// only partly or not at all (the last line names the parts that do not work).
int doctor(const DoctorOptions& options, std::FILE* out = stdout);

// The self-test's workload, run by `stepscope doctor --self-test-workload S` under the collector: the main
// thread and two named threads (ss-doctor-cpu0/1) burn CPU for `seconds`; where libcuda.so.1 loads and
// cuInit succeeds, a thread ss-doctor-cuda launches an empty kernel in a loop through the driver API. Writes
// what it did (pid, each thread's tid, name and CPU time, the launches) to `report_path`. Returns 0.
int doctor_workload(double seconds, const std::string& report_path);

}  // namespace stepscope::collector
