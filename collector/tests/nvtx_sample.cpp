// NVTX v3 ranges (header-only NVTX: no GPU, no CUDA library needed); the collector captures them through
// NVTX_INJECTION64_PATH. Each of 4 steps: a "data_loader_next" range (a data wait) and a "train_step" range.
#include <nvtx3/nvToolsExt.h>

#include <cstdint>
#include <cstdio>

__attribute__((noinline)) uint64_t spin(uint64_t n, uint64_t x) {
  for (uint64_t i = 0; i < n; ++i) x = x * 6364136223846793005ull + 1;
  return x;
}

int main() {
  uint64_t x = 1;
  nvtxDomainHandle_t dom = nvtxDomainCreateA("trainer");
  for (int s = 0; s < 4; ++s) {
    nvtxRangePushA("train_step");
    nvtxRangePushA("data_loader_next");
    x = spin(2000000, x);
    nvtxRangePop();
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = "forward";
    nvtxDomainRangePushEx(dom, &a);
    x = spin(4000000, x);
    nvtxDomainRangePop(dom);
    nvtxRangePop();
  }
  std::printf("nvtx_sample: %llu\n", (unsigned long long)(x & 0xffff));
  return 0;
}
