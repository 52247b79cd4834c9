// Unwinds the stack copies the sampling handler takes (stack_capture.h), on the collector thread, with
// libunwind's remote API — the way perf unwinds `--call-graph dwarf` samples: an address space whose accessors
// serve the copied window for stack reads, the process's own mapped objects for everything else (read
// fault-safely: an object may be unloaded since), and find unwind info in each object's .eh_frame_hdr table.
// Not thread-safe: one instance per collector thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "output/module_maps.h"
#include "stack_capture.h"

namespace stepscope::collector::unwind {

class CopiedStackUnwinder {
 public:
  explicit CopiedStackUnwinder(const ModuleMap& modules) : modules_(modules) {}
  ~CopiedStackUnwinder();
  CopiedStackUnwinder(const CopiedStackUnwinder&) = delete;
  CopiedStackUnwinder& operator=(const CopiedStackUnwinder&) = delete;

  // Loads libunwind's remote API (libunwind-x86_64.so.8, RTLD_LOCAL). False, with why, when it cannot: samples
  // then keep their leaf only.
  bool init(std::string& why);
  bool ready() const { return as_ != nullptr; }
  // Objects were unloaded: cached unwind rules and memory may belong to objects gone since.
  void flush();

  struct Result {
    int frames = 0;          // written to `out`, innermost (the interrupted PC) first
    bool truncated = false;  // the unwind needed stack beyond the copied window
  };
  // The PCs of the sampled stack: regs and `bytes` of stack copied from regs.r[kRegSp]; `capped` when the
  // copy stopped at its window's size.
  Result unwind(const Registers& regs, const uint8_t* stack, size_t bytes, bool capped, uintptr_t* out, int max);

  // Whether libunwind's cache lock runs without its sigprocmask calls on this thread (the fast path).
  static bool skips_signal_masks();
  // Process-memory reads that went to the kernel (cache misses), for the collector's own accounting.
  uint64_t memory_reads() const { return memory_reads_; }
  // Unwind-table searches (libunwind's rule cache missed) and reads of objects' memory (tables, code).
  uint64_t table_searches() const { return table_searches_; }
  uint64_t object_reads() const { return object_reads_; }

  // libunwind's callbacks (public for the C accessor table; not part of the interface).
  struct Sample;
  int find_proc_info(uintptr_t ip, void* proc_info, int need_unwind_info, void* arg);
  int access_mem(uintptr_t addr, uint64_t* value, const Sample& s);

 private:
  bool read_process(uintptr_t addr, uint64_t* value);

  const ModuleMap& modules_;
  void* as_ = nullptr;  // unw_addr_space_t
  bool flush_due_ = false;
  uint64_t memory_reads_ = 0, table_searches_ = 0, object_reads_ = 0;
  uintptr_t image_lo_ = 0, image_span_ = 0;  // the object the last read outside the stack copy fell in
  int64_t image_generation_ = -1;            // the module map's refresh it was found in
  // Direct-mapped cache of process memory read through the kernel: objects' code and unwind tables are
  // read-only and read again and again on cache misses of libunwind's own.
  static constexpr int kLines = 4096;
  static constexpr size_t kLineBytes = 256;
  struct Line {
    uintptr_t base = 0;
    bool valid = false;
    alignas(8) uint8_t data[kLineBytes];
  };
  Line lines_[kLines];
};

}  // namespace stepscope::collector::unwind
