// libFuzzer target: Kineto / Chrome trace JSON → store::Trace (the importer behind `stepscope import x.json`).
// Any input must either import or throw StoreError; a crash, hang, leak or sanitizer report is a bug.
#include <cstdint>
#include <cstring>

#include "import/decompress.h"
#include "import/kineto_importer.h"
#include "stepscope/store/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stepscope;
  analyzer::import::PaddedBuffer json;  // simdjson reads up to 64 bytes past the end
  json.reserve(size);
  json.resize(size);
  if (size) std::memcpy(json.data(), data, size);
  try {
    analyzer::import::KinetoImporter("fuzz.json").import(json.data(), json.size());
  } catch (const store::StoreError&) {
  }
  return 0;
}
