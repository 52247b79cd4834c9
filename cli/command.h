// `stepscope` subcommands register themselves; main.cpp only dispatches. One cmd_*.cpp per subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
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

// All registered commands, ordered by `order` (the order --help lists them in).
std::vector<std::pair<int, CommandSetup>>& registered_commands();

}  // namespace stepscope::cli
