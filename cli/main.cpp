#include <cstdio>
#include <exception>

#include "command.h"
#include "stepscope/store/store.h"
#include "stepscope_version.h"

namespace stepscope::cli {

std::vector<std::pair<int, CommandSetup>>& registered_commands() {
  static std::vector<std::pair<int, CommandSetup>> commands;
  return commands;
}

CommandRegistration::CommandRegistration(int order, CommandSetup setup) {
  registered_commands().emplace_back(order, std::move(setup));
}

}  // namespace stepscope::cli

int main(int argc, char** argv) {
  using namespace stepscope;
  CLI::App app{"stepscope: find why GPU training steps are slow (launch overhead, input pipeline, syncs)"};
  app.set_version_flag("--version", std::string("stepscope ") + STEPSCOPE_VERSION);
  app.require_subcommand(1);
  app.fallthrough(false);

  int exit_code = 0;
  auto commands = cli::registered_commands();
  std::stable_sort(commands.begin(), commands.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [order, setup] : commands) setup(app, exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const store::StoreError& e) {
    std::fprintf(stderr, "stepscope: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepscope: %s\n", e.what());
    return 2;
  }
  return exit_code;
}
