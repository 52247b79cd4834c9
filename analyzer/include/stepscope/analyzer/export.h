// Exporting a trace for other tools: Chrome trace JSON (Kineto-compatible categories) that Perfetto UI and
// chrome://tracing open, and that load_trace() reads back with the same kernels, copies, API calls, syncs,
// ranges, steps and data waits. See docs/formats.md.
#pragma once

#include <string>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// The Chrome trace JSON text of `t`.
std::string to_chrome_json(const store::Trace& t);

// Writes `t` as Chrome trace JSON to `path` (gzip-compressed when `path` ends in ".gz"), atomically: a
// temporary file beside `path`, renamed over it when complete. Throws store::StoreError("path: reason").
void export_chrome_trace(const store::Trace& t, const std::string& path);

// The CPU samples as collapsed stacks, the input of flame-graph tools (flamegraph.pl, inferno, speedscope):
// one line per distinct stack, "process (pid);thread (tid);outermost;…;innermost N", N the samples with it,
// frames named as the GUI names them; off-CPU samples (`record --wall`) end in a frame "[off CPU]". Lines are
// sorted. Samples without a stack count under their thread alone.
std::string to_folded_stacks(const store::Trace& t);
void export_folded_stacks(const store::Trace& t, const std::string& path);

// Writes `bytes` to `path` through a temporary file beside it, renamed into place when complete.
void write_export_atomically(const std::string& path, const std::string& bytes);

}  // namespace stepscope::analyzer
