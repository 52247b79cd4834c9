// The single-trace analysis as JSON: "stepscope.analysis/1" (docs/analysis-json.md) and the writers of its
// parts, all in the report room beside the other views of an analysis; and its findings into a store.
#pragma once

#include <string>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/gpu_breakdowns.h"
#include "stepscope/analyzer/graph_replays.h"
#include "stepscope/analyzer/step_outliers.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// "stepscope.analysis/1" JSON.
std::string to_json(const Analysis& a);

// One finding as a JSON object (the elements of the "findings" array).
std::string finding_to_json(const FindingResult& f);

// Replaces t.findings with a's findings (rule, severity, step span, saving, summary as message; the
// evidence_json column holds the finding's full JSON object).
void store_findings(const Analysis& a, store::Trace& t);

// The "step_outliers", "gpu_breakdowns" and "graphs" objects of `analyze --json`.
std::string step_outliers_to_json(const StepOutliers& o);
std::string gpu_breakdowns_to_json(const GpuBreakdowns& b);
std::string graph_table_to_json(const GraphTable& g);

}  // namespace stepscope::analyzer
