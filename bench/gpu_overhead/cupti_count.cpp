// The floor any CUPTI-based tracer pays: a CUDA injection library (CUDA_INJECTION64_PATH) that enables the
// activity kinds stepscope's collector enables (collector/src/gpu/cupti_recorder.cpp: keep the two lists equal),
// with the same buffer size and flush period, and only counts and drops the records. No timestamp callback,
// no decoding, no store. At exit it prints one line on stderr that bench/gpu_overhead reads:
//   cupti_count: records R kernels K dropped D not_enabled LIST
#include <cupti.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

constexpr size_t kBufferBytes = 4 << 20;  // as the collector (and Kineto)
constexpr uint32_t kFlushPeriodMs = 500;  // as the collector

std::atomic<uint64_t> records{0}, kernels{0}, dropped{0};
std::string not_enabled;  // written once in InitializeInjection, read at exit

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid_size) {
  uint64_t n = 0, k = 0;
  CUpti_Activity* record = nullptr;
  while (buffer && valid_size > 0 &&
         cuptiActivityGetNextRecord(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    ++n;
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL)
      ++k;
  }
  records += n;
  kernels += k;
  size_t lost = 0;
  if (cuptiActivityGetNumDroppedRecords(ctx, stream, &lost) == CUPTI_SUCCESS) dropped += lost;
  std::free(buffer);
}

void report_at_exit() {
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::fprintf(
      stderr, "cupti_count: records %llu kernels %llu dropped %llu not_enabled %s\n",
      static_cast<unsigned long long>(records.load()), static_cast<unsigned long long>(kernels.load()),
      static_cast<unsigned long long>(dropped.load()), not_enabled.empty() ? "-" : not_enabled.c_str());
}

}  // namespace

// Called by the CUDA driver at cuInit when CUDA_INJECTION64_PATH names this library.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    std::fprintf(stderr, "cupti_count: cuptiActivityRegisterCallbacks failed: recording nothing\n");
    return 1;
  }
  const CUpti_ActivityKind kinds[] = {
      CUPTI_ACTIVITY_KIND_DEVICE,          CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
      CUPTI_ACTIVITY_KIND_MEMCPY,          CUPTI_ACTIVITY_KIND_MEMSET,
      CUPTI_ACTIVITY_KIND_RUNTIME,         CUPTI_ACTIVITY_KIND_DRIVER,
      CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_MARKER,
      CUPTI_ACTIVITY_KIND_GRAPH_TRACE,     CUPTI_ACTIVITY_KIND_OVERHEAD};
  for (auto kind : kinds)
    if (cuptiActivityEnable(kind) != CUPTI_SUCCESS)
      not_enabled += (not_enabled.empty() ? "" : ",") + std::to_string(static_cast<int>(kind));
  cuptiActivityFlushPeriod(kFlushPeriodMs);
  std::atexit(report_at_exit);
  return 1;
}
