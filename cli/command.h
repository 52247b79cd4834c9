// `stepscope` subcommands register themselves; main.cpp only dispatches. One cmd_*.cpp per subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace stepscope::cli {

// Adds a subcommand to `app`. Its callback stores the process exit code in `exit_code`.
// Throwing store::StoreError from a callback prints "stepscope: FILE: reason" and exits 2.
using CommandSetup = std::function<void(CLI::App& app, int& exit_code)>;

struct CommandRegistration {
  CommandRegistration(int order, CommandSetup setup);
};

// The callback of a subcommand this build cannot run (no collector): says so and exits 2.
void refuse_without_collector(CLI::App* cmd, int& exit_code);

// The width to fit text tables to: $COLUMNS when set (a test, or a user who wants it), else standard output's
// terminal width; 0 when neither (a pipe or a file: the fixed layout, the same from run to run).
int terminal_columns();
// `text` with each line longer than `width` columns broken at spaces, continued under its indent plus two (an
// unindented line: `hang_unindented`; a numbered item "N. ": under its text; a word longer than the line
// stays whole). UTF-8 counts a column per character. width <= 0: as it is.
std::string wrapped_to(const std::string& text, int width, size_t hang_unindented = 2);

// A number 0 or more (`whole`: an int), refused in one line: "-1: must be 0 or more". CLI::NonNegativeNumber
// said "Value -1 not in range 0.000000 to " and DBL_MAX's 309 digits.
inline CLI::Validator at_least_zero(bool whole) {
  return CLI::Validator(
      [whole](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = whole ? double(std::strtoll(v.c_str(), &end, 10)) : std::strtod(v.c_str(), &end);
        if (v.empty() || *end || errno || !std::isfinite(x) || (whole && x > 2147483647))
          return v + (whole ? ": expected a whole number, 0 or more" : ": expected a number, 0 or more");
        if (x < 0) return v + ": must be 0 or more";
        return {};
      },
      whole ? "N>=0" : "X>=0");
}

// An option that takes a regular expression (ECMAScript, as the analysis and the collector compile it): one
// that does not compile is refused as the option is read, before a file is read or a program started (the
// collector ignored it, with a line in the program's output, and the analysis named the file for it).
inline CLI::Validator regex_option() {
  return CLI::Validator(
      [](std::string& re) -> std::string {
        try {
          std::regex compiled(re, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
          return "'" + re + "' is not a regular expression (" + e.what() + ")";
        }
        return {};
      },
      "");
}

// A backslash escape at re[i] (the backslash) Python's `re` refuses in a str pattern on every CPython
// stepscope supports (3.9–3.14): a letter that is no escape (\q; in a set also \A, \B, \Z), \x without two
// hex digits, \u without four, \U without eight. "" when it is valid or not judged here (\N{...}, group
// references, \z).
inline std::string python_escape_problem(const std::string& re, size_t i, bool in_set) {
  const char c = re[i + 1];
  auto hex_digits = [&](size_t n) {
    for (size_t k = 0; k < n; ++k)
      if (i + 2 + k >= re.size() || !std::isxdigit(static_cast<unsigned char>(re[i + 2 + k]))) return false;
    return true;
  };
  const std::string at = " at position " + std::to_string(i);
  if (c == 'x' && !hex_digits(2)) return "incomplete escape \\x" + at;
  if (c == 'u' && !hex_digits(4)) return "incomplete escape \\u" + at;
  if (c == 'U' && !hex_digits(8)) return "incomplete escape \\U" + at;
  if (!std::isalpha(static_cast<unsigned char>(c)) || static_cast<unsigned char>(c) >= 0x80) return {};
  // \z: Python 3.14's \Z, refused before it; left to the program's own `re`.
  const std::string_view valid = in_set ? "abdDfnrsStvwWxuUNz" : "abBdDfnrsStvwWAZxuUNz";
  if (valid.find(c) == std::string_view::npos) return std::string("bad escape \\") + c + at;
  return {};
}

// The mistakes Python's `re` refuses whatever the pattern means, found without a Python (`record` may start
// none, and the dialect is not std::regex's: (?P<name>...), lookbehind and inline flags are valid there): an
// unbalanced parenthesis, an unterminated character set or comment, a trailing backslash, an escape that is
// none (python_escape_problem), a repeat with nothing before it. "" when none is found; the rest is left to
// re.compile in the program, which says so on its stderr. A verbose pattern ((?x): whitespace and # comments)
// is not checked.
inline std::string python_regex_problem(const std::string& re) {
  for (size_t i = re.find("(?"); i != std::string::npos; i = re.find("(?", i + 2)) {
    size_t j = i + 2;
    bool verbose = false;
    while (j < re.size() && std::string_view("aiLmsux-").find(re[j]) != std::string_view::npos)
      verbose |= re[j++] == 'x';
    if (verbose && j < re.size() && (re[j] == ')' || re[j] == ':')) return {};
  }
  std::vector<size_t> open;
  bool can_repeat = false;  // whether a *, + or ? here has something before it to repeat
  for (size_t i = 0; i < re.size(); ++i) {
    const char c = re[i];
    const std::string at = " at position " + std::to_string(i);
    if (c == '\\') {
      if (i + 1 == re.size()) return "bad escape (end of pattern)" + at;
      if (std::string e = python_escape_problem(re, i, false); !e.empty()) return e;
      ++i;
      can_repeat = true;
    } else if (c == '[') {
      size_t j = i + 1;
      if (j < re.size() && re[j] == '^') ++j;
      if (j < re.size() && re[j] == ']') ++j;  // a first ']' is itself
      for (; j < re.size() && re[j] != ']'; ++j)
        if (re[j] == '\\') {
          if (j + 1 < re.size())
            if (std::string e = python_escape_problem(re, j, true); !e.empty()) return e;
          ++j;
        }
      if (j >= re.size()) return "unterminated character set" + at;
      i = j;
      can_repeat = true;
    } else if (c == '(' && re.compare(i, 3, "(?#") == 0) {
      size_t j = i + 3;
      for (; j < re.size() && re[j] != ')'; ++j)
        if (re[j] == '\\') ++j;
      if (j >= re.size()) return "missing ), unterminated comment" + at;
      i = j;
    } else if (c == '(') {
      open.push_back(i);
      if (i + 1 < re.size() && re[i + 1] == '?') ++i;  // (?:, (?P<name>, (?=, (?i): the '?' is the group's
      can_repeat = false;
    } else if (c == ')') {
      if (open.empty()) return "unbalanced parenthesis" + at;
      open.pop_back();
      can_repeat = true;
    } else if (c == '|') {
      can_repeat = false;
    } else if (c == '*' || c == '+' || c == '?') {
      if (!can_repeat) return "nothing to repeat" + at;
      if (i + 1 < re.size() && (re[i + 1] == '?' || re[i + 1] == '+')) ++i;  // lazy (a*?) or possessive (a*+)
      can_repeat = false;
    } else {
      can_repeat = true;
    }
  }
  if (!open.empty()) return "missing ), unterminated subpattern at position " + std::to_string(open.back());
  return {};
}

// --step-func and --data-wait-func: a Python regex the program's `re` would refuse is refused as the option
// is read (the program ran to its end without steps, one line on its stderr saying the option was ignored).
inline CLI::Validator python_regex_option() {
  return CLI::Validator(
      [](std::string& re) -> std::string {
        const std::string problem = python_regex_problem(re);
        if (problem.empty()) return {};
        return "'" + re + "' is not a Python regular expression (" + problem + ")";
      },
      "");
}

// All registered commands, ordered by `order` (the order --help lists them in).
std::vector<std::pair<int, CommandSetup>>& registered_commands();

}  // namespace stepscope::cli
