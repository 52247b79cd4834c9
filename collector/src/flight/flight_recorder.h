// The flight recorder inside a process (docs/flight.md). With Config::flight_dir the collector thread keeps
// its rows in a FlightWindow instead of a part, and saves the window when
//   - a trigger fires here (flight_trigger.h): after a short tail it makes a save folder <flight_dir>/<name>
//     (with a `trigger` file) and writes its part there;
//   - another process of the recording made a save folder: it adds its own part (every process's last minute
//     is in the save, DataLoader workers included);
//   - `stepscope dump PID` asks over the control channel (an on-demand save, as above);
//   - the recording's root process ends (exit or a signal): its part goes to <flight_dir>/exit, which the
//     launcher keeps only when the program failed.
// The launcher (flight_watcher.h) merges each folder into <flight_prefix>-<name>.db. Everything here runs on
// the collector thread, apart from request(), which the control thread calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "stepscope/store/records.h"

namespace stepscope::collector::flight {

using MetaFn = std::function<std::map<std::string, std::string>()>;

// Starts the window for this recording (start, a window opening, a forked child): the Drainer writes into it.
void begin();
bool active();
// The window's rows (the Drainer's sink); null when not flight recording.
store::Trace* window_rows();
// The rows a drain pass took from the pending queue, before they join the window: steps and data waits
// judged.
void observe(const store::Trace& rows);
// After each drain pass: saves due, other processes' saves, on-demand requests, pruning.
void after_pass(int64_t now_ns, const MetaFn& meta);
// The last pass: `process_end` when the process is ending (exit, _exit, a signal), not a window closing.
void final_pass(bool process_end, int signal, const MetaFn& meta);
// Under attach: an on_exit() handler keeps the status exit() was given, which the attacher, not the parent,
// cannot see otherwise; the exit window then says "exit status N" (flight.end).
void watch_exit_status();
// On the control thread: "dump" (a save of every process, named like a trigger's) or "snapshot" (this
// process's part only, written into `dir`: `stepscope top`). Waits for the collector thread (bounded).
// Returns the reply's text after "ok " or an error.
bool request(const std::string& kind, const std::string& dir, std::string& result, std::string& error);

}  // namespace stepscope::collector::flight
