// Real CUPTI activity records (the structs of CUDA 13's cupti_activity.h), laid out in a buffer as CUPTI does
// and walked by libcupti's own cuptiActivityGetNextRecord through decode_activity_buffer() — the function the
// collector's buffer-completed callback calls. The rows are written to a real store and read back.
#include <cupti.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "activity_buffer.h"
#include "gpu/cupti_api_classes.h"
#include "gpu/cupti_decode.h"
#include "gpu/gpu_window.h"
#include "stepscope/store/store.h"
#include "test_support.h"

using namespace stepscope;
using test::ActivityBuffer;

namespace {

// The decoded rows written to a real store and read back.
store::Trace through_store(const store::Trace& rows, const std::string& name) {
  test::ScratchDir dir(name);
  const std::string db = dir.file("cupti.db");
  {
    store::StoreWriter w(db);
    w.append(rows);
    w.close();
  }
  return store::StoreReader(db).load();
}

}  // namespace

TEST_CASE("CUPTI records decode into the exact store rows") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());

  ActivityBuffer b;
  auto& k = b.add<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 1000;
  k.end = 3500;
  k.deviceId = 0;
  k.contextId = 1;
  k.streamId = 7;
  k.gridX = 128, k.gridY = 2, k.gridZ = 1;
  k.blockX = 256, k.blockY = 1, k.blockZ = 1;
  k.registersPerThread = 32;
  k.staticSharedMemory = 1024;
  k.dynamicSharedMemory = 2048;
  k.correlationId = 42;
  k.graphId = 0;
  k.name = "_Z6vecAddPfS_S_i";

  auto& m = b.add<CUpti_ActivityMemcpy6>();
  m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
  m.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
  m.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  m.bytes = 1 << 20;
  m.start = 500;
  m.end = 900;
  m.deviceId = 0;
  m.streamId = 7;
  m.correlationId = 41;

  auto& s = b.add<CUpti_ActivityMemset4>();
  s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  s.bytes = 4096;
  s.start = 950;
  s.end = 990;
  s.streamId = 7;
  s.correlationId = 40;
  s.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;

  auto& rt = b.add<CUpti_ActivityAPI>();
  rt.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  rt.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
  rt.start = 800;
  rt.end = 840;
  rt.processId = 1234;
  rt.threadId = 1235;
  rt.correlationId = 42;
  rt.returnValue = 0;

  auto& drv = b.add<CUpti_ActivityAPI>();
  drv.kind = CUPTI_ACTIVITY_KIND_DRIVER;
  drv.cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel;
  drv.start = 810;
  drv.end = 830;
  drv.processId = 1234;
  drv.threadId = 1235;
  drv.correlationId = 43;

  auto& sy = b.add<CUpti_ActivitySynchronization2>();
  sy.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sy.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
  sy.start = 3600;
  sy.end = 5000;
  sy.correlationId = 42;
  sy.contextId = 1;
  sy.streamId = 7;

  auto& mk1 = b.add<CUpti_ActivityMarker2>();
  mk1.kind = CUPTI_ACTIVITY_KIND_MARKER;
  mk1.flags = CUPTI_ACTIVITY_FLAG_MARKER_START;
  mk1.timestamp = 700;
  mk1.id = 9;
  mk1.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  mk1.objectId.pt.processId = 1234;
  mk1.objectId.pt.threadId = 1235;
  mk1.name = "forward";
  mk1.domain = "trainer";
  auto& mk2 = b.add<CUpti_ActivityMarker2>();
  mk2.kind = CUPTI_ACTIVITY_KIND_MARKER;
  mk2.flags = CUPTI_ACTIVITY_FLAG_MARKER_END;
  mk2.timestamp = 5100;
  mk2.id = 9;
  mk2.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;

  collector::cupti::DecodeState st;
  st.pid = 1234;
  store::Trace rows;
  size_t n = collector::cupti::decode_activity_buffer(b.bytes.data(), b.used, rows, st);
  REQUIRE(n == 8);

  store::Trace t = through_store(rows, "collector_cupti");

  REQUIRE(t.kernels.size() == 1);
  const auto& kr = t.kernels[0];
  CHECK(kr.start == 1000);
  CHECK(kr.end == 3500);
  CHECK(kr.stream == 7);
  CHECK(kr.context == 1);
  CHECK(kr.correlation == 42);
  CHECK(kr.grid_x == 128);
  CHECK(kr.grid_y == 2);
  CHECK(kr.block_x == 256);
  CHECK(kr.registers == 32);
  CHECK(kr.shared_memory == 3072);
  CHECK(kr.pid == 1234);
  CHECK(t.str(kr.name) == "_Z6vecAddPfS_S_i");

  REQUIRE(t.memcpys.size() == 1);
  CHECK(t.memcpys[0].start == 500);
  CHECK(t.memcpys[0].end == 900);
  CHECK(t.memcpys[0].bytes == (1 << 20));
  CHECK(t.memcpys[0].kind == store::CopyKind::HtoD);
  CHECK(t.memcpys[0].src_kind == store::MemoryKind::Pageable);
  CHECK(t.memcpys[0].dst_kind == store::MemoryKind::Device);
  CHECK(t.memcpys[0].correlation == 41);

  REQUIRE(t.memsets.size() == 1);
  CHECK(t.memsets[0].bytes == 4096);
  CHECK(t.memsets[0].mem_kind == store::MemoryKind::Device);
  CHECK(t.memsets[0].correlation == 40);

  REQUIRE(t.api_calls.size() == 2);
  const auto& a0 = t.api_calls[0].kind == store::ApiKind::Runtime ? t.api_calls[0] : t.api_calls[1];
  const auto& a1 = t.api_calls[0].kind == store::ApiKind::Runtime ? t.api_calls[1] : t.api_calls[0];
  CHECK(t.str(a0.name) == "cudaLaunchKernel");
  CHECK(a0.correlation == 42);
  CHECK(a0.pid == 1234);
  CHECK(a0.tid == 1235);
  CHECK(a0.start == 800);
  CHECK(a0.end == 840);
  CHECK(a1.kind == store::ApiKind::Driver);
  CHECK(t.str(a1.name) == "cuLaunchKernel");

  REQUIRE(t.syncs.size() == 1);
  CHECK(t.syncs[0].type == store::SyncType::Stream);
  CHECK(t.syncs[0].stream == 7);
  CHECK(t.syncs[0].tid == 1235);  // from the API call with the same correlation id
  CHECK(t.syncs[0].start == 3600);
  CHECK(t.syncs[0].end == 5000);

  REQUIRE(t.ranges.size() == 1);
  CHECK(t.str(t.ranges[0].name) == "forward");
  CHECK(t.str(t.ranges[0].domain) == "trainer");
  CHECK(t.ranges[0].start == 700);
  CHECK(t.ranges[0].end == 5100);
  CHECK(t.ranges[0].tid == 1235);
  CHECK(t.ranges[0].source == store::RangeSource::Nvtx);
}

TEST_CASE("a clock offset from the fallback calibration shifts every timestamp") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  ActivityBuffer b;
  auto& k = b.add<CUpti_ActivityKernel10>();
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.start = 100;
  k.end = 200;
  k.name = "k";
  collector::cupti::DecodeState st;
  st.clock_offset = -50;
  store::Trace rows;
  REQUIRE(collector::cupti::decode_activity_buffer(b.bytes.data(), b.used, rows, st) == 1);
  CHECK(rows.kernels[0].start == 50);
  CHECK(rows.kernels[0].end == 150);
}

TEST_CASE("system thread ids: a sync before its API call in the buffer gets the calling OS thread") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  // With cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM) CUPTI writes gettid() values: use this
  // process's real pid and thread, the ids samples carry.
  const uint32_t pid = uint32_t(getpid()), tid = uint32_t(syscall(SYS_gettid));
  ActivityBuffer b;
  auto& sy = b.add<CUpti_ActivitySynchronization2>();  // CUPTI may emit it first: the call ends after the wait
  sy.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
  sy.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
  sy.start = 2000;
  sy.end = 9000;
  sy.correlationId = 77;
  sy.streamId = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
  auto& rt = b.add<CUpti_ActivityAPI>();
  rt.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
  rt.cbid = CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020;
  rt.start = 1990;
  rt.end = 9010;
  rt.processId = pid;
  rt.threadId = tid;
  rt.correlationId = 77;
  auto& mk = b.add<CUpti_ActivityMarker2>();
  mk.kind = CUPTI_ACTIVITY_KIND_MARKER;
  mk.flags = CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS;
  mk.timestamp = 1500;
  mk.id = 3;
  mk.objectKind = CUPTI_ACTIVITY_OBJECT_THREAD;
  mk.objectId.pt.processId = pid;
  mk.objectId.pt.threadId = tid;
  mk.name = "mark";

  collector::cupti::DecodeState st;
  st.pid = pid;
  store::Trace t;
  REQUIRE(collector::cupti::decode_activity_buffer(b.bytes.data(), b.used, t, st) == 3);
  REQUIRE(t.api_calls.size() == 1);
  CHECK(t.api_calls[0].pid == pid);
  CHECK(t.api_calls[0].tid == tid);
  CHECK(t.str(t.api_calls[0].name) == "cudaDeviceSynchronize");
  REQUIRE(t.syncs.size() == 1);
  CHECK(t.syncs[0].pid == pid);
  CHECK(t.syncs[0].tid == tid);  // resolved after the walk, from the API record that followed it
  CHECK(t.syncs[0].stream == -1);
  REQUIRE(t.ranges.size() == 1);
  CHECK(t.ranges[0].tid == tid);
}

TEST_CASE("a sync whose API record comes in a later buffer waits for it, one that never gets it is counted") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  auto sync = [](ActivityBuffer& b, uint32_t correlation) {
    auto& s = b.add<CUpti_ActivitySynchronization2>();
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    s.correlationId = correlation;
    s.start = 100;
    s.end = 200;
  };
  auto api = [](ActivityBuffer& b, uint32_t tid, uint32_t correlation) {
    auto& a = b.add<CUpti_ActivityAPI>();
    a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    a.cbid = CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize;
    a.threadId = tid;
    a.correlationId = correlation;
  };
  collector::cupti::DecodeState st;
  st.skip_tid = 555;  // the calibration's thread
  store::Trace t;
  ActivityBuffer b1;
  sync(b1, 41);  // the program's: its API record is in the next buffer
  sync(b1, 42);  // the calibration's (an attach window opened by it): dropped once its API record shows that
  sync(b1, 43);  // its API call was before the window: never resolved
  collector::cupti::decode_activity_buffer(b1.bytes.data(), b1.used, t, st);
  CHECK(t.syncs.empty());  // nothing written with thread 0
  CHECK(st.held_syncs.size() == 3);
  ActivityBuffer b2;
  api(b2, 777, 41);
  api(b2, 555, 42);
  collector::cupti::decode_activity_buffer(b2.bytes.data(), b2.used, t, st);
  REQUIRE(t.syncs.size() == 1);
  CHECK(t.syncs[0].correlation == 41);
  CHECK(t.syncs[0].tid == 777);
  REQUIRE(st.held_syncs.size() == 1);
  for (int i = 0; i < 9; ++i) {
    ActivityBuffer empty;
    api(empty, 778, 1000 + i);
    collector::cupti::decode_activity_buffer(empty.bytes.data(), empty.used, t, st);
  }
  CHECK(st.held_syncs.empty());
  CHECK(st.syncs_without_thread == 1);
  CHECK(t.syncs.size() == 1);
}

TEST_CASE(
    "after a re-attach CUPTI's ids start again, and the store's correlation ids stay unique per process") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  // One launch per attach, both with CUPTI's correlation id 2 (its count restarts after cuptiFinalize), and a
  // sync whose API record comes after it. The H100 proof of 2026-11-27 found windows 3-6 of launch_bound
  // without a single launch joined to its kernel: they joined window 2's launches of the same ids.
  auto attach_rows = [](uint32_t start, uint32_t tid) {
    ActivityBuffer b;
    auto& k = b.add<CUpti_ActivityKernel10>();
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.start = start + 10;
    k.end = start + 20;
    k.correlationId = 2;
    k.name = "step_kernel";
    auto& sy = b.add<CUpti_ActivitySynchronization2>();
    sy.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    sy.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    sy.start = start + 21;
    sy.end = start + 30;
    sy.correlationId = 3;
    auto launch = [&b, start, tid](uint32_t correlation, CUpti_CallbackId cbid) {
      auto& a = b.add<CUpti_ActivityAPI>();
      a.kind = CUPTI_ACTIVITY_KIND_RUNTIME;
      a.cbid = cbid;
      a.start = start + correlation;
      a.end = start + correlation + 5;
      a.processId = 1234;
      a.threadId = tid;
      a.correlationId = correlation;
    };
    launch(2, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    launch(3, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020);
    return b;
  };
  collector::cupti::DecodeState st;
  st.pid = 1234;
  store::Trace rows;
  ActivityBuffer first = attach_rows(1000, 11);
  REQUIRE(collector::cupti::decode_activity_buffer(first.bytes.data(), first.used, rows, st) == 4);
  // What the recorder does at a re-attach (attach_again_locked): the per-attach maps go, the base moves on.
  st.correlation_tid.clear();
  st.give_up_held_syncs();
  st.correlation_base += int64_t(1) << 32;
  ActivityBuffer second = attach_rows(9000, 12);
  REQUIRE(collector::cupti::decode_activity_buffer(second.bytes.data(), second.used, rows, st) == 4);

  store::Trace t = through_store(rows, "collector_cupti_reattach");
  REQUIRE(t.kernels.size() == 2);
  REQUIRE(t.api_calls.size() == 4);
  REQUIRE(t.syncs.size() == 2);
  const int64_t second_base = int64_t(1) << 32;
  CHECK(t.kernels[0].correlation == 2);
  CHECK(t.kernels[1].correlation == second_base + 2);
  // Each kernel joins exactly its own attach's launch (docs/schema.md: kernels.correlation =
  // api_calls.correlation).
  for (const auto& k : t.kernels) {
    std::vector<const store::ApiCall*> launches;
    for (const auto& a : t.api_calls)
      if (a.correlation == k.correlation) launches.push_back(&a);
    REQUIRE(launches.size() == 1);
    CHECK(t.str(launches[0]->name) == "cudaLaunchKernel");
    CHECK(launches[0]->start + 8 == k.start);  // 2 before the kernel's start + 10
  }
  // The syncs got their own attach's thread, by the low half of the id.
  CHECK(t.syncs[0].correlation == 3);
  CHECK(t.syncs[0].tid == 11);
  CHECK(t.syncs[1].correlation == second_base + 3);
  CHECK(t.syncs[1].tid == 12);
  CHECK(st.syncs_without_thread == 0);
}

TEST_CASE("the collector's calibration kernels and its thread's API records are dropped") {
  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  ActivityBuffer b;
  auto& k1 = b.add<CUpti_ActivityKernel10>();
  k1.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k1.name = "stepscope_calibration_empty";
  k1.start = 10, k1.end = 11;
  auto& k2 = b.add<CUpti_ActivityKernel10>();
  k2.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k2.name = "user_kernel";
  k2.start = 20, k2.end = 21;
  auto driver_api = [&b](CUpti_CallbackId cbid, uint32_t tid, uint32_t correlation) {
    auto& a = b.add<CUpti_ActivityAPI>();
    a.kind = CUPTI_ACTIVITY_KIND_DRIVER;
    a.cbid = cbid;
    a.threadId = tid;
    a.correlationId = correlation;
  };
  auto stream_sync = [&b](uint32_t correlation) {
    auto& s = b.add<CUpti_ActivitySynchronization2>();
    s.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    s.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE;
    s.correlationId = correlation;
  };
  driver_api(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 555, 0);  // the collector thread
  driver_api(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 556, 0);
  // The calibration's cuStreamSynchronize: one sync before its API record in the buffer, one after; the
  // program's own sync stays.
  stream_sync(900);
  driver_api(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, 555, 900);
  driver_api(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, 555, 901);
  stream_sync(901);
  driver_api(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, 556, 902);
  stream_sync(902);
  collector::cupti::DecodeState st;
  st.skip_kernel = "stepscope_calibration_empty";
  st.skip_tid = 555;
  store::Trace t;
  collector::cupti::decode_activity_buffer(b.bytes.data(), b.used, t, st);
  REQUIRE(t.kernels.size() == 1);
  CHECK(t.str(t.kernels[0].name) == "user_kernel");
  REQUIRE(t.api_calls.size() == 2);
  CHECK(t.api_calls[0].tid == 556);
  CHECK(t.api_calls[1].tid == 556);
  REQUIRE(t.syncs.size() == 1);
  CHECK(t.syncs[0].correlation == 902);
  CHECK(t.syncs[0].tid == 556);
}

TEST_CASE("lean API tracing: the callback ids recorded by default, from the real CUPTI names") {
  using collector::cupti::ApiClass;
  using collector::cupti::classify_api;
  using store::ApiKind;
  // Names as CUPTI gives them, with version and per-thread-stream suffixes.
  CHECK(classify_api(ApiKind::Runtime, "cudaLaunchKernel_v7000").cls == ApiClass::Launch);
  CHECK(classify_api(ApiKind::Runtime, "cudaGraphLaunch_ptsz_v10000").cls == ApiClass::Launch);
  CHECK(classify_api(ApiKind::Driver, "cuLaunchKernelEx").cls == ApiClass::Launch);
  CHECK(classify_api(ApiKind::Driver, "cuGraphLaunch_ptsz").cls == ApiClass::Launch);
  auto copy = classify_api(ApiKind::Runtime, "cudaMemcpy_v3020");
  CHECK((copy.cls == ApiClass::Copy && copy.blocking));
  auto async = classify_api(ApiKind::Runtime, "cudaMemcpyAsync_ptsz_v7000");
  CHECK((async.cls == ApiClass::Copy && !async.blocking));
  auto dsync = classify_api(ApiKind::Runtime, "cudaDeviceSynchronize_v3020");
  CHECK((dsync.cls == ApiClass::Sync && dsync.blocking));
  auto wait = classify_api(ApiKind::Runtime, "cudaStreamWaitEvent_v3020");
  CHECK((wait.cls == ApiClass::Sync && !wait.blocking));
  CHECK(classify_api(ApiKind::Driver, "cuStreamSynchronize").blocking);
  CHECK(classify_api(ApiKind::Runtime, "cudaEventQuery_v3020").cls == ApiClass::Query);
  CHECK(classify_api(ApiKind::Runtime, "cudaHostAlloc_v3020").cls == ApiClass::PinnedAlloc);
  CHECK(classify_api(ApiKind::Driver, "cuMemHostAlloc").cls == ApiClass::PinnedAlloc);
  CHECK(classify_api(ApiKind::Driver, "cuMemsetD8Async").cls == ApiClass::Memset);
  CHECK(classify_api(ApiKind::Runtime, "cudaGetDevice_v3020").cls == ApiClass::Other);
  CHECK(classify_api(ApiKind::Runtime, "cudaGetLastError_v3020").cls == ApiClass::Other);
  CHECK(classify_api(ApiKind::Driver, "cuCtxGetCurrent").cls == ApiClass::Other);
  CHECK(classify_api(ApiKind::Driver, "cuMemAlloc_v2").cls == ApiClass::Other);

  std::string err;
  if (!collector::cupti::load_library(&err)) STEPSCOPE_SKIP(err.c_str());
  auto has = [](const std::vector<uint32_t>& ids, uint32_t id) {
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  };
  const auto rt = collector::cupti::lean_callback_ids(ApiKind::Runtime, false);
  const auto drv = collector::cupti::lean_callback_ids(ApiKind::Driver, false);
  const auto rt_block = collector::cupti::lean_callback_ids(ApiKind::Runtime, true);
  const auto drv_block = collector::cupti::lean_callback_ids(ApiKind::Driver, true);
  CHECK(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
  CHECK(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000));
  CHECK(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020));
  CHECK(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000));
  CHECK(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020));
  CHECK_FALSE(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020));
  CHECK_FALSE(has(rt, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020));
  CHECK(has(drv, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel));
  CHECK(has(drv, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx));
  CHECK(has(drv, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch));
  CHECK_FALSE(has(drv, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent));
  CHECK(has(rt_block, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020));
  CHECK(has(rt_block, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020));
  CHECK_FALSE(has(rt_block, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020));
  CHECK_FALSE(has(rt_block, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000));
  CHECK(has(drv_block, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize));
  // A small fraction of the ~520 runtime and ~800 driver entry points.
  INFO("lean: " << rt.size() << " runtime, " << drv.size() << " driver; blocking: " << rt_block.size() << " + "
                << drv_block.size());
  CHECK(rt.size() < 120);
  CHECK(drv.size() < 160);
  CHECK(rt.size() > 30);
}

TEST_CASE(
    "GPU windows: the off phase lasts long enough that tracing's measured cost stays within the budget") {
  using collector::cupti::kGpuCostBudget;
  using collector::cupti::kMaxBudgetOffNs;
  using collector::cupti::kMinDetachGraceNs;
  using collector::cupti::WindowSchedule;
  using collector::cupti::WindowSwitch;
  // Steps whose time depends on the phase, as on the H100: traced, with CUPTI attached in the grace after a
  // window, and detached. Runs until the next switch and returns it (and the time of the last Off).
  struct Program {
    int64_t traced, grace, detached, t = 0, off_at = 0;
    int64_t stall_at_step = -1, stall_ns = 0, steps = 0;
    int64_t reattach_ns = 0;  // added to the first traced step after an On (the re-attach runs in it)
    bool after_on = false;
    WindowSwitch until_switch(WindowSchedule& w) {
      for (;;) {
        const bool in_grace = !w.tracing() && t - off_at < kMinDetachGraceNs;
        t += w.tracing() ? traced : in_grace ? grace : detached;
        if (std::exchange(after_on, false)) t += reattach_ns;
        if (steps++ == stall_at_step) t += stall_ns;
        const auto s = w.at_step(t);
        if (s == WindowSwitch::Off) off_at = t;
        if (s == WindowSwitch::On) after_on = true;
        if (s != WindowSwitch::None) return s;
      }
    }
  };
  const int64_t us = 1000;
  {
    // launch_bound's shape: 226 µs traced, 190 µs attached but off, 140 µs detached; a 25 ms detach + attach.
    WindowSchedule w(20, 200);
    Program p{226 * us, 190 * us, 140 * us};
    REQUIRE(p.until_switch(w) == WindowSwitch::Off);  // the first window: nothing measured off yet
    CHECK(w.budget_off_ns() == 0);
    CHECK(w.min_off_ns() == 2 * kMinDetachGraceNs);
    REQUIRE(p.until_switch(w) == WindowSwitch::On);
    w.set_switch_cost(25000 * us);
    REQUIRE(p.until_switch(w) == WindowSwitch::Off);
    // 20 traced steps × 86 µs + 527 grace steps (100 ms at 190 µs) × 50 µs + 25 ms, over the budget, less the
    // window's own 4.52 ms.
    const double cost_us = 20 * 86 + 527 * 50 + 25000;
    CHECK(double(w.budget_off_ns()) == Approx((cost_us / kGpuCostBudget - 20 * 226) * us).epsilon(0.001));
    CHECK(w.min_off_ns() == w.budget_off_ns());  // longer than 100 × the switch (2.5 s) and than M−N steps
    CHECK(w.traced_step_ns() == 226 * us);       // the paces it came from (meta gpu.window_budget)
    CHECK(w.grace_step_ns() == 190 * us);
    CHECK(w.detached_step_ns() == 140 * us);
    const int64_t off_from = p.t;
    REQUIRE(p.until_switch(w) == WindowSwitch::On);
    CHECK(p.t - off_from >= w.min_off_ns());
    // The traced share of wall time, and the cost over the whole cycle, at most the budget.
    const double cycle_us = double(p.t - off_from) / us + 20 * 226;
    CHECK(cost_us / cycle_us <= kGpuCostBudget + 1e-4);
  }
  {
    // The same with a 5 s checkpoint among the detached steps: the median pace ignores it.
    WindowSchedule w(20, 200);
    Program p{226 * us, 190 * us, 140 * us};
    p.stall_at_step = 1000;
    p.stall_ns = 5000000 * us;
    p.until_switch(w);
    p.until_switch(w);
    w.set_switch_cost(25000 * us);
    REQUIRE(p.until_switch(w) == WindowSwitch::Off);
    const double cost_us = 20 * 86 + 527 * 50 + 25000;
    CHECK(double(w.budget_off_ns()) == Approx((cost_us / kGpuCostBudget - 20 * 226) * us).epsilon(0.001));
  }
  {
    // Two traced steps a window, the first of them holding the 25 ms re-attach (also in the switch cost): the
    // traced pace is the second's, not the median of the two.
    WindowSchedule w(2, 200);
    Program p{226 * us, 190 * us, 140 * us};
    p.reattach_ns = 25000 * us;
    p.until_switch(w);
    p.until_switch(w);
    w.set_switch_cost(25000 * us);
    REQUIRE(p.until_switch(w) == WindowSwitch::Off);
    CHECK(w.traced_step_ns() == 226 * us);
    const double cost_us = 2 * 86 + 527 * 50 + 25000;
    CHECK(double(w.budget_off_ns()) == Approx((cost_us / kGpuCostBudget - (226 + 25226)) * us).epsilon(0.001));
  }
  {
    // GPU-bound: traced steps as fast as the others (10 ms). Only the switch costs; M−N steps decide, as
    // before.
    WindowSchedule w(20, 200);
    Program p{10000 * us, 10000 * us, 10000 * us};
    p.until_switch(w);
    p.until_switch(w);
    w.set_switch_cost(5000 * us);
    REQUIRE(p.until_switch(w) == WindowSwitch::Off);
    CHECK(double(w.budget_off_ns()) == Approx((5000 / kGpuCostBudget - 20 * 10000) * us).epsilon(0.001));
    CHECK(w.min_off_ns() == 180 * 10000 * us);
  }
  {
    // Tracing that costs 100× a step: the off phase is capped (a window every kMaxBudgetOffNs at least).
    WindowSchedule w(20, 200);
    Program p{100000 * us, 1000 * us, 1000 * us};
    p.until_switch(w);
    p.until_switch(w);
    REQUIRE(p.until_switch(w) == WindowSwitch::Off);
    CHECK(w.budget_off_ns() == kMaxBudgetOffNs);
    CHECK(w.min_off_ns() == kMaxBudgetOffNs);
  }
}

TEST_CASE("GPU windows follow one step sequence, another taking over only once it has gone quiet") {
  using collector::cupti::kDriverStaleFactor;
  using collector::cupti::kMinDriverStaleNs;
  using collector::cupti::WindowDriver;
  const int64_t ms = 1000000;
  WindowDriver d;
  // Three threads mark api steps; thread 11 completes one first and drives. The others' steps never count.
  CHECK(d.drives("api", 11, 10 * ms));
  CHECK_FALSE(d.drives("api", 12, 11 * ms));
  CHECK_FALSE(d.drives("api", 13, 12 * ms));
  CHECK(d.drives("api", 11, 20 * ms));         // 10 ms steps
  CHECK_FALSE(d.drives("nvtx", 11, 21 * ms));  // another source on the same thread is another sequence
  std::string source = "api";  // a caller's string, changed after the call: the name was copied
  CHECK(d.drives(source.c_str(), 11, 30 * ms));
  source = "xyz";
  CHECK_FALSE(d.drives(source.c_str(), 11, 31 * ms));
  CHECK(d.drivers() == 1);
  // Thread 11's loop ends (its last step at 30 ms). Under kMinDriverStaleNs nobody else drives; past it, the
  // next to mark does (it stalled for good when the windows followed the highest count: thread 11's).
  CHECK_FALSE(d.drives("api", 12, 30 * ms + kMinDriverStaleNs - 1));
  CHECK(d.drives("api", 12, 30 * ms + kMinDriverStaleNs));
  CHECK(d.drivers() == 2);
  CHECK_FALSE(
      d.drives("api", 11, 30 * ms + kMinDriverStaleNs + 1));  // the old driver back: it does not count
  // A loop of 1 s steps back from a 10 s stall takes the windows back within 4 of its steps (the quiet span
  // carried as the new driver's step locked it out for 40 s).
  WindowDriver stall;
  const int64_t s1 = 1000 * ms;
  CHECK(stall.drives("api", 1, 0));
  CHECK(stall.drives("api", 1, s1));
  CHECK(stall.drives("nvtx", 2, 11 * s1));  // after 10 s of quiet: nvtx's one step takes over
  int64_t back_at = 0;
  for (int64_t t = 12 * s1; t <= 60 * s1 && !back_at; t += s1)
    if (stall.drives("api", 1, t)) back_at = t;
  CHECK(back_at == 11 * s1 + kDriverStaleFactor * s1);
  // Long steps: the driver is quiet only after kDriverStaleFactor of its own last step.
  WindowDriver slow;
  const int64_t step = 5000 * ms;  // 5 s steps: over the 2 s minimum
  CHECK(slow.drives("optimizer", 7, 0));
  CHECK(slow.drives("optimizer", 7, step));
  CHECK_FALSE(slow.drives("dataloader", 8, step + 3 * step));  // two sources in turn do not both count
  CHECK_FALSE(slow.drives("dataloader", 8, step + kDriverStaleFactor * step - 1));
  CHECK(slow.drives("dataloader", 8, step + kDriverStaleFactor * step));

  // Two sequences half a 5 s step apart (the optimizer hook and stepscope.step() at the loop's top), from
  // their first steps: one drives, after at most one hand-over. Each new driver's step counted as 0 s let
  // them hand it back and forth at every boundary: 40 of 40 counted for 20 steps.
  WindowDriver two;
  int counted = 0;
  for (int i = 0; i < 20; ++i) {
    counted += two.drives("api", 1, int64_t(i) * step);
    counted += two.drives("optimizer", 1, int64_t(i) * step + step / 2);
  }
  CHECK(counted <= 21);
  CHECK(two.drivers() <= 2);

  // Names alike in their first 63 bytes are two sequences.
  const std::string long_a = std::string(70, 's') + "a", long_b = std::string(70, 's') + "b";
  WindowDriver names;
  CHECK(names.drives(long_a.c_str(), 1, 0));
  CHECK_FALSE(names.drives(long_b.c_str(), 1, 1 * ms));
  CHECK(names.drives(long_a.c_str(), 1, 10 * ms));

  // Tracing lent to torch.profiler for 60 s: the driver's quiet span starts again at the take-back, and the
  // step that held the lend is not its length (a takeover then waited 4 x 60 s).
  WindowDriver lent;
  CHECK(lent.drives("api", 1, 0));
  CHECK(lent.drives("api", 1, 10 * ms));  // 10 ms steps
  lent.restart(60000 * ms);
  CHECK_FALSE(lent.drives("api", 2, 60000 * ms + kMinDriverStaleNs - 1));  // quiet only since the take-back
  CHECK(lent.drives("api", 1, 60020 * ms));                                // the step that held the lend
  CHECK(lent.drives("api", 2, 60020 * ms + kMinDriverStaleNs));            // 4 x 10 ms under the 2 s floor
}

TEST_CASE("GPU windows: an interval that is no step stays out of the window's step time and its off phase") {
  using collector::cupti::WindowSchedule;
  using collector::cupti::WindowSwitch;
  const int64_t ms = 1000000;
  // 10 ms steps, 20/200; after the 10th boundary a 2 s span that is no step (a new driver took over after the
  // old one's quiet end, or tracing was lent), forgotten or not.
  auto first_off = [&](bool forget) {
    WindowSchedule w(20, 200);
    int64_t t = 0;
    for (int i = 1;; ++i) {
      t += 10 * ms;
      if (i == 11) {
        t += 2000 * ms;
        if (forget) w.forget_last_step();
      }
      if (w.at_step(t) == WindowSwitch::Off) return w.min_off_ns();
    }
  };
  WindowSchedule plain(20, 200);
  int64_t t = 0, plain_off = 0;
  while (!plain_off) {
    t += 10 * ms;
    if (plain.at_step(t) == WindowSwitch::Off) plain_off = plain.min_off_ns();
  }
  CHECK(plain_off == 1800 * ms);                 // 180 off steps of 10 ms
  CHECK(first_off(true) == plain_off);           // forgotten: the same off phase
  CHECK(first_off(false) > 20 * plain_off / 2);  // counted as steps: ~115 ms a step, an off phase of ~20 s

  // The flight recorder armed the first window before its first boundary (a data-wait trigger on the first
  // batch), on a clock 5000 s in: the window was timed from 0, an off phase of 15 hours.
  WindowSchedule armed(5, 50);
  armed.arm(3);
  int64_t at = 5000000 * ms, armed_off = 0;
  while (!armed_off) {
    at += 10 * ms;
    if (armed.at_step(at) == WindowSwitch::Off) armed_off = armed.min_off_ns();
  }
  CHECK(armed_off == 450 * ms);  // 45 off steps of 10 ms
}

TEST_CASE("GPU windows switch tracing off after N steps and on again after M-N more, long enough in time") {
  using collector::cupti::kMinDetachGraceNs;
  using collector::cupti::kSwitchCostFactor;
  using collector::cupti::WindowSchedule;
  using collector::cupti::WindowSwitch;
  auto run = [](WindowSchedule& w, int steps, int64_t step_ns, int64_t& t) {
    std::string seq;
    for (int i = 0; i < steps; ++i) {
      t += step_ns;
      auto s = w.at_step(t);
      seq += s == WindowSwitch::Off ? 'x' : s == WindowSwitch::On ? 'o' : '.';
    }
    return seq;
  };
  {
    // Long steps (1 s): the step counts decide. Steps 1-2 traced, off after step 2; on after 3 more; ...
    WindowSchedule w(2, 5);
    int64_t t = 0;
    CHECK(run(w, 12, 1000000000, t) == ".x..o.x..o.x");
    CHECK(w.detach_grace_ns() == 2000000000);  // two traced steps: the GPU may still run the last one
    CHECK(w.min_off_ns() == 3000000000);       // M-N steps, longer than the grace + 100 ms
  }
  {
    // Tiny steps (100 us, as launch_bound): off for at least two grace periods, not M-N steps (18 ms).
    WindowSchedule w(20, 200);
    int64_t t = 0;
    CHECK(run(w, 20, 100000, t) == std::string(19, '.') + "x");
    CHECK(w.detach_this_phase());
    CHECK(w.min_off_ns() == 2 * kMinDetachGraceNs);
    const std::string off = run(w, 2000, 100000, t);  // on when 200 ms have passed: after 2000 steps
    CHECK(off == std::string(1999, '.') + "o");
    // A measured detach + attach of 5 ms: the next off phase lasts kSwitchCostFactor times that.
    w.set_switch_cost(5000000);
    run(w, 20, 100000, t);
    CHECK(!w.tracing());
    CHECK(w.min_off_ns() == kSwitchCostFactor * 5000000);
  }
  {
    // One traced step of 1 s: timed from the boundary that switched tracing on (not 0 for want of two
    // boundaries), so the grace covers two such steps.
    WindowSchedule w(1, 10);
    int64_t t = 0;
    CHECK(run(w, 1, 1000000000, t) == "x");  // the first window: no step timed yet
    CHECK(run(w, 9, 1000000000, t) == "........o");
    CHECK(run(w, 1, 1000000000, t) == "x");
    CHECK(w.detach_grace_ns() == 2000000000);
    CHECK(w.detach_this_phase());  // 9 s off > grace + 100 ms
  }
  {
    // Few off steps of 500 ms (3/4): no detach — it would stretch the off phase past M−N steps; M−N decides.
    WindowSchedule w(3, 4);
    int64_t t = 0;
    const std::string seq = run(w, 16, 500000000, t);
    CHECK(seq == "..xo..xo..xo..xo");
    CHECK(!w.detach_this_phase());
  }
  {
    // The flight recorder fired (arm): off now → on at the next boundary, whatever the off phase's minimum, for
    // the armed steps; on now → the current window lengthened to cover them.
    WindowSchedule w(2, 5);
    int64_t t = 0;
    CHECK(run(w, 3, 1000000000, t) == ".x.");
    w.arm(4);
    CHECK(run(w, 6, 1000000000, t) == "o...x.");  // on at once, traced 4 steps, then off
    CHECK(run(w, 3, 1000000000, t) == ".o.");     // the usual M-N steps off, then the usual window
    w.arm(5);
    CHECK(run(w, 7, 1000000000, t) == ".....x.");  // lengthened: 1 traced + 5 armed
  }
  {
    WindowSchedule all(0, 0);
    int64_t t = 0;
    CHECK(all.all());
    CHECK(run(all, 400, 1000, t) == std::string(400, '.'));
  }
}

TEST_CASE("a CUDA graph pins CUPTI: no finalize begins after the pin, and a pin racing one sees it") {
  using collector::cupti::begin_detach;
  using collector::cupti::Link;
  using collector::cupti::pin_attached;
  {
    // Pinned while the detach waited for a CUDA call: the call's exit calls it off.
    std::atomic<int> link{int(Link::DetachRequested)};
    std::atomic<bool> pinned{false};
    CHECK_FALSE(pin_attached(pinned, link));
    CHECK_FALSE(begin_detach(link, pinned));
    CHECK(link.load() == int(Link::Attached));
  }
  {
    // The finalize began first: the pinning thread is told so (it waits for the finalize to end).
    std::atomic<int> link{int(Link::DetachRequested)};
    std::atomic<bool> pinned{false};
    CHECK(begin_detach(link, pinned));
    CHECK(link.load() == int(Link::Detaching));
    CHECK(pin_attached(pinned, link));
    link.store(int(Link::Detached));
    CHECK(pin_attached(pinned, link));
  }
  {
    // Nothing asked for: nothing begins.
    std::atomic<int> link{int(Link::Attached)};
    std::atomic<bool> pinned{false};
    CHECK_FALSE(begin_detach(link, pinned));
    CHECK(link.load() == int(Link::Attached));
  }
  // Two threads at once, many times: whenever a finalize began, the pin saw it (else a graph could be made
  // under a CUPTI that then detaches: the H200's cudaErrorLaunchFailure).
  // One pair of threads meets at a start line each round (spinning briefly, then yielding: on a loaded 2-core
  // machine a pure spin starves the other thread, and CI's first run of this case timed out), for 50,000 rounds or
  // 3 s, whichever comes first (an idle machine does the rounds in ~0.05 s; with the pin read only before the
  // compare-and-swap, such a run fails every time).
  constexpr int kRounds = 50000, kStop = -1000000000;
  std::atomic<int> link{0};
  std::atomic<bool> pinned{false};
  std::atomic<int> arrived{0}, turn{-1};  // turn: the round the exit thread is to run; -1 - r: round r done
  bool began = false;
  auto meet = [&arrived](int round) {
    arrived.fetch_add(1);
    for (int spin = 0; arrived.load() < 2 * (round + 1); ++spin)
      if (spin > 64) std::this_thread::yield();
  };
  std::thread exit_callback([&] {
    for (int round = 0;; ++round) {
      int t;
      while ((t = turn.load()) != round && t != kStop) std::this_thread::yield();
      if (t == kStop) return;
      meet(round);
      began = begin_detach(link, pinned);
      if (began) link.store(int(Link::Detached));
      turn.store(-1 - round);
    }
  });
  int rounds = 0, finalized = 0, pinned_first = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (; rounds < kRounds && std::chrono::steady_clock::now() < until; ++rounds) {
    link.store(int(Link::DetachRequested));
    pinned.store(false);
    turn.store(rounds);
    meet(rounds);
    const bool saw = pin_attached(pinned, link);
    while (turn.load() != -1 - rounds) std::this_thread::yield();
    if (began) {
      ++finalized;
      REQUIRE(saw);
    } else {
      ++pinned_first;
      REQUIRE(link.load() == int(Link::Attached));
    }
  }
  turn.store(kStop);
  exit_callback.join();
  CHECK(finalized + pinned_first == rounds);
  CHECK(rounds >= 100);
}
