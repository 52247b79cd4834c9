#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

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

void refuse_without_collector(CLI::App* cmd, int& exit_code) {
  cmd->callback([&exit_code]() {
    std::fprintf(stderr, "stepscope: this build has no collector\n");
    exit_code = 2;
  });
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
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, as every other error: what was wrong and where the usage is.
    std::string where = "stepscope";
    const auto all = app.get_subcommands([](CLI::App*) { return true; });
    for (int i = 1; i < argc && where == "stepscope"; ++i)
      for (const CLI::App* sc : all)
        if (sc->check_name(argv[i])) where += std::string(" ") + argv[i];
    std::string what = e.what();
    if (where == "stepscope" && argc > 1 && argv[1][0] != '-') what = std::string("unknown command '") + argv[1] + "'";
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::fprintf(stderr, "stepscope: %s (usage: %s --help)\n", what.c_str(), where.c_str());
    return 2;
  } catch (const store::StoreError& e) {
    std::fprintf(stderr, "stepscope: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stepscope: %s\n", e.what());
    return 2;
  }
  return exit_code;
}
