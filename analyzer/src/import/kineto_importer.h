// Kineto (PyTorch profiler) and Chrome trace JSON → store::Trace. Dialects: current Kineto categories,
// legacy Kineto (Kernel/Runtime/Operator), AMD/HIP Kineto, the Chrome trace nsys reports convert to, and
// stepscope's own Chrome export. See docs/formats.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "import/kineto_parser.h"
#include "stepscope/store/records.h"

namespace stepscope::analyzer::import {

class KinetoImporter {
 public:
  explicit KinetoImporter(std::string source_file) : file_(std::move(source_file)) {}
  void set_progress(std::function<void(uint64_t, uint64_t)> p) { progress_ = std::move(p); }
  void set_threads(unsigned threads) { options_.threads = threads; }

  // `json` must stay readable for 64 bytes past `size` (simdjson padding). Throws store::StoreError
  // naming the file for invalid JSON or JSON that is no trace.
  store::Trace import(const char* json, size_t size);
  // The text read as it is decompressed (parse_kineto_stream): throws NotStreamed where it cannot be.
  store::Trace import_stream(size_t size, const std::function<size_t(char*, size_t)>& read,
                             KinetoParseReport* report = nullptr);

 private:
  std::string file_;
  std::function<void(uint64_t, uint64_t)> progress_;
  KinetoParseOptions options_;
};

}  // namespace stepscope::analyzer::import
