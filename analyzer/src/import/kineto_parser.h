// Kineto/Chrome trace JSON → store::Trace, the parsing half of KinetoImporter (kineto_parser.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "stepscope/store/records.h"

namespace stepscope::analyzer::import {

// `json` must stay readable for 64 bytes past `size` (simdjson padding); `file` names the input in errors and
// meta. Throws store::StoreError for invalid JSON or JSON that is no trace.
store::Trace parse_kineto_json(const char* json, size_t size, const std::string& file,
                               const std::function<void(uint64_t, uint64_t)>& progress);

}  // namespace stepscope::analyzer::import
