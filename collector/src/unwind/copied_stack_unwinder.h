// Unwinds the stack copies the sampling handler takes (stack_capture.h), on the collector thread, with
// libunwind's remote API — the way perf unwinds `--call-graph dwarf` samples: an address space whose
// accessors serve the copied window for stack reads, the process's own mapped objects for everything else
// (read fault-safely: an object may be unloaded since), and find unwind info in each object's .eh_frame_hdr
// table. Where a frame has no unwind table (MKL's kernels, JIT code), the unwind goes on from a return
// address found by scanning the copied stack above it, each one checked against the call instruction that
// pushed it (docs/collector.md, "Code without unwind tables"). Not thread-safe: one instance per collector
// thread.
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
    int scanned = 0;  // return addresses among them found by scanning the stack (0: unwind tables only)
  };
  // A frame the unwind need not go past (the Python evaluator, whose callers the Python frames name): a stack
  // whose tables ran out after one is not scanned.
  struct Goal {  // {} : none
    bool (*reached)(uintptr_t pc, void* ctx);
    void* ctx;
  };
  // The PCs of the sampled stack: regs and `bytes` of stack copied from regs.r[kRegSp]; `capped` when the
  // copy stopped at its window's size.
  Result unwind(const Registers& regs, const uint8_t* stack, size_t bytes, bool capped, uintptr_t* out,
                int max, const Goal& goal = {});

  // Whether libunwind's cache lock runs without its sigprocmask calls on this thread (the fast path).
  static bool skips_signal_masks();
  // Process-memory reads that went to the kernel (cache misses), for the collector's own accounting.
  uint64_t memory_reads() const { return memory_reads_; }
  // Unwind-table searches (libunwind's rule cache missed) and reads of objects' memory (tables, code).
  uint64_t table_searches() const { return table_searches_; }
  uint64_t object_reads() const { return object_reads_; }
  // Stacks whose unwind tables ran out before the goal or the thread's entry: a scan was tried.
  uint64_t scans_tried() const { return scans_tried_; }

  // libunwind's callbacks (public for the C accessor table; not part of the interface).
  struct Sample;
  int find_proc_info(uintptr_t ip, void* proc_info, int need_unwind_info, void* arg);
  int access_mem(uintptr_t addr, uint64_t* value, const Sample& s);

 private:
  enum class Stop { kEnd, kNoTable, kFailed, kFull };
  // Steps `cursor` until the stack ends, a frame has no unwind table, a step fails or `out` is full.
  Stop walk(void* cursor, uintptr_t* out, int max, int& frames, uint64_t& last_sp);
  // The return address of the frame at `callee_pc` whose stack starts at `from`, by scanning the copy
  // upwards: the first word that a call instruction could have pushed decides (a later one could skip a live
  // frame).
  bool scan_for_caller(const Sample& s, uintptr_t from, uintptr_t callee_pc, uintptr_t& slot, uintptr_t& ra);
  // Sets `cursor` on the caller whose return address `ra` was found at `slot`, above a frame without table
  // that starts at `from`; `rbp_then` is the interrupted frame pointer. False when its frame cannot be told.
  bool resume_at(void* cursor, Sample& rs, Registers& resumed, uintptr_t from, uintptr_t slot, uintptr_t ra,
                 uint64_t rbp_then);
  enum class Caller { kNo, kUnknownTarget, kCallsCallee, kCallsElsewhere };
  Caller check_return_address(uintptr_t ra, uintptr_t callee_pc);
  // Whether a call to `target` can have led to `pc` without an intervening return: the same function.
  bool same_function(uintptr_t target, uintptr_t pc);
  // [start, end) of the last function the unwind table describes that starts at or before `pc` ({0, 0}:
  // none); false when the table cannot be read.
  bool table_entry_before(const ModuleImage& m, uintptr_t pc, uintptr_t& start, uintptr_t& end);
  bool read_bytes(uintptr_t addr, void* dst, size_t n);
  bool read_process(uintptr_t addr, uint64_t* value);

  const ModuleMap& modules_;
  void* as_ = nullptr;  // unw_addr_space_t
  bool flush_due_ = false;
  uint64_t memory_reads_ = 0, table_searches_ = 0, object_reads_ = 0;
  uint64_t scans_tried_ = 0;
  bool lookup_failed_ = false;               // a table search of the current step found no entry
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
