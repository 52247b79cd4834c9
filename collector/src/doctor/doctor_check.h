// The checks of `stepscope doctor` (docs/collector.md, "stepscope doctor"), one file each: a check has a name
// and a run that prints its lines through the Printer (verdict, detail, advice; a FAIL names the part of
// recording that does not work) and leaves what later checks need in the context. doctor.cpp runs them in
// order: the environment, the Python interpreters, the self-test recording.
#pragma once

#include <string>

#include "doctor/doctor_support.h"
#include "stepscope/collector/doctor.h"

namespace stepscope::collector::checkup {

struct GpuState {
  // A driver, a device, CUPTI loaded and subscribing: the self-test exercises the GPU path.
  bool usable = false;
  std::string why_not;  // for the self-test's skip line
};

struct DoctorContext {
  const DoctorOptions& options;
  std::string dir;            // where recordings go (private; removed unless --keep)
  bool collector_ok = false;  // the collector library exists and loads: recordings can run
  GpuState gpu;               // from the CUDA check, for the self-test
  bool records = false;       // something records at all (the final line's "works partly")
};

struct DoctorCheck {
  const char* name;
  void (*run)(Printer& p, DoctorContext& ctx);
};

extern const DoctorCheck kCollectorLibraryCheck;  // collector_library_check.cpp
extern const DoctorCheck kPythonHelperCheck;      // python_helper_check.cpp
extern const DoctorCheck kLibunwindCheck;         // libunwind_check.cpp
extern const DoctorCheck kCudaCheck;              // cuda_check.cpp: driver, runtime, CUPTI
extern const DoctorCheck kPerfEventsCheck;        // perf_events_check.cpp
extern const DoctorCheck kPtraceCheck;            // ptrace_check.cpp
extern const DoctorCheck
    kPythonInterpretersCheck;             // python_interpreters_check.cpp: each records a 0.5 s loop
extern const DoctorCheck kSelfTestCheck;  // self_test_check.cpp: a recording of the workload below

// The self-test's workload (self_test_workload.cpp), run as `stepscope doctor --self-test-workload S`.
inline constexpr const char* kCpuThreadNames[] = {"ss-doctor-cpu0", "ss-doctor-cpu1"};

}  // namespace stepscope::collector::checkup
