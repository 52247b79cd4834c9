// fmt formats a SharedName as its text. Internal.
#pragma once

#include <fmt/format.h>

#include <string_view>

#include "stepscope/analyzer/multi_rank.h"

template <>
struct fmt::formatter<stepscope::analyzer::SharedName> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(const stepscope::analyzer::SharedName& name, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(name.str()), ctx);
  }
};
