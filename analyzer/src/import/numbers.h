// Exact parsing of JSON number text. Kineto writes µs timestamps like 1712195495505583.125; a double holds
// only ~16 significant digits, so converting through double would lose nanoseconds. We read the text.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace stepscope::analyzer::import {

// JSON's whitespace: what may follow a number's token.
inline bool is_json_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Parses a decimal number and returns round(value * 10^scale_digits) (half away from zero).
// Handles sign, fraction and exponent; falls back to double for numbers too long for int64.
inline bool parse_scaled(std::string_view s, int scale_digits, int64_t& out) {
  // Fast path, what traces hold: [-]digits[.digits], at most 18 digits in all, then no exponent.
  {
    const char* p = s.data();
    const char* e = p + s.size();
    bool neg = p < e && *p == '-';
    p += neg;
    uint64_t mant = 0;
    int digits = 0, frac = 0;
    while (p < e && unsigned(*p - '0') < 10 && digits < 18) mant = mant * 10 + unsigned(*p++ - '0'), ++digits;
    if (p < e && *p == '.') {
      ++p;
      while (p < e && unsigned(*p - '0') < 10 && digits < 18)
        mant = mant * 10 + unsigned(*p++ - '0'), ++digits, ++frac;
    }
    // The number ends the token or a space does ("25738 (python)"): "12abc" and "0x10" are no number.
    bool clean = digits > 0 && (p == e || is_json_space(*p));
    if (clean && frac <= 18 && scale_digits >= 0 && scale_digits <= 18) {
      int shift = scale_digits - frac;
      static constexpr uint64_t kPow10[19] = {1ull,
                                              10ull,
                                              100ull,
                                              1000ull,
                                              10000ull,
                                              100000ull,
                                              1000000ull,
                                              10000000ull,
                                              100000000ull,
                                              1000000000ull,
                                              10000000000ull,
                                              100000000000ull,
                                              1000000000000ull,
                                              10000000000000ull,
                                              100000000000000ull,
                                              1000000000000000ull,
                                              10000000000000000ull,
                                              100000000000000000ull,
                                              1000000000000000000ull};
      bool ok = true;
      if (shift >= 0) {
        if (mant > static_cast<uint64_t>(INT64_MAX) / kPow10[shift])
          ok = false;
        else
          mant *= kPow10[shift];
      } else {
        uint64_t p10 = kPow10[-shift];
        uint64_t q = mant / p10, r = mant % p10;
        mant = q + (r * 2 >= p10 ? 1 : 0);  // half away from zero
      }
      if (ok) {
        out = neg ? -static_cast<int64_t>(mant) : static_cast<int64_t>(mant);
        return true;
      }
    }
  }
  size_t i = 0, n = s.size();
  while (i < n && is_json_space(s[i])) ++i;
  bool neg = false;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  // Collect up to 19 significant digits (epoch ns need 19) as an integer mantissa with a decimal exponent.
  uint64_t mant = 0;
  int digits = 0, exp10 = 0;
  bool any = false, round_up = false, dropped = false;
  auto take = [&](char c, bool frac) {
    any = true;
    if (digits < 19) {  // 19 digits always fit in uint64
      if (mant != 0 || c != '0') ++digits;
      mant = mant * 10 + static_cast<uint64_t>(c - '0');
      if (frac) --exp10;
    } else {
      if (!dropped) round_up = c >= '5';
      dropped = true;
      if (!frac) ++exp10;
    }
  };
  while (i < n && s[i] >= '0' && s[i] <= '9') take(s[i++], false);
  if (i < n && s[i] == '.') {
    ++i;
    while (i < n && s[i] >= '0' && s[i] <= '9') take(s[i++], true);
  }
  if (!any) return false;
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    bool eneg = false;
    if (i < n && (s[i] == '-' || s[i] == '+')) eneg = s[i++] == '-';
    int e = 0;
    bool edig = false;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
      edig = true;
      if (e < 10000) e = e * 10 + (s[i] - '0');
      ++i;
    }
    if (!edig) return false;
    exp10 += eneg ? -e : e;
  }
  // Only spaces may follow ("12abc", "0x10": no number).
  if (i < n && !is_json_space(s[i])) return false;
  if (round_up) ++mant;
  exp10 += scale_digits;
  // value = mant * 10^exp10
  if (exp10 >= 0) {
    for (int k = 0; k < exp10; ++k) {
      if (mant > static_cast<uint64_t>(INT64_MAX) / 10) return false;
      mant *= 10;
    }
  } else {
    int drop = -exp10;
    if (drop > 19) {
      mant = 0;
    } else {
      uint64_t p = 1;
      for (int k = 0; k < drop - 1; ++k) p *= 10;
      uint64_t q = mant / p;  // one extra digit kept for rounding
      mant = q / 10 + ((q % 10) >= 5 ? 1 : 0);
    }
  }
  if (mant > static_cast<uint64_t>(INT64_MAX)) return false;
  out = neg ? -static_cast<int64_t>(mant) : static_cast<int64_t>(mant);
  return true;
}

// Sums and differences of times from a file: two's-complement wrap where int64 would overflow (a hostile
// file's nonsense stays nonsense, not undefined behaviour).
inline int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrapping_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

// µs text → integer ns.
inline int64_t us_text_to_ns(std::string_view s) {
  int64_t v = 0;
  if (parse_scaled(s, 3, v)) return v;
  return static_cast<int64_t>(std::llround(std::strtod(std::string(s).c_str(), nullptr) * 1000.0));
}

// The widest time or duration a file may give: ±4e18 ns (±126 years), so that the difference of two stays in int64.
inline constexpr int64_t kMaxAbsTimeNs = 4'000'000'000'000'000'000;

// A JSON token of µs → integer ns; false where it is no number (a string, null, a bare word), not finite or past
// kMaxAbsTimeNs: such an event is left out and counted, not read as 0 or as INT64_MIN.
inline bool us_token_to_ns(std::string_view s, int64_t& out) {
  int64_t v = 0;
  if (!parse_scaled(s, 3, v)) {
    // Not a plain decimal (past 19 digits, a large exponent) or no number at all: only a token strtod reads whole
    // is a time. Checked here, off the path every plain number takes (the import's 1 GB/s).
    while (!s.empty() && is_json_space(s.back())) s.remove_suffix(1);
    if (s.empty() || !(s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) return false;
    for (char c : s)
      if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E')) return false;
    const std::string text(s);
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end) * 1000.0;
    if (end != text.c_str() + text.size() || !std::isfinite(d) || std::fabs(d) > double(kMaxAbsTimeNs)) return false;
    v = static_cast<int64_t>(std::llround(d));
  }
  if (v < -kMaxAbsTimeNs || v > kMaxAbsTimeNs) return false;
  out = v;
  return true;
}

// Integer text (fractions rounded).
inline int64_t int_text(std::string_view s) {
  int64_t v = 0;
  if (parse_scaled(s, 0, v)) return v;
  return static_cast<int64_t>(std::llround(std::strtod(std::string(s).c_str(), nullptr)));
}

// The last run of digits in a label such as "stream 7", "Device 0", "CUDA API Thread 169"; -1 when none.
inline int64_t trailing_number(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && !(s[end - 1] >= '0' && s[end - 1] <= '9')) --end;
  if (end == 0) return -1;
  size_t b = end;
  while (b > 0 && s[b - 1] >= '0' && s[b - 1] <= '9') --b;
  if (end - b > 18) return -1;
  int64_t v = 0;
  for (size_t k = b; k < end; ++k) v = v * 10 + (s[k] - '0');
  if (b > 0 && s[b - 1] == '-' && b == 1) v = -v;
  return v;
}

}  // namespace stepscope::analyzer::import
