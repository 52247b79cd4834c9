// /proc/PID/maps and libelf over the target's own module files; see process_maps.h.
#include "process_maps.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "attach_support.h"
#include "process_status.h"

namespace stepscope::collector::attach {
namespace {

bool is_named(const std::string& path, const char* soname, const char* old_prefix) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base == soname ||
         (base.rfind(old_prefix, 0) == 0 && base.size() > 3 && base.substr(base.size() - 3) == ".so");
}

}  // namespace

Maps read_maps(pid_t pid) {
  // Reading the map needs the same permission as ptrace: explain a refusal the same way.
  const int fd = open(proc(pid, "maps").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == EACCES || errno == EPERM) throw AttachError(explain_ptrace_failure(pid, EPERM));
    throw AttachError("process " + std::to_string(pid) + " exited during attach");
  }
  close(fd);
  std::ifstream f(proc(pid, "maps"));
  if (!f) throw AttachError("process " + std::to_string(pid) + " exited during attach");
  Maps m;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream ls(line);
    std::string range, perms, offset, dev, inode, path;
    ls >> range >> perms >> offset >> dev >> inode;
    std::getline(ls >> std::ws, path);
    if (path.empty() || path[0] != '/') continue;
    Module* mod = nullptr;
    if (is_named(path, "libc.so.6", "libc-2."))
      mod = &m.libc;
    else if (is_named(path, "ld-linux-x86-64.so.2", "ld-2."))
      mod = &m.ldso;
    else if (is_named(path, "libdl.so.2", "libdl-2."))
      mod = &m.libdl;
    if (!mod) continue;
    const uint64_t lo = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const uint64_t hi = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (mod->path.empty()) mod->path = path;
    if (std::stoull(offset, nullptr, 16) == 0 && (mod->base == 0 || lo < mod->base)) mod->base = lo;
    if (perms.find('x') != std::string::npos) mod->text.push_back({lo, hi});
  }
  return m;
}

uint64_t remote_symbol(pid_t pid, const Module& mod, const char* name) {
  if (mod.path.empty()) return 0;
  const std::string file = proc(pid, "root") + mod.path;
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  elf_version(EV_CURRENT);
  Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
  uint64_t found = 0, first_load = UINT64_MAX;
  if (elf) {
    size_t nph = 0;
    elf_getphdrnum(elf, &nph);
    for (size_t i = 0; i < nph; ++i) {
      GElf_Phdr ph;
      if (gelf_getphdr(elf, int(i), &ph) && ph.p_type == PT_LOAD)
        first_load = std::min<uint64_t>(first_load, ph.p_vaddr & ~(ph.p_align ? ph.p_align - 1 : 0));
    }
    Elf_Scn* scn = nullptr;
    while (!found && (scn = elf_nextscn(elf, scn))) {
      GElf_Shdr sh;
      if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize) continue;
      Elf_Data* data = elf_getdata(scn, nullptr);
      const size_t n = sh.sh_size / sh.sh_entsize;
      for (size_t i = 0; data && i < n; ++i) {
        GElf_Sym sym;
        if (!gelf_getsym(data, int(i), &sym) || sym.st_value == 0 || GELF_ST_TYPE(sym.st_info) != STT_FUNC)
          continue;
        const char* s = elf_strptr(elf, sh.sh_link, sym.st_name);
        if (s && std::strcmp(s, name) == 0) {
          found = sym.st_value;
          break;
        }
      }
    }
    elf_end(elf);
  }
  close(fd);
  if (!found || first_load == UINT64_MAX) return 0;
  return mod.base - first_load + found;
}

}  // namespace stepscope::collector::attach
