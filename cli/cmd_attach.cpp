// `stepscope attach PID`, `detach PID`, `start PID`, `stop PID`: recording windows in running processes.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "command.h"
#include "recording_options.h"
#include "stepscope/store/store.h"

#ifdef HAVE_STEPSCOPE_ATTACH
#include "stepscope/collector/attach.h"
#endif

namespace stepscope::cli {
namespace {

#ifdef HAVE_STEPSCOPE_ATTACH
CommandRegistration reg_attach(11, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "attach", "Record a running process until --duration, Ctrl-C or `stepscope detach PID`; it keeps running");
  auto o = std::make_shared<collector::AttachOptions>();
  cmd->add_option("pid", o->pid, "Process to record")->required();
  add_recording_options(cmd, o->record, "Stop recording after S seconds (0: until Ctrl-C or `stepscope detach`)");
  cmd->add_flag("--children", o->children, "Also record the process's descendants (DataLoader workers, ranks)");
  auto flight = std::make_shared<FlightArgs>();
  add_flight_options(cmd, o->record, *flight);
  cmd->callback([cmd, o, flight, &exit_code]() {
    if (const std::string bad = apply_flight_args(cmd, o->record, *flight); !bad.empty()) {
      std::fprintf(stderr, "stepscope: attach: %s\n", bad.c_str());
      exit_code = 2;
      return;
    }
    o->record.output = collector::attach_output_name(o->record.output, o->pid);  // %p, %h, %r as record
    store::require_output_folder(o->record.output);  // as `record`: nothing created (docs/collector.md)
    collector::record_attached(*o);
    exit_code = 0;
  });
});

// detach/stop, start: one request each over the control channel.
void add_control_command(CLI::App& app, int& exit_code, const char* name, const char* command, const char* help) {
  auto* cmd = app.add_subcommand(name, help);
  auto pid = std::make_shared<int>(0);
  cmd->add_option("pid", *pid, "Process")->required();
  cmd->callback([pid, command, &exit_code]() {
    const std::string reply = collector::control_request(*pid, command);
    std::printf("%d: %s\n", *pid, reply.substr(reply.find_first_not_of("ok ") == std::string::npos ? reply.size() : 3).c_str());
    exit_code = 0;
  });
}

// `stepscope dump PID`: the flight recorder saves its window now; prints the store once the recording's
// `record --flight` / `attach --flight` has written it (--wait 0: at once, the path it will have).
CommandRegistration reg_dump(13, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("dump", "Save a flight recording's window now (record --flight, attach --flight); "
                                         "prints the store written");
  auto pid = std::make_shared<int>(0);
  auto wait_s = std::make_shared<double>(60);
  cmd->add_option("pid", *pid, "Process recorded with --flight")->required();
  cmd->add_option("--wait", *wait_s,
                  "Seconds to wait for the store (0: print the path it will have, do not wait)")
      ->capture_default_str()
      ->check(at_least_zero(false));
  cmd->callback([pid, wait_s, &exit_code]() {
    const std::string reply = collector::control_request(*pid, "dump");
    const auto at = reply.find("path=");
    if (at == std::string::npos) {
      std::fprintf(stderr, "stepscope: dump: process %d: unexpected reply: %s\n", *pid, reply.c_str());
      exit_code = 1;
      return;
    }
    std::string path = reply.substr(at + 5);
    path = path.substr(0, path.find(' '));
    const auto save_at = reply.find(" save=");
    // A word, as path= is: asked of the launcher, the reply goes on with "(in process N, the command ...)",
    // which read as part of the folder made every dump of `stepscope dump LAUNCHER_PID` report "not saved".
    std::string save = save_at == std::string::npos ? "" : reply.substr(save_at + 6);
    save = save.substr(0, save.find(' '));
    // The save is made; its store comes with the launcher's merge (unless the quota holds it back).
    if (*wait_s == 0) {
      std::printf("%s\n", path.c_str());
      exit_code = 0;
      return;
    }
    // Why the launcher did not write the save: "<flight folder>/.not-saved-<folder>" (flight_watcher.cpp).
    const auto not_saved = [&save]() {
      const auto slash = save.rfind('/');
      std::string why;
      if (FILE* f =
              std::fopen((save.substr(0, slash + 1) + ".not-saved-" + save.substr(slash + 1)).c_str(), "r")) {
        char line[1024];
        if (std::fgets(line, sizeof line, f)) why = line;
        std::fclose(f);
      }
      if (!why.empty() && why.back() == '\n') why.pop_back();
      return why.empty() ? std::string("no store was written (the output of record/attach --flight says why)")
                         : why;
    };
    // The recording's launcher merges the processes' parts a couple of seconds after the save began. With
    // -o run-%r.db it writes one store per rank: done when it has removed the save's folder.
    const bool per_rank = path.find("%r") != std::string::npos && !save.empty();
    for (double waited = 0; waited < *wait_s; waited += 0.1) {
      std::error_code ec;
      // Read before the store is looked for: the store is in place before the folder goes.
      const bool pending = save.empty() || collector::flight_save_pending(save);
      if (!per_rank && std::filesystem::exists(path, ec)) {
        std::printf("%s\n", path.c_str());
        exit_code = 0;
        return;
      }
      if (!pending) {
        const auto stores = per_rank ? collector::rank_stores(path) : std::vector<std::string>{};
        for (const auto& s : stores) std::printf("%s\n", s.c_str());
        exit_code = stores.empty() ? 1 : 0;
        if (stores.empty())
          std::fprintf(stderr, "stepscope: dump: %s not saved: %s\n", path.c_str(), not_saved().c_str());
        return;
      }
      usleep(100000);
    }
    std::fprintf(stderr, "stepscope: dump: %s did not appear within %g s (is `stepscope record/attach --flight` still "
                 "running? its output says why)\n", path.c_str(), *wait_s);
    exit_code = 1;
  });
});

CommandRegistration reg_control(12, [](CLI::App& app, int& exit_code) {
  add_control_command(app, exit_code, "detach", "stop",
                      "End the recording window of `stepscope attach PID` (the attach command writes the store)");
  add_control_command(app, exit_code, "start", "start",
                      "Open a recording window in a process started with `stepscope record --paused`");
  add_control_command(app, exit_code, "stop", "stop",
                      "Close the recording window opened by `stepscope start PID`");
});
#endif

}  // namespace
}  // namespace stepscope::cli
