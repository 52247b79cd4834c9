// Reading and writing a stopped thread's memory with PTRACE_PEEKDATA/POKEDATA (a word at a time; writes go
// through page protections, as a debugger's do).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace stepscope::collector::attach {

// The 8-byte word at `addr`; throws AttachError("cannot read the target's memory at 0x…: why").
uint64_t peek(pid_t tid, uint64_t addr);

// Writes the 8-byte word at `addr`; throws AttachError("cannot write the target's memory: why").
void poke(pid_t tid, uint64_t addr, uint64_t value);

// Writes `bytes` at `addr`; a last partial word keeps the bytes that follow it.
void write_bytes(pid_t tid, uint64_t addr, const std::vector<uint8_t>& bytes);

// The C string at `addr`, read a word at a time: at most `max` characters rounded up to a multiple of 8; cut
// short where the memory cannot be read.
std::string read_string(pid_t tid, uint64_t addr, size_t max);

}  // namespace stepscope::collector::attach
