// Reading input files whole, decompressing gzip / zstd into a buffer padded for simdjson.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

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

// A gzip file of one member, inflated on a thread of its own (ISA-L's streaming inflate) while the caller
// reads what has arrived: load_trace parses the JSON as it comes. The output is sized from the gzip trailer;
// a file that is not one member of that size (concatenated members, 4 GiB or more, a damaged trailer) or not
// valid gzip fails, and the caller decompresses it whole the usual way (which says what is wrong with a bad
// one).
class GzipStream {
 public:
  // True when `in` may be streamed: this build has ISA-L, `in` is gzip and its trailer's size is plausible.
  static bool usable(std::string_view in);
  explicit GzipStream(std::string_view in);  // `in` outlives the stream; the thread starts here
  ~GzipStream();                             // stops the thread (a parse that gave up) and joins it
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  const char* data() const { return out_.data(); }
  size_t size() const { return out_.size(); }  // the whole size, known before it arrives
  // Waits until bytes [0, end) have arrived; false when they never will (the stream failed). Bytes that
  // arrived are there even from a stream that fails later: finish() says whether any of it may be used.
  bool ready(size_t end);
  // Waits for the end: true when the whole member arrived, its size the trailer's and its CRC right.
  bool finish();
  PaddedBuffer take() { return std::move(out_); }

 private:
  void run();

  std::string_view in_;
  PaddedBuffer out_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<size_t> arrived_{0};
  std::atomic<bool> stop_{false};
  bool done_ = false, ok_ = false;  // mu_
  std::thread thread_;
};

// The first (up to) `n` bytes of the decompressed stream; "" when they cannot be decoded.
std::string peek_decompressed(std::string_view in, Compression c, size_t n);
}  // namespace stepscope::analyzer::import
