// Kineto/Chrome trace JSON → store::Trace, the parsing half of KinetoImporter (kineto_parser.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "stepscope/store/records.h"

namespace stepscope::analyzer::import {

struct KinetoParseOptions {
  bool chunks = true;    // false: one pass over the file, on the calling thread
  // Set while the file is still arriving (GzipStream: inflated as it is parsed): waits until bytes [0, end)
  // are there; false when they never will be. The parse then throws SourceFailed, and the caller says why.
  std::function<bool(size_t end)> arriving;
  unsigned threads = 0;  // threads for the chunks; 0: the machine's cores (at most 8)
  size_t chunk_bytes =
      0;  // 0: chosen from the file's size and the threads; set, files under 1 MiB are cut too
};

// How a parse went, for tests and benches.
struct KinetoParseReport {
  bool chunked = false;  // false: one pass (small file, or a chunk could not stand alone)
  size_t chunks = 0;
};

// KinetoParseOptions::arriving said the bytes it waited for will never come.
struct SourceFailed {};

// `json` must stay readable for 64 bytes past `size` (simdjson padding); `file` names the input in errors and
// meta. Throws store::StoreError for invalid JSON or JSON that is no trace. The result does not depend on the
// options: the chunked parse gives the one pass's trace, row order and string ids included.
store::Trace parse_kineto_json(const char* json, size_t size, const std::string& file,
                               const std::function<void(uint64_t, uint64_t)>& progress,
                               const KinetoParseOptions& options = {}, KinetoParseReport* report = nullptr);

}  // namespace stepscope::analyzer::import
