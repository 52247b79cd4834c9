// The block codec (zstd). The collector links packed_unavailable.cpp instead: it never packs, and so never
// needs libzstd in the program it is injected into.
#include <zstd.h>

#include <memory>

#include "packed.h"
#include "stepscope/store/store.h"

namespace stepscope::store::packed {

namespace {

// The first byte of a block's data names its encoding; 1 is the only one so far.
constexpr char kFormatColumnsZstd = 1;
constexpr int kZstdLevel = 3;
constexpr size_t kMaxVarintBytes = 10;

uint64_t zigzag(int64_t v) {
  return (uint64_t(v) << 1) ^ uint64_t(v >> 63);
}
int64_t unzigzag(uint64_t u) {
  return int64_t(u >> 1) ^ -int64_t(u & 1);
}

void put_varint(std::string& out, uint64_t u) {
  while (u >= 0x80) {
    out.push_back(char(u | 0x80));
    u >>= 7;
  }
  out.push_back(char(u));
}

struct CctxFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DctxFree {
  void operator()(ZSTD_DCtx* c) const { ZSTD_freeDCtx(c); }
};

}  // namespace

bool available() {
  return true;
}

std::string encode(const Layout& layout, const int64_t* values, size_t rows) {
  const size_t cols = layout.columns.size();
  std::string raw;
  raw.reserve(rows * cols * 2);
  for (size_t c = 0; c < cols; ++c) {
    const int p = layout.columns[c].predictor;
    uint64_t before = 0;
    for (size_t i = 0; i < rows; ++i) {
      const uint64_t v = uint64_t(values[i * cols + c]);
      const uint64_t predicted = p < 0 ? before : uint64_t(values[i * cols + size_t(p)]);
      put_varint(raw, zigzag(int64_t(v - predicted)));  // wraps, never overflows
      before = v;
    }
  }
  thread_local std::unique_ptr<ZSTD_CCtx, CctxFree> cctx(ZSTD_createCCtx());
  if (!cctx) throw StoreError("", "zstd: cannot allocate a compression context");
  // A checksum in each frame: a damaged block is an error when read, never rows of other values.
  ZSTD_CCtx_reset(cctx.get(), ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, kZstdLevel);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_checksumFlag, 1);
  std::string out(1 + ZSTD_compressBound(raw.size()), '\0');
  out[0] = kFormatColumnsZstd;
  const size_t n = ZSTD_compress2(cctx.get(), out.data() + 1, out.size() - 1, raw.data(), raw.size());
  if (ZSTD_isError(n)) throw StoreError("", std::string("zstd: ") + ZSTD_getErrorName(n));
  out.resize(1 + n);
  return out;
}

void decode(const Layout& layout, std::string_view data, int64_t rows, std::vector<int64_t>& out,
            const std::string& file) {
  auto corrupt = [&](const std::string& why) {
    return StoreError(file, std::string("corrupt store: a block of ") + layout.packed_table + " " + why);
  };
  const size_t cols = layout.columns.size();
  if (rows < 1 || rows > kMaxBlockRows) throw corrupt("claims " + std::to_string(rows) + " rows");
  if (data.empty() || data[0] != kFormatColumnsZstd) throw corrupt("has an unknown encoding");
  const size_t limit = size_t(rows) * cols * kMaxVarintBytes;
  const unsigned long long size = ZSTD_getFrameContentSize(data.data() + 1, data.size() - 1);
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN || size > limit ||
      size < size_t(rows) * cols)
    throw corrupt("is not a zstd frame of its rows");
  thread_local std::unique_ptr<ZSTD_DCtx, DctxFree> dctx(ZSTD_createDCtx());
  if (!dctx) throw StoreError(file, "zstd: cannot allocate a decompression context");
  std::string raw(size, '\0');
  const size_t n = ZSTD_decompressDCtx(dctx.get(), raw.data(), raw.size(), data.data() + 1, data.size() - 1);
  if (ZSTD_isError(n) || n != size) throw corrupt("does not decompress");
  const size_t base = out.size();
  out.resize(base + size_t(rows) * cols);
  int64_t* v = out.data() + base;
  const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
  const auto* end = p + raw.size();
  for (size_t c = 0; c < cols; ++c) {
    const int pred = layout.columns[c].predictor;
    uint64_t before = 0;
    for (size_t i = 0; i < size_t(rows); ++i) {
      uint64_t u = 0;
      for (int shift = 0;; shift += 7) {
        if (p == end || shift > 63) throw corrupt("ends inside a value");
        const unsigned char b = *p++;
        if (shift == 63 && b > 1) throw corrupt("holds a value past 64 bits");
        u |= uint64_t(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
      }
      const uint64_t predicted = pred < 0 ? before : uint64_t(v[i * cols + size_t(pred)]);
      const uint64_t value = predicted + uint64_t(unzigzag(u));
      v[i * cols + c] = int64_t(value);
      before = value;
    }
  }
  if (p != end) throw corrupt("has bytes past its rows");
}

}  // namespace stepscope::store::packed
