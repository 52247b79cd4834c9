// cuptiSubscribe as "stepscope", shared by the recorder and `stepscope doctor`: cuptiSubscribe_v2 where the
// library has it (CUPTI 13), so that a profiler refused after us reads our name, and a refusal of ours names
// the tool that holds CUPTI (Nsight Systems, Kineto, ...); cuptiSubscribe elsewhere. Internal.
#pragma once

#include <dlfcn.h>

#include <cupti.h>

#include <cstring>
#include <string>

namespace stepscope::collector::cupti {

inline constexpr const char* kSubscriberName = "stepscope";

struct Subscription {
  CUptiResult result = CUPTI_ERROR_UNKNOWN;
  // With CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED: who holds CUPTI, as CUPTI names it ("" when it
  // cannot).
  std::string holder;
};

// `library`: the dlopen handle of libcupti (cuptiSubscribe_v2 is looked up there); `subscribe`: its
// cuptiSubscribe, the fallback.
inline Subscription subscribe_named(void* library, decltype(&cuptiSubscribe) subscribe,
                                    CUpti_SubscriberHandle* handle, CUpti_CallbackFunc callback,
                                    void* userdata) {
  Subscription s;
#ifdef CUpti_SubscriberParams_STRUCT_SIZE
  using SubscribeV2 = decltype(&cuptiSubscribe_v2);
  if (auto v2 = library ? reinterpret_cast<SubscribeV2>(dlsym(library, "cuptiSubscribe_v2")) : nullptr) {
    char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 64] = {};
    CUpti_SubscriberParams params{};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = kSubscriberName;
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof holder;
    s.result = v2(handle, callback, userdata, &params);
    if (s.result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
      s.holder.assign(holder, strnlen(holder, sizeof holder));
    return s;
  }
#endif
  s.result = subscribe ? subscribe(handle, callback, userdata) : CUPTI_ERROR_NOT_SUPPORTED;
  return s;
}

// "another CUPTI subscriber (NAME)" / "(Kineto, Nsight Systems?)" when CUPTI did not name it.
inline std::string holder_words(const std::string& holder) {
  return "another CUPTI subscriber (" + (holder.empty() ? std::string("Kineto, Nsight Systems?") : holder) +
         ")";
}

}  // namespace stepscope::collector::cupti
