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

// The same stacks in speedscope's JSON file format (https://www.speedscope.app/file-format-schema.json, as
// py-spy --format speedscope writes it): a shared frames table, one "sampled" profile per thread ("process
// (pid): thread (tid)"), samples as frame indexes outermost first, weights in samples (unit "none"), time
// order; `name` names the file in speedscope.
std::string to_speedscope_json(const store::Trace& t, const std::string& name);
void export_speedscope(const store::Trace& t, const std::string& path, const std::string& name);

// The same stacks as a self-contained SVG flame graph (no script, no web font): the root ("all") at the
// bottom, then process, thread and the frames, callees above callers, widths proportional to samples, a
// <title> per frame; frames narrower than 0.1 px are left out. `title` heads the picture.
std::string to_flame_graph_svg(const store::Trace& t, const std::string& title);
void export_flame_graph_svg(const store::Trace& t, const std::string& path, const std::string& title);

}  // namespace stepscope::analyzer
