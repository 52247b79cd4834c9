// libFuzzer target: gzip / zstd / plain detection and decompression (every compressed input goes through it).
#include <algorithm>
#include <cstdint>
#include <string>
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
  // The readers load_trace parses as they inflate, read in uneven pieces into one small buffer overwritten
  // each time (as the chunk buffers are reused): where both decoders took the file whole, the same bytes.
  auto same_pieces = [&](auto& reader) {
    std::string piece(4096, '\0');
    size_t got = 0;
    bool same = true;
    for (size_t want = 1; got < reader.size(); want = std::min(piece.size(), want * 3 + 1)) {
      const size_t n = reader.read(piece.data(), std::min(want, reader.size() - got));
      if (whole && (got > out.size() || out.view().substr(got, n) != std::string_view(piece.data(), n)))
        same = false;
      got += n;
      if (n == 0) break;
    }
    if (reader.finish() && whole && (!same || got != out.size())) __builtin_trap();
  };
  if (GzipReader::usable(in)) {
    GzipReader reader(in);
    same_pieces(reader);
  }
  if (ZstdReader::usable(in)) {
    ZstdReader reader(in);
    same_pieces(reader);
  }
  return 0;
}
