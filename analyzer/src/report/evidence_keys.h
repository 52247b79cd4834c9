// How an evidence field is shown, judged by its key: one reading for the HTML, text and Markdown renderers.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "report/report_util.h"

namespace stepscope::analyzer::evidence {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// "gpu_idle_while_waiting_us_per_step" → "GPU idle while waiting per step" (the unit goes with the value).
inline std::string label_of(std::string_view key) {
  std::string k(key);
  for (const char* unit : {"_us_per_step", "_us"})
    if (auto p = k.find(unit); p != std::string::npos) k.erase(p, 3);  // drop "_us", keep "_per_step"
  std::string out;
  for (char c : k) out += c == '_' ? ' ' : c;
  for (size_t p = 0; (p = out.find("gpu", p)) != std::string::npos; p += 3)  // the word, not "gpus"
    if ((p == 0 || out[p - 1] == ' ') && (p + 3 == out.size() || out[p + 3] == ' ')) out.replace(p, 3, "GPU");
  return out;
}

inline bool is_time(std::string_view key) { return ends_with(key, "_us") || key.find("_us_") != std::string_view::npos; }

inline bool is_share(std::string_view key) {
  return key.find("share") != std::string_view::npos || key.find("fraction") != std::string_view::npos ||
         key == "high_at" || key == "medium_at" || key == "threshold_margin";
}

// Fields that hold a kernel, API call, op or range name.
inline bool is_name(std::string_view key) {
  for (const char* k : {"name", "kernel", "kernels", "api", "op", "annotation", "sources", "calls", "ops", "sequence"})
    if (key == k) return true;
  return false;
}

// A number as the key says: a time with its unit, a share as a percentage, an integer, else 3 digits.
inline std::string number(std::string_view key, double d) {
  if (is_time(key)) return report_util::format_us(d);
  if (is_share(key)) return report_util::format_share(d);
  if (d == std::floor(d) && std::fabs(d) < 1e15) return fmt::format("{}", int64_t(d));
  return fmt::format("{:.3g}", d);
}

}  // namespace stepscope::analyzer::evidence
