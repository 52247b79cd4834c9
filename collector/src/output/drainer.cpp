#include "drainer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/rank_env.h"

namespace stepscope::collector {

Drainer* g_drainer = nullptr;

Drainer::Drainer(std::string parts_dir) : parts_dir_(std::move(parts_dir)), pid_(getpid()) {}

store::StoreWriter& Drainer::writer() {
  if (!writer_) {
    char name[128];
    std::snprintf(name, sizeof name, "/%d-%lld.db", int(pid_), (long long)clock_ns(CLOCK_MONOTONIC));
    store::WriterOptions opt;
    opt.batch_rows = 1 << 20;  // we commit on our own cadence
    opt.fsync = false;         // a part must survive this process dying, not the machine: no disk syncs
    opt.packed = false;        // rows: each commit whole on disk, and no compression inside the target
    writer_ = std::make_unique<store::StoreWriter>(parts_dir_ + name, opt);
    writer_->set_meta("clock_domain", "CLOCK_MONOTONIC");
    writer_->set_meta("source", "stepscope-collector");
    // Which rank this process belongs to (workers inherit it): `record -o run-%r.db` groups parts by it.
    for (const auto& [k, v] : rank_from_env()) writer_->set_meta(k, v);
    store::Trace names;
    store::Process p = process_row(names);
    p.name = writer_->intern(names.str(p.name));
    writer_->add(p);
  }
  return *writer_;
}

void Drainer::refresh_modules() {
  modules_.refresh([this](const std::string& path, const std::string& build_id, uintptr_t lo, uintptr_t hi,
                          uint64_t file_offset) {
    store::Module m;
    m.pid = pid_;
    m.path = intern(path);
    m.build_id = intern(build_id);
    m.start = static_cast<int64_t>(lo);
    m.end = static_cast<int64_t>(hi);
    m.file_offset = static_cast<int64_t>(file_offset);
    put(m);
  });
  raw_stacks_.clear();  // a library may have been replaced at the same addresses
  std::fill(pc_frames_.begin(), pc_frames_.end(), PcSlot{});
}

int64_t Drainer::native_frame(uintptr_t pc, bool leaf) {
  const uintptr_t pc_key = (pc << 1) | uintptr_t(leaf);
  PcSlot& slot = pc_frames_[(pc_key ^ (pc_key >> 13)) & (kPcSlots - 1)];
  if (slot.key == pc_key) return slot.frame;
  const int64_t id = native_frame_uncached(pc, leaf);
  slot = {pc_key, id};  // after a refresh (which empties the slots) too: the id is the new map's
  return id;
}

int64_t Drainer::native_frame_uncached(uintptr_t pc, bool leaf) {
  const ModuleRange* m = modules_.find(pc);
  if (!m && clock_ns(CLOCK_MONOTONIC) - modules_.last_refresh_ns() > 50000000) {  // a dlopen since the last look
    refresh_modules();
    m = modules_.find(pc);
  }
  // Return addresses point after the call; step back into it so file:line names the call site.
  uintptr_t addr = leaf ? pc : pc - 1;
  int64_t mod = m ? m->index : -1;
  int64_t rel = m ? static_cast<int64_t>(addr - m->bias) : static_cast<int64_t>(addr);
  auto key = std::make_pair(mod, rel);
  auto it = frames_.find(key);
  if (it != frames_.end()) return it->second;
  store::Frame f;
  f.id = ++last_frame_;
  f.module = intern(m ? modules_.path(m->index) : "[unknown]");
  f.address = rel;
  f.kind = store::FrameKind::Native;
  put(f);
  frames_.emplace(key, f.id);
  return f.id;
}

int64_t Drainer::python_frame(const python::RawPyFrame& pf) {
  const PyFrameKey key{pf.code, pf.name, pf.file, pf.names_digest, pf.first_line, pf.instr_offset};
  auto it = py_frames_.find(key);
  if (it != py_frames_.end()) return it->second;
  store::Frame f;
  f.id = ++last_frame_;
  f.module = intern("python");
  f.kind = store::FrameKind::Python;
#if STEPSCOPE_HAVE_PYTHON
  std::string function, file;
  int line = 0;
  if (python::resolve(pf, function, file, line)) {
    f.symbol = intern(function);
    f.file = intern(file);
    f.line = line;
  } else {
    f.symbol = intern("[python code freed before it was read]");
  }
#else
  f.symbol = intern("[python]");
#endif
  put(f);
  py_frames_.emplace(key, f.id);
  return f.id;
}

bool Drainer::is_eval_frame(uintptr_t pc) {
#if STEPSCOPE_HAVE_PYTHON
  return g->python_ready.load() && python::is_eval_frame(pc);
#else
  (void)pc;
  return false;
#endif
}

int64_t Drainer::truncated_frame() {
  if (truncated_frame_) return truncated_frame_;
  store::Frame f;
  f.id = ++last_frame_;
  f.module = intern("[stepscope]");
  f.symbol = intern("[stack deeper than the " + std::to_string(g->stack_window / 1024) + " KiB window or " +
                    std::to_string(kMaxPcs) + " frames: outer frames cut]");
  f.kind = store::FrameKind::Native;
  put(f);
  return truncated_frame_ = f.id;
}

// Between a sample's recovered native frames and the Python frames that called them, where the native unwind
// stopped short of the evaluator: the native frames in between are unknown.
int64_t Drainer::native_cut_frame() {
  if (native_cut_frame_) return native_cut_frame_;
  store::Frame f;
  f.id = ++last_frame_;
  f.module = intern("[stepscope]");
  f.symbol = intern("[truncated]");
  f.kind = store::FrameKind::Native;
  put(f);
  return native_cut_frame_ = f.id;
}

int64_t Drainer::stack_node(int64_t parent, int64_t frame) {
  auto key = std::make_pair(parent, frame);
  auto it = stacks_.find(key);
  if (it != stacks_.end()) return it->second;
  store::Stack s;
  s.id = ++last_stack_;
  s.parent = parent;
  s.frame = frame;
  put(s);
  stacks_.emplace(key, s.id);
  return s.id;
}

void Drainer::check_modules() {
  if (modules_.empty() || modules_.loader_changed()) refresh_modules();
  // The unwinder's rules and memory lines stay true while nothing is unloaded: a library loaded since only
  // adds addresses (a PyTorch loop loads a few dozen in its first steps; flushing for each re-searched every
  // table). Compared here, not in refresh_modules(): native_frame() may have refreshed after a dlclose
  // already.
  if (modules_.unloads() != unloads_flushed_) {
    unloads_flushed_ = modules_.unloads();
    unwinder_.flush();
  }
}

int64_t Drainer::record_stack(const uint8_t* rec, size_t len, SampleHeader& h) {
  if (len < sizeof(SampleHeader)) return -1;
  std::memcpy(&h, rec, sizeof h);
  const size_t stack_padded = (size_t(h.stack_bytes) + 7) & ~size_t{7};
  const size_t n_py_bytes = h.n_py * sizeof(python::RawPyFrame);
  if (sizeof h + stack_padded + n_py_bytes > len) return -1;
  if (modules_.empty()) refresh_modules();
  if (!unwinder_tried_) {
    unwinder_tried_ = true;
    std::string why;
    if (!unwinder_.init(why))
      std::fprintf(stderr, "stepscope: %s; samples of pid %d keep their innermost frame only\n", why.c_str(),
                   int(pid_));
  }
  // Unwind the copy: the PCs innermost first.
  unwound_.resize(kMaxPcs + 1);
  // CPU time, not wall time (the collector thread is often preempted by the program it records), of one unwind
  // in 16: the clock is a system call.
  const bool timed = (stats_.records & 15) == 0;
  const int64_t t0 = timed ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
  // A stack with Python frames is unwound up to the evaluator, where they take over: no scan past code
  // without unwind tables once it is reached.
  unwind::CopiedStackUnwinder::Goal goal{};
  if (h.n_py)
    goal = {[](uintptr_t pc, void* self) { return static_cast<Drainer*>(self)->is_eval_frame(pc); }, this};
  const auto r = unwinder_.unwind(h.regs, rec + sizeof h, h.stack_bytes, (h.flags & kSampleStackCapped) != 0,
                                  unwound_.data(), kMaxPcs + 1, goal);
  if (timed) {
    stats_.ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
    ++stats_.timed;
  }
  ++stats_.records;
  stats_.frames += r.frames;
  stats_.stack_bytes += h.stack_bytes;
  stats_.max_stack_bytes = std::max<uint64_t>(stats_.max_stack_bytes, h.stack_bytes);
  if (r.truncated) ++stats_.truncated;
  if (r.scanned) ++stats_.scanned;
  if (h.flags & kSampleStackUnreadable) ++stats_.unreadable;
  if (r.frames <= 1) ++stats_.leaf_only;
  const size_t skip = (h.flags & kSampleSkipLeaf) && r.frames > 1 ? 1 : 0;
  const size_t n_pcs = std::min<size_t>(r.frames - skip, kMaxPcs);
  const uintptr_t* pcs = unwound_.data() + skip;
  py_.resize(h.n_py);
  std::memcpy(static_cast<void*>(py_.data()), rec + sizeof h + stack_padded, n_py_bytes);

  // Most samples repeat a stack seen before: look the PCs (and raw Python frames) up first, and only map PCs
  // to modules and walk the prefix tree for a stack not seen yet.
  raw_key_.assign(reinterpret_cast<const char*>(pcs), n_pcs * sizeof(uintptr_t));
  raw_key_.append(reinterpret_cast<const char*>(py_.data()), n_py_bytes);
  raw_key_.push_back(r.truncated ? 't' : 'w');
  if (h.n_py) {
    ++stats_.python_samples;
    bool reached = false;
    for (size_t i = 0; i < n_pcs && !reached; ++i) reached = is_eval_frame(pcs[i]);
    stats_.python_cut += !reached && n_pcs > 0;
  }
  if (auto it = raw_stacks_.find(raw_key_); it != raw_stacks_.end()) {
    ++stats_.raw_hits;
    return it->second;
  }
  const int64_t node = intern_stack(pcs, n_pcs, py_.data(), py_.size(), skip == 0, r.truncated);
  if (raw_stacks_.size() >= kMaxRawStacks) raw_stacks_.clear();  // bounded memory (Python's varied stacks)
  raw_stacks_.emplace(raw_key_, node);
  return node;
}

void Drainer::add_sample(const uint8_t* rec, size_t len) {
  SampleHeader h;
  const int64_t node = record_stack(rec, len, h);
  if (node < 0) return;
  name_thread(h.tid);
  store::Sample s;
  s.time = h.time;
  s.pid = pid_;
  s.tid = h.tid;
  s.stack = node;
  s.on_cpu = h.on_cpu != 0;
  s.periods = int64_t(h.overruns) + 1;
  put(s);
}

// The prefix-tree node of one stack (PCs innermost first, then the raw Python frames).
int64_t Drainer::intern_stack(const uintptr_t* pcs, size_t n_pcs, const python::RawPyFrame* py, size_t n_py,
                              bool first_is_leaf, bool truncated) {
  // Frames innermost first, Python frames spliced in place of each evaluator frame up to its entry frame.
  frame_ids_.clear();
  size_t py_i = 0;
  bool spliced = false;
  for (size_t i = 0; i < n_pcs; ++i) {
    if (py_i < n_py && is_eval_frame(pcs[i])) {
      while (py_i < n_py) {
        const auto& pf = py[py_i++];
        frame_ids_.push_back(python_frame(pf));
        spliced = true;
        if (pf.is_entry) break;
      }
      continue;
    }
    frame_ids_.push_back(native_frame(pcs[i], i == 0 && first_is_leaf));
  }
  if (!spliced && n_py) {
    // No evaluator frame among the native ones: the native unwind stopped before it (code without unwind
    // tables, such as MKL's kernels or JIT code). What it recovered was called from the Python frames, so they
    // are its callers, a [truncated] frame between for the native frames that are missing. (Putting the Python
    // frames below the native leaf drew MKL calling `<module>` in flame graphs: ~30% of a PyTorch trainer's
    // samples.)
    if (!frame_ids_.empty()) frame_ids_.push_back(native_cut_frame());
    for (size_t i = 0; i < n_py; ++i) frame_ids_.push_back(python_frame(py[i]));
  }
  // A stack deeper than the copied window: its outermost frames are missing, and the tree says so at its root.
  if (truncated) frame_ids_.push_back(truncated_frame());
  // Consecutive samples of a thread share most of their outer frames: the nodes of the prefix (root first)
  // this stack has in common with the last one interned are known, so only the rest is looked up.
  const size_t depth = frame_ids_.size();
  size_t same = 0;
  while (same < depth && same < last_ids_.size() && last_ids_[same] == frame_ids_[depth - 1 - same]) ++same;
  last_ids_.resize(depth);
  last_nodes_.resize(depth);
  int64_t node = same ? last_nodes_[same - 1] : 0;
  stats_.node_lookups += depth - same;
  for (size_t k = same; k < depth; ++k) {
    const int64_t frame = frame_ids_[depth - 1 - k];
    node = stack_node(node, frame);
    last_ids_[k] = frame;
    last_nodes_[k] = node;
  }
  return node;
}

void Drainer::name_thread(int64_t tid) {
  if (tid <= 0 || !threads_named_.insert(static_cast<int32_t>(tid)).second) return;
  store::Thread t;
  t.pid = pid_;
  t.tid = tid;
  t.name = intern(read_small_file("/proc/self/task/" + std::to_string(tid) + "/comm"));
  {
    std::lock_guard<std::mutex> lk(g->own_mu);
    t.collector = std::find(g->own_tids.begin(), g->own_tids.end(), tid) != g->own_tids.end();
  }
  put(t);
}

void Drainer::add_call_stacks(std::vector<PendingRows::CallStack>& stacks) {
  if (stacks.empty()) return;
  for (const auto& cs : stacks) {
    SampleHeader h;
    const int64_t node =
        record_stack(reinterpret_cast<const uint8_t*>(cs.record.data()), cs.record.size(), h);
    if (node < 0) continue;
    if (stack_of_call_.size() >= kMaxRawStacks) stack_of_call_.clear();  // bounded: API rows come within seconds
    stack_of_call_[cs.correlation] = node;
    name_thread(cs.tid);
  }
}

void Drainer::append_pending(store::Trace& rows) {
  for (const auto& t : rows.threads) threads_named_.insert(static_cast<int32_t>(t.tid));
  // The invariant of docs/schema.md: every thread a row names has its threads row (with its kernel name).
  for (const auto& r : rows.api_calls) name_thread(r.tid);
  for (const auto& r : rows.syncs) name_thread(r.tid);
  for (const auto& r : rows.ranges) name_thread(r.tid);
  for (const auto& r : rows.data_waits) name_thread(r.tid);
  for (const auto& r : rows.steps) name_thread(r.tid);
  // API calls with a captured stack carry this writer's stack ids: written directly, not renumbered by append().
  if (!stack_of_call_.empty()) {
    std::vector<store::ApiCall> plain;
    plain.reserve(rows.api_calls.size());
    for (auto& r : rows.api_calls) {
      auto it = stack_of_call_.find(r.correlation);
      if (it == stack_of_call_.end()) {
        plain.push_back(r);
        continue;
      }
      r.stack = it->second;
      r.name = intern(rows.str(r.name));
      put(r);
      stack_of_call_.erase(it);
    }
    rows.api_calls.swap(plain);
  }
  if (flight_) {
    append_to_flight(rows);
    return;
  }
  writer().append(rows);
}

void Drainer::write_meta(const std::map<std::string, std::string>& meta) {
  if (flight_) {
    for (const auto& [k, v] : meta) flight_->meta[k] = v;
    return;
  }
  for (const auto& [k, v] : meta) writer().set_meta(k, v);
}

void Drainer::set_flight(store::Trace* window) {
  flight_ = window;
  if (!flight_) return;
  // The window's own process row and rank meta: what writer() puts in a part.
  for (const auto& [k, v] : rank_from_env()) flight_->meta[k] = v;
  flight_->add(process_row(*flight_));
}

store::Process Drainer::process_row(store::Trace& strings_of) {
  store::Process p;
  p.pid = pid_;
  std::string exe = self_exe();
  std::string comm = read_small_file("/proc/self/comm");
  p.name = strings_of.intern(exe.empty() ? comm : exe.substr(exe.rfind('/') + 1));
  p.parent_pid = getppid();
  return p;
}

// Pending rows (their own string table) joined to the window: strings re-interned, no frames or stacks to shift.
void Drainer::append_to_flight(const store::Trace& rows) {
  store::visit_remapped(
      rows, [&](store::StringId id) { return flight_->intern(rows.str(id)); }, 0, 0,
      [&](const auto& r) { flight_->add(r); });
}


}  // namespace stepscope::collector
