// SQLite inputs must be files: each fuzz input is written to one scratch file per process.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace stepscope::fuzz {

inline const std::string& scratch_path(const char* name) {
  static const std::string path = [name] {
    std::error_code ec;
    std::string dir = std::filesystem::temp_directory_path(ec).string();
    if (std::filesystem::is_directory("/dev/shm")) dir = "/dev/shm";  // no disk writes per execution
    return dir + "/stepscope-fuzz-" + std::to_string(::getpid()) + "-" + name;
  }();
  return path;
}

// Writes the input, removing any -wal/-shm/-journal left by the previous one.
inline void write_input(const std::string& path, const uint8_t* data, size_t size) {
  for (const char* suffix : {"-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

}  // namespace stepscope::fuzz
