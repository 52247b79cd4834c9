// The executable mappings of this process (dl_iterate_phdr): which module and offset a PC belongs to, the
// build ids the launcher's symbolizer needs, and each object's unwind table for the copied-stack unwinder.
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

// One loaded object as the unwinder needs it: the extent of its segments (all of it may be read while
// unwinding) and its binary-search table of FDEs (.eh_frame_hdr), read while the loader guaranteed it mapped.
struct ModuleImage {
  uintptr_t lo = 0, hi = 0;
  uintptr_t text_lo = 0, text_hi = 0;  // from its first executable byte to its last
  uintptr_t eh_frame_hdr = 0;          // 0: no usable table (libunwind then follows frame pointers)
  uintptr_t fde_table = 0;
  uint64_t fde_count = 0;
};

class ModuleMap {
 public:
  // Called for each executable mapping not reported before (a module loaded at a new address).
  using OnNewMapping = std::function<void(const std::string& path, const std::string& build_id, uintptr_t lo,
                                          uintptr_t hi, uint64_t file_offset)>;
  // Re-reads the loaded objects.
  void refresh(const OnNewMapping& on_new);
  const ModuleRange* find(uintptr_t pc) const;
  const ModuleImage* find_image(uintptr_t addr) const;
  // Whether objects were loaded or unloaded since the last refresh (dl_iterate_phdr's adds/subs counters).
  bool loader_changed() const;
  // Objects unloaded before the last refresh (dl_iterate_phdr's subs counter).
  unsigned long long unloads() const { return subs_; }
  const std::string& path(int index) const { return paths_[index]; }
  bool empty() const { return ranges_.empty(); }
  int64_t last_refresh_ns() const { return last_refresh_ns_; }

 private:
  int module_index(const std::string& path);

  std::string exe_path_;
  std::vector<ModuleRange> ranges_;
  std::vector<ModuleImage> images_;  // sorted by lo
  unsigned long long adds_ = 0, subs_ = 0;
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
