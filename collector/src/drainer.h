// The collector thread's writer: this process's partial store, and the deduplication that turns raw samples
// (PCs + raw Python frames) into frames and prefix-tree stack nodes. Only the collector thread uses it.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector_state.h"
#include "module_maps.h"
#include "stepscope/store/store.h"

namespace stepscope::collector {

struct PairHash {
  size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<int64_t>()(p.first * 1000003) ^ std::hash<int64_t>()(p.second);
  }
};

class Drainer {
 public:
  explicit Drainer(std::string parts_dir);

  // Opens the part lazily: a process that forks and execs at once leaves no empty part behind.
  store::StoreWriter& writer();
  bool has_writer() const { return writer_ != nullptr; }
  // After fork the child must not touch the parent's SQLite handle: forget it without closing.
  void abandon_after_fork() { (void)writer_.release(); }

  void refresh_modules();
  // One raw sample record of a ring (SampleHeader, PCs, raw Python frames) → a samples row.
  void add_sample(const uint8_t* rec, size_t len);
  // The prefix-tree node of one raw stack (PCs innermost first, then the raw Python frames).
  int64_t intern_stack(const uint8_t* pc_bytes, size_t n_pcs, const uint8_t* py_bytes, size_t n_py);
  void append_pending(store::Trace& rows);
  // Interns stacks captured at blocking CUDA calls; append_pending() attaches them to their API calls.
  void add_call_stacks(std::vector<PendingRows::CallStack>& stacks);
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
  int64_t native_frame(uintptr_t pc, bool leaf);
  int64_t python_frame(const python::RawPyFrame& pf);
  bool is_eval_frame(uintptr_t pc);
  int64_t stack_node(int64_t parent, int64_t frame);

  std::string parts_dir_;
  int32_t pid_;
  std::unique_ptr<store::StoreWriter> writer_;
  ModuleMap modules_;
  std::unordered_map<std::pair<int64_t, int64_t>, int64_t, PairHash> frames_, py_frames_, stacks_;
  int64_t last_frame_ = 0, last_stack_ = 0;
  std::unordered_set<int32_t> threads_named_;
  std::vector<int64_t> frame_ids_;
  std::vector<uintptr_t> pcs_;
  std::vector<python::RawPyFrame> py_;
  std::string raw_key_;
  std::unordered_map<std::string, int64_t> raw_stacks_;  // raw PCs + raw Python frames → stack node
  std::unordered_map<int64_t, int64_t> stack_of_call_;    // correlation id → stack node, until its API row
};

extern Drainer* g_drainer;

}  // namespace stepscope::collector
