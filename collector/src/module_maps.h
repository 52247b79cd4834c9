// The executable mappings of this process (dl_iterate_phdr): which module and offset a PC belongs to, and the
// build ids the launcher's symbolizer needs.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace stepscope::collector {

struct ModuleRange {
  uintptr_t lo, hi, bias;
  int index;  // into ModuleMap::path()
};

class ModuleMap {
 public:
  // Called for each executable mapping not reported before (a module loaded at a new address).
  using OnNewMapping = std::function<void(const std::string& path, const std::string& build_id, uintptr_t lo,
                                          uintptr_t hi, uint64_t file_offset)>;
  // Re-reads the loaded objects.
  void refresh(const OnNewMapping& on_new);
  const ModuleRange* find(uintptr_t pc) const;
  const std::string& path(int index) const { return paths_[index]; }
  bool empty() const { return ranges_.empty(); }
  int64_t last_refresh_ns() const { return last_refresh_ns_; }

 private:
  int module_index(const std::string& path);

  std::string exe_path_;
  std::vector<ModuleRange> ranges_;
  std::vector<std::string> paths_;
  std::unordered_map<std::string, int> ids_;
  std::unordered_set<std::string> written_;
  int64_t last_refresh_ns_ = 0;
};

// /proc/self/exe's target ("[exe]" when unreadable).
std::string self_exe();
// A small /proc file's text without its trailing newline ("" when unreadable).
std::string read_small_file(const std::string& path);

}  // namespace stepscope::collector
