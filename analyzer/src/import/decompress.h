// Reading input files whole, decompressing gzip / zstd into a buffer padded for simdjson.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
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

// A plain file read in order straight into the caller's buffers: load_trace parses a big JSON file as it
// is read and never holds its whole text.
class FileReader {
 public:
  explicit FileReader(const std::string& path);  // throws store::StoreError("path: ...") as read_file does
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  size_t size() const { return size_; }  // when opened
  // Up to `n` more bytes into `dst`: how many came. Fewer than `n` only at the end of the file or where a
  // read failed; 0 from then on.
  size_t read(char* dst, size_t n);
  // Reads on to the end: true when the file held size() bytes, no more, and no read failed.
  bool finish();
  int read_error() const { return error_; }  // the errno of a read that failed; 0: none did

 private:
  int fd_ = -1;
  size_t size_ = 0, total_ = 0;
  bool ended_ = false;
  int error_ = 0;
};

// A gzip file of one member inflated as it is read (ISA-L's streaming inflate), straight into the caller's
// buffers: load_trace parses a gzip trace as it comes and never holds its whole text. The size is the gzip
// trailer's; a file that is not one member of that size (concatenated members, 4 GiB or more, a damaged
// trailer) or not valid gzip ends early or not whole(), and the caller decompresses it whole the usual way
// (which says what is wrong with a bad one).
class GzipReader {
 public:
  // True when `in` may be read so: this build has ISA-L, `in` is gzip and its trailer's size is plausible.
  static bool usable(std::string_view in);
  explicit GzipReader(std::string_view in);  // `in` outlives the reader
  ~GzipReader();
  GzipReader(const GzipReader&) = delete;
  GzipReader& operator=(const GzipReader&) = delete;

  size_t size() const { return size_; }  // the whole size, known before it is read
  // Inflates up to `n` more bytes into `dst`: how many came. Fewer than `n` only at the end of the member
  // or where the data is bad; 0 from then on.
  size_t read(char* dst, size_t n);
  // Reads on to the member's end (a read of all size() bytes may stop short of its trailer): true when it
  // ended where the file ends, as long as its trailer said, its CRC right, no byte past size().
  bool finish();

 private:
  struct State;
  std::string_view in_;
  std::unique_ptr<State> state_;
  size_t size_ = 0, total_ = 0;
  bool ended_ = false, whole_ = false;
};

// A zstd file inflated as it is read, like GzipReader: every frame declares its size (the zstd tool writes it
// when it compresses a file), so the whole size is known before it is read.
class ZstdReader {
 public:
  static bool usable(std::string_view in);
  explicit ZstdReader(std::string_view in);  // `in` outlives the reader
  ~ZstdReader();
  ZstdReader(const ZstdReader&) = delete;
  ZstdReader& operator=(const ZstdReader&) = delete;

  size_t size() const { return size_; }
  size_t read(char* dst, size_t n);  // as GzipReader::read
  // Reads on to the end: true when every frame was whole, the input all read, and size() bytes came.
  bool finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
  size_t size_ = 0, total_ = 0;
  bool ended_ = false, failed_ = false;
};

// The first (up to) `n` bytes of the decompressed stream; "" when they cannot be decoded.
std::string peek_decompressed(std::string_view in, Compression c, size_t n);
}  // namespace stepscope::analyzer::import
