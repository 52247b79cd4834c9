// Offline symbolization with elfutils libdwfl: function, file:line and inlined frames, demangled. Runs in the
// launcher after the target has exited, never in the target.
#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
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
  explicit ModuleSymbolizer(const std::string& path) {
    static char* debuginfo_path = nullptr;
    callbacks_.find_elf = dwfl_build_id_find_elf;
    callbacks_.find_debuginfo = dwfl_standard_find_debuginfo;
    callbacks_.section_address = dwfl_offline_section_address;
    callbacks_.debuginfo_path = &debuginfo_path;
    dwfl_ = dwfl_begin(&callbacks_);
    if (!dwfl_) return;
    dwfl_report_begin(dwfl_);
    // Base 0: module addresses are the ELF's own virtual addresses, which is what the collector records.
    mod_ = dwfl_report_elf(dwfl_, path.c_str(), path.c_str(), -1, 0, false);
    dwfl_report_end(dwfl_, nullptr, nullptr);
  }
  ~ModuleSymbolizer() {
    if (dwfl_) dwfl_end(dwfl_);
  }
  ModuleSymbolizer(const ModuleSymbolizer&) = delete;
  ModuleSymbolizer& operator=(const ModuleSymbolizer&) = delete;

  // Outermost first; the last element is the function the address is in (after inlining).
  std::vector<Sym> lookup(Dwarf_Addr addr) {
    std::vector<Sym> out;
    if (!mod_) return out;
    GElf_Off off = 0;
    GElf_Sym sym;
    const char* symname = dwfl_module_addrinfo(mod_, addr, &off, &sym, nullptr, nullptr, nullptr);
    std::string symtab_name = demangle(symname);

    std::string leaf_file;
    int leaf_line = 0;
    if (Dwfl_Line* line = dwfl_module_getsrc(mod_, addr)) {
      int lineno = 0;
      if (const char* f = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) leaf_file = f;
      leaf_line = lineno;
    }

    Dwarf_Addr bias = 0;
    Dwarf_Die* cudie = dwfl_module_addrdie(mod_, addr, &bias);
    Dwarf_Die* scopes = nullptr;
    int nscopes = cudie ? dwarf_getscopes(cudie, addr - bias, &scopes) : 0;
    // Innermost first: each inlined_subroutine's call site is a location in the next outer function.
    std::vector<Sym> inner_first;
    std::string file = leaf_file;
    int line = leaf_line;
    Dwarf_Files* files = nullptr;
    size_t nfiles = 0;
    if (cudie) dwarf_getsrcfiles(cudie, &files, &nfiles);
    for (int i = 0; i < nscopes; ++i) {
      Dwarf_Die* d = &scopes[i];
      int tag = dwarf_tag(d);
      if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
      std::string name = die_function_name(d);
      if (tag == DW_TAG_subprogram && !symtab_name.empty() && (name.empty() || name.find('(') == std::string::npos))
        name = symtab_name;  // the symbol table's demangled name carries the namespace and signature
      inner_first.push_back({name.empty() ? symtab_name : name, file, line});
      if (tag == DW_TAG_subprogram) break;
      Dwarf_Attribute attr;
      Dwarf_Word call_file = 0, call_line = 0;
      if (dwarf_attr(d, DW_AT_call_file, &attr)) dwarf_formudata(&attr, &call_file);
      if (dwarf_attr(d, DW_AT_call_line, &attr)) dwarf_formudata(&attr, &call_line);
      const char* f = files && call_file < nfiles ? dwarf_filesrc(files, call_file, nullptr, nullptr) : nullptr;
      file = f ? f : "";
      line = static_cast<int>(call_line);
    }
    std::free(scopes);
    if (inner_first.empty()) inner_first.push_back({symtab_name, leaf_file, leaf_line});
    out.assign(inner_first.rbegin(), inner_first.rend());
    return out;
  }

 private:
  Dwfl_Callbacks callbacks_{};
  Dwfl* dwfl_ = nullptr;
  Dwfl_Module* mod_ = nullptr;
};

std::string base_name(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

}  // namespace

void symbolize(store::Trace& t) {
  std::unordered_map<std::string, std::unique_ptr<ModuleSymbolizer>> modules;
  auto module_for = [&](const std::string& path) -> ModuleSymbolizer* {
    if (path.empty() || path[0] != '/') return nullptr;  // [unknown], [vdso], python
    auto& m = modules[path];
    if (!m) m = std::make_unique<ModuleSymbolizer>(path);
    return m.get();
  };

  // Old frame id → chain of new frame ids (outermost first).
  std::unordered_map<int64_t, std::vector<int64_t>> chains;
  std::vector<store::Frame> frames;
  int64_t next_frame = 0;
  for (const auto& f : t.frames) {
    std::vector<int64_t> chain;
    ModuleSymbolizer* ms = (f.kind == store::FrameKind::Native && f.symbol == 0) ? module_for(t.str(f.module)) : nullptr;
    std::vector<Sym> syms;
    if (ms) syms = ms->lookup(static_cast<Dwarf_Addr>(f.address));
    if (syms.empty()) {
      store::Frame nf = f;
      nf.id = ++next_frame;
      if (nf.kind == store::FrameKind::Native && nf.symbol == 0) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s+0x%llx", base_name(t.str(f.module)).c_str(),
                      static_cast<unsigned long long>(f.address));
        nf.symbol = t.intern(buf);
      }
      frames.push_back(nf);
      chain.push_back(nf.id);
    } else {
      for (const auto& s : syms) {
        store::Frame nf = f;
        nf.id = ++next_frame;
        nf.symbol = t.intern(s.function.empty() ? "[unknown]" : s.function);
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
  t.frames = std::move(frames);
  t.stacks = std::move(stacks);
}

}  // namespace stepscope::collector
