// Times and shares in words (format/units.h).
#include "format/units.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

namespace stepscope::analyzer::units {

std::string format_us(double us) {
  char buf[64];
  double a = std::fabs(us);
  if (!std::isfinite(us)) return "n/a";
  if (a >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3g s", us / 1e6);
  else if (a >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3g ms", us / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g µs", us);
  return buf;
}

namespace {
// A fraction as a percentage in the given printf form ("n/a" when not finite).
std::string percent(const char* form, double f) {
  if (!std::isfinite(f)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, form, f * 100.0);
  return buf;
}
}  // namespace

std::string format_share(double f) {
  return percent("%.1f%%", f);
}
std::string format_signed_percent(double f) {
  return percent("%+.1f%%", f);
}
std::string format_signed_pp(double f) {
  return percent("%+.1f pp", f);
}

std::string format_ns_fixed(double ns) {
  const double us = ns / 1000.0;
  if (us >= 1e6) return fmt::format("{:.2f} s", us / 1e6);
  if (us >= 1000) return fmt::format("{:.2f} ms", us / 1000);
  return fmt::format("{:.1f} µs", us);
}

std::string format_bytes(double bytes) {
  if (!std::isfinite(bytes)) return "n/a";
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int u = 0;
  double v = bytes;
  // Past 999.5 of a unit "{:.3g}" prints an exponent ("1.02e+03 KiB"): the next unit instead.
  while (u < 5 && (u == 0 ? std::fabs(v) >= 1024 : std::fabs(v) >= 999.5)) v /= 1024, ++u;
  if (u == 0) return fmt::format("{} B", int64_t(v));
  return fmt::format("{:.3g} {}", v, kUnits[u]);
}

}  // namespace stepscope::analyzer::units
