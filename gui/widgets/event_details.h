// The details panel's text for an event: name, times, launch geometry, bytes, correlation; for GPU work the
// launching API call with its enclosing ops and CPU stack.
#pragma once

#include <QString>

#include "stepscope/gui/range_stats.h"
#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

// Links in the details whose target is a name to highlight on the timeline: "highlight:<percent-encoded name>".
inline constexpr const char* kHighlightScheme = "highlight:";

QString event_details_html(const TimelineModel& model, EventRef e);
// A CPU sample (trace.samples row): when, which thread, on or off the CPU, its Python frames (innermost
// first) and its whole stack with the interpreter's own frames between two Python frames folded.
QString sample_details_html(const TimelineModel& model, uint32_t sample_row);
// The tooltip of a CPU sample: on or off the CPU, its Python frames first, then its innermost native frames.
QString sample_tooltip(const TimelineModel& model, uint32_t sample_row);
QString finding_details_html(const TimelineModel& model, size_t finding);
// The run in the analyzer's words when no finding is selected (TimelineModel::run_notes()): no GPU activity,
// how to mark steps, "No findings."; empty when there is nothing to say.
QString run_notes_html(const TimelineModel& model);
// A directory of ranks (TimelineModel::cross_rank()): the job's critical path and what-if lines of `analyze DIR`,
// then its whole text report; empty otherwise. Shown under a cross-rank finding.
QString job_html(const TimelineModel& model);
// A selected time range: its breakdown (GPU busy, each idle category), top kernels and top host functions
// (`bottom_up`: the range's bottom-up call tree, whose first level is the functions by self weight).
QString range_details_html(const TimelineModel& model, const RangeBreakdown& b, const std::vector<KernelStat>& kernels,
                           const CallTree& bottom_up);

}  // namespace stepscope::gui
