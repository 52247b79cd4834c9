// Times and shares in words, for every text the analyzer writes: the analysis' own explanations (slow steps)
// and the reports. The lowest room (tests/rooms/check_rooms.py): it includes nothing of the analyzer.
#pragma once

#include <string>

namespace stepscope::analyzer::units {

// 1234.5 µs → "1.23 ms"; 12.3 → "12.3 µs"; seconds above 1e6 µs.
std::string format_us(double us);
// 0.1234 → "12.3%"
std::string format_share(double fraction);
// Signed percent with one decimal: 0.052 → "+5.2%".
std::string format_signed_percent(double fraction);
// Signed percentage points: 0.021 → "+2.1 pp".
std::string format_signed_pp(double fraction);
// The findings' fixed-decimal form, from nanoseconds: "1.23 s", "45.60 ms", "205.4 µs".
std::string format_ns_fixed(double ns);
// A byte count in binary units, 3 significant digits: 251658240 → "240 MiB"; 512 → "512 B".
std::string format_bytes(double bytes);

}  // namespace stepscope::analyzer::units
