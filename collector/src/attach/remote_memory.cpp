// PTRACE_PEEKDATA / PTRACE_POKEDATA over a stopped thread's memory; see remote_memory.h.
#include "remote_memory.h"

#include <sys/ptrace.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "attach_support.h"

namespace stepscope::collector::attach {

uint64_t peek(pid_t tid, uint64_t addr) {
  errno = 0;
  const long v = ptrace(PTRACE_PEEKDATA, tid, reinterpret_cast<void*>(addr), nullptr);
  if (errno)
    throw AttachError("cannot read the target's memory at 0x" + fmt_hex(addr) + ": " + std::strerror(errno));
  return static_cast<uint64_t>(v);
}

void poke(pid_t tid, uint64_t addr, uint64_t value) {
  if (ptrace(PTRACE_POKEDATA, tid, reinterpret_cast<void*>(addr), reinterpret_cast<void*>(value)) != 0)
    throw AttachError("cannot write the target's memory: " + std::string(std::strerror(errno)));
}

void write_bytes(pid_t tid, uint64_t addr, const std::vector<uint8_t>& bytes) {
  for (size_t i = 0; i < bytes.size(); i += 8) {
    uint64_t word = 0;
    const size_t n = std::min<size_t>(8, bytes.size() - i);
    if (n < 8) word = peek(tid, addr + i);
    std::memcpy(&word, bytes.data() + i, n);
    poke(tid, addr + i, word);
  }
}

std::string read_string(pid_t tid, uint64_t addr, size_t max) {
  std::string s;
  while (s.size() < max) {
    uint64_t w = 0;
    try {
      w = peek(tid, addr + s.size());
    } catch (const AttachError&) {
      break;
    }
    const char* c = reinterpret_cast<const char*>(&w);
    for (int i = 0; i < 8; ++i) {
      if (!c[i]) return s;
      s.push_back(c[i]);
    }
  }
  return s;
}

}  // namespace stepscope::collector::attach
