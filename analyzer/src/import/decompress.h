// Reading input files whole, decompressing gzip / zstd into a buffer padded for simdjson.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace stepscope::analyzer::import {

enum class Compression { None, Gzip, Zstd };

// A byte buffer with at least `kPadding` readable bytes past size() (simdjson needs 64).
class PaddedBuffer {
 public:
  static constexpr size_t kPadding = 64;
  PaddedBuffer() = default;
  ~PaddedBuffer();
  PaddedBuffer(PaddedBuffer&& o) noexcept;
  PaddedBuffer& operator=(PaddedBuffer&& o) noexcept;
  PaddedBuffer(const PaddedBuffer&) = delete;
  PaddedBuffer& operator=(const PaddedBuffer&) = delete;

  void reserve(size_t capacity);  // keeps content
  void resize(size_t n);          // n <= capacity after reserve(n)
  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  std::string_view view() const { return {data_, size_}; }
  void clear();

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;  // usable bytes; the allocation is capacity_ + kPadding
};

Compression compression_of(std::string_view head);

// Reads `path` whole. Throws store::StoreError("path: ...").
PaddedBuffer read_file(const std::string& path);

// Decompresses `in` (gzip, possibly multi-member, or zstd). Throws store::StoreError naming `path`
// ("truncated or corrupt gzip data" ...). `progress` gets (input bytes done, input bytes total).
PaddedBuffer decompress(const std::string& path, std::string_view in, Compression c,
                        const std::function<void(uint64_t, uint64_t)>& progress = {});

// Streams the decompression of `path` (gzip or zstd) into `out_path`; for SQLite inputs that must be
// files. Throws store::StoreError naming `path`.
void decompress_to_file(const std::string& path, std::string_view in, Compression c,
                        const std::string& out_path);

}  // namespace stepscope::analyzer::import

namespace stepscope::analyzer::import {
// The first (up to) `n` bytes of the decompressed stream; "" when they cannot be decoded.
std::string peek_decompressed(std::string_view in, Compression c, size_t n);
}  // namespace stepscope::analyzer::import
