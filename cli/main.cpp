#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

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

int terminal_columns() {
  if (const char* env = std::getenv("COLUMNS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  winsize ws{};
  if (::isatty(1) && ::ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 0;
}

namespace {

// A unit after a figure, with what punctuation follows it: "ms", "µs)", "MiB,".
bool is_unit(std::string_view word) {
  while (!word.empty() && std::strchr(").,;:]", word.back())) word.remove_suffix(1);
  for (const char* unit : {"ns", "µs", "us", "ms", "s",  "min", "h",     "B",    "KiB",     "MiB",     "GiB",
                           "KB", "MB", "GB", "kB", "pp", "%",   "steps", "step", "samples", "kernels", "x"})
    if (word == unit) return true;
  return false;
}

}  // namespace

std::string wrapped_to(const std::string& text, int width, size_t hang_unindented) {
  if (width <= 0) return text;
  const auto columns = [](std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  };
  const size_t w = size_t(width);
  std::string out;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    const bool newline = end != std::string::npos;
    if (!newline) end = text.size();
    const std::string_view line(text.data() + begin, end - begin);
    if (columns(line) <= w) {
      out.append(line);
    } else {
      const size_t indent = std::min(line.find_first_not_of(' '), line.size());
      // A numbered item ("12. ...") continues under its text, anything else two columns in.
      size_t hang = indent == 0 ? hang_unindented : 2;
      if (const size_t digits = line.find_first_not_of("0123456789", indent);
          digits > indent && digits != std::string_view::npos && line.substr(digits, 2) == ". ")
        hang = digits - indent + 2;
      const size_t more = std::min(indent + hang, w / 2);
      size_t used = indent;
      bool has_word = false;
      out.append(indent, ' ');
      // Words split at single spaces (a run of spaces inside the line keeps its width); a figure keeps its
      // unit
      // ("3.83 ms" is not broken).
      for (size_t at = indent; at <= line.size();) {
        size_t space = line.find(' ', at);
        if (space == std::string_view::npos) space = line.size();
        while (space < line.size() && space > at &&
               std::isdigit(static_cast<unsigned char>(line[space - 1]))) {
          size_t next = line.find(' ', space + 1);
          if (next == std::string_view::npos) next = line.size();
          if (!is_unit(line.substr(space + 1, next - space - 1))) break;
          space = next;
        }
        const std::string_view word = line.substr(at, space - at);
        at = space + 1;
        if (word.empty() && !has_word) continue;  // no leading space on a continued line
        const size_t cols = columns(word);
        if (has_word && used + 1 + cols > w) {
          while (!out.empty() && out.back() == ' ') out.pop_back();
          out.append("\n").append(more, ' ');
          used = more, has_word = false;
          if (word.empty()) continue;
        }
        if (has_word) out += ' ', ++used;
        out.append(word);
        used += cols, has_word = true;
      }
    }
    if (!newline) break;
    out += '\n';
    begin = end + 1;
  }
  return out;
}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

// CLI11 names what it could not place, not why ("The following argument was not expected: true" for
// `record --cpuhz 100 -- true`): the first word that looks like an option of `sub` and is none, with the
// nearest option it has; or, for a command run by `sub` (record), that options after it need a `--` before
// it.
std::string unexpected_argument_reason(const CLI::App& sub, const std::vector<std::string>& args) {
  const bool runs_a_command = sub.get_option_no_throw("command") != nullptr;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return {};
    if (a.size() < 2 || a[0] != '-' || (a[1] >= '0' && a[1] <= '9')) {  // a value, a file, or the command
      if (runs_a_command) return {};                                    // what follows is the command's own
      continue;
    }
    const std::string name = a.substr(0, a.find('='));
    if (const CLI::Option* o = sub.get_option_no_throw(name)) {
      if (a.find('=') == std::string::npos && o->get_items_expected_min() > 0) ++i;  // its value
      continue;
    }
    std::string nearest;
    size_t best = 3;  // at most two edits away
    for (const CLI::Option* o : sub.get_options())
      for (const std::string& l : o->get_lnames())
        if (const size_t d = edit_distance(name.substr(name.find_first_not_of('-')), l); d < best)
          best = d, nearest = "--" + l;
    return "unknown option " + name + (nearest.empty() ? std::string() : " (did you mean " + nearest + "?)");
  }
  return {};
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
    // The command is the first argument that names one (a later one is the recorded program's argument).
    std::string where = "stepscope";
    const CLI::App* command = nullptr;
    int command_at = 0;
    for (int i = 1; i < argc && !command; ++i)
      for (const CLI::App* sc : app.get_subcommands([](CLI::App*) { return true; }))
        if (sc->check_name(argv[i])) {
          command = sc, command_at = i;
          where += std::string(" ") + argv[i];
          break;
        }
    std::string what = e.what();
    if (where == "stepscope" && argc > 1 && argv[1][0] != '-') what = std::string("unknown command '") + argv[1] + "'";
    if (dynamic_cast<const CLI::ExtrasError*>(&e) && argc > 1 && argv[1][0] == '-' && command)
      what = std::string("options go after the command's name (") + where + " " + argv[1] + " ...)";
    else if (dynamic_cast<const CLI::ExtrasError*>(&e) && command) {
      if (std::string why = cli::unexpected_argument_reason(
              *command, std::vector<std::string>(argv + command_at + 1, argv + argc));
          !why.empty())
        what = why;
      else if (command->get_option_no_throw("command") &&
               std::find(argv + command_at, argv + argc, std::string("--")) == argv + argc)
        what += "; options after the command are the command's own: put -- before it (stepscope " +
                command->get_name() + " [options] -- COMMAND ARGS...)";
    }
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
