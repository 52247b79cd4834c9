// --config for `stepscope diff`: a TOML subset or JSON with the same keys (docs/ci.md lists them).
//   [thresholds] step_time_median step_time_p90 gpu_busy_share data_wait_share launch_idle_share sync_idle_share
//                kernel_regression_us kernel_regression_ratio
//   [test]       alpha skip_first_steps seed bootstrap_resamples
//   [report]     top_kernels fail_on_new_findings
#include <fmt/format.h>
#include <simdjson.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <variant>

#include "stepscope/analyzer/diff.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

namespace {

using Value = std::variant<double, std::string, bool>;

struct Setter {
  const char* key;  // "table.key"
  void (*apply)(DiffConfig&, const Value&, const std::string& where);
};

[[noreturn]] void fail(const std::string& where, const std::string& why) { throw store::StoreError(where, why); }

double number(const Value& v, const std::string& where, const char* key) {
  if (!std::holds_alternative<double>(v)) fail(where, std::string(key) + " must be a number");
  return std::get<double>(v);
}

double non_negative(const Value& v, const std::string& where, const char* key) {
  double d = number(v, where, key);
  if (!(d >= 0) || !std::isfinite(d)) fail(where, std::string(key) + " must be a number >= 0");
  return d;
}

// A share's threshold is a change of a fraction of the step (0.03 = 3 points): 5 could never be passed.
double share_change(const Value& v, const std::string& where, const char* key) {
  double d = number(v, where, key);
  if (!(d >= 0 && d <= 1))
    fail(where, std::string(key) + " must be a fraction of the step between 0 and 1 (0.03 = 3 points)");
  return d;
}

int64_t integer(const Value& v, const std::string& where, const char* key, int64_t lo, int64_t hi) {
  double d = number(v, where, key);
  if (d != std::floor(d) || d < double(lo) || d > double(hi))
    fail(where, std::string(key) + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(d);
}

const Setter kSetters[] = {
    {"thresholds.step_time_median",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.step_time_median = non_negative(v, w, "thresholds.step_time_median");
     }},
    {"thresholds.kernel_regression_us",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.kernel_regression_us = non_negative(v, w, "thresholds.kernel_regression_us");
     }},
    {"thresholds.kernel_regression_ratio",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.kernel_regression_ratio = non_negative(v, w, "thresholds.kernel_regression_ratio");
     }},
    {"thresholds.step_time_p90",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.step_time_p90 = non_negative(v, w, "thresholds.step_time_p90");
     }},
    {"thresholds.gpu_busy_share",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.gpu_busy_share = share_change(v, w, "thresholds.gpu_busy_share");
     }},
    {"thresholds.data_wait_share",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.data_wait_share = share_change(v, w, "thresholds.data_wait_share");
     }},
    {"thresholds.launch_idle_share",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.launch_idle_share = share_change(v, w, "thresholds.launch_idle_share");
     }},
    {"thresholds.sync_idle_share",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.sync_idle_share = share_change(v, w, "thresholds.sync_idle_share");
     }},
    {"test.alpha",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       double a = number(v, w, "test.alpha");
       if (!(a > 0 && a < 1)) fail(w, "test.alpha must lie strictly between 0 and 1");
       c.alpha = a;
     }},
    {"test.skip_first_steps",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.skip_first_steps = int(integer(v, w, "test.skip_first_steps", 0, 1000000));
     }},
    {"test.seed",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.seed = uint64_t(integer(v, w, "test.seed", 0, int64_t(1) << 52));
     }},
    {"test.bootstrap_resamples",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.bootstrap_resamples = int(integer(v, w, "test.bootstrap_resamples", 0, 100000));
     }},
    {"report.top_kernels",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       c.top_kernels = int(integer(v, w, "report.top_kernels", 0, 10000));
     }},
    {"report.fail_on_new_findings",
     [](DiffConfig& c, const Value& v, const std::string& w) {
       if (!std::holds_alternative<std::string>(v)) fail(w, "report.fail_on_new_findings must be a string");
       const auto& s = std::get<std::string>(v);
       if (s != "none" && s != "low" && s != "medium" && s != "high")
         fail(w, "report.fail_on_new_findings must be \"none\", \"low\", \"medium\" or \"high\"");
       c.fail_on_new_findings = s;
     }},
};

void apply(DiffConfig& c, const std::string& key, const Value& v, const std::string& where) {
  for (const auto& s : kSetters)
    if (key == s.key) {
      s.apply(c, v, where);
      return;
    }
  fail(where, "unknown setting '" + key + "'");
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

bool bare_key(const std::string& k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

DiffConfig parse_toml(const std::string& text, const std::string& name) {
  DiffConfig c;
  std::set<std::string> seen;
  std::istringstream in(text);
  std::string line, table;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    std::string where = name + ":" + std::to_string(lineno);
    // Strip a comment that is not inside a string.
    {
      char quote = 0;
      for (size_t i = 0; i < line.size(); ++i) {
        char ch = line[i];
        if (quote) {
          if (ch == '\\' && quote == '"') ++i;
          else if (ch == quote) quote = 0;
        } else if (ch == '"' || ch == '\'') {
          quote = ch;
        } else if (ch == '#') {
          line.resize(i);
          break;
        }
      }
    }
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3 || line[1] == '[') fail(where, "expected a [table] header");
      table = trim(line.substr(1, line.size() - 2));
      if (table != "thresholds" && table != "test" && table != "report") fail(where, "unknown table [" + table + "]");
      continue;
    }
    size_t eq = line.find('=');
    if (eq == std::string::npos) fail(where, "expected key = value");
    std::string key = trim(line.substr(0, eq)), raw = trim(line.substr(eq + 1));
    if (!bare_key(key)) fail(where, "bad key '" + key + "'");
    if (raw.empty()) fail(where, "missing value for '" + key + "'");
    Value v;
    if (raw.front() == '"' || raw.front() == '\'') {
      char q = raw.front();
      if (raw.size() < 2 || raw.back() != q) fail(where, "unterminated string");
      std::string s = raw.substr(1, raw.size() - 2);
      if (s.find(q) != std::string::npos || s.find('\\') != std::string::npos) fail(where, "unsupported string escape");
      v = s;
    } else if (raw == "true" || raw == "false") {
      v = raw == "true";
    } else {
      std::string digits;
      for (char ch : raw)
        if (ch != '_') digits += ch;
      char* end = nullptr;
      errno = 0;
      double d = std::strtod(digits.c_str(), &end);
      if (end == digits.c_str() || *end != '\0' || errno == ERANGE) {
        // "5%": thresholds are fractions (and change in the units docs/ci.md gives): say which number was
        // meant.
        std::string hint;
        if (!digits.empty() && digits.back() == '%') {
          char* pend = nullptr;
          const double pct = std::strtod(digits.c_str(), &pend);
          if (pend == digits.c_str() + digits.size() - 1)
            hint = fmt::format(" (a fraction: {:g} for {})", pct / 100, raw);
        }
        fail(where, "bad value '" + raw + "' for '" + key +
                        "': expected a number, a quoted string or true/false" + hint);
      }
      v = d;
    }
    std::string full = table.empty() ? key : table + "." + key;
    // TOML forbids a key twice; silently taking the last hid an edit that did nothing.
    if (!seen.insert(full).second) fail(where, "'" + full + "' is set twice");
    apply(c, full, v, where);
  }
  return c;
}

DiffConfig parse_json(const std::string& text, const std::string& name) {
  DiffConfig c;
  std::set<std::string> seen;
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element root;
  auto err = parser.parse(padded).get(root);
  if (err) fail(name, std::string("invalid JSON: ") + simdjson::error_message(err));
  simdjson::dom::object top;
  if (root.get_object().get(top) != simdjson::SUCCESS) fail(name, "the configuration must be a JSON object");
  for (auto table : top) {
    std::string tname(table.key);
    if (tname != "thresholds" && tname != "test" && tname != "report") fail(name, "unknown table '" + tname + "'");
    simdjson::dom::object fields;
    if (table.value.get_object().get(fields) != simdjson::SUCCESS) fail(name, "'" + tname + "' must be an object");
    for (auto field : fields) {
      std::string key = tname + "." + std::string(field.key);
      Value v;
      simdjson::dom::element e = field.value;
      bool b = false;
      double dnum = 0;
      std::string_view str;
      if (e.get_bool().get(b) == simdjson::SUCCESS) v = b;
      else if (e.get_double().get(dnum) == simdjson::SUCCESS) v = dnum;
      else if (e.get_string().get(str) == simdjson::SUCCESS) v = std::string(str);
      else fail(name, "'" + key + "' must be a number, string or boolean");
      if (!seen.insert(key).second) fail(name, "'" + key + "' is set twice");
      apply(c, key, v, name);
    }
  }
  return c;
}

}  // namespace

// Settings that are each valid but together make a gate that can never fail.
void check_together(const DiffConfig& c, const std::string& name) {
  // A bootstrap p-value is at least 1/B, and Holm multiplies the smallest by the six metrics: below 6/B no
  // metric could ever be significant (alpha = 0.001 with 2,000 resamples passed a +794% step time as
  // unchanged).
  const int b = c.test_resamples();
  const double least = 6.0 / double(b);
  if (least > c.alpha) {
    char buf[320];
    std::snprintf(
        buf, sizeof buf,
        "test.alpha = %g cannot be reached with %d bootstrap resamples: the least p-value they can give, "
        "corrected over the six metrics, is 6/%d = %.4g, so no metric could ever be significant; set "
        "test.bootstrap_resamples to %d or more, or raise test.alpha",
        c.alpha, b, b, least, int(std::ceil(6.0 / c.alpha)));
    fail(name, buf);
  }
}

DiffConfig parse_diff_config(const std::string& text, const std::string& name) {
  size_t first = text.find_first_not_of(" \t\r\n");
  DiffConfig c =
      first != std::string::npos && text[first] == '{' ? parse_json(text, name) : parse_toml(text, name);
  check_together(c, name);
  return c;
}

DiffConfig load_diff_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw store::StoreError(path, "is a folder, not a configuration file");
  errno = 0;
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw store::StoreError(path, std::string("cannot open the configuration file: ") +
                                      (errno ? std::strerror(errno) : "unreadable"));
  std::string text((std::istreambuf_iterator<char>(f)), {});
  if (f.bad()) throw store::StoreError(path, "cannot read the configuration file");
  return parse_diff_config(text, path);
}

}  // namespace stepscope::analyzer
