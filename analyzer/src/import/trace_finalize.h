// Steps every importer runs after filling a Trace: order rows by time, nest ranges, link GPU work to the
// process that launched it, and make sure every process, thread and device seen has its row.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "stepscope/analyzer/correlation_index.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer::import {

struct NameHints {
  std::map<int64_t, std::string> process_names;                      // pid → name
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;  // (pid, tid) → name
};

void finalize_trace(store::Trace& t, const NameHints& names);

// Every table in time order; rows with equal times keep their order (finalize_trace's first step, and a
// Kineto chunk's before it is merged with the others).
void sort_rows_by_start(store::Trace& t);

// Range depth per (pid, tid) by nesting (depth 0 = outermost); ranges that only partly overlap their
// enclosing range are placed one level below it.
void compute_range_depths(store::Trace& t);

// "cudaLaunchKernel_v7000" → "cudaLaunchKernel" (nsys appends the API version).
std::string_view strip_api_version(std::string_view name);

// Memcpy kind and memory kinds from names like "Memcpy HtoD (Pageable -> Device)".
void parse_memcpy_name(std::string_view name, store::CopyKind& kind, store::MemoryKind& src,
                       store::MemoryKind& dst);
store::MemoryKind parse_memory_kind(std::string_view word);

}  // namespace stepscope::analyzer::import
