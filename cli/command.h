// `stepscope` subcommands register themselves; main.cpp only dispatches. One cmd_*.cpp per subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <regex>
#include <string>
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

// A number 0 or more (`whole`: an int), refused in one line: "-1: must be 0 or more". CLI::NonNegativeNumber
// said "Value -1 not in range 0.000000 to " and DBL_MAX's 309 digits.
inline CLI::Validator at_least_zero(bool whole) {
  return CLI::Validator(
      [whole](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = whole ? double(std::strtoll(v.c_str(), &end, 10)) : std::strtod(v.c_str(), &end);
        if (v.empty() || *end || errno || x != x || (whole && x > 2147483647))
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

// All registered commands, ordered by `order` (the order --help lists them in).
std::vector<std::pair<int, CommandSetup>>& registered_commands();

}  // namespace stepscope::cli
