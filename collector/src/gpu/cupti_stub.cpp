// Built when stepscope is configured without CUDA: no CUPTI, CPU data only.
#include "core/collector_internal.h"

namespace stepscope::collector::cupti {
void start_if_possible(const char*) {
  if (running() && !config().no_gpu) set_process_meta("cupti.status", "built without CUDA: recording CPU data only");
}
void flush(bool) {}
void stop() {}
void after_fork_child() {}
void on_step(const char*, int32_t) {}
void arm_window(int) {}
void take_switches(std::vector<std::pair<int64_t, int64_t>>&) {}
void calibrate_if_due() {}
void detach_if_due() {}
bool lend_to(const char*) {
  return false;
}
void take_back() {}
}  // namespace stepscope::collector::cupti
