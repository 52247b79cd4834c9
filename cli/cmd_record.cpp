// `stepscope record [options] -- CMD ARGS...`: run CMD under the collector and write one store.
#include <cstdio>

#include "command.h"
#include "stepscope/store/store.h"

#ifdef HAVE_STEPSCOPE_LAUNCHER
#include "stepscope/collector/launcher.h"
#endif

namespace stepscope::cli {
namespace {

CommandRegistration reg(10, [](CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("record", "Run a command under the sampling collector (CPU stacks, CUDA, NVTX)");
  struct Opts {
    std::string output = "run.db";
    int cpu_hz = 1000;
    bool wall = false, no_gpu = false;
    double duration = 0;
    std::string data_wait_regex = "data|load|fetch|next_batch", step_regex, data_wait_func, step_func;
    std::vector<std::string> command;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("-o,--output", o->output, "Store to write (atomically, when the command ends)")->capture_default_str();
  cmd->add_option("--cpu-hz", o->cpu_hz, "CPU samples per second per thread")->capture_default_str()->check(CLI::Range(1, 20000));
  cmd->add_flag("--wall", o->wall, "Wall-clock sampling: also sample threads blocked off-CPU");
  cmd->add_flag("--no-gpu", o->no_gpu, "Do not record CUDA activity (no CUPTI)");
  cmd->add_option("--duration", o->duration, "Stop the command (SIGINT) after S seconds")->check(CLI::NonNegativeNumber);
  cmd->add_option("--data-wait-regex", o->data_wait_regex, "NVTX ranges matching this (case-insensitive) are data waits")
      ->capture_default_str();
  cmd->add_option("--step-regex", o->step_regex, "NVTX ranges matching this are training steps");
  cmd->add_option("--data-wait-func", o->data_wait_func, "Python functions matching this are data waits (Python hook)");
  cmd->add_option("--step-func", o->step_func, "Python functions matching this mark steps (Python hook)");
  cmd->add_option("command", o->command, "The command to record (after --)")->required();
  cmd->callback([o, &exit_code]() {
#ifdef HAVE_STEPSCOPE_LAUNCHER
    collector::RecordOptions r;
    r.output = o->output;
    r.cpu_hz = o->cpu_hz;
    r.wall = o->wall;
    r.no_gpu = o->no_gpu;
    r.duration_s = o->duration;
    r.data_wait_regex = o->data_wait_regex;
    r.step_regex = o->step_regex;
    r.data_wait_func = o->data_wait_func;
    r.step_func = o->step_func;
    r.command = o->command;
    exit_code = collector::record(r).exit_code;
#else
    (void)o;
    std::fprintf(stderr, "stepscope: this build has no collector\n");
    exit_code = 2;
#endif
  });
});

}  // namespace
}  // namespace stepscope::cli
