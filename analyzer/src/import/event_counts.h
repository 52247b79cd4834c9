// The importers' counts of what they left out or could not read, as meta holds them (import.dropped_events,
// import.unread_device_events): "name:count,name:count", in name order.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace stepscope::analyzer::import {

struct EventCount {
  std::string name;
  int64_t count = -1;  // -1: an item without ":count"
};

inline std::vector<EventCount> parse_event_counts(std::string_view text) {
  std::vector<EventCount> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string item(text.substr(pos, comma - pos));
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos) out.push_back({item, -1});
    else out.push_back({item.substr(0, colon), std::atoll(item.c_str() + colon + 1)});
    pos = comma + 1;
  }
  return out;
}

// Any map (or sequence) of name -> count.
template <class Counts>
std::string join_event_counts(const Counts& counts) {
  std::string s;
  for (const auto& [name, n] : counts) s += (s.empty() ? "" : ",") + std::string(name) + ":" + std::to_string(n);
  return s;
}

}  // namespace stepscope::analyzer::import
