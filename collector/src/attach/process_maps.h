// The target's memory map (/proc/PID/maps): where libc, the dynamic loader and libdl are mapped; and the
// address of a function of one of them in the target, from the module's own ELF file (its dynamic symbols).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace stepscope::collector::attach {

struct Module {
  std::string path;
  uint64_t base = 0;  // start of its mapping at file offset 0
  std::vector<std::pair<uint64_t, uint64_t>> text;
};

struct Maps {
  Module libc, ldso, libdl;
  bool in_libc_or_loader(uint64_t pc) const {
    for (const Module* m : {&libc, &ldso})
      for (auto [lo, hi] : m->text)
        if (pc >= lo && pc < hi) return true;
    return false;
  }
};

// Reads /proc/PID/maps. Throws AttachError: the ptrace refusal explained when the map may not be read (it
// needs the same permission), "process PID exited during attach" when it is gone.
Maps read_maps(pid_t pid);

// Address of a dynamic symbol (a function) of `mod` in the target, 0 when absent: the ELF file is read
// through /proc/PID/root, so a process in another mount namespace (a container) is read from its own files.
uint64_t remote_symbol(pid_t pid, const Module& mod, const char* name);

}  // namespace stepscope::collector::attach
