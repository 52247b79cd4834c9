#include "stack_capture.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "unwind/safe_copy.h"

namespace stepscope::collector::unwind {
namespace {

constexpr uintptr_t kPage = 4096;

}  // namespace

void registers_from(const ucontext_t* uc, Registers* out) {
  const greg_t* gr = uc->uc_mcontext.gregs;
  static constexpr int kFromDwarf[kRegisterCount] = {REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI,
                                                     REG_RBP, REG_RSP, REG_R8,  REG_R9,  REG_R10, REG_R11,
                                                     REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
  for (int i = 0; i < kRegisterCount; ++i) out->r[i] = static_cast<uint64_t>(gr[kFromDwarf[i]]);
}

StackBounds thread_stack_bounds() {
  StackBounds b;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return b;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr && size) {
    b.lo = reinterpret_cast<uintptr_t>(addr);
    b.hi = b.lo + size;
  }
  pthread_attr_destroy(&attr);
  return b;
}

StackCopy copy_stack(uintptr_t sp, const StackBounds& bounds, uint8_t* dst, size_t max, SeenStackTop* seen) {
  StackCopy c;
  if (sp >= bounds.lo && sp < bounds.hi) {
    const size_t avail = bounds.hi - sp;
    c.bytes = avail < max ? avail : max;
    c.capped = avail > max;
    std::memcpy(dst, reinterpret_cast<const void*>(sp), c.bytes);
    return c;
  }
  // Unknown bounds: one iovec per page, so a partial read ends exactly at the first unmapped page (guarded
  // copies in the sampling handler, process_vm_readv elsewhere: read_own).
  uintptr_t top = 0;
  if (seen && seen->copies.fetch_add(1, std::memory_order_relaxed) % kSeenTopRecheck != kSeenTopRecheck - 1)
    top = seen->top.load(std::memory_order_relaxed);
  const size_t want = top > sp && top - sp < max ? top - sp : max;
  if (want == 0) return c;
  // In batches of pages: the iovecs are on the handler's stack, which may be the program's small alternate
  // stack (signal_handler.h); 16 pages cover the default window in one read.
  constexpr int kBatch = 16;
  iovec local[kBatch], remote[kBatch];
  size_t planned = 0, got = 0;
  uintptr_t at = sp;
  while (planned < want) {
    int n = 0;
    while (planned < want && n < kBatch) {
      const size_t len = std::min<size_t>(want - planned, kPage - (at & (kPage - 1)));
      local[n] = {dst + planned, len};
      remote[n] = {reinterpret_cast<void*>(at), len};
      ++n;
      planned += len;
      at += len;
    }
    const long r = read_own(local, remote, static_cast<unsigned long>(n));
    got += r > 0 ? static_cast<size_t>(r) : 0;
    if (got < planned) break;  // an unreadable page: the copy ends there
  }
  if (got == 0) {
    c.faulted = true;
    return c;
  }
  c.bytes = got;
  c.capped = c.bytes == max;
  if (seen) {
    const uintptr_t known = seen->top.load(std::memory_order_relaxed);
    if (c.bytes < planned)
      seen->top.store(sp + c.bytes, std::memory_order_relaxed);
    else if (known > sp && known < sp + c.bytes)
      seen->top.store(0, std::memory_order_relaxed);  // read past it
  }
  return c;
}

bool read_own_memory(void* dst, uintptr_t addr, size_t n) {
  iovec local{dst, n}, remote{reinterpret_cast<void*>(addr), n};
  return read_own(&local, &remote, 1) == static_cast<long>(n);
}

}  // namespace stepscope::collector::unwind
