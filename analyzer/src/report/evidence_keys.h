// How an evidence field is shown, judged by its key: one reading for the HTML, text and Markdown renderers.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "report/report_util.h"

namespace stepscope::analyzer::evidence {

// Rows a table shows, items a list shows; the rest are counted.
constexpr size_t kMaxEvidenceRows = 12;

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Keys whose words alone do not say what they are: the label a person reads instead.
inline const char* worded_label(std::string_view key) {
  struct Word {
    std::string_view key;
    const char* label;
  };
  static constexpr Word kWords[] = {
      {"share_for_severity", "share of the steady steps' time (sets the severity)"},
      {"high_at", "high from"},
      {"medium_at", "medium from"},
      {"threshold_margin", "margin around a threshold"},
      {"near_threshold", "within that margin of a threshold"},
      {"steady_steps", "steps counted (warm-up left out)"},
      {"saving_model", "how the saving is estimated"},
      {"assumed_parallel_loaders", "loaders in parallel the estimate assumes"},
      {"hidden_behind_gpu_work_share", "waiting while the GPU was busy anyway"},
      {"input_idle_share", "idle waiting for input"},
      {"data_wait_share", "host waiting for input"},
      {"host_data_wait_us_per_step", "host waiting for input per step"},
      {"gpu_idle_while_waiting_us_per_step", "GPU idle while the host waits, per step"},
      {"activity_source", "host activity from"},
      {"loader", "data loader"},
      {"residual_gap_us_per_kernel", "gap left per kernel after fusing"},
      {"long_gap_min_us", "a gap counts as long from"},
      {"launch_call_idle_us", "GPU idle inside launch calls"},
      {"host_code_idle_us", "GPU idle while the host ran its own code"},
      {"host_bound_share", "GPU waiting for the host"},
      {"host_bound_share_of_gpu_idle", "that wait, of all the GPU's idle time"},
      {"host_compute_share", "GPU idle in long host gaps"},
      {"kernels_shorter_than_launch", "kernels shorter than their launch call"},
      {"short_kernel_fraction", "share of kernels shorter than their launch call"},
      {"mean_launch_call_us", "mean launch call"},
      {"runs", "loops"},
      {"mean_run_length", "kernels per loop"},
      {"launched_from", "launched from"},
      {"fusion_candidates", "kernel sequences to fuse"},
      {"not_blocking", "calls that did not block"},
      {"outside_steps", "outside the steps"},
      {"simt_share_of_gemm_conv", "GEMM/conv time without tensor cores"},
      {"simt_fp32_us", "FP32 GEMM/conv time without tensor cores"},
      {"compiled_fused_kernel_share", "time in compiler-fused kernels"},
      {"gap_us_total", "gaps between their kernels"},
      {"gaps_per_step", "GPU gaps per step"},
      {"profiler_correction", "profiler's own launch cost removed"},
      {"cost_us_per_launch", "profiler cost per launch"},
      {"removed_us", "removed in all"},
      {"step_source", "steps found from"},
  };
  for (const Word& w : kWords)
    if (w.key == key) return w.label;
  return nullptr;
}

// "gpu_idle_while_waiting_us_per_step" → "GPU idle while waiting per step" (the unit goes with the value).
inline std::string label_of(std::string_view key) {
  if (const char* worded = worded_label(key)) return worded;
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

// The key a nested object's value is formatted by: under a time key ("longer_than_median_us": {"compute": -8})
// the inner numbers are times too (they read "compute -8", without the unit).
inline std::string nested_key(std::string_view outer, std::string_view inner) {
  if (is_time(outer) && !is_time(inner) && !is_share(inner)) return std::string(inner) + "_us";
  return std::string(inner);
}

// A string value in words where the JSON keeps a terse token: the launch-overhead rule's GPU-gap buckets
// ("<10us" → "< 10 µs"); anything else unchanged.
inline std::string_view worded_value(std::string_view key, std::string_view v) {
  if (key != "bucket") return v;
  struct Word {
    std::string_view token, words;
  };
  static constexpr Word kBuckets[] = {
      {"<10us", "< 10 µs"}, {"10-200us", "10–200 µs"}, {"200us-1ms", "200 µs–1 ms"}, {">=1ms", "≥ 1 ms"}};
  for (const Word& w : kBuckets)
    if (w.token == v) return w.words;
  return v;
}

// Byte counts ("bytes", "copied_bytes"): 251658240 reads "240 MiB", not a number to count the digits of.
inline bool is_bytes(std::string_view key) {
  return key == "bytes" || ends_with(key, "_bytes");
}

// A number as the key says: a time with its unit, a share as a percentage, bytes in binary units, an
// integer, else 3 digits.
inline std::string number(std::string_view key, double d) {
  if (is_time(key)) return report_util::format_us(d);
  if (is_share(key)) return report_util::format_share(d);
  if (is_bytes(key)) return units::format_bytes(d);
  if (d == std::floor(d) && std::fabs(d) < 1e15) return fmt::format("{}", int64_t(d));
  return fmt::format("{:.3g}", d);
}

}  // namespace stepscope::analyzer::evidence
