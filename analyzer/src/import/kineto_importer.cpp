#include "import/kineto_importer.h"

#include <simdjson.h>

#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "import/numbers.h"
#include "import/trace_finalize.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer::import {

using namespace stepscope::store;

namespace {

enum class Cat {
  Unknown,
  Kernel,
  Memcpy,
  Memset,
  Runtime,
  Driver,
  Sync,
  CpuOp,
  UserAnnotation,
  GpuAnnotation,
  Python,
  Nvtx,
  NvtxGpu,
  NsysCuda,  // nsys-converted Chrome trace: kernels, copies and memsets share "cuda"
  StepscopeStep,
  StepscopeDataWait,
  Drop,
  ForeignDevice,  // device events with no readable timeline (MTIA, XPU, ..., CUPTI range-profiler metrics): counted, said
};

Cat classify(std::string_view c) {
  switch (c.size()) {
    case 4:
      if (c == "cuda") return Cat::NsysCuda;
      if (c == "nvtx") return Cat::Nvtx;
      if (c == "osrt") return Cat::Drop;
      break;
    case 5:
      if (c == "Trace") return Cat::Drop;
      if (c == "sched") return Cat::Drop;
      break;
    case 6:
      if (c == "kernel" || c == "Kernel") return Cat::Kernel;
      if (c == "cpu_op") return Cat::CpuOp;
      if (c == "Memcpy") return Cat::Memcpy;
      if (c == "Memset") return Cat::Memset;
      break;
    case 7:
      if (c == "Runtime") return Cat::Runtime;
      break;
    case 8:
      if (c == "Operator") return Cat::CpuOp;
      if (c == "cuda_api") return Cat::Runtime;
      if (c == "overhead") return Cat::Drop;
      break;
    case 9:
      if (c == "cuda_sync") return Cat::Sync;
      break;
    case 10:
      if (c == "gpu_memcpy") return Cat::Memcpy;
      if (c == "gpu_memset") return Cat::Memset;
      if (c == "cuda_event") return Cat::Drop;
      break;
    case 11:
      if (c == "cuda_driver") return Cat::Driver;
      if (c == "nvtx-kernel") return Cat::NvtxGpu;
      break;
    case 12:
      if (c == "cuda_runtime") return Cat::Runtime;
      break;
    case 14:
      if (c == "stepscope_step") return Cat::StepscopeStep;
      break;
    case 15:
      if (c == "user_annotation") return Cat::UserAnnotation;
      if (c == "python_function") return Cat::Python;
      break;
    case 19:
      if (c == "gpu_user_annotation") return Cat::GpuAnnotation;
      // CUPTI range-profiler metrics: Kineto gives them no real times (CuptiRangeProfilerSession::addRangeEvents
      // splits the profiled span evenly, "the actual times do not really matter"), so they are not a timeline.
      if (c == "cuda_profiler_range") return Cat::ForeignDevice;
      if (c == "stepscope_data_wait") return Cat::StepscopeDataWait;
      break;
    default:
      break;
  }
  // Accelerators whose events stepscope does not model: their kernels and runtime calls must not pass for host
  // annotations, and the analysis must say they were there.
  for (std::string_view prefix : {"mtia", "xpu", "hpu", "npu", "tpu", "mlu", "ipu", "privateuse1"})
    if (c.substr(0, prefix.size()) == prefix) return Cat::ForeignDevice;
  return Cat::Unknown;
}

struct Args {
  int64_t device = -1, stream = INT64_MIN, correlation = 0, context = 0;
  int64_t registers = 0, shared_mem = 0, bytes = 0;
  int64_t start_ns = INT64_MIN, end_ns = INT64_MIN;
  int64_t raw_pid = INT64_MIN, raw_tid = INT64_MIN;
  int64_t graph_id = 0, index = INT64_MIN, return_code = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  bool has_grid = false;
  std::string_view sync_kind, kind, name, source, domain;
  void reset() { *this = Args{}; }
};

SyncType sync_type_of(std::string_view s) {
  if (s.find("Wait") != std::string_view::npos) return SyncType::StreamWaitEvent;
  if (s.find("Event") != std::string_view::npos) return SyncType::Event;
  if (s.find("Stream") != std::string_view::npos) return SyncType::Stream;
  if (s.find("Context") != std::string_view::npos || s.find("Device") != std::string_view::npos)
    return SyncType::Context;
  return SyncType::Unknown;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

namespace {
namespace impl {
namespace od = simdjson::ondemand;
#include "import/kineto_parser.inc"
}  // namespace impl
}  // namespace

Trace KinetoImporter::import(const char* json, size_t size) {
  return impl::Parser(file_, progress_).run(json, size);
}

}  // namespace stepscope::analyzer::import
