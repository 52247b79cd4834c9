// `stepscope attach PID`, `detach PID`, `start PID`, `stop PID`: recording windows in running processes.
#include <cstdio>
#include <memory>

#include "command.h"
#include "recording_options.h"

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
  cmd->callback([o, &exit_code]() {
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
