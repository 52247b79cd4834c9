// Offline symbolization with elfutils libdwfl: function, file:line and inlined frames, demangled. Runs in the
// launcher after the target has exited, never in the target. Results are memoized per address and kept on
// disk per build-id (docs/collector.md, "Symbolization"), so a module's debug information is only read for
// addresses no earlier run has resolved.
#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "stepscope/collector/launcher.h"

namespace stepscope::collector {
namespace {

struct Sym {
  std::string function, file;
  int line = 0;
};

std::string demangle(const char* name) {
  if (!name) return {};
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status == 0 && d) {
    std::string s(d);
    std::free(d);
    return s;
  }
  return name;
}

std::string die_function_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int at : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name}) {
    if (dwarf_attr_integrate(die, at, &attr))
      if (const char* s = dwarf_formstring(&attr)) return demangle(s);
  }
  if (dwarf_attr_integrate(die, DW_AT_name, &attr))
    if (const char* s = dwarf_formstring(&attr)) return s;
  return {};
}

class ModuleSymbolizer {
 public:
  // `build_id`: the one recorded with the module (hex), empty when unknown. `cache_dir`: where results are
  // kept per build-id; empty = no persistent cache.
  ModuleSymbolizer(std::string path, std::string build_id, const std::string& cache_dir)
      : path_(std::move(path)), build_id_(std::move(build_id)) {
    if (!cache_dir.empty() && build_id_.size() >= 8 && build_id_.find('/') == std::string::npos) {
      // The suffix names the lookup rules: results cached under older rules (.2: an unsized symbol reaching
      // past its section; .3: no file:line without .debug_aranges) are not reused.
      cache_file_ = cache_dir + "/" + build_id_ + ".3";
      load_cache();
    }
  }
  ~ModuleSymbolizer() {
    if (dwfl_) dwfl_end(dwfl_);
  }
  ModuleSymbolizer(const ModuleSymbolizer&) = delete;
  ModuleSymbolizer& operator=(const ModuleSymbolizer&) = delete;

  // Outermost first; the last element is the function the address is in (after inlining). Empty: unresolved.
  const std::vector<Sym>& lookup(Dwarf_Addr addr) {
    auto [it, fresh] = memo_.try_emplace(addr);
    if (fresh) {
      if (auto cached = from_cache(addr)) {
        it->second = std::move(*cached);
        ++cache_hits_;
      } else {
        it->second = open() ? lookup_uncached(addr) : std::vector<Sym>();
        if (!mismatch_ && !cache_file_.empty()) unsaved_.push_back(addr);
      }
    }
    return it->second;
  }
  size_t lookups() const { return memo_.size(); }
  size_t cache_hits() const { return cache_hits_; }
  bool opened() const { return dwfl_ != nullptr; }

  // Writes the persistent cache, one line per address in address order (the next load needs no sort): the
  // newest line read for each address as it was, or what was resolved here since (temp file + rename; a
  // concurrent run may win, which only costs a lookup).
  void save() {
    if (unsaved_.empty() || cache_file_.empty()) return;
    std::sort(unsaved_.begin(), unsaved_.end());
    std::string out = std::string(kCacheHeader) + '\n';
    out.reserve(cache_text_.size() + unsaved_.size() * 64);
    auto address = [&out](Dwarf_Addr addr) {
      char hex[24];
      std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(addr));
      out += hex;
    };
    const size_t n = cache_index_.size();
    for (size_t i = 0, j = 0; i < n || j < unsaved_.size();) {
      if (j == unsaved_.size() || (i < n && cache_index_[i].first < unsaved_[j])) {
        size_t last = i;  // lines of one address sort by their place in the file: the last is the newest
        while (last + 1 < n && cache_index_[last + 1].first == cache_index_[i].first) ++last;
        const size_t at = cache_index_[last].second;
        address(cache_index_[last].first);
        out.append(cache_text_, at, cache_text_.find('\n', at) - at + 1);
        i = last + 1;
      } else {
        while (i < n && cache_index_[i].first == unsaved_[j]) ++i;  // replaced: unreadable, or resolved again
        address(unsaved_[j]);
        for (const auto& sym : memo_.at(unsaved_[j]))
          out += '\t' + sym.function + '\t' + sym.file + '\t' + std::to_string(sym.line);
        out += '\n';
        ++j;
      }
    }
    const std::string tmp = cache_file_ + ".tmp" + std::to_string(getpid());
    {
      // Created 0600 before the stream opens it, whatever the umask.
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, S_IRUSR | S_IWUSR);
      if (fd < 0) return;
      const bool private_mode = ::fchmod(fd, S_IRUSR | S_IWUSR) == 0;
      ::close(fd);
      if (!private_mode) return;
      std::ofstream f(tmp, std::ios::trunc | std::ios::binary);
      if (!f) return;
      f << out;
      if (!f) {
        std::remove(tmp.c_str());
        return;
      }
    }
    if (std::rename(tmp.c_str(), cache_file_.c_str()) != 0) std::remove(tmp.c_str());
    unsaved_.clear();
  }

 private:
  static constexpr const char* kCacheHeader = "stepscope-symbols 1";

  // The file is kept as text and only each line's address is read here: libtorch's file holds ~120,000 lines
  // (26 MB), which took ~2 s to parse whole for every store, while one store looks up a few thousand of them.
  void load_cache() {
    const int fd = ::open(cache_file_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    std::string text;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      text.resize(size_t(st.st_size));
      size_t got = 0;
      while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n <= 0) break;
        got += size_t(n);
      }
      text.resize(got);
    }
    ::close(fd);
    const std::string header = std::string(kCacheHeader) + '\n';
    if (text.compare(0, header.size(), header) != 0) return;
    text.erase(text.rfind('\n') + 1);  // a last line cut short (a full disk) is dropped
    cache_text_ = std::move(text);
    const char* data = cache_text_.data();
    for (size_t at = header.size(); at < cache_text_.size();) {
      const char* nl = static_cast<const char*>(std::memchr(data + at, '\n', cache_text_.size() - at));
      char* after = nullptr;
      const unsigned long long addr = std::strtoull(data + at, &after, 16);
      if (after != data + at && (*after == '\t' || after == nl))
        cache_index_.emplace_back(static_cast<Dwarf_Addr>(addr), size_t(after - data));
      at = size_t(nl - data) + 1;
    }
    // Written in address order (save()): sorted already, unless an older stepscope wrote the file.
    if (!std::is_sorted(cache_index_.begin(), cache_index_.end()))
      std::sort(cache_index_.begin(), cache_index_.end());
  }

  // The cached symbols of `addr`, outermost first, from its last well-formed line (fields in threes:
  // function, file, line; a later line was written by a later run); none when the cache has no such line.
  std::optional<std::vector<Sym>> from_cache(Dwarf_Addr addr) const {
    const auto first =
        std::lower_bound(cache_index_.begin(), cache_index_.end(), std::make_pair(addr, size_t(0)));
    auto it = std::upper_bound(first, cache_index_.end(), std::make_pair(addr, SIZE_MAX));
    while (it != first) {
      --it;
      // "\tfunction\tfile\tline..." or empty; every indexed line ends with a newline (load_cache()).
      const size_t end = cache_text_.find('\n', it->second);
      const std::string_view line(cache_text_.data() + it->second, end - it->second);
      std::vector<std::string_view> fields;
      for (size_t at = 0; at < line.size();) {
        const size_t next = std::min(line.find('\t', at + 1), line.size());
        fields.push_back(line.substr(at + 1, next - at - 1));
        at = next;
      }
      if (fields.size() % 3 != 0) continue;
      std::vector<Sym> syms;
      for (size_t i = 0; i < fields.size(); i += 3)
        syms.push_back({std::string(fields[i]), std::string(fields[i + 1]),
                        std::atoi(std::string(fields[i + 2]).c_str())});
      return syms;
    }
    return std::nullopt;
  }

  // Opens the module on the first address the cache cannot answer. False when it cannot be read or is no
  // longer the file that was recorded (rebuilt since: its build-id differs).
  bool open() {
    if (tried_) return mod_ != nullptr;
    tried_ = true;
    static char* debuginfo_path = nullptr;
    callbacks_.find_elf = dwfl_build_id_find_elf;
    callbacks_.find_debuginfo = dwfl_standard_find_debuginfo;
    callbacks_.section_address = dwfl_offline_section_address;
    callbacks_.debuginfo_path = &debuginfo_path;
    dwfl_ = dwfl_begin(&callbacks_);
    if (!dwfl_) return false;
    dwfl_report_begin(dwfl_);
    // Base 0: module addresses are the ELF's own virtual addresses, which is what the collector records.
    mod_ = dwfl_report_elf(dwfl_, path_.c_str(), path_.c_str(), -1, 0, false);
    dwfl_report_end(dwfl_, nullptr, nullptr);
    if (mod_ && !build_id_.empty()) {
      const unsigned char* bits = nullptr;
      GElf_Addr vaddr = 0;
      int n = dwfl_module_build_id(mod_, &bits, &vaddr);
      static const char* d = "0123456789abcdef";
      std::string hex;
      for (int i = 0; i < n; ++i) {
        hex += d[bits[i] >> 4];
        hex += d[bits[i] & 15];
      }
      if (n > 0 && hex != build_id_) {
        mismatch_ = true;
        mod_ = nullptr;
      }
    }
    if (mod_) build_symbol_table();
    return mod_ != nullptr;
  }

  // dwfl_module_addrinfo() scans the whole symbol table on every call: with libtorch's ~10^5-10^6 symbols and
  // thousands of addresses that took most of a minute. One pass here, then a binary search per address.
  void build_symbol_table() {
    const int n = dwfl_module_getsymtab(mod_);
    for (int i = 1; i < n; ++i) {
      GElf_Sym sym;
      GElf_Addr value = 0;
      GElf_Word shndx = 0;
      Elf* elf = nullptr;
      Dwarf_Addr sym_bias = 0;
      const char* name = dwfl_module_getsym_info(mod_, i, &sym, &value, &shndx, &elf, &sym_bias);
      const int type = GELF_ST_TYPE(sym.st_info);
      if (!name || !*name || shndx == SHN_UNDEF || value == 0) continue;
      if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
      const int bind = GELF_ST_BIND(sym.st_info);
      // Among aliases at one address prefer a sized, global one.
      const int rank = (sym.st_size > 0 ? 4 : 0) + (bind == STB_GLOBAL ? 2 : bind == STB_WEAK ? 1 : 0);
      // An unsized symbol (`_init` from crti.o) covers at most the rest of its section: in a stripped library
      // the next symbol may lie megabytes later, and every local function between would read `_init`.
      GElf_Xword size = sym.st_size;
      if (size == 0 && elf && shndx < SHN_LORESERVE)
        if (Elf_Scn* scn = elf_getscn(elf, shndx)) {
          GElf_Shdr sh;
          if (gelf_getshdr(scn, &sh) && (sh.sh_flags & SHF_ALLOC)) {
            const GElf_Addr end = sh.sh_addr + sym_bias + sh.sh_size;
            size = end > value ? end - value : 1;
          }
        }
      symbols_.push_back({value, size, rank, name});
    }
    std::sort(symbols_.begin(), symbols_.end(), [](const SymbolEntry& a, const SymbolEntry& b) {
      return a.addr != b.addr ? a.addr < b.addr : a.rank > b.rank;
    });
    symbols_.erase(std::unique(symbols_.begin(), symbols_.end(),
                               [](const SymbolEntry& a, const SymbolEntry& b) { return a.addr == b.addr; }),
                   symbols_.end());
  }

  // The function symbol containing addr (sized: within its size; unsized: before the next symbol).
  const char* find_symbol(Dwarf_Addr addr, GElf_Off& off) const {
    auto it = std::upper_bound(symbols_.begin(), symbols_.end(), addr,
                               [](Dwarf_Addr a, const SymbolEntry& e) { return a < e.addr; });
    if (it == symbols_.begin()) return nullptr;
    const SymbolEntry& e = *std::prev(it);
    if (e.size > 0 ? addr >= e.addr + e.size : it == symbols_.end()) return nullptr;
    off = addr - e.addr;
    return e.name;
  }

  // The compile unit holding `addr`. libdw finds it through .debug_aranges, which clang does not write unless
  // asked (-gdwarf-aranges) and elfutils 0.188 does not make up: without them every file:line of a
  // clang-built module was lost. Then the units' own address ranges (DW_AT_low_pc/high_pc, DW_AT_ranges) are
  // indexed once.
  Dwarf_Die* compile_unit_of(Dwarf_Addr addr, Dwarf_Addr& bias, Dwarf_Die& storage) {
    if (Dwarf_Die* d = dwfl_module_addrdie(mod_, addr, &bias)) return d;
    if (!unit_ranges_built_) build_unit_ranges();
    if (!dwarf_) return nullptr;
    const Dwarf_Addr a = addr - dwarf_bias_;
    auto it = std::upper_bound(unit_ranges_.begin(), unit_ranges_.end(), a,
                               [](Dwarf_Addr v, const UnitRange& r) { return v < r.start; });
    // Ranges of different units may nest (a unit spanning others' code): the nearest start below wins, else
    // the ones before it are tried.
    for (int tries = 0; it != unit_ranges_.begin() && tries < 8; ++tries) {
      --it;
      if (a < it->end) {
        if (!dwarf_offdie(dwarf_, it->die_offset, &storage)) return nullptr;
        bias = dwarf_bias_;
        return &storage;
      }
    }
    return nullptr;
  }

  void build_unit_ranges() {
    unit_ranges_built_ = true;
    dwarf_ = dwfl_module_getdwarf(mod_, &dwarf_bias_);
    if (!dwarf_) return;
    Dwarf_CU* cu = nullptr;
    Dwarf_Half version = 0;
    uint8_t unit_type = 0;
    Dwarf_Die unit;
    while (dwarf_get_units(dwarf_, cu, &cu, &version, &unit_type, &unit, nullptr) == 0) {
      if (unit_type != DW_UT_compile && unit_type != DW_UT_partial) continue;
      Dwarf_Addr base = 0, start = 0, end = 0;
      for (ptrdiff_t o = 0; (o = dwarf_ranges(&unit, o, &base, &start, &end)) > 0;)
        if (end > start) unit_ranges_.push_back({start, end, dwarf_dieoffset(&unit)});
    }
    std::sort(unit_ranges_.begin(), unit_ranges_.end(),
              [](const UnitRange& x, const UnitRange& y) { return x.start < y.start; });
  }

  // A line table's path relative to its unit's directory (clang writes the directories below the compilation
  // directory that way, and libdw 0.188 does not join them) made absolute with DW_AT_comp_dir.
  static std::string in_unit_dir(const char* f, Dwarf_Die* cudie) {
    if (f[0] == '/' || !cudie) return f;
    Dwarf_Attribute attr;
    const char* dir = dwarf_attr(cudie, DW_AT_comp_dir, &attr) ? dwarf_formstring(&attr) : nullptr;
    if (!dir || !*dir) return f;
    std::string out = dir;
    if (out.back() != '/') out += '/';
    return out + f;
  }

  std::vector<Sym> lookup_uncached(Dwarf_Addr addr) {
    std::vector<Sym> out;
    if (!mod_) return out;
    GElf_Off off = 0;
    const char* symname = find_symbol(addr, off);
    std::string symtab_name = demangle(symname);

    Dwarf_Addr bias = 0;
    Dwarf_Die cu_storage;
    Dwarf_Die* cudie = compile_unit_of(addr, bias, cu_storage);

    std::string leaf_file;
    int leaf_line = 0;
    if (Dwarf_Line* line = cudie ? dwarf_getsrc_die(cudie, addr - bias) : nullptr) {
      int lineno = 0;
      Dwarf_Addr row = 0;
      dwarf_lineno(line, &lineno);
      dwarf_lineaddr(line, &row);
      const char* f = dwarf_linesrc(line, nullptr, nullptr);
      // The nearest line row at or below the address may belong to code before this function when the
      // function itself has no line information (e.g. _start from crt1.o): then there is no file:line.
      if (f && (!symname || row + bias >= addr - off)) {
        leaf_file = in_unit_dir(f, cudie);
        leaf_line = lineno;
      }
    }

    Dwarf_Die* scopes = nullptr;
    int nscopes = cudie ? dwarf_getscopes(cudie, addr - bias, &scopes) : 0;
    // Innermost first: each inlined_subroutine's call site is a location in the next outer function.
    std::vector<Sym> inner_first;
    std::string file = leaf_file;
    int line = leaf_line;
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (cudie) dwarf_getsrcfiles(cudie, &files, &nfiles);
    bool found_subprogram = false;
    for (int i = 0; i < nscopes && inner_first.size() < 64;) {
      Dwarf_Die d = scopes[i];
      int tag = dwarf_tag(&d);
      if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) {
        ++i;
        continue;
      }
      std::string name = die_function_name(&d);
      if (tag == DW_TAG_subprogram && !symtab_name.empty() &&
          (name.empty() || name.find('(') == std::string::npos))
        name = symtab_name;  // the symbol table's demangled name carries the namespace and signature
      inner_first.push_back({name.empty() ? symtab_name : name, file, line});
      if (tag == DW_TAG_subprogram) {
        found_subprogram = true;
        break;
      }
      Dwarf_Attribute attr;
      Dwarf_Word call_file = 0, call_line = 0;
      if (dwarf_attr(&d, DW_AT_call_file, &attr)) dwarf_formudata(&attr, &call_file);
      if (dwarf_attr(&d, DW_AT_call_line, &attr)) dwarf_formudata(&attr, &call_line);
      const char* f =
          files && call_file < nfiles ? dwarf_filesrc(files, call_file, nullptr, nullptr) : nullptr;
      file = f ? in_unit_dir(f, cudie) : "";
      line = static_cast<int>(call_line);
      // Past an inlined instance, dwarf_getscopes() goes on with the scopes of the inlined function's
      // abstract definition (its namespace), not with the function it was inlined into: take the scopes
      // that contain this very DIE instead (element 0 is the DIE itself).
      Dwarf_Die* outer = nullptr;
      int nouter = dwarf_getscopes_die(&d, &outer);
      std::free(scopes);
      scopes = outer;
      nscopes = nouter;
      i = 1;
    }
    std::free(scopes);
    // Inlined frames but no enclosing subprogram DIE: the symbol table names the function.
    if (!inner_first.empty() && !found_subprogram && !symtab_name.empty())
      inner_first.push_back({symtab_name, file, line});
    if (inner_first.empty()) inner_first.push_back({symtab_name, leaf_file, leaf_line});
    out.assign(inner_first.rbegin(), inner_first.rend());
    // Tabs and newlines cannot occur in these names; if they did, the cache line format would break.
    for (auto& s : out)
      for (std::string* str : {&s.function, &s.file})
        std::replace_if(
            str->begin(), str->end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
    return out;
  }

  std::string path_, build_id_, cache_file_;
  Dwfl_Callbacks callbacks_{};
  Dwfl* dwfl_ = nullptr;
  Dwfl_Module* mod_ = nullptr;
  bool tried_ = false, mismatch_ = false;
  size_t cache_hits_ = 0;
  struct SymbolEntry {
    GElf_Addr addr;
    GElf_Xword size;
    int rank;
    const char* name;  // in the ELF's string table, alive as long as dwfl_
  };
  std::vector<SymbolEntry> symbols_;
  struct UnitRange {
    Dwarf_Addr start, end;
    Dwarf_Off die_offset;
  };
  std::vector<UnitRange> unit_ranges_;  // only for a module without .debug_aranges
  bool unit_ranges_built_ = false;
  Dwarf* dwarf_ = nullptr;
  Dwarf_Addr dwarf_bias_ = 0;
  std::unordered_map<Dwarf_Addr, std::vector<Sym>> memo_;
  std::string cache_text_;  // the cache file as read (header included); save() writes a new one
  std::vector<std::pair<Dwarf_Addr, size_t>> cache_index_;  // address → where its fields start, sorted
  std::vector<Dwarf_Addr> unsaved_;                         // resolved here since the last save
};

std::string base_name(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

}  // namespace

std::string symbol_cache_dir() {
  if (const char* e = std::getenv("STEPSCOPE_SYMBOL_CACHE")) {
    const std::string v = e;
    return v == "0" || v == "off" ? std::string() : v;
  }
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/stepscope/symbols";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/stepscope/symbols";
  return {};
}

struct Symbolizer::Impl {
  std::string cache_dir = symbol_cache_dir();
  // By path and build-id: parts of one run share their modules' files (a fork's child maps the same
  // libraries), and an exec'd rebuilt binary at the same path is a different module.
  std::map<std::pair<std::string, std::string>, std::unique_ptr<ModuleSymbolizer>> modules;
};

Symbolizer::Symbolizer() : impl_(new Impl) {
  if (!impl_->cache_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(impl_->cache_dir, ec);
    // Cached symbols name the user's source files: keep the folder the owner's alone (0700).
    if (!ec)
      std::filesystem::permissions(impl_->cache_dir, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
    if (ec) impl_->cache_dir.clear();
  }
}
Symbolizer::~Symbolizer() {
  for (auto& [key, m] : impl_->modules) m->save();
  delete impl_;
}
int64_t Symbolizer::modules_opened() const {
  int64_t n = 0;
  for (const auto& [key, m] : impl_->modules) n += m->opened() ? 1 : 0;
  return n;
}
int64_t Symbolizer::cache_hits() const {
  int64_t n = 0;
  for (const auto& [key, m] : impl_->modules) n += static_cast<int64_t>(m->cache_hits());
  return n;
}
int64_t Symbolizer::addresses_looked_up() const {
  int64_t n = 0;
  for (const auto& [key, m] : impl_->modules) n += static_cast<int64_t>(m->lookups());
  return n;
}

void symbolize(store::Trace& t) {
  Symbolizer s;
  s.symbolize(t);
}

std::unordered_map<int64_t, int64_t> Symbolizer::symbolize(store::Trace& t) {
  std::map<std::string, std::string> build_id_of;  // module path → recorded build-id
  for (const auto& m : t.modules) build_id_of.emplace(t.str(m.path), t.str(m.build_id));
  auto module_for = [&](const std::string& path) -> ModuleSymbolizer* {
    if (path.empty() || path[0] != '/') return nullptr;  // [unknown], [vdso], python
    auto b = build_id_of.find(path);
    const std::string build_id = b == build_id_of.end() ? std::string() : b->second;
    auto& m = impl_->modules[{path, build_id}];
    if (!m) m = std::make_unique<ModuleSymbolizer>(path, build_id, impl_->cache_dir);
    return m.get();
  };

  // Old frame id → chain of new frame ids (outermost first).
  std::unordered_map<int64_t, std::vector<int64_t>> chains;
  std::vector<store::Frame> frames;
  int64_t next_frame = 0;
  static const std::vector<Sym> kNone;
  for (const auto& f : t.frames) {
    std::vector<int64_t> chain;
    ModuleSymbolizer* ms =
        (f.kind == store::FrameKind::Native && f.symbol == 0) ? module_for(t.str(f.module)) : nullptr;
    const std::vector<Sym>& syms = ms ? ms->lookup(static_cast<Dwarf_Addr>(f.address)) : kNone;
    char fallback[300];
    std::snprintf(fallback, sizeof fallback, "%s+0x%llx", base_name(t.str(f.module)).c_str(),
                  static_cast<unsigned long long>(f.address));
    if (syms.empty()) {
      store::Frame nf = f;
      nf.id = ++next_frame;
      if (nf.kind == store::FrameKind::Native && nf.symbol == 0) nf.symbol = t.intern(fallback);
      frames.push_back(nf);
      chain.push_back(nf.id);
    } else {
      for (const auto& s : syms) {
        store::Frame nf = f;
        nf.id = ++next_frame;
        // No name even in the symbol table (a stripped library's local function): module+offset says more.
        nf.symbol = t.intern(s.function.empty() ? fallback : s.function);
        nf.file = t.intern(s.file);
        nf.line = s.line;
        frames.push_back(nf);
        chain.push_back(nf.id);
      }
    }
    chains.emplace(f.id, std::move(chain));
  }

  std::vector<store::Stack> old = t.stacks;
  std::sort(old.begin(), old.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::unordered_map<int64_t, int64_t> node_of;  // old stack id → new stack id
  std::map<std::pair<int64_t, int64_t>, int64_t> dedup;
  std::vector<store::Stack> stacks;
  std::vector<int64_t> pending_parents;
  // Parents first; ids from the collector already are, but resolve recursively to be safe.
  std::unordered_map<int64_t, const store::Stack*> by_id;
  for (const auto& s : old) by_id[s.id] = &s;
  std::function<int64_t(int64_t)> resolve = [&](int64_t id) -> int64_t {
    if (id == 0) return 0;
    auto it = node_of.find(id);
    if (it != node_of.end()) return it->second;
    auto o = by_id.find(id);
    if (o == by_id.end()) return 0;
    int64_t node = resolve(o->second->parent);
    auto c = chains.find(o->second->frame);
    if (c != chains.end()) {
      for (int64_t fid : c->second) {
        auto key = std::make_pair(node, fid);
        auto d = dedup.find(key);
        if (d != dedup.end()) {
          node = d->second;
        } else {
          store::Stack s;
          s.id = static_cast<int64_t>(stacks.size()) + 1;
          s.parent = node;
          s.frame = fid;
          stacks.push_back(s);
          dedup.emplace(key, s.id);
          node = s.id;
        }
      }
    }
    node_of[id] = node;
    return node;
  };
  for (const auto& s : old) resolve(s.id);
  for (auto& s : t.samples) s.stack = s.stack ? resolve(s.stack) : 0;
  for (auto& a : t.api_calls) a.stack = a.stack ? resolve(a.stack) : 0;
  // A graph's and a node's capture stack are stack ids too: renumbered like a sample's (they kept the old ids,
  // another node's once an inlined frame or a merged node shifted them).
  for (auto& g : t.graphs) g.stack = g.stack ? resolve(g.stack) : 0;
  for (auto& n : t.graph_nodes) n.stack = n.stack ? resolve(n.stack) : 0;
  t.frames = std::move(frames);
  t.stacks = std::move(stacks);
  return node_of;
}

}  // namespace stepscope::collector
