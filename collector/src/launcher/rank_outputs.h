// `stepscope record -o run-%r.db`: output names with %r/%p/%h and one store per rank (docs/collector.md,
// "Several ranks"). The launcher's side; the collector's side is rank_env.h.
#pragma once

#include <map>
#include <string>

#include "stepscope/collector/launcher.h"

namespace stepscope::collector {

// `pattern` with %r, %p, %h and %% replaced; a null field keeps its %-sequence as it is.
std::string expand_output(const std::string& pattern, const std::string* rank, const std::string* pid,
                          const std::string* host);

// This machine's host name ("unknown-host" when it cannot be read).
std::string host_name();

// Groups the parts in `parts_dir` by the rank in their meta and merges each group into the store named by
// `pattern` (%r = the rank; "launcher" for the processes outside every rank); adds to `summary`, and its
// outputs. One Symbolizer serves all the ranks' stores: their processes map the same libraries.
void merge_parts_by_rank(const std::string& parts_dir, const std::string& pattern, const std::string& host,
                         std::map<std::string, std::string> meta, RecordSummary& summary);

}  // namespace stepscope::collector
