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
// `record --flight` / `attach --flight` has written it.
CommandRegistration reg_dump(13, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("dump", "Save a flight recording's window now (record --flight, attach --flight); "
                                         "prints the store written");
  auto pid = std::make_shared<int>(0);
  auto wait_s = std::make_shared<double>(60);
  cmd->add_option("pid", *pid, "Process recorded with --flight")->required();
  cmd->add_option("--wait", *wait_s, "Seconds to wait for the store")->capture_default_str()->check(CLI::NonNegativeNumber);
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
    const std::string save = save_at == std::string::npos ? "" : reply.substr(save_at + 6);
    // The recording's launcher merges the processes' parts a couple of seconds after the save began. With
    // -o run-%r.db it writes one store per rank: done when it has removed the save's folder.
    const bool per_rank = path.find("%r") != std::string::npos && !save.empty();
    for (double waited = 0; waited < *wait_s; waited += 0.1) {
      std::error_code ec;
      if (!per_rank && std::filesystem::exists(path, ec)) {
        std::printf("%s\n", path.c_str());
        exit_code = 0;
        return;
      }
      if (per_rank && !collector::flight_save_pending(save)) {
        const auto stores = collector::rank_stores(path);
        for (const auto& s : stores) std::printf("%s\n", s.c_str());
        exit_code = stores.empty() ? 1 : 0;
        if (stores.empty()) std::fprintf(stderr, "stepscope: dump: no store was written for %s\n", path.c_str());
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
