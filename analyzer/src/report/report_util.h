// Formatting helpers shared by the report and diff renderers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "format/units.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer::report_util {

const char* bound_name(Bound b);
// Where a text view's cut rows are in full: the JSON of either command (the terminal's `analyze` and `report`
// share these renderers, and only the one spelling each takes exists).
inline constexpr const char* kJsonHint = "analyze --json or report -f json";
// Times and shares (format/units.h, a room below the analysis, which words its slow-step explanations too).
using units::format_share;
using units::format_signed_pp;
using units::format_signed_percent;
using units::format_us;
// Keeps at most `max_chars` characters (UTF-8 aware), eliding the middle with "…".
std::string shorten(std::string_view s, size_t max_chars);
// For a terminal: valid UTF-8 with control characters (escape sequences included) replaced by U+FFFD;
// newlines and tabs stay when keep_newlines.
std::string printable(std::string_view s, bool keep_newlines = false);
// Pretty-prints a JSON value with 2-space indentation; returns the input unchanged when it does not parse.
std::string pretty_json(std::string_view json);
// A fence for a Markdown code block that no backtick run inside `content` can close.
std::string code_fence_for(std::string_view content);

// Without GPU activity a step is the training loop's wait for input and its own work: the words every view
// uses for the two (step_category_label(), the slow-step explanations' words), so no view speaks of GPU idle.
enum class StepPart { Input, OwnWork };
const char* host_words(StepPart p);
std::string capitalized(std::string s);
// A slow step's "grew" cell: its category's label and growth ("the training thread's own work +120 ms"); "—"
// when no category grew.
std::string grew_words(const SlowStep& s, bool has_gpu);
// A slow step whose training thread was not running (SlowStep::not_running): "not running: +120 ms off CPU".
std::string not_running_words(const SlowStep& s);
// The slow steps past the explained ones, counted: "10 more slow steps, shorter than these: the 20 longest are
// explained"; "" when every slow step is explained.
std::string more_slow_steps_words(const StepOutliers& o);

}  // namespace stepscope::analyzer::report_util
