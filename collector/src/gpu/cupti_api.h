// The CUPTI entry points the collector uses, resolved with dlopen/dlsym (see load_library()).
#pragma once

#include <cupti.h>

namespace stepscope::collector::cupti {

struct Api {
  void* library = nullptr;  // the dlopen handle (entry points of newer CUPTIs are looked up as needed)
  decltype(&cuptiActivityGetNextRecord) get_next_record = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityFlushPeriod) flush_period = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped = nullptr;
  decltype(&cuptiActivityRegisterTimestampCallback) register_timestamp = nullptr;
  decltype(&cuptiGetTimestamp) get_timestamp = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;
  decltype(&cuptiSubscribe) subscribe = nullptr;
  decltype(&cuptiUnsubscribe) unsubscribe = nullptr;
  decltype(&cuptiEnableCallback) enable_callback = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiSetThreadIdType) set_thread_id_type = nullptr;
  decltype(&cuptiEnableDomain) enable_domain = nullptr;
  decltype(&cuptiFinalize) finalize = nullptr;  // detach: the only way to take CUPTI's per-launch cost away
  // Fine-grained API records (CUPTI 12.x+); null in older libraries: lean tracing then falls back to all APIs.
  decltype(&cuptiActivityEnableRuntimeApi) enable_runtime_api = nullptr;
  decltype(&cuptiActivityEnableDriverApi) enable_driver_api = nullptr;
  // CUDA graphs' ids, for the resource callbacks (cupti_graphs.h); null where this libcupti lacks them.
  decltype(&cuptiGetGraphId) graph_id = nullptr;
  decltype(&cuptiGetGraphExecId) graph_exec_id = nullptr;
  decltype(&cuptiGetGraphNodeId) graph_node_id = nullptr;
};

extern Api* api;  // set by load_library()

}  // namespace stepscope::collector::cupti
