// Collapsed ("folded") stacks of the CPU samples: the flame-graph tools' input format.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "export/sample_stacks.h"
#include "stepscope/analyzer/export.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

using namespace stepscope::store;

namespace {

// ';' separates frames and the last ' ' the count: a name keeps neither meaning.
std::string folded_name(std::string s) {
  std::replace(s.begin(), s.end(), ';', ':');
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

std::string to_folded_stacks(const Trace& t) {
  const SampleStacks st = sample_stacks(t);
  std::vector<std::string> stack_text(st.stacks.size());  // ";outer;…;inner", "" for an empty stack
  for (size_t i = 0; i < st.stacks.size(); ++i)
    for (int32_t f : st.stacks[i]) stack_text[i] += ";" + folded_name(st.frames[f]);
  std::map<std::string, int64_t> counts;
  for (const auto& th : st.threads) {
    const std::string prefix = folded_name(th.process) + ";" + folded_name(th.thread);
    // Per thread first: a line's text is built once per distinct stack, not per sample.
    std::map<int32_t, int64_t> per_stack;
    for (const auto& s : th.samples) per_stack[s.stack] += s.weight;
    for (const auto& [stack, n] : per_stack) counts[prefix + stack_text[stack]] += n;
  }
  std::string out;
  for (const auto& [line, n] : counts) out += line + " " + std::to_string(n) + "\n";
  return out;
}

void export_folded_stacks(const Trace& t, const std::string& path) {
  store::write_file_atomically(path, to_folded_stacks(t));
}

}  // namespace stepscope::analyzer
