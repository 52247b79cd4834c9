// The pool behind SharedName: node-based, so a name's address stays put while the set grows.
#include <mutex>
#include <set>

#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::analyzer {

namespace {

struct NamePool {
  std::mutex mutex;
  std::set<std::string, std::less<>> names;
};

NamePool& pool() {
  static NamePool p;
  return p;
}

}  // namespace

SharedName::SharedName(std::string_view text) {
  if (text.empty()) return;
  NamePool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  auto it = p.names.find(text);
  if (it == p.names.end()) it = p.names.emplace(text).first;
  text_ = &*it;
}

const std::string& SharedName::empty_text() {
  static const std::string empty;
  return empty;
}

}  // namespace stepscope::analyzer
