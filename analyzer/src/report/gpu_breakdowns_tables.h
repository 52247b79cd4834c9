// The GPU breakdowns as tables for the report renderers (report room internal).
#pragma once

#include <string>
#include <vector>

#include "stepscope/analyzer/gpu_breakdowns.h"
#include "stepscope/analyzer/graph_replays.h"

namespace stepscope::analyzer {

struct BreakdownTable {
  std::string title;
  std::vector<std::string> head;               // column headings
  std::vector<std::vector<std::string>> rows;  // cells, unescaped
  std::string note;                            // a sentence under the table, or empty
};

std::vector<BreakdownTable> gpu_breakdown_tables(const GpuBreakdowns& b, size_t max_rows);

// The per-graph table (graph_replays.h) and the sentence every view puts above it ("" without graphs).
BreakdownTable graph_table_rows(const GraphTable& g, size_t max_rows);
std::string graph_sentence(const GraphTable& g);

}  // namespace stepscope::analyzer
