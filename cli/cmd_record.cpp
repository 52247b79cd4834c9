// `stepscope record [options] -- CMD ARGS...`: run CMD under the collector and write one store.
#include <cstdio>
#include <memory>

#include "command.h"
#include "recording_options.h"
#include "stepscope/store/store.h"

namespace stepscope::cli {
namespace {

CommandRegistration record_command(10, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("record", "Run a command under the sampling collector (CPU stacks, CUDA, NVTX)");
#ifdef HAVE_STEPSCOPE_LAUNCHER
  auto o = std::make_shared<collector::RecordOptions>();
  add_recording_options(cmd, *o, "Stop the command (SIGINT) after S seconds");
  cmd->add_flag("--paused", o->paused,
                "Load the collector but record only between `stepscope start PID` and `stepscope stop PID`");
  auto flight = std::make_shared<FlightArgs>();
  add_flight_options(cmd, *o, *flight);
  cmd->add_option("command", o->command, "The command to record (after --)")->required();
  cmd->callback([cmd, o, flight, &exit_code]() {
    if (const std::string bad = apply_flight_args(cmd, *o, *flight); !bad.empty()) {
      std::fprintf(stderr, "stepscope: record: %s\n", bad.c_str());
      exit_code = 2;
      return;
    }
    if (o->flight_s > 0 && o->paused) {
      std::fprintf(stderr, "stepscope: record: --flight and --paused do not go together\n");
      exit_code = 2;
      return;
    }
    const auto summary = collector::record(*o);
    // A recording that --duration ended ended as asked: 0, where the program's 130 (CPython's
    // KeyboardInterrupt) failed every CI step that ran `record --duration`; a crash on the way out stays a
    // failure.
    exit_code = summary.stopped_by_duration ? 0 : summary.exit_code;
    if (summary.stopped_by_duration && summary.exit_code != 0 && o->print_summary)
      std::fprintf(stderr,
                   "stepscope: --duration %g s ended the command (its own exit status %d): record exits 0\n",
                   o->duration_s, summary.exit_code);
  });
#else
  std::vector<std::string> command;
  cmd->add_option("command", command, "The command to record (after --)")->required();
  refuse_without_collector(cmd, exit_code);
#endif
});

}  // namespace
}  // namespace stepscope::cli
