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
  bool whole = false;
  PaddedBuffer out;
  try {
    out = decompress("fuzz.gz", in, c);
    whole = true;
  } catch (const stepscope::store::StoreError&) {
  }
  // The stream load_trace parses as it inflates: where both decoders took the file whole, the same bytes.
  if (GzipStream::usable(in)) {
    GzipStream stream(in);
    (void)stream.ready(stream.size() / 2);
    if (stream.finish() && whole && std::string_view(stream.data(), stream.size()) != out.view())
      __builtin_trap();
  }
  return 0;
}
