// The collector thread's writer: this process's partial store, and the deduplication that turns raw samples
// (PCs + raw Python frames) into frames and prefix-tree stack nodes. Only the collector thread uses it.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/collector_state.h"
#include "output/module_maps.h"
#include "stepscope/store/store.h"
#include "unwind/copied_stack_unwinder.h"

namespace stepscope::collector {

struct PairHash {
  size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<int64_t>()(p.first * 1000003) ^ std::hash<int64_t>()(p.second);
  }
};

// A Python frame as the sample saw it: the same code address with other names is another (later) code object.
struct PyFrameKey {
  uint64_t code, name, file;
  uint32_t names_digest;
  int32_t first_line, instr_offset;
  bool operator==(const PyFrameKey&) const = default;
};
struct PyFrameKeyHash {
  size_t operator()(const PyFrameKey& k) const {
    uint64_t h = k.code * 0x9E3779B97F4A7C15ull;
    h ^= k.name + 0x632BE59BD9B4E019ull + (h << 6) + (h >> 2);
    h ^= k.file + k.names_digest + (h << 6) + (h >> 2);
    h ^= (uint64_t(uint32_t(k.first_line)) << 32 | uint32_t(k.instr_offset)) + (h << 6) + (h >> 2);
    return static_cast<size_t>(h);
  }
};

class Drainer {
 public:
  explicit Drainer(std::string parts_dir);

  // Opens the part lazily: a process that forks and execs at once leaves no empty part behind.
  store::StoreWriter& writer();
  bool has_writer() const { return writer_ != nullptr || flight_ != nullptr; }
  // Flight recording (docs/flight.md): rows go to `window` (in memory) instead of a part on disk.
  void set_flight(store::Trace* window);
  bool flight() const { return flight_ != nullptr; }
  // After fork the child must not touch the parent's SQLite handle: forget it without closing.
  void abandon_after_fork() { (void)writer_.release(); }

  void refresh_modules();
  // Refreshes the module map (and drops what the unwinder cached) when objects were loaded or unloaded.
  void check_modules();
  // One raw sample record of a ring (SampleHeader with registers, stack copy, raw Python frames) → a samples row.
  void add_sample(const uint8_t* rec, size_t len);
  // How the unwinding went, for the store's meta (collector.*).
  struct UnwindStats {
    uint64_t records = 0, truncated = 0, unreadable = 0, leaf_only = 0, frames = 0;
    uint64_t ns = 0, timed = 0;  // CPU time of the timed unwinds (one in 16)
    uint64_t stack_bytes = 0, max_stack_bytes = 0;
    uint64_t raw_hits = 0;      // samples whose raw stack was interned before (no frame or node lookups)
    uint64_t node_lookups = 0;  // prefix-tree nodes looked up for the others
    // Samples with Python frames, and those of them whose native unwind stopped before the interpreter's
    // evaluator (code without unwind tables: MKL's kernels, JIT code): their Python frames are the callers of
    // what was recovered, a [truncated] frame between.
    uint64_t python_samples = 0, python_cut = 0;
    // Samples whose unwind went on past code without unwind tables from return addresses found by scanning
    // the stack copy (CopiedStackUnwinder).
    uint64_t scanned = 0;
  };
  const UnwindStats& unwind_stats() const { return stats_; }
  const unwind::CopiedStackUnwinder& unwinder() const { return unwinder_; }
  void append_pending(store::Trace& rows);
  // Interns stacks captured at blocking CUDA calls; append_pending() attaches them to their API calls.
  void add_call_stacks(std::vector<PendingRows::CallStack>& stacks);
  // A stack add_call_stacks interned under `key` (capture_creation_stack's: a CUDA graph's or node's), 0 when
  // none; forget_call_stack once every row that names it has it.
  int64_t call_stack(int64_t key) const {
    auto it = stack_of_call_.find(key);
    return it == stack_of_call_.end() ? 0 : it->second;
  }
  void forget_call_stack(int64_t key) { stack_of_call_.erase(key); }
  // A row whose stack is this writer's own (call_stack): written as it is, not renumbered as
  // append_pending's.
  template <class Row>
  void put_with_own_stack(const Row& r) {
    put(r);
  }
  // Writes the threads row of `tid` once (name from /proc comm, collector flag from Globals::own_tids).
  void name_thread(int64_t tid);
  void write_meta(const std::map<std::string, std::string>& meta);
  void commit() {
    if (writer_) writer_->flush();
  }
  void close() {
    if (writer_) writer_->close();
  }

 private:
  template <class Row>
  void put(const Row& r) {
    if (flight_) flight_->add(r);
    else writer().add(r);
  }
  store::StringId intern(std::string_view s) { return flight_ ? flight_->intern(s) : writer().intern(s); }
  store::Process process_row(store::Trace& strings_of);
  void append_to_flight(const store::Trace& rows);
  // The prefix-tree node of one record's stack (unwound, then spliced with its Python frames); -1 when malformed.
  int64_t record_stack(const uint8_t* rec, size_t len, SampleHeader& h);
  // `first_is_leaf`: pcs[0] is where the thread was interrupted, not a return address.
  // `truncated`: the unwind needed stack beyond the copied window (a marker frame at the root).
  int64_t intern_stack(const uintptr_t* pcs, size_t n_pcs, const python::RawPyFrame* py, size_t n_py,
                       bool first_is_leaf, bool truncated);
  int64_t truncated_frame();
  int64_t native_cut_frame();
  int64_t native_frame(uintptr_t pc, bool leaf);
  int64_t native_frame_uncached(uintptr_t pc, bool leaf);
  int64_t python_frame(const python::RawPyFrame& pf);
  bool is_eval_frame(uintptr_t pc);
  int64_t stack_node(int64_t parent, int64_t frame);

  std::string parts_dir_;
  int32_t pid_;
  std::unique_ptr<store::StoreWriter> writer_;
  store::Trace* flight_ = nullptr;
  ModuleMap modules_;
  unwind::CopiedStackUnwinder unwinder_{modules_};
  bool unwinder_tried_ = false;
  unsigned long long unloads_flushed_ = 0;  // the loader's unload count when the unwinder was last flushed
  UnwindStats stats_;
  std::vector<uintptr_t> unwound_;
  std::unordered_map<std::pair<int64_t, int64_t>, int64_t, PairHash> frames_, stacks_;
  std::unordered_map<PyFrameKey, int64_t, PyFrameKeyHash> py_frames_;
  int64_t last_frame_ = 0, last_stack_ = 0, truncated_frame_ = 0, native_cut_frame_ = 0;
  std::unordered_set<int32_t> threads_named_;
  // PC → frame id, direct-mapped in front of the module lookup and frames_ (emptied when the modules change).
  struct PcSlot {
    uintptr_t key = 0;  // pc << 1 | leaf
    int64_t frame = 0;
  };
  static constexpr size_t kPcSlots = 8192;
  std::array<PcSlot, kPcSlots> pc_frames_{};
  std::vector<int64_t> frame_ids_;
  // The last interned stack, root first: its frame ids and their prefix-tree nodes.
  std::vector<int64_t> last_ids_, last_nodes_;
  std::vector<python::RawPyFrame> py_;
  std::string raw_key_;
  std::unordered_map<std::string, int64_t> raw_stacks_;  // raw PCs + raw Python frames → stack node
  std::unordered_map<int64_t, int64_t> stack_of_call_;    // correlation id → stack node, until its API row
};

extern Drainer* g_drainer;

}  // namespace stepscope::collector
