#include "stepscope/gui/range_stats.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>
#include <unordered_map>

#include "stepscope/analyzer/collector_threads.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/step_outliers.h"

namespace stepscope::gui {

const std::string& CallTree::name(const Node& n) const {
  static const std::string root = "(all)";
  return n.name < 0 ? root : shown_[n.name];
}

const std::string& CallTree::full_name(const Node& n) const {
  static const std::string root = "(all)";
  return n.name < 0 ? root : names_[n.name];
}

int32_t CallTree::intern(const std::string& full, const std::string& shown) {
  auto [it, inserted] = name_map_.emplace(full, static_cast<int32_t>(names_.size()));
  if (inserted) {
    names_.push_back(full);
    shown_.push_back(shown);
  }
  return it->second;
}

int32_t CallTree::child(int32_t parent, int32_t name) {
  // Most nodes have a few children, searched in place; a node with many (the root, a thread, a dispatcher)
  // gets its children indexed. A window's tree has hundreds of thousands of nodes: one allocation a node less.
  constexpr size_t kSearchedInPlace = 12;
  auto key_of = [parent](int32_t child_name) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) | static_cast<uint32_t>(child_name);
  };
  {
    const auto& kids = nodes_[parent].children;
    if (kids.size() <= kSearchedInPlace) {
      for (int32_t k : kids)
        if (nodes_[k].name == name) return k;
    } else if (auto it = child_map_.find(key_of(name)); it != child_map_.end()) {
      return it->second;
    }
  }
  const int32_t id = static_cast<int32_t>(nodes_.size());
  Node n;
  n.name = name;
  n.parent = parent;
  nodes_.push_back(std::move(n));
  auto& kids = nodes_[parent].children;
  kids.push_back(id);
  if (kids.size() == kSearchedInPlace + 1) {
    for (int32_t k : kids) child_map_.emplace(key_of(nodes_[k].name), k);
  } else if (kids.size() > kSearchedInPlace + 1) {
    child_map_.emplace(key_of(name), id);
  }
  return id;
}

// The indexes only serve the building: a finished tree is copied to the views and kept per range.
void CallTree::drop_indexes() {
  child_map_ = {};
  name_map_ = {};
}

// totals_from_self: total = self + Σ children totals. Otherwise `total` already holds each node's own
// weight and self = total − Σ children totals.
void CallTree::finish(bool totals_from_self) {
  // Children always have larger ids than their parent, so a reverse sweep is a post-order.
  if (totals_from_self) {
    for (auto& n : nodes_) n.total = n.self;
    for (size_t i = nodes_.size(); i-- > 1;) nodes_[nodes_[i].parent].total += nodes_[i].total;
  } else {
    for (auto& n : nodes_) n.self = n.total;
    for (size_t i = nodes_.size(); i-- > 1;) nodes_[nodes_[i].parent].self -= nodes_[i].total;
    double root = 0;
    for (int32_t c : nodes_[0].children) root += nodes_[c].total;
    nodes_[0].total = root;
    nodes_[0].self = 0;
    for (auto& n : nodes_) n.self = std::max(0.0, n.self);
  }
  for (auto& n : nodes_)
    std::stable_sort(n.children.begin(), n.children.end(),
                     [&](int32_t a, int32_t b) { return nodes_[a].total > nodes_[b].total; });
  drop_indexes();
}

void CallTree::sort_children(Order order, bool descending) {
  const auto key_less = [&](int32_t a, int32_t b) {
    const Node &x = nodes_[size_t(a)], &y = nodes_[size_t(b)];
    switch (order) {
      case Order::Name:
        return shown_[size_t(x.name)] < shown_[size_t(y.name)];
      case Order::Self:
        return x.self < y.self;
      case Order::Total:
        break;
    }
    return x.total < y.total;
  };
  for (auto& n : nodes_)
    std::stable_sort(n.children.begin(), n.children.end(),
                     [&](int32_t a, int32_t b) { return descending ? key_less(b, a) : key_less(a, b); });
}

namespace {

// A stack whose thread entry (the outermost frame below libc's clone/start_thread) is in libcupti: a thread
// CUPTI runs for the profiler. `frames` leaf first.
bool started_by_cupti(const store::Trace& t, const std::vector<uint32_t>& frames) {
  for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
    const store::Frame& fr = t.frames[*f];
    if (fr.kind != store::FrameKind::Native) return false;
    const std::string& module = t.str(fr.module);
    const std::string_view base = std::string_view(module).substr(module.rfind('/') + 1);
    if (base.rfind("libc.so", 0) == 0 || base.rfind("libpthread", 0) == 0) continue;
    return base.rfind("libcupti", 0) == 0;
  }
  return false;
}

// torch.profiler's step ranges are one node: "ProfilerStep#5" … "#10" were six subtrees, and the DataLoader's
// time under them was never summed.
std::string folded_step_name(std::string name) {
  constexpr std::string_view kStep = "ProfilerStep#";
  if (name.size() > kStep.size() && name.compare(0, kStep.size(), kStep) == 0 &&
      std::all_of(name.begin() + long(kStep.size()), name.end(),
                  [](char c) { return std::isdigit(uint8_t(c)); }))
    return std::string(kStep) + "N";
  return name;
}

}  // namespace

CallTree CallTree::from_samples(const TimelineModel& model, int64_t t0, int64_t t1, Direction dir,
                                bool collector_threads) {
  CallTree tree;
  tree.by_time_ = false;
  const store::Trace& t = model.trace();
  const analyzer::CollectorThreads own(t);
  analyzer::CollectorModules collector_code(t);
  std::unordered_map<int64_t, std::vector<int32_t>> path_cache;  // stack id → names, root first; empty: left out
  std::vector<int32_t> frame_names;                                // frame row → name id, -1 not yet
  // (thread, stack) → its leaf node, -1 when left out: a window of a long recording has tens of thousands of
  // samples whose few thousand distinct stacks run 100+ frames deep; each path is walked once, not once a sample.
  struct ThreadStackHash {
    size_t operator()(const std::pair<int64_t, int64_t>& k) const {
      return std::hash<uint64_t>{}(static_cast<uint64_t>(k.first) * 0x9E3779B97F4A7C15ULL ^ static_cast<uint64_t>(k.second));
    }
  };
  std::unordered_map<std::pair<int64_t, int64_t>, int32_t, ThreadStackHash> leaf_cache;
  std::vector<int32_t> path;
  std::unordered_map<std::pair<int64_t, int64_t>, int32_t, ThreadStackHash>
      thread_names;  // (pid, tid) → name
  for (uint32_t row : model.samples_in(t0, t1)) {
    const store::Sample& s = t.samples[row];
    if (!collector_threads && own.contains(s)) continue;
    // Keyed by process and thread (a tid below 2^32): two processes' threads with one tid stay apart.
    const auto [leaf, first] =
        leaf_cache.try_emplace({int64_t(uint64_t(s.pid) << 32 ^ uint64_t(uint32_t(s.tid))), s.stack}, -1);
    if (!first) {
      if (leaf->second >= 0) tree.nodes_[leaf->second].self += s.periods;
      continue;
    }
    auto it = path_cache.find(s.stack);
    if (it == path_cache.end()) {
      std::vector<int32_t> names;
      auto frames = model.stack_frames(s.stack);
      // v1 stores do not mark the collector's threads: its code at the leaf is the profiler's work too, and
      // so is a thread CUPTI started (launch_bound's, 2.9% of the samples, read as the program's).
      if (!collector_threads && !frames.empty() &&
          (collector_code.contains(t.frames[frames.front()]) || started_by_cupti(t, frames))) {
        path_cache.emplace(s.stack, std::vector<int32_t>{});
        continue;
      }
      for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
        // Each frame's names are made and interned once: distinct stacks share most of their frames.
        if (*f >= frame_names.size()) frame_names.resize(*f + 1, -1);
        int32_t& id = frame_names[*f];
        if (id < 0) {
          // A Python function is one node whatever line it was at (as a native function is one whatever its
          // address): split by line, numpy's roll was fifteen siblings of 2-16% each where it held 62%. The
          // sample's own line is in its details on the timeline.
          if (const store::Frame& fr = t.frames[*f]; fr.kind == store::FrameKind::Python) {
            const std::string function = t.str(fr.symbol), file = t.str(fr.file);
            id = tree.intern(function + " (" + file + ")", analyzer::python_frame_name(function, file, 0));
            if (tree.python_.size() <= size_t(id)) tree.python_.resize(size_t(id) + 1, false);
            tree.python_[size_t(id)] = true;
          } else {
            id = tree.intern(model.frame_name(*f, true), model.frame_name(*f));
          }
        }
        names.push_back(id);
      }
      if (names.empty()) names.push_back(tree.intern("(no stack)"));
      it = path_cache.emplace(s.stack, std::move(names)).first;
    }
    if (it->second.empty()) continue;
    path.clear();
    auto [thread, fresh] = thread_names.try_emplace({s.pid, s.tid}, 0);
    if (fresh) thread->second = tree.intern(model.thread_label(s.pid, s.tid));
    path.push_back(thread->second);
    path.insert(path.end(), it->second.begin(), it->second.end());
    int32_t node = 0;
    for (int32_t n : path) node = tree.child(node, n);
    leaf->second = node;
    tree.nodes_[node].self += s.periods;
  }
  tree.finish(true);
  return dir == Direction::TopDown ? tree : tree.inverted();
}

std::vector<CallTree::Function> CallTree::innermost_functions() const {
  std::vector<Function> out;
  if (by_time_ || dir_ != Direction::BottomUp) return out;
  std::unordered_map<int32_t, size_t> at;  // name id → index in out
  auto add = [&](int32_t node, double w) {
    if (w <= 0) return;
    auto [it, fresh] = at.try_emplace(nodes_[node].name, out.size());
    if (fresh) out.push_back({node, 0});
    out[it->second].weight += w;
  };
  // Below a leaf (its callers, innermost first), the first Python function on each path takes all the samples
  // through it; what no Python caller took stays with the leaf.
  std::vector<int32_t> todo;
  for (int32_t leaf : nodes_[0].children) {
    double taken = 0;
    todo.assign(1, leaf);
    while (!todo.empty()) {
      const int32_t n = todo.back();
      todo.pop_back();
      if (is_python(nodes_[n])) {
        add(n, nodes_[n].total);
        taken += nodes_[n].total;
        continue;
      }
      todo.insert(todo.end(), nodes_[n].children.begin(), nodes_[n].children.end());
    }
    add(leaf, nodes_[leaf].total - taken);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Function& a, const Function& b) { return a.weight > b.weight; });
  return out;
}

CallTree CallTree::from_ranges(const TimelineModel& model, int64_t t0, int64_t t1, Direction dir) {
  CallTree tree;
  tree.by_time_ = true;
  constexpr size_t kMaxEvents = 500000;  // a window this busy is summarized by its first half-million events
  size_t visited = 0;
  std::vector<int32_t> stack_names;
  std::vector<int64_t> stack_ends;
  for (const Track& tr : model.tracks()) {
    if (tr.kind != TrackKind::CpuRanges) continue;
    const int32_t thread = tree.intern(model.thread_label(tr.pid, tr.tid));
    // Walk every lane's visible events in start order (a k-way merge over depth lanes), keeping the
    // stack of enclosing events, so each event's path is its enclosing events on that thread.
    std::vector<size_t> pos(tr.lanes.size());
    for (size_t li = 0; li < tr.lanes.size(); ++li) pos[li] = tr.lanes[li].first_ending_after(t0);
    std::vector<int32_t> node_stack{tree.child(0, thread)};
    stack_ends.assign(1, INT64_MAX);
    for (;;) {
      int best = -1;
      for (size_t li = 0; li < tr.lanes.size(); ++li) {
        const Lane& l = tr.lanes[li];
        if (pos[li] >= l.size() || l.starts[pos[li]] >= t1) continue;
        if (best < 0 || l.starts[pos[li]] < tr.lanes[best].starts[pos[best]] ||
            (l.starts[pos[li]] == tr.lanes[best].starts[pos[best]] && static_cast<int>(li) < best))
          best = static_cast<int>(li);
      }
      if (best < 0 || ++visited > kMaxEvents) break;
      const Lane& l = tr.lanes[best];
      const size_t i = pos[best]++;
      const int64_t s = l.starts[i], e = l.end(i);
      while (stack_ends.size() > 1 && stack_ends.back() <= s) {
        stack_ends.pop_back();
        node_stack.pop_back();
      }
      const int32_t node =
          tree.child(node_stack.back(), tree.intern(folded_step_name(model.name_of(l.ref(i)))));
      tree.nodes_[node].total += static_cast<double>(std::min(e, t1) - std::max(s, t0));
      node_stack.push_back(node);
      stack_ends.push_back(e);
    }
    // A thread's time is that of its outermost events: its node had none of its own, and the root, the sum of
    // the threads, read 0 (no flame graph, "0 ns" on every thread).
    const int32_t thread_node = tree.child(0, thread);
    double outermost = 0;
    for (int32_t c : tree.nodes_[thread_node].children) outermost += tree.nodes_[c].total;
    tree.nodes_[thread_node].total = outermost;
  }
  tree.finish(false);
  return dir == Direction::TopDown ? tree : tree.inverted();
}

CallTree CallTree::for_range(const TimelineModel& model, int64_t t0, int64_t t1, Direction dir,
                             bool collector_threads) {
  if (!model.samples_in(t0, t1).empty()) return from_samples(model, t0, t1, dir, collector_threads);
  return from_ranges(model, t0, t1, dir);
}

CallTree CallTree::inverted() const {
  CallTree out;
  out.by_time_ = by_time_;
  out.dir_ = dir_ == Direction::TopDown ? Direction::BottomUp : Direction::TopDown;
  // The same names under the same ids: paths are walked by id, no name hashed again.
  out.names_ = names_;
  out.shown_ = shown_;
  out.python_ = python_;
  std::vector<int32_t> path;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.self <= 0) continue;
    // Reversed path, leaf first; the thread (top-down root level) is left out of bottom-up paths.
    path.clear();
    for (int32_t k = static_cast<int32_t>(i); k > 0 && nodes_[k].parent > 0; k = nodes_[k].parent)
      path.push_back(nodes_[k].name);
    if (path.empty()) path.push_back(n.name);
    int32_t node = 0;
    for (int32_t name : path) {
      node = out.child(node, name);
      out.nodes_[node].total += n.self;
    }
    // A root-level node of a bottom-up tree is a function; its self weight is the time spent in it.
    out.nodes_[out.child(0, path.front())].self += n.self;
  }
  double root = 0;
  for (int32_t c : out.nodes_[0].children) root += out.nodes_[c].total;
  out.nodes_[0].total = root;
  for (auto& n : out.nodes_)
    std::stable_sort(n.children.begin(), n.children.end(),
                     [&](int32_t a, int32_t b) { return out.nodes_[a].total > out.nodes_[b].total; });
  out.drop_indexes();
  return out;
}

namespace {

// The arguments of the template whose name ends at full[open - 1] (full[open] == '<'), split at its top
// level.
std::vector<std::string_view> template_arguments(std::string_view full, size_t open) {
  std::vector<std::string_view> args;
  int depth = 0;
  size_t start = open + 1;
  for (size_t i = open; i < full.size(); ++i) {
    const char c = full[i];
    if (c == '<' || c == '(' || c == '{' || c == '[') {
      ++depth;
    } else if (c == '>' || c == ')' || c == '}' || c == ']') {
      if (--depth == 0) {
        args.push_back(full.substr(start, i - start));
        return args;
      }
    } else if (c == ',' && depth == 1) {
      args.push_back(full.substr(start, i - start));
      start = i + 1;
    }
  }
  return {};  // unbalanced: no arguments to show
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// A template argument as a distinguishing word: short_symbol's form without its namespaces
// ("at::native::FillFunctor<float>" → "FillFunctor<…>").
std::string argument_word(std::string_view arg) {
  std::string s = analyzer::short_symbol(trimmed(arg));
  int depth = 0;
  size_t cut = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' || c == '(' || c == '{' || c == '[') {
      if (depth++ == 0) break;  // the qualifiers end where the first template, call or lambda begins
    } else if (c == ':' && i + 1 < s.size() && s[i + 1] == ':') {
      cut = i + 2;
    }
  }
  s.erase(0, cut);
  // A lambda's chain of enclosing lambdas and operator()s says nothing more than where it begins:
  // "launch_clamp_scalar(…)::{lambda()#1}::operator()() const::{lambda()#7}::…" →
  // "launch_clamp_scalar(…)::{lambda}".
  if (const size_t lambda = s.find("::{lambda"); lambda != std::string::npos && lambda > 0)
    s = s.substr(0, lambda) + "::{lambda}";
  return s;
}

bool numeric_argument(std::string_view arg) {
  arg = trimmed(arg);
  if (arg == "true" || arg == "false") return true;
  if (arg.empty()) return false;
  for (char c : arg)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == 'u' || c == 'l' || c == 'U' ||
          c == 'L'))
      return false;
  return true;
}

// Kernels whose short names coincide — at::native::vectorized_elementwise_kernel<…>(…) for a fill, a ReLU's
// backward and a clamp — show their template's arguments up to the first that is not a number:
// "at::native::vectorized_elementwise_kernel<4, FillFunctor<…>, …>(…)". "" when there is nothing to add.
std::string distinguishing_name(const std::string& shown, const std::string& full) {
  const size_t folded = shown.find("<…>");
  if (folded == std::string::npos) return {};
  const std::string head = shown.substr(0, folded);  // "at::native::vectorized_elementwise_kernel"
  // Found by its last name: the full name may hold what the short one dropped ("(anonymous namespace)::").
  const size_t colons = head.rfind("::");
  const std::string last = colons == std::string::npos ? head : head.substr(colons + 2);
  const size_t at = full.find(last + "<");
  if (last.empty() || at == std::string::npos) return {};
  const auto args = template_arguments(full, at + last.size());
  if (args.empty()) return {};
  std::string kept;
  size_t n = 0;
  while (n < args.size()) {
    const bool number = numeric_argument(args[n]);
    kept += (n ? ", " : "") + (number ? std::string(trimmed(args[n])) : argument_word(args[n]));
    ++n;
    if (!number) break;
  }
  if (n < args.size()) kept += ", …";
  return head + "<" + kept + ">" + shown.substr(folded + std::string_view("<…>").size());
}

}  // namespace

std::vector<KernelStat> kernel_stats(const TimelineModel& model, int64_t t0, int64_t t1) {
  std::unordered_map<std::string, KernelStat> by_name;
  std::unordered_map<uint64_t, KernelStat*> by_key;  // kernel name id (or kind | colour key)
  for (const Track& tr : model.tracks()) {
    if (tr.kind != TrackKind::GpuStream) continue;
    for (size_t li = 0; li < tr.all_lanes(); ++li) {  // a graph replay's rows, not its block
      const Lane& l = tr.lane_at(li);
      size_t i = l.first_starting_at_or_after(t0);
      for (; i < l.size() && l.starts[i] < t1; ++i) {
        const EventRef ref = l.ref(i);
        if (ref.kind == EventKind::GraphReplay) continue;
        const uint64_t key = ref.kind == EventKind::Kernel
                                 ? static_cast<uint64_t>(model.kernel_name(ref.row))
                                 : (static_cast<uint64_t>(ref.kind) << 56) | model.colour_key(ref);
        KernelStat*& st = by_key[key];
        if (!st) {
          // Grouped by the full name: kernels whose short names coincide (other template arguments) stay apart.
          std::string full = model.full_name_of(ref);
          st = &by_name[full];
          st->name = model.name_of(ref);
          st->full_name = std::move(full);
        }
        const int64_t d = l.dur(i);
        if (st->count == 0 || d < st->min_ns) st->min_ns = d;
        if (st->count == 0 || d > st->max_ns) st->max_ns = d;
        st->count += 1;
        st->total_ns += d;
      }
    }
  }
  std::vector<KernelStat> out;
  out.reserve(by_name.size());
  for (auto& [k, v] : by_name) out.push_back(std::move(v));
  std::unordered_map<std::string, int> shown_count;
  for (const auto& st : out) ++shown_count[st.name];
  for (auto& st : out)
    if (shown_count[st.name] > 1)
      if (std::string longer = distinguishing_name(st.name, st.full_name); !longer.empty())
        st.name = std::move(longer);
  std::sort(out.begin(), out.end(), [](const KernelStat& a, const KernelStat& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  return out;
}

RangeBreakdown range_breakdown(const TimelineModel& model, int64_t t0, int64_t t1) {
  RangeBreakdown out;
  out.t0 = t0;
  out.t1 = t1;
  std::vector<std::pair<int64_t, int64_t>> busy;
  for (const Track& tr : model.tracks()) {
    if (tr.kind != TrackKind::GpuStream) continue;
    for (size_t li = 0; li < tr.all_lanes(); ++li) {  // a graph replay's rows, not its block (idle inside it)
      const Lane& l = tr.lane_at(li);
      for (size_t i = l.first_ending_after(t0); i < l.size() && l.starts[i] < t1; ++i)
        if (l.kind(i) != EventKind::GraphReplay) busy.emplace_back(std::max(t0, l.starts[i]), std::min(t1, l.end(i)));
    }
  }
  std::sort(busy.begin(), busy.end());
  int64_t cur_s = 0, cur_e = INT64_MIN;
  for (const auto& [s, e] : busy) {
    if (s > cur_e) {
      if (cur_e > cur_s) out.gpu_busy_ns += cur_e - cur_s;
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  if (cur_e > cur_s) out.gpu_busy_ns += cur_e - cur_s;

  const analyzer::Analysis* a = model.analysis();
  if (!a) return out;
  const auto& cats = analyzer::step_categories();
  std::vector<double> idle(cats.size(), 0.0);
  for (const auto& st : a->steps) {
    const int64_t s = std::max(t0, st.start_ns), e = std::min(t1, st.start_ns + st.dur_ns);
    if (e <= s || st.dur_ns <= 0) continue;
    out.in_steps_ns += e - s;
    const double frac = double(e - s) / double(st.dur_ns);
    for (size_t c = 0; c < cats.size(); ++c) idle[c] += frac * double(st.*(cats[c].field));
  }
  // Without GPU activity a step is the loop's wait for input and its own work, in the host's words.
  const bool has_gpu = a->summary.has_gpu;
  for (size_t c = 0; c < cats.size(); ++c) {
    const std::string_view key = cats[c].key;
    if (key == "gpu_busy" || (!has_gpu && key != "data_wait" && key != "host_idle")) continue;
    out.idle.emplace_back(analyzer::step_category_label(cats[c], has_gpu), int64_t(std::llround(idle[c])));
  }
  return out;
}

}  // namespace stepscope::gui
