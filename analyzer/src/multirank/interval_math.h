// Interval unions for the multi-rank reduction (internal).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace stepscope::analyzer::multirank {

struct Span {
  int64_t start = 0, end = 0;
};

// Sorted, disjoint union of `v`.
inline std::vector<Span> union_of(std::vector<Span> v) {
  std::sort(v.begin(), v.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  std::vector<Span> out;
  for (const auto& s : v) {
    if (!out.empty() && s.start <= out.back().end)
      out.back().end = std::max(out.back().end, s.end);
    else
      out.push_back(s);
  }
  return out;
}

inline int64_t total(const std::vector<Span>& u) {
  int64_t n = 0;
  for (const auto& s : u) n += s.end - s.start;
  return n;
}

// Length of [a, b) covered by the sorted, disjoint union `u`.
inline int64_t covered(const std::vector<Span>& u, int64_t a, int64_t b) {
  auto it = std::upper_bound(u.begin(), u.end(), a, [](int64_t v, const Span& s) { return v < s.end; });
  int64_t n = 0;
  for (; it != u.end() && it->start < b; ++it) n += std::min(b, it->end) - std::max(a, it->start);
  return n;
}

}  // namespace stepscope::analyzer::multirank
