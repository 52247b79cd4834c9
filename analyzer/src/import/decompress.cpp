#include "import/decompress.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "stepscope/store/store.h"

#ifdef STEPSCOPE_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif
#ifdef STEPSCOPE_HAVE_ISAL
#include <isa-l/igzip_lib.h>
#endif

namespace stepscope::analyzer::import {

using store::StoreError;

PaddedBuffer::~PaddedBuffer() { clear(); }

PaddedBuffer::PaddedBuffer(PaddedBuffer&& o) noexcept
    : data_(o.data_), size_(o.size_), capacity_(o.capacity_) {
  o.data_ = nullptr;
  o.size_ = o.capacity_ = 0;
}

PaddedBuffer& PaddedBuffer::operator=(PaddedBuffer&& o) noexcept {
  if (this != &o) {
    clear();
    data_ = o.data_;
    size_ = o.size_;
    capacity_ = o.capacity_;
    o.data_ = nullptr;
    o.size_ = o.capacity_ = 0;
  }
  return *this;
}

void PaddedBuffer::clear() {
  std::free(data_);
  data_ = nullptr;
  size_ = capacity_ = 0;
}

void PaddedBuffer::reserve(size_t capacity) {
  if (capacity <= capacity_ && data_) return;
  // realloc keeps content; malloc'd memory is only touched (and so only counted in RSS) when written.
  char* p = static_cast<char*>(std::realloc(data_, capacity + kPadding));
  if (!p) throw std::bad_alloc();
  data_ = p;
  capacity_ = capacity;
  // Big buffers are written once front to back: huge pages save most of the page-fault time.
  if (capacity >= (8u << 20)) {
    uintptr_t b = (reinterpret_cast<uintptr_t>(p) + 0x1fffff) & ~uintptr_t(0x1fffff);
    uintptr_t e = (reinterpret_cast<uintptr_t>(p) + capacity) & ~uintptr_t(0x1fffff);
    if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_HUGEPAGE);
  }
  std::memset(data_ + capacity_, 0, kPadding);
}

void PaddedBuffer::resize(size_t n) {
  // An empty buffer has no allocation yet: even size 0 needs its padding (fuzz_decompress, empty input).
  if (n > capacity_ || !data_) reserve(n);
  size_ = n;
  std::memset(data_ + size_, 0, kPadding);
}

Compression compression_of(std::string_view head) {
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
      static_cast<unsigned char>(head[1]) == 0x8b)
    return Compression::Gzip;
  if (head.size() >= 4 && static_cast<unsigned char>(head[0]) == 0x28 &&
      static_cast<unsigned char>(head[1]) == 0xb5 && static_cast<unsigned char>(head[2]) == 0x2f &&
      static_cast<unsigned char>(head[3]) == 0xfd)
    return Compression::Zstd;
  return Compression::None;
}

PaddedBuffer read_file(const std::string& path) {
  FileReader file(path);
  PaddedBuffer buf;
  buf.reserve(file.size() > 0 ? file.size() : 65536);
  size_t n = 0;
  for (;;) {  // on past the size it had when opened, if it grew
    if (n == buf.capacity()) buf.reserve(buf.capacity() * 2);
    n += file.read(buf.data() + n, buf.capacity() - n);
    if (n < buf.capacity()) break;  // fewer than asked: the end, or a failed read
  }
  if (file.read_error())
    throw StoreError(path, std::string("read failed: ") + std::strerror(file.read_error()));
  buf.resize(n);
  return buf;
}

namespace {

constexpr const char* kBadGzip = "truncated or corrupt gzip data";

// What may follow the last gzip member: nothing, or zeros (the padding some writers add). Anything else is
// not this file's data, and may be what was meant to be read (gzip(1) warns "trailing garbage ignored").
// Returns the problem, or "".
std::string after_gzip_problem(std::string_view rest) {
  if (std::all_of(rest.begin(), rest.end(), [](char c) { return c == 0; })) return {};
  return rest.size() == 1
             ? std::string("1 byte after the end of the gzip data is not gzip (another file appended?)")
             : std::to_string(rest.size()) +
                   " bytes after the end of the gzip data are not gzip (another file appended?)";
}

// Guess of the uncompressed size of a gzip stream: the trailer's ISIZE (size mod 2^32) when plausible.
size_t gzip_size_guess(std::string_view in) {
  size_t guess = in.size() * 4 + 4096;
  if (in.size() >= 18) {
    uint32_t isize;
    std::memcpy(&isize, in.data() + in.size() - 4, 4);  // little endian on every target we build for
    // Deflate expands at most ~1032:1; a larger ISIZE means a truncated or odd file.
    if (isize >= in.size() / 2 && static_cast<double>(isize) <= static_cast<double>(in.size()) * 1032.0)
      guess = isize;
  }
  return guess;
}

[[maybe_unused]] PaddedBuffer gunzip_zlib(const std::string& path, std::string_view in,
                         const std::function<void(uint64_t, uint64_t)>& progress) {
  PaddedBuffer out;
  out.reserve(gzip_size_guess(in));
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw StoreError(path, "zlib init failed");
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  size_t in_left = in.size();
  size_t produced = 0;
  uint64_t last_report = 0;
  int rc = Z_OK;
  std::string_view rest;  // after the last member
  for (;;) {
    if (produced == out.capacity()) out.reserve(out.capacity() * 2);
    uInt in_chunk = static_cast<uInt>(std::min<size_t>(in_left, 1u << 30));
    zs.avail_in = in_chunk;
    size_t room = std::min<size_t>(out.capacity() - produced, 1u << 30);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(room);
    rc = inflate(&zs, Z_NO_FLUSH);
    in_left -= in_chunk - zs.avail_in;
    produced += room - zs.avail_out;
    if (progress && in.size() - in_left - last_report > (16u << 20)) {
      last_report = in.size() - in_left;
      progress(last_report, in.size());
    }
    if (rc == Z_STREAM_END) {
      // Concatenated members (gzip -c a >> b): keep going while a gzip header follows.
      rest = std::string_view(reinterpret_cast<const char*>(zs.next_in), in_left);
      if (in_left >= 2 && compression_of(rest) == Compression::Gzip) {
        inflateReset(&zs);
        continue;
      }
      break;
    }
    if (rc == Z_BUF_ERROR && in_left == 0) {
      inflateEnd(&zs);
      throw StoreError(path, kBadGzip);
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      inflateEnd(&zs);
      throw StoreError(path, kBadGzip);
    }
  }
  inflateEnd(&zs);
  if (std::string problem = after_gzip_problem(rest); !problem.empty()) throw StoreError(path, problem);
  out.resize(produced);
  return out;
}

#ifdef STEPSCOPE_HAVE_LIBDEFLATE
PaddedBuffer gunzip_libdeflate(const std::string& path, std::string_view in) {
  PaddedBuffer out;
  out.reserve(gzip_size_guess(in));
  libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  if (!d) throw std::bad_alloc();
  size_t in_pos = 0, produced = 0;
  while (in_pos < in.size()) {
    size_t in_used = 0, out_made = 0;
    libdeflate_result r =
        libdeflate_gzip_decompress_ex(d, in.data() + in_pos, in.size() - in_pos, out.data() + produced,
                                      out.capacity() - produced, &in_used, &out_made);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
      out.reserve(out.capacity() * 2);
      continue;
    }
    if (r != LIBDEFLATE_SUCCESS) {
      libdeflate_free_decompressor(d);
      throw StoreError(path, kBadGzip);
    }
    in_pos += in_used;
    produced += out_made;
    if (in.size() - in_pos < 2 || compression_of(in.substr(in_pos)) != Compression::Gzip) {
      libdeflate_free_decompressor(d);
      if (std::string problem = after_gzip_problem(in.substr(in_pos)); !problem.empty())
        throw StoreError(path, problem);
      d = nullptr;
      break;
    }
    // Another member follows: make room for at least as much again.
    out.reserve(std::max(out.capacity(), produced * 2));
  }
  if (d) libdeflate_free_decompressor(d);
  out.resize(produced);
  return out;
}
#endif

PaddedBuffer unzstd(const std::string& path, std::string_view in) {
  PaddedBuffer out;
  unsigned long long sz = ZSTD_getFrameContentSize(in.data(), in.size());
  size_t guess = in.size() * 6 + 4096;
  if (sz != ZSTD_CONTENTSIZE_UNKNOWN && sz != ZSTD_CONTENTSIZE_ERROR &&
      static_cast<double>(sz) < static_cast<double>(in.size()) * 40000.0)
    guess = static_cast<size_t>(sz);
  out.reserve(guess);
  ZSTD_DStream* ds = ZSTD_createDStream();
  ZSTD_initDStream(ds);
  ZSTD_inBuffer ib{in.data(), in.size(), 0};
  size_t produced = 0, last = 1;
  while (ib.pos < ib.size) {
    if (produced == out.capacity()) out.reserve(out.capacity() * 2);
    ZSTD_outBuffer ob{out.data() + produced, out.capacity() - produced, 0};
    last = ZSTD_decompressStream(ds, &ob, &ib);
    produced += ob.pos;
    if (ZSTD_isError(last)) {
      ZSTD_freeDStream(ds);
      throw StoreError(path, std::string("corrupt zstd data: ") + ZSTD_getErrorName(last));
    }
    if (ob.pos == 0 && ib.pos == ib.size) break;
  }
  // Drain what is buffered inside the decoder.
  while (last != 0) {
    if (produced == out.capacity()) out.reserve(out.capacity() * 2);
    ZSTD_outBuffer ob{out.data() + produced, out.capacity() - produced, 0};
    last = ZSTD_decompressStream(ds, &ob, &ib);
    produced += ob.pos;
    if (ZSTD_isError(last) || (ob.pos == 0 && last != 0)) {
      ZSTD_freeDStream(ds);
      throw StoreError(path, "truncated or corrupt zstd data");
    }
  }
  ZSTD_freeDStream(ds);
  out.resize(produced);
  return out;
}

}  // namespace

PaddedBuffer decompress(const std::string& path, std::string_view in, Compression c,
                        const std::function<void(uint64_t, uint64_t)>& progress) {
  switch (c) {
    case Compression::Gzip:
#ifdef STEPSCOPE_HAVE_LIBDEFLATE
      (void)progress;  // one call, ~1 GB/s: no progress needed
      return gunzip_libdeflate(path, in);
#else
      return gunzip_zlib(path, in, progress);
#endif
    case Compression::Zstd:
      return unzstd(path, in);
    case Compression::None:
      break;
  }
  PaddedBuffer out;
  out.resize(in.size());
  if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());  // an empty view may have a null data()
  return out;
}

void decompress_to_file(const std::string& path, std::string_view in, Compression c,
                        const std::string& out_path) {
  FILE* f = std::fopen(out_path.c_str(), "wb");
  if (!f) throw StoreError(out_path, std::string("cannot create: ") + std::strerror(errno));
  std::string chunk(1 << 20, '\0');
  auto write = [&](const char* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f) != n) {
      std::fclose(f);
      std::remove(out_path.c_str());
      throw StoreError(out_path, "write failed (disk full?)");
    }
  };
  auto fail = [&](const std::string& why) {
    std::fclose(f);
    std::remove(out_path.c_str());
    throw StoreError(path, why);
  };
  if (c == Compression::Gzip) {
    z_stream zs{};
    inflateInit2(&zs, 15 + 32);
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(in.size());  // SQLite exports over 4 GiB compressed are not expected
    for (;;) {
      zs.next_out = reinterpret_cast<Bytef*>(chunk.data());
      zs.avail_out = static_cast<uInt>(chunk.size());
      int rc = inflate(&zs, Z_NO_FLUSH);
      write(chunk.data(), chunk.size() - zs.avail_out);
      if (rc == Z_STREAM_END) {
        const std::string_view rest(reinterpret_cast<const char*>(zs.next_in), zs.avail_in);
        if (zs.avail_in >= 2 && compression_of(rest) == Compression::Gzip) {
          inflateReset(&zs);
          continue;
        }
        if (std::string problem = after_gzip_problem(rest); !problem.empty()) {
          inflateEnd(&zs);
          fail(problem);
        }
        break;
      }
      if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_in > 0)) {
        inflateEnd(&zs);
        fail(kBadGzip);
      }
    }
    inflateEnd(&zs);
  } else if (c == Compression::Zstd) {
    ZSTD_DStream* ds = ZSTD_createDStream();
    ZSTD_initDStream(ds);
    ZSTD_inBuffer ib{in.data(), in.size(), 0};
    size_t last = 1;
    for (;;) {
      ZSTD_outBuffer ob{chunk.data(), chunk.size(), 0};
      last = ZSTD_decompressStream(ds, &ob, &ib);
      if (ZSTD_isError(last)) {
        ZSTD_freeDStream(ds);
        fail("corrupt zstd data");
      }
      write(chunk.data(), ob.pos);
      if (ib.pos == ib.size && ob.pos < ob.size) break;
    }
    ZSTD_freeDStream(ds);
    if (last != 0) fail("truncated zstd data");
  } else {
    write(in.data(), in.size());
  }
  if (std::fclose(f) != 0) {
    std::remove(out_path.c_str());
    throw StoreError(out_path, "write failed");
  }
}

}  // namespace stepscope::analyzer::import

namespace stepscope::analyzer::import {

std::string peek_decompressed(std::string_view in, Compression c, size_t n) {
  std::string out(n, '\0');
  if (c == Compression::Gzip) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 32) != Z_OK) return {};
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), 1u << 20));
    zs.next_out = reinterpret_cast<Bytef*>(out.data());
    zs.avail_out = static_cast<uInt>(n);
    int rc = inflate(&zs, Z_SYNC_FLUSH);
    size_t got = n - zs.avail_out;
    inflateEnd(&zs);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return {};
    out.resize(got);
    return out;
  }
  if (c == Compression::Zstd) {
    ZSTD_DStream* ds = ZSTD_createDStream();
    ZSTD_initDStream(ds);
    ZSTD_inBuffer ib{in.data(), std::min<size_t>(in.size(), 1u << 20), 0};
    ZSTD_outBuffer ob{out.data(), n, 0};
    while (ob.pos < n && ib.pos < ib.size) {
      size_t r = ZSTD_decompressStream(ds, &ob, &ib);
      if (ZSTD_isError(r)) break;
      if (r == 0) break;
    }
    ZSTD_freeDStream(ds);
    out.resize(ob.pos);
    return out;
  }
  out.assign(in.substr(0, n));
  return out;
}

}  // namespace stepscope::analyzer::import

namespace stepscope::analyzer::import {

FileReader::FileReader(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    int e = errno;
    throw StoreError(path, e == ENOENT ? "no such file" : std::string("cannot open: ") + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || S_ISDIR(st.st_mode)) {
    ::close(fd_);
    throw StoreError(path, S_ISDIR(st.st_mode) ? "is a directory" : "cannot stat");
  }
  size_ = st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

size_t FileReader::read(char* dst, size_t n) {
  size_t got = 0;
  while (!ended_ && got < n) {
    const ssize_t r = ::read(fd_, dst + got, std::min<size_t>(n - got, size_t{1} << 30));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      ended_ = true;
      if (r < 0) error_ = errno;
      break;
    }
    got += static_cast<size_t>(r);
    total_ += static_cast<size_t>(r);
  }
  return got;
}

bool FileReader::finish() {
  char one;
  while (!ended_ && read(&one, 1) > 0) {
  }
  return error_ == 0 && total_ == size_;
}

struct ZstdReader::State {
  ZSTD_DStream* ds = nullptr;
  ZSTD_inBuffer in{};
  size_t last = 1;  // ZSTD_decompressStream's last hint: 0 once a frame is whole and flushed
};

namespace {
// The sum of the frames' declared sizes; nothing when a frame does not declare one or is damaged (the stable
// API's ZSTD_getFrameContentSize frame by frame: ZSTD_findDecompressedSize is not in it).
std::optional<uint64_t> zstd_content_size(std::string_view in) {
  uint64_t sum = 0;
  for (size_t at = 0; at < in.size();) {
    const unsigned long long n = ZSTD_getFrameContentSize(in.data() + at, in.size() - at);
    const size_t frame = ZSTD_findFrameCompressedSize(in.data() + at, in.size() - at);
    if (n == ZSTD_CONTENTSIZE_UNKNOWN || n == ZSTD_CONTENTSIZE_ERROR || ZSTD_isError(frame) || frame == 0 ||
        n > UINT32_MAX)
      return std::nullopt;
    sum += n;
    if (sum > UINT32_MAX) return std::nullopt;
    at += frame;
  }
  return sum;
}
}  // namespace

bool ZstdReader::usable(std::string_view in) {
  return compression_of(in) == Compression::Zstd && zstd_content_size(in).has_value();
}

ZstdReader::ZstdReader(std::string_view in) : state_(std::make_unique<State>()) {
  size_ = static_cast<size_t>(zstd_content_size(in).value_or(0));
  state_->ds = ZSTD_createDStream();
  if (!state_->ds) throw std::bad_alloc();
  ZSTD_initDStream(state_->ds);
  state_->in = {in.data(), in.size(), 0};
}

ZstdReader::~ZstdReader() {
  ZSTD_freeDStream(state_->ds);
}

size_t ZstdReader::read(char* dst, size_t n) {
  size_t got = 0;
  State& st = *state_;
  while (!ended_ && got < n) {
    ZSTD_outBuffer ob{dst + got, n - got, 0};
    const size_t in_before = st.in.pos;
    const size_t r = ZSTD_decompressStream(st.ds, &ob, &st.in);
    got += ob.pos;
    total_ += ob.pos;
    if (ZSTD_isError(r) || total_ > size_) {
      ended_ = failed_ = true;
    } else if (ob.pos == 0 && st.in.pos == in_before) {
      ended_ = true;  // no way on: the end (where the decoder asks for the next frame's header), or stuck
    } else {
      st.last = r;
    }
  }
  return got;
}

bool ZstdReader::finish() {
  char scratch[4096];
  while (!ended_ && read(scratch, sizeof scratch) > 0) {
  }
  return !failed_ && total_ == size_ && state_->last == 0 && state_->in.pos == state_->in.size;
}

bool GzipReader::usable([[maybe_unused]] std::string_view in) {
#ifdef STEPSCOPE_HAVE_ISAL
  // Reserved header flags set: libdeflate and zlib refuse the file (ISA-L would not), and so does the reader.
  if (compression_of(in) != Compression::Gzip || in.size() < 18 || in.size() > UINT32_MAX ||
      (static_cast<unsigned char>(in[3]) & 0xE0) != 0)
    return false;
  uint32_t isize;
  std::memcpy(&isize, in.data() + in.size() - 4, 4);
  // Deflate expands at most ~1032:1; below half the input it is no single member's size.
  return isize >= in.size() / 2 && static_cast<double>(isize) <= static_cast<double>(in.size()) * 1032.0;
#else
  return false;
#endif
}

#ifdef STEPSCOPE_HAVE_ISAL
struct GzipReader::State {
  inflate_state st;
};
#else
struct GzipReader::State {};
#endif

GzipReader::GzipReader(std::string_view in) : in_(in), state_(std::make_unique<State>()) {
  uint32_t isize = 0;
  if (in.size() >= 4) std::memcpy(&isize, in.data() + in.size() - 4, 4);
  size_ = isize;
#ifdef STEPSCOPE_HAVE_ISAL
  inflate_state* st = &state_->st;
  isal_inflate_init(st);
  st->crc_flag = ISAL_GZIP;  // the header parsed, the CRC checked
  st->next_in = reinterpret_cast<uint8_t*>(const_cast<char*>(in_.data()));
  st->avail_in = static_cast<uint32_t>(std::min<size_t>(in_.size(), UINT32_MAX));
#else
  ended_ = true;
#endif
}

GzipReader::~GzipReader() = default;

size_t GzipReader::read([[maybe_unused]] char* dst, size_t n) {
  size_t got = 0;
#ifdef STEPSCOPE_HAVE_ISAL
  inflate_state* st = &state_->st;
  // The history deflate refers back to is the inflater's own: `dst` need not follow the last read's bytes.
  while (!ended_ && got < n) {
    const size_t piece = std::min<size_t>(n - got, UINT32_MAX);
    st->next_out = reinterpret_cast<uint8_t*>(dst + got);
    st->avail_out = static_cast<uint32_t>(piece);
    const uint32_t avail_in = st->avail_in;
    const int r = isal_inflate(st);
    const size_t wrote = piece - st->avail_out;
    got += wrote;
    total_ += wrote;
    if (r != ISAL_DECOMP_OK && r != ISAL_END_INPUT && r != ISAL_OUT_OVERFLOW) {
      ended_ = true;
    } else if (st->block_state == ISAL_BLOCK_FINISH) {
      // One member, ending where the file ends, as long as its trailer said.
      ended_ = true;
      whole_ = total_ == size_ && st->avail_in == 0 && in_.size() <= UINT32_MAX;
    } else if (total_ > size_ || (st->avail_in == 0 && st->avail_out > 0) ||
               (wrote == 0 && st->avail_in == avail_in)) {
      ended_ = true;  // more than the trailer said, the file cut short, or no way on
    }
  }
#else
  (void)n;
#endif
  return got;
}

bool GzipReader::finish() {
  char scratch[4096];
  while (!ended_ && read(scratch, sizeof scratch) > 0) {
  }
  return ended_ && whole_;
}

}  // namespace stepscope::analyzer::import
