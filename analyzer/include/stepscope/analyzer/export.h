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

}  // namespace stepscope::analyzer
