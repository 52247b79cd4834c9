// CPython frame reading; see python_frames.h and docs/python.md.
//
// Struct offsets below come from the public CPython headers of each minor version (Include/cpython/*.h and
// Include/internal/pycore_frame.h, pycore_code.h), x86-64/aarch64 LP64 layout, release builds. CPython keeps
// these layouts fixed within a minor version. The tests run the real interpreters (tests/python).
#include "python_frames.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "unwind/safe_copy.h"

namespace stepscope::collector::python {
namespace {

enum class FrameModel { FrameObject, Cframe311, Cframe312, Current313, Current314 };
enum class LineTable { Lnotab39, Linetable310, Locations311 };

struct Layout {
  uint32_t hex;  // 0x03MM0000
  FrameModel model;
  LineTable lines;
  // thread state → frame chain
  uint32_t tstate_frame;    // 3.9/3.10 tstate->frame, 3.11/3.12 tstate->cframe, 3.13+ tstate->current_frame
  uint32_t cframe_current;  // 3.11/3.12 _PyCFrame.current_frame
  // frame (PyFrameObject for 3.9/3.10, _PyInterpreterFrame after)
  uint32_t frame_code, frame_previous, frame_instr, frame_owner, frame_is_entry, frame_read;
  // PyCodeObject
  uint32_t code_filename, code_name, code_qualname, code_lines, code_firstlineno, code_adaptive;
  // unicode: sizeof(PyASCIIObject), sizeof(PyCompactUnicodeObject), offsetof(PyCompactUnicodeObject, utf8)
  uint32_t ascii_size, compact_size, compact_utf8, compact_utf8_length;
};

constexpr uint32_t kNone = 0xFFFFFFFFu;
// The shim frame an evaluator call pushes (3.12+): FRAME_OWNED_BY_CSTACK in 3.12/3.13,
// FRAME_OWNED_BY_INTERPRETER in 3.14. Owners above it (3.14's FRAME_OWNED_BY_CSTACK) are not Python frames
// either.
constexpr uint8_t kOwnedByEntryShim = 3;

// clang-format off
constexpr Layout kLayouts[] = {
  // hex        model                    lines                    tstate cframe  code prev instr owner entry read   file name qual lines first adapt  ascii compact utf8 utf8len
  {0x03090000, FrameModel::FrameObject, LineTable::Lnotab39,      24, kNone,     32, 24, 104, kNone, kNone, 112,  104, 112, kNone, 120, 40, kNone,  48, 72, 56, 48},
  {0x030A0000, FrameModel::FrameObject, LineTable::Linetable310,  24, kNone,     32, 24,  96, kNone, kNone, 104,  104, 112, kNone, 120, 40, kNone,  48, 72, 56, 48},
  {0x030B0000, FrameModel::Cframe311,   LineTable::Locations311,  56, 8,         32, 48,  56, 69, 68, 80,         112, 120, 128, 136, 72, 184,  48, 72, 56, 48},
  {0x030C0000, FrameModel::Cframe312,   LineTable::Locations311,  56, 0,          0,  8,  56, 70, kNone, 80,      112, 120, 128, 136, 68, 192,  40, 56, 48, 40},
  {0x030D0000, FrameModel::Current313,  LineTable::Locations311,  72, kNone,      0,  8,  56, 70, kNone, 80,      112, 120, 128, 136, 68, 200,  40, 56, 48, 40},
  {0x030E0000, FrameModel::Current314,  LineTable::Locations311,  72, kNone,      0,  8,  56, 74, kNone, 80,      112, 120, 128, 136, 68, 208,  40, 56, 48, 40},
};
// clang-format on

constexpr size_t kDigestChars = 16;  // characters of a name or file name in the sample's digest

constexpr bool header_spans_fit() {
  for (const Layout& l : kLayouts) {
    uint32_t end = l.code_filename > l.code_name ? l.code_filename : l.code_name;
    if (l.code_qualname != kNone && l.code_qualname > end) end = l.code_qualname;
    if (l.code_firstlineno > end) end = l.code_firstlineno;
    if (end + 8 - 8 > CaptureScratch::kHeaderBytes) return false;
    if (l.ascii_size + kDigestChars > CaptureScratch::kStringBytes) return false;
  }
  return true;
}
static_assert(header_spans_fit(), "CaptureScratch::headers must hold a code object's naming fields");

constexpr int kMaxWalk = 512;          // frames (incl. shims) walked per sample: stops cycles
constexpr size_t kMaxString = 4096;    // characters of a name or file name
constexpr size_t kMaxTable = 1 << 20;  // bytes of a line table

using GetTstateFn = void* (*)();

// The CPython this process runs, found once by init().
struct Interpreter {
  std::atomic<bool> ready{false};
  const Layout* layout = nullptr;
  GetTstateFn get_tstate = nullptr;
  uint64_t code_type = 0, unicode_type = 0, bytes_type = 0;
  // The evaluator's code: the symbol, then the parts a compiler split from it (kMaxEvalParts in all).
  static constexpr int kMaxEvalParts = 4;
  std::atomic<uint64_t> eval_lo[kMaxEvalParts] = {}, eval_hi[kMaxEvalParts] = {};
  char description[200] = "not looked for yet";
};
// Constant-initialized (no constructor runs), so init() may be called from any library constructor.
constinit Interpreter interp;

void set_description(const std::string& text) {
  std::snprintf(interp.description, sizeof interp.description, "%s", text.c_str());
}

bool plausible(uint64_t p) { return p >= 4096 && p < (1ull << 47) && (p & 7) == 0; }

// Our pid, refreshed in forked children (pthread_atfork): a stale pid would read the parent's memory.
std::atomic<pid_t> g_pid{0};
pid_t own_pid() {
  pid_t p = g_pid.load(std::memory_order_relaxed);
  if (p == 0) {
    p = static_cast<pid_t>(syscall(SYS_getpid));
    g_pid.store(p, std::memory_order_relaxed);
  }
  return p;
}
void forget_pid() { g_pid.store(0, std::memory_order_relaxed); }

// Fault-safe reads of our own memory (pairs of equal length): guarded copies in the sampling handler,
// otherwise the kernel copies or fails with EFAULT; the target never faults.
long vm_read(const iovec* local, const iovec* remote, unsigned long n) {
  return unwind::read_own(local, remote, n, own_pid());
}

bool safe_read(void* dst, uint64_t addr, size_t n) {
  if (addr < 4096 || addr + n < addr) return false;
  iovec local{dst, n};
  iovec remote{reinterpret_cast<void*>(addr), n};
  return vm_read(&local, &remote, 1) == static_cast<long>(n);
}

template <typename T>
T field(const unsigned char* buf, uint32_t off) {
  T v;
  std::memcpy(&v, buf + off, sizeof v);
  return v;
}

// A string's length, kind and (ASCII) first characters from a copy of its head: what tells two strings that
// lived at one address apart. Async-signal-safe. Not its hash (computed lazily, so it changes) nor its
// interned bits or cached UTF-8 form.
uint64_t string_digest(const unsigned char* head, size_t have) {
  const Layout& L = *interp.layout;
  const int64_t length = field<int64_t>(head, 16);
  const uint32_t state = field<uint32_t>(head, 32);
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i, v >>= 8) h = (h ^ (v & 0xFF)) * 0x100000001B3ull;
  };
  mix(static_cast<uint64_t>(length));
  mix((state >> 2) & 0x1F);  // kind, compact, ascii
  const bool compact_ascii = ((state >> 5) & 1) && ((state >> 6) & 1);
  if (compact_ascii && length > 0) {
    const size_t n = std::min({static_cast<size_t>(length), kDigestChars, have - std::min(have, size_t{L.ascii_size})});
    for (size_t i = 0; i < n; ++i) h = (h ^ head[L.ascii_size + i]) * 0x100000001B3ull;
  }
  return h;
}

uint32_t names_digest(const unsigned char* name_head, const unsigned char* file_head, size_t have) {
  const uint64_t h = string_digest(name_head, have) * 31 + string_digest(file_head, have);
  return static_cast<uint32_t>(h ^ (h >> 32)) | 1u;  // never 0: 0 is "not read"
}

// How many bytes of a string's head the digest reads: its header and the characters that follow.
size_t digest_span() { return interp.layout->ascii_size + kDigestChars; }

void* symbol(const char* name) { return dlsym(RTLD_DEFAULT, name); }

// Size of a dynamic symbol (dladdr1 gives its ELF symbol entry).
size_t symbol_size(void* addr) {
  Dl_info info{};
  void* entry = nullptr;
  if (!dladdr1(addr, &info, &entry, RTLD_DL_SYMENT) || !entry) return 0;
  return static_cast<const ElfW(Sym)*>(entry)->st_size;
}

std::string module_of(void* addr) {
  Dl_info info{};
  if (!dladdr(addr, &info) || !info.dli_fname || !*info.dli_fname) return "the executable";
  const char* slash = std::strrchr(info.dli_fname, '/');
  return slash ? slash + 1 : info.dli_fname;
}

// libgcc's lookup of the unwind table entry (FDE) that covers a pc, through .eh_frame_hdr.
struct DwarfEhBases {
  void* tbase;
  void* dbase;
  void* func;
};
extern "C" const void* _Unwind_Find_FDE(void* pc, DwarfEhBases* bases);

struct CodeRange {
  uint64_t lo = 0, hi = 0;
};

// The function that covers `pc` as its unwind table sees it: [start, end). The FDE's address range follows
// its length, CIE pointer and start (both 4 bytes: the pcrel|sdata4 encoding every x86-64 toolchain writes);
// anything else is not trusted.
CodeRange unwind_function_of(uint64_t pc) {
  DwarfEhBases bases{};
  const auto* fde = static_cast<const unsigned char*>(_Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases));
  if (!fde || !bases.func) return {};
  int32_t begin_rel = 0;
  uint32_t range = 0;
  std::memcpy(&begin_rel, fde + 8, 4);
  std::memcpy(&range, fde + 12, 4);
  const uint64_t begin = reinterpret_cast<uint64_t>(fde + 8) + static_cast<int64_t>(begin_rel);
  if (begin != reinterpret_cast<uint64_t>(bases.func) || pc < begin || pc >= begin + range) return {};
  return {begin, begin + range};
}

// Parts of the evaluator that the compiler split off (GCC's hot/cold partitioning: Debian's CPython 3.14
// exports a 1,184-byte _PyEval_EvalFrameDefault that jumps into an 84 KB body without a symbol of its own).
// Native frames there are evaluator frames too, or Python frames cannot be spliced into native stacks. Only a
// symbol too small to hold the evaluator is scanned: its jumps out of it (jmp and jcc rel32, read byte by
// byte, so an immediate can pass for one) must reach, from at least two places, one unwind-table function of
// the same object that is large (the body) and does not start at an exported symbol (that would be a tail
// call).
std::vector<CodeRange> split_parts(void* eval, size_t size) {
  constexpr uint64_t kMinPart = 16 * 1024;
  std::vector<CodeRange> parts;
  if (size < 6 || size >= kMinPart) return parts;
  Dl_info self{};
  if (!dladdr(eval, &self)) return parts;
  const auto* code = static_cast<const unsigned char*>(eval);
  const uint64_t lo = reinterpret_cast<uint64_t>(eval), hi = lo + size;
  std::vector<std::pair<CodeRange, int>> seen;  // candidate functions and their jump sites
  for (size_t i = 0; i + 5 <= size; ++i) {
    size_t len = 0;
    if (code[i] == 0xE9)
      len = 5;  // jmp rel32
    else if (code[i] == 0x0F && i + 6 <= size && (code[i + 1] & 0xF0) == 0x80)
      len = 6;  // jcc rel32
    if (!len) continue;
    int32_t rel = 0;
    std::memcpy(&rel, code + i + len - 4, 4);
    const uint64_t target = lo + i + len + static_cast<int64_t>(rel);
    if (target >= lo && target < hi) continue;
    bool known = false;
    for (auto& [r, sites] : seen)
      if (target >= r.lo && target < r.hi) known = true, ++sites;
    if (known) continue;
    const CodeRange f = unwind_function_of(target);
    if (f.hi - f.lo < kMinPart || (lo >= f.lo && lo < f.hi)) continue;
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(f.lo), &info) || info.dli_fbase != self.dli_fbase ||
        info.dli_saddr == reinterpret_cast<void*>(f.lo))
      continue;
    seen.emplace_back(f, 1);
  }
  for (const auto& [r, sites] : seen)
    if (sites >= 2) parts.push_back(r);
  return parts;
}

uint32_t detect_version() {
  if (auto* v = static_cast<const unsigned long*>(symbol("Py_Version"))) return static_cast<uint32_t>(*v);  // 3.11+
  using GetVersion = const char* (*)();
  auto get = reinterpret_cast<GetVersion>(symbol("Py_GetVersion"));
  if (!get) return 0;
  int major = 0, minor = 0;
  if (std::sscanf(get(), "%d.%d", &major, &minor) != 2) return 0;
  return static_cast<uint32_t>(major) << 24 | static_cast<uint32_t>(minor) << 16;
}

// ---- line tables -------------------------------------------------------------------------------------

int line_from_lnotab(const std::vector<uint8_t>& t, int first, int addr_bytes) {
  int line = first, addr = 0;
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    addr += t[i];
    if (addr > addr_bytes) break;
    line += static_cast<int8_t>(t[i + 1]);
  }
  return line;
}

int line_from_linetable310(const std::vector<uint8_t>& t, int first, int addr_bytes) {
  int computed = first, end = 0;
  for (size_t i = 0; i + 1 < t.size(); i += 2) {
    const int start = end;
    end = start + t[i];
    const int delta = static_cast<int8_t>(t[i + 1]);
    int line = -1;
    if (delta != -128) {
      computed += delta;
      line = computed;
    }
    if (start <= addr_bytes && addr_bytes < end) return line;
  }
  return -1;
}

struct Cursor {
  const std::vector<uint8_t>& t;
  size_t i = 0;
  bool more() const { return i < t.size(); }
  unsigned byte() { return i < t.size() ? t[i++] : 0; }
  unsigned varint() {
    unsigned b = byte(), v = b & 63, shift = 6;
    while ((b & 64) && i < t.size() && shift < 30) {
      b = byte();
      v |= (b & 63) << shift;
      shift += 6;
    }
    return v;
  }
  int svarint() {
    const unsigned v = varint();
    return (v & 1) ? -static_cast<int>(v >> 1) : static_cast<int>(v >> 1);
  }
};

// 3.11+ location table (InternalDocs/locations.md): entries of (code, length in code units, line delta…).
int line_from_locations(const std::vector<uint8_t>& t, int first, int addr_units) {
  Cursor c{t};
  int line = first, addr = 0;
  while (c.more()) {
    const unsigned head = c.byte();
    if (!(head & 0x80)) return -1;  // not at an entry start: corrupt
    const unsigned code = (head >> 3) & 15;
    const int len = static_cast<int>(head & 7) + 1;
    int entry_line = line;
    bool has_line = true;
    if (code == 15) {
      has_line = false;
    } else if (code == 14) {
      line += c.svarint();
      entry_line = line;
      c.varint(), c.varint(), c.varint();
    } else if (code == 13) {
      line += c.svarint();
      entry_line = line;
    } else if (code >= 10) {
      line += static_cast<int>(code) - 10;
      entry_line = line;
      c.byte(), c.byte();
    } else {
      c.byte();
    }
    if (addr <= addr_units && addr_units < addr + len) return has_line ? entry_line : -1;
    addr += len;
  }
  return -1;
}

// ---- reading objects in the collector thread ---------------------------------------------------------

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 63));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 63));
    out += static_cast<char>(0x80 | (cp & 63));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 63));
    out += static_cast<char>(0x80 | ((cp >> 6) & 63));
    out += static_cast<char>(0x80 | (cp & 63));
  }
}

bool read_unicode(uint64_t obj, std::string& out) {
  const Layout& L = *interp.layout;
  if (!plausible(obj)) return false;
  unsigned char head[80];
  if (!safe_read(head, obj, L.compact_size)) return false;
  if (field<uint64_t>(head, 8) != interp.unicode_type) return false;
  const int64_t length = field<int64_t>(head, 16);
  const uint32_t state = field<uint32_t>(head, 32);
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (length < 0 || static_cast<size_t>(length) > kMaxString) return false;
  out.clear();
  // The text must be what its header says (a string freed since the sample may be half overwritten): ASCII
  // below 0x80, code points valid and none a control character a name or path never holds.
  if (compact && ascii) {
    out.resize(static_cast<size_t>(length));
    if (length != 0 && !safe_read(out.data(), obj + L.ascii_size, out.size())) return false;
    return std::all_of(out.begin(), out.end(), [](char ch) { return ch >= 0x20 && ch < 0x7F; });
  }
  if (compact && (kind == 1 || kind == 2 || kind == 4)) {
    std::vector<unsigned char> raw(static_cast<size_t>(length) * kind);
    if (!raw.empty() && !safe_read(raw.data(), obj + L.compact_size, raw.size())) return false;
    for (int64_t i = 0; i < length; ++i) {
      uint32_t cp = 0;
      std::memcpy(&cp, raw.data() + i * kind, kind);  // little-endian
      if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0) || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return false;
      append_utf8(out, cp);
    }
    return true;
  }
  // Legacy (non-compact) string: use its cached UTF-8 form when present.
  const uint64_t utf8 = field<uint64_t>(head, L.compact_utf8);
  const int64_t utf8_length = field<int64_t>(head, L.compact_utf8_length);
  if (!utf8 || utf8_length < 0 || static_cast<size_t>(utf8_length) > kMaxString) return false;
  out.resize(static_cast<size_t>(utf8_length));
  return safe_read(out.data(), utf8, out.size());
}

bool read_bytes(uint64_t obj, std::vector<uint8_t>& out) {
  if (!plausible(obj)) return false;
  unsigned char head[32];
  if (!safe_read(head, obj, sizeof head)) return false;
  if (field<uint64_t>(head, 8) != interp.bytes_type) return false;
  const int64_t size = field<int64_t>(head, 16);
  if (size < 0 || static_cast<size_t>(size) > kMaxTable) return false;
  out.resize(static_cast<size_t>(size));
  return size == 0 || safe_read(out.data(), obj + 32, out.size());
}

struct CodeInfo {
  std::vector<unsigned char> header;  // the code object's fields as read; a changed header means a new object
  uint32_t names_digest = 0;           // and its strings' (a new object may have the old one's fields)
  std::string function, file;
  int first_line = 0;
  std::vector<uint8_t> table;
  std::unordered_map<int32_t, int> lines;
};

struct Cache {
  std::mutex mutex;
  std::unordered_map<uint64_t, CodeInfo> codes;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: the collector may resolve during exit
  return *c;
}
constexpr size_t kMaxCacheEntries = 200000;

size_t code_header_size() {
  const Layout& L = *interp.layout;
  return std::max({L.code_filename, L.code_name, L.code_lines, L.code_firstlineno,
                   L.code_qualname == kNone ? 0u : L.code_qualname}) + 8;
}

// Bytes of a code object the signal handler reads, from its type field (offset 8) to the end of the last field
// that names it.
size_t sample_header_span() {
  const Layout& L = *interp.layout;
  return std::max({L.code_filename, L.code_name, L.code_firstlineno,
                   L.code_qualname == kNone ? 0u : L.code_qualname}) + 8 - 8;
}

bool load_code(uint64_t code, const std::vector<unsigned char>& header, CodeInfo& info) {
  const Layout& L = *interp.layout;
  info.header = header;
  const uint64_t name = field<uint64_t>(header.data(), L.code_qualname != kNone ? L.code_qualname : L.code_name);
  if (!read_unicode(name, info.function)) return false;
  if (!read_unicode(field<uint64_t>(header.data(), L.code_filename), info.file)) return false;
  info.first_line = field<int32_t>(header.data(), L.code_firstlineno);
  if (info.first_line < 0) return false;
  if (!read_bytes(field<uint64_t>(header.data(), L.code_lines), info.table)) info.table.clear();
  info.lines.clear();
  (void)code;
  return true;
}

int compute_line(const CodeInfo& info, int32_t instr) {
  if (instr < 0) return info.first_line;
  switch (interp.layout->lines) {
    case LineTable::Lnotab39: return line_from_lnotab(info.table, info.first_line, instr * 2);
    case LineTable::Linetable310: return line_from_linetable310(info.table, info.first_line, instr * 2);
    case LineTable::Locations311: return line_from_locations(info.table, info.first_line, instr);
  }
  return -1;
}

// Frames of 3.11+ live in the thread's data stack: contiguous, older frames at lower addresses. A syscall
// costs ~10 µs in some VMs (measured here), so one read fetches a window below the current frame and the
// chain is walked in it; a frame outside the window starts a new one. Pages are read top-down in separate
// iovecs, so an unmapped page below the data-stack chunk only shortens the window.
class FrameWindow {
 public:
  explicit FrameWindow(unsigned char (&buf)[CaptureScratch::kWindowBytes]) : buf_(buf) {}

  const unsigned char* get(uint64_t frame, uint32_t size) {
    if (frame >= valid_lo_ && frame + size <= hi_) return buf_ + (frame - base_);
    const uint64_t hi = frame + size;
    const uint64_t base = hi > sizeof buf_ ? hi - sizeof buf_ : 0;
    iovec local[4], remote[4];
    unsigned long n = 0;
    for (uint64_t top = hi; top > base && n < 4;) {
      const uint64_t bottom = std::max(base, (top - 1) & ~uint64_t{4095});
      remote[n] = {reinterpret_cast<void*>(bottom), top - bottom};
      local[n] = {buf_ + (bottom - base), top - bottom};
      ++n;
      top = bottom;
    }
    const long got = vm_read(local, remote, n);
    if (got < static_cast<long>(size)) {
      valid_lo_ = hi_ = 0;
      return nullptr;
    }
    base_ = base;
    hi_ = hi;
    valid_lo_ = hi - static_cast<uint64_t>(got);  // pages are read top-down: [hi - got, hi) is valid
    return buf_ + (frame - base_);
  }

 private:
  unsigned char (&buf_)[CaptureScratch::kWindowBytes];
  uint64_t base_ = 0, valid_lo_ = 0, hi_ = 0;
};

}  // namespace

bool init() {
  if (interp.ready.load(std::memory_order_acquire)) return true;
  auto get_tstate = reinterpret_cast<GetTstateFn>(symbol("PyGILState_GetThisThreadState"));
  void* eval = symbol("_PyEval_EvalFrameDefault");
  if (!get_tstate || !eval) {
    set_description("no CPython in this process");
    return false;
  }
  const uint32_t hex = detect_version() & 0xFFFF0000u;
  const Layout* layout = nullptr;
  for (const Layout& l : kLayouts)
    if (l.hex == hex) layout = &l;
  char version[32];
  std::snprintf(version, sizeof version, "%u.%u", hex >> 24, (hex >> 16) & 0xFF);
  if (!layout) {
    set_description(std::string("CPython ") + version + " is not supported (3.9–3.14 are)");
    return false;
  }
  if (hex >= 0x030D0000u) {
    // 3.13+ begin _PyRuntime with _Py_DebugOffsets: "xdebugpy", the version, then whether the build is
    // free-threaded, whose frames and code objects are laid out differently.
    const auto* runtime = static_cast<const unsigned char*>(symbol("_PyRuntime"));
    uint64_t head[3] = {};
    if (runtime && safe_read(head, reinterpret_cast<uint64_t>(runtime), sizeof head) &&
        std::memcmp(head, "xdebugpy", 8) == 0 && (head[1] & 0xFFFF0000u) == hex && head[2] != 0) {
      set_description(std::string("CPython ") + version +
                      " free-threaded is not supported (the GIL builds are)");
      return false;
    }
  }
  interp.code_type = reinterpret_cast<uint64_t>(symbol("PyCode_Type"));
  interp.unicode_type = reinterpret_cast<uint64_t>(symbol("PyUnicode_Type"));
  interp.bytes_type = reinterpret_cast<uint64_t>(symbol("PyBytes_Type"));
  if (!interp.code_type || !interp.unicode_type || !interp.bytes_type) {
    set_description(std::string("CPython ") + version + ": type objects not exported");
    return false;
  }
  uint64_t probe = 0, here = 0x5354455053434F50ull;
  if (!safe_read(&probe, reinterpret_cast<uint64_t>(&here), sizeof probe) || probe != here) {
    set_description(std::string("CPython ") + version + ": process_vm_readv on our own pid is not permitted (" +
                    std::strerror(errno) + "); Python frames off");
    return false;
  }
  const size_t eval_size = symbol_size(eval);
  interp.eval_lo[0].store(reinterpret_cast<uint64_t>(eval), std::memory_order_relaxed);
  interp.eval_hi[0].store(reinterpret_cast<uint64_t>(eval) + (eval_size ? eval_size : 1),
                          std::memory_order_relaxed);
  int parts = 1;
  uint64_t split_bytes = 0;
  for (const CodeRange& r : split_parts(eval, eval_size)) {
    if (parts == Interpreter::kMaxEvalParts) break;
    interp.eval_lo[parts].store(r.lo, std::memory_order_relaxed);
    interp.eval_hi[parts].store(r.hi, std::memory_order_relaxed);
    split_bytes += r.hi - r.lo;
    ++parts;
  }
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, forget_pid); });
  interp.layout = layout;
  interp.get_tstate = get_tstate;
  std::string where = module_of(eval);
  if (parts > 1)
    where += "; evaluator split: " + std::to_string(parts - 1) + " part(s), " + std::to_string(split_bytes) +
             " bytes, beside the symbol's " + std::to_string(eval_size);
  set_description(std::string("CPython ") + version + " (" + where + ")");
  interp.ready.store(true, std::memory_order_release);
  return true;
}

std::string describe() { return std::string(interp.description); }

uint32_t version_hex() { return interp.ready.load(std::memory_order_acquire) ? interp.layout->hex : 0; }

bool is_eval_frame(uint64_t pc) {
  for (int i = 0; i < Interpreter::kMaxEvalParts; ++i)
    if (pc >= interp.eval_lo[i].load(std::memory_order_relaxed) &&
        pc < interp.eval_hi[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

int capture_current_thread(RawPyFrame* out, int max, CaptureScratch& scratch) {
  if (max <= 0 || !interp.ready.load(std::memory_order_acquire)) return 0;
  const Layout& L = *interp.layout;
  // The GIL-state TLS slot (pthread_getspecific): set for every thread that runs Python, kept while the
  // thread waits with the GIL released, read without locks. The thread is interrupted by us, so its own
  // frame chain cannot change under us.
  const auto tstate = reinterpret_cast<uint64_t>(interp.get_tstate());
  if (!plausible(tstate)) return 0;
  uint64_t frame = 0;
  if (!safe_read(&frame, tstate + L.tstate_frame, 8)) return 0;
  if (L.cframe_current != kNone) {
    if (!plausible(frame) || !safe_read(&frame, frame + L.cframe_current, 8)) return 0;
  }
  int n = 0;
  unsigned char small[128];
  FrameWindow window(scratch.window);  // 3.11+: frames are contiguous in the thread's data stack
  const bool contiguous = L.model != FrameModel::FrameObject;
  for (int walked = 0; frame && n < max && walked < kMaxWalk; ++walked) {
    if (!plausible(frame)) break;
    const unsigned char* buf = small;
    if (contiguous) {
      buf = window.get(frame, L.frame_read);
      if (!buf) break;
    } else if (!safe_read(small, frame, L.frame_read)) {
      break;
    }
    const uint64_t previous = field<uint64_t>(buf, L.frame_previous);
    if (L.frame_owner != kNone && L.model != FrameModel::Cframe311 &&
        buf[L.frame_owner] >= kOwnedByEntryShim) {
      // The shim an evaluator call pushes: the Python frame just above it was that call's first.
      if (n > 0 && buf[L.frame_owner] == kOwnedByEntryShim) out[n - 1].is_entry = 1;
      frame = previous;
      continue;
    }
    uint64_t code = field<uint64_t>(buf, L.frame_code);
    // 3.14's f_executable is a _PyStackRef: a tagged pointer (Py_TAG_REFCNT, the low bit, in GIL builds).
    if (L.model == FrameModel::Current314) code &= ~uint64_t{3};
    if (!plausible(code)) break;
    int64_t instr = -1;
    switch (L.model) {
      case FrameModel::FrameObject: {
        const int32_t lasti = field<int32_t>(buf, L.frame_instr);
        instr = lasti < 0 ? -1 : (L.lines == LineTable::Lnotab39 ? lasti / 2 : lasti);
        break;
      }
      default: {
        const uint64_t ip = field<uint64_t>(buf, L.frame_instr);
        const uint64_t base = code + L.code_adaptive;
        instr = ip >= base ? static_cast<int64_t>((ip - base) / 2) : -1;
        if (instr > (1 << 30)) instr = -1;
        break;
      }
    }
    RawPyFrame& f = out[n++];
    f.code = code;
    f.instr_offset = static_cast<int32_t>(instr);
    f.is_entry = L.model == FrameModel::FrameObject ? 1
                 : L.model == FrameModel::Cframe311 ? (buf[L.frame_is_entry] ? 1 : 0)
                                                     : 0;
    frame = previous;
  }
  if (n == 0) return 0;
  // Check that every code pointer is a code object and keep the fields that name it: one batched read of
  // their headers. The chain is cut at the first that is not (a frame torn by a concurrent interpreter change,
  // or wrong layout).
  constexpr int kBatch = CaptureScratch::kBatch;
  const size_t span = sample_header_span();
  const uint32_t name_at = (L.code_qualname != kNone ? L.code_qualname : L.code_name) - 8;
  iovec* local = scratch.local;
  iovec* remote = scratch.remote;
  for (int base = 0; base < n; base += kBatch) {
    const int count = std::min(kBatch, n - base);
    for (int i = 0; i < count; ++i) {
      local[i] = {scratch.headers[i], span};
      remote[i] = {reinterpret_cast<void*>(out[base + i].code + 8), span};
    }
    const long got = vm_read(local, remote, static_cast<unsigned long>(count));
    const int ok = got < 0 ? 0 : static_cast<int>(static_cast<size_t>(got) / span);
    for (int i = 0; i < count; ++i) {
      const unsigned char* h = scratch.headers[i];  // the code object from its type field on
      if (i >= ok || field<uint64_t>(h, 0) != interp.code_type) return base + i;
      RawPyFrame& f = out[base + i];
      f.name = field<uint64_t>(h, name_at);
      f.file = field<uint64_t>(h, L.code_filename - 8);
      f.first_line = field<int32_t>(h, L.code_firstlineno - 8);
    }
    // Then the heads of their name and file strings (alive: this thread's frames hold the code objects).
    const size_t strings = digest_span();
    for (int i = 0; i < count; ++i) {
      scratch.string_local[2 * i] = {scratch.strings[2 * i], strings};
      scratch.string_remote[2 * i] = {reinterpret_cast<void*>(out[base + i].name), strings};
      scratch.string_local[2 * i + 1] = {scratch.strings[2 * i + 1], strings};
      scratch.string_remote[2 * i + 1] = {reinterpret_cast<void*>(out[base + i].file), strings};
    }
    const long read = vm_read(scratch.string_local, scratch.string_remote, static_cast<unsigned long>(2 * count));
    const int whole = read < 0 ? 0 : static_cast<int>(static_cast<size_t>(read) / strings);
    for (int i = 0; i < count; ++i)
      out[base + i].names_digest =
          2 * i + 1 < whole ? names_digest(scratch.strings[2 * i], scratch.strings[2 * i + 1], strings) : 0;
  }
  return n;
}

// The digest of the strings at `name` and `file` now; 0 when unreadable.
uint32_t names_digest_now(uint64_t name, uint64_t file) {
  unsigned char heads[2][CaptureScratch::kStringBytes];
  const size_t span = digest_span();
  if (!safe_read(heads[0], name, span) || !safe_read(heads[1], file, span)) return 0;
  return names_digest(heads[0], heads[1], span);
}

bool resolve(const RawPyFrame& f, std::string& function, std::string& file, int& line) {
  if (!interp.ready.load(std::memory_order_acquire) || !plausible(f.code) || f.names_digest == 0) return false;
  const Layout& L = *interp.layout;
  const uint32_t name_at = L.code_qualname != kNone ? L.code_qualname : L.code_name;
  std::vector<unsigned char> header(code_header_size());
  // The strings the sample saw must still read the same, whether or not their code object is still there.
  if (names_digest_now(f.name, f.file) != f.names_digest) return false;
  // The code object the sample saw, still there: the same fields.
  const bool same = safe_read(header.data(), f.code, header.size()) &&
                    field<uint64_t>(header.data(), 8) == interp.code_type &&
                    field<uint64_t>(header.data(), name_at) == f.name &&
                    field<uint64_t>(header.data(), L.code_filename) == f.file &&
                    field<int32_t>(header.data(), L.code_firstlineno) == f.first_line;
  if (!same) {
    // Freed since the sample (its address maybe another code object's now): the strings it named may live on
    // (a module's file name is its functions' too, "<module>" is interned); the executing line went with it.
    // Their digest is checked again after the read: they may be freed meanwhile.
    if (!read_unicode(f.name, function) || function.empty() || !read_unicode(f.file, file) ||
        names_digest_now(f.name, f.file) != f.names_digest)
      return false;
    line = 0;
    return true;
  }
  // The header from the type field on: the reference count changes all the time, the object does not.
  auto unchanged = [](const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
    return a.size() == b.size() && std::memcmp(a.data() + 8, b.data() + 8, a.size() - 8) == 0;
  };
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.codes.find(f.code);
  if (it == c.codes.end() || !unchanged(it->second.header, header) || it->second.names_digest != f.names_digest) {
    if (c.codes.size() >= kMaxCacheEntries) c.codes.clear();
    CodeInfo info;
    std::vector<unsigned char> again(header.size());
    // Read again after its strings and line table: a code object freed meanwhile is not cached as whole.
    if (!load_code(f.code, header, info) || !safe_read(again.data(), f.code, again.size()) ||
        !unchanged(header, again)) {
      c.codes.erase(f.code);
      return false;
    }
    info.names_digest = f.names_digest;
    it = c.codes.insert_or_assign(f.code, std::move(info)).first;
  }
  CodeInfo& info = it->second;
  auto cached = info.lines.find(f.instr_offset);
  if (cached == info.lines.end()) cached = info.lines.emplace(f.instr_offset, compute_line(info, f.instr_offset)).first;
  function = info.function;
  file = info.file;
  line = cached->second > 0 ? cached->second : 0;  // 0: the instruction has no line (compiler-made code)
  return true;
}

}  // namespace stepscope::collector::python
