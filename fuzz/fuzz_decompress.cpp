// libFuzzer target: gzip / zstd / plain detection and decompression (every compressed input goes through it).
#include <cstdint>
#include <string_view>

#include "import/decompress.h"
#include "stepscope/store/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stepscope::analyzer::import;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const Compression c = compression_of(in);
  (void)peek_decompressed(in, c, 16);
  try {
    PaddedBuffer out = decompress("fuzz.gz", in, c);
    (void)out;
  } catch (const stepscope::store::StoreError&) {
  }
  return 0;
}
