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
  unsigned threads = 0;  // threads for the chunks; 0: the machine's cores (at most 8)
  size_t chunk_bytes =
      0;  // 0: chosen from the file's size and the threads; set, files under 1 MiB are cut too
};

// How a parse went, for tests and benches.
struct KinetoParseReport {
  bool chunked = false;  // false: one pass (small file, or a chunk could not stand alone)
  size_t chunks = 0;
  size_t streamed_buffer_bytes = 0;  // parse_kineto_stream: the text's buffers, all of them together
};

// parse_kineto_stream could not parse the text as it came: the source ended early, a cut was not proven, the
// JSON is not what it should be. The caller parses the whole text instead, which says what is wrong.
struct NotStreamed {};

// `json` must stay readable for 64 bytes past `size` (simdjson padding); `file` names the input in errors and
// meta. Throws store::StoreError for invalid JSON or JSON that is no trace. The result does not depend on the
// options: the chunked parse gives the one pass's trace, row order and string ids included.
store::Trace parse_kineto_json(const char* json, size_t size, const std::string& file,
                               const std::function<void(uint64_t, uint64_t)>& progress,
                               const KinetoParseOptions& options = {}, KinetoParseReport* report = nullptr);

// The same trace from a text read in order as it is decompressed, never held whole: `read(dst, n)` puts the
// next bytes (up to n) at dst and says how many came, fewer only at the end; `size` is the text's. The text
// goes through a few chunk buffers, reused (KinetoParseReport::streamed_buffer_bytes). Throws NotStreamed (or
// the progress callback's exception); reads the text to its end unless it throws.
store::Trace parse_kineto_stream(size_t size, const std::function<size_t(char*, size_t)>& read,
                                 const std::string& file,
                                 const std::function<void(uint64_t, uint64_t)>& progress,
                                 const KinetoParseOptions& options = {}, KinetoParseReport* report = nullptr);

}  // namespace stepscope::analyzer::import
