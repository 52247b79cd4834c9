#include "export/sample_stacks.h"

#include <map>
#include <unordered_map>

#include "stepscope/analyzer/display_names.h"

namespace stepscope::analyzer {

using namespace stepscope::store;

SampleStacks sample_stacks(const Trace& t) {
  SampleStacks out;
  std::unordered_map<int64_t, const Frame*> frames;
  for (const auto& f : t.frames) frames[f.id] = &f;
  std::unordered_map<int64_t, const Stack*> stacks;
  for (const auto& s : t.stacks) stacks[s.id] = &s;

  std::unordered_map<std::string, int32_t> frame_index;
  auto frame_id = [&](const std::string& name) {
    auto [it, added] = frame_index.emplace(name, int32_t(out.frames.size()));
    if (added) out.frames.push_back(name);
    return it->second;
  };
  // Store stacks that differ only in what is not shown (hook frames, addresses of one function) are one
  // stack.
  std::map<std::vector<int32_t>, int32_t> stack_index;
  auto stack_id = [&](std::vector<int32_t> frames_outer_first) {
    auto [it, added] = stack_index.emplace(frames_outer_first, int32_t(out.stacks.size()));
    if (added) out.stacks.push_back(std::move(frames_outer_first));
    return it->second;
  };

  std::unordered_map<int64_t, std::vector<int32_t>> walked;  // store stack id → frame indexes, leaf first
  auto walk = [&](int64_t id) -> const std::vector<int32_t>& {
    auto it = walked.find(id);
    if (it != walked.end()) return it->second;
    std::vector<int32_t> leaf_first;
    for (int64_t node = id, hops = 0; node && hops < 100000; ++hops) {
      auto s = stacks.find(node);
      if (s == stacks.end()) break;
      auto f = frames.find(s->second->frame);
      node = s->second->parent;
      // A --step-func/--data-wait-func trampoline sits between the caller and the hooked function: it is the
      // profiler's, so it stays out of the program's stacks, and time in it alone is named as ours.
      if (f != frames.end() && is_profiler_python_frame(t, *f->second)) {
        if (is_profiler_owned_python_frame(t, *f->second)) leaf_first.clear();  // what it called is ours too
        if (leaf_first.empty()) leaf_first.push_back(frame_id("[stepscope hook]"));
        continue;
      }
      leaf_first.push_back(
          frame_id(f == frames.end() ? std::string("??") : frame_display_name(t, *f->second)));
    }
    return walked.emplace(id, std::move(leaf_first)).first->second;
  };
  // (store stack id, on CPU) → index into out.stacks
  std::map<std::pair<int64_t, bool>, int32_t> sample_stack;

  std::map<int64_t, std::string> process_names;
  for (const auto& p : t.processes) process_names[p.pid] = t.str(p.name);
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  for (const auto& th : t.threads) thread_names[{th.pid, th.tid}] = t.str(th.name);
  auto label = [](const std::string* name, const char* fallback, int64_t id) {
    return (name && !name->empty() ? *name : std::string(fallback)) + " (" + std::to_string(id) + ")";
  };

  std::map<std::pair<int64_t, int64_t>, SampleStacks::Thread> by_thread;
  for (const auto& s : t.samples) {
    auto [th, added] = by_thread.try_emplace({s.pid, s.tid});
    if (added) {
      th->second.pid = s.pid, th->second.tid = s.tid;
      auto p = process_names.find(s.pid);
      auto n = thread_names.find({s.pid, s.tid});
      th->second.process = label(p == process_names.end() ? nullptr : &p->second, "process", s.pid);
      th->second.thread = label(n == thread_names.end() ? nullptr : &n->second, "thread", s.tid);
    }
    auto [st, fresh] = sample_stack.try_emplace({s.stack, s.on_cpu}, 0);
    if (fresh) {
      std::vector<int32_t> outer_first;
      if (s.stack) {
        const auto& leaf_first = walk(s.stack);
        outer_first.assign(leaf_first.rbegin(), leaf_first.rend());
      }
      if (!s.on_cpu) outer_first.push_back(frame_id("[off CPU]"));
      st->second = stack_id(std::move(outer_first));
    }
    // A sample that stands for several periods weighs as many.
    th->second.samples.push_back({st->second, s.periods});
    th->second.total += s.periods;
    out.total += s.periods;
  }
  for (auto& [key, th] : by_thread) out.threads.push_back(std::move(th));
  return out;
}

}  // namespace stepscope::analyzer
