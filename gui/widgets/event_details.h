// The details panel's text for an event: name, times, launch geometry, bytes, correlation; for GPU work the
// launching API call with its enclosing ops and CPU stack.
#pragma once

#include <QString>

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

QString event_details_html(const TimelineModel& model, EventRef e);
QString finding_details_html(const TimelineModel& model, size_t finding);

}  // namespace stepscope::gui
