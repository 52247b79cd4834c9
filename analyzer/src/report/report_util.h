// Formatting helpers shared by the report and diff renderers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "format/units.h"
#include "stepscope/analyzer/analysis.h"

namespace stepscope::analyzer::report_util {

const char* bound_name(Bound b);
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

}  // namespace stepscope::analyzer::report_util
