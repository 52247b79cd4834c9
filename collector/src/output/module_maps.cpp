#include "module_maps.h"

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <cstdio>
#include <cstddef>
#include <cstring>

#include "core/collector_state.h"

namespace stepscope::collector {
namespace {

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

std::string read_build_id(const dl_phdr_info* info) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const uint8_t* p = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    const uint8_t* end = p + ph.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      auto* nh = reinterpret_cast<const ElfW(Nhdr)*>(p);
      const uint8_t* name = p + sizeof(ElfW(Nhdr));
      const uint8_t* desc = name + ((nh->n_namesz + 3) & ~3u);
      if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0 &&
          desc + nh->n_descsz <= end)
        return hex(desc, nh->n_descsz);
      p = desc + ((nh->n_descsz + 3) & ~3u);
    }
  }
  return {};
}

// .eh_frame_hdr (LSB): version 1, the encodings of eh_frame_ptr, fde_count and the table, then the table of
// (initial location, FDE address) pairs relative to the header. Only the layout every linker writes is used:
// a udata4 count and a datarel sdata4 table.
void read_eh_frame_hdr(const dl_phdr_info* info, ModuleImage& m) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_GNU_EH_FRAME || ph.p_memsz < 12) continue;
    const uint8_t* h = reinterpret_cast<const uint8_t*>(info->dlpi_addr + ph.p_vaddr);
    constexpr uint8_t kUdata4 = 0x03, kSdata4 = 0x0b, kUdata8 = 0x04, kSdata8 = 0x0c, kDatarelSdata4 = 0x3b;
    if (h[0] != 1 || h[2] != kUdata4 || h[3] != kDatarelSdata4) return;
    const uint8_t ptr_format = h[1] & 0x0f;
    size_t ptr_size = 0;
    if (ptr_format == kUdata4 || ptr_format == kSdata4) ptr_size = 4;
    else if (ptr_format == kUdata8 || ptr_format == kSdata8) ptr_size = 8;
    else return;
    uint32_t count;
    std::memcpy(&count, h + 4 + ptr_size, 4);
    if (4 + ptr_size + 4 + uint64_t(count) * 8 > ph.p_memsz) return;
    m.eh_frame_hdr = reinterpret_cast<uintptr_t>(h);
    m.fde_table = m.eh_frame_hdr + 4 + ptr_size + 4;
    m.fde_count = count;
    return;
  }
}

}  // namespace

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "[exe]";
  buf[n] = 0;
  return buf;
}

std::string read_small_file(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return {};
  char buf[4096];
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

int ModuleMap::module_index(const std::string& path) {
  auto it = ids_.find(path);
  if (it != ids_.end()) return it->second;
  paths_.push_back(path);
  int id = static_cast<int>(paths_.size() - 1);
  ids_.emplace(path, id);
  return id;
}

void ModuleMap::refresh(const OnNewMapping& on_new) {
  if (exe_path_.empty()) exe_path_ = self_exe();
  struct Ctx {
    ModuleMap* self;
    const OnNewMapping* on_new;
    std::vector<ModuleRange> ranges;
    std::vector<ModuleImage> images;
    unsigned long long adds = 0, subs = 0;
    std::exception_ptr error;
  } ctx{this, &on_new, {}, {}, 0, 0, nullptr};
  // No exception may unwind through dl_iterate_phdr (C code): glibc would need to load libgcc_s for its
  // cleanup, and a process at its memory limit — where allocations here throw — cannot, so glibc aborts the
  // program. The callback stops the walk instead, and the error is thrown again once the walk is over.
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* c = static_cast<Ctx*>(data);
        c->adds = info->dlpi_adds;
        c->subs = info->dlpi_subs;
        std::string key;
        bool fresh = false;
        try {
          std::string path = info->dlpi_name ? info->dlpi_name : "";
          if (path.empty()) path = c->self->exe_path_;
          int index = c->self->module_index(path);
          key = path + "@" + std::to_string(info->dlpi_addr);
          fresh = c->self->written_.insert(key).second;
          std::string build_id = fresh ? read_build_id(info) : std::string();
          ModuleImage image;
          image.lo = UINTPTR_MAX;
          image.text_lo = UINTPTR_MAX;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type != PT_LOAD) continue;
            uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
            image.lo = std::min(image.lo, lo);
            image.hi = std::max(image.hi, hi);
            if (!(ph.p_flags & PF_X)) continue;
            image.text_lo = std::min(image.text_lo, lo);
            image.text_hi = std::max(image.text_hi, hi);
            c->ranges.push_back({lo, hi, info->dlpi_addr, index});
            if (fresh) (*c->on_new)(path, build_id, lo, hi, ph.p_offset);
          }
          if (image.text_hi) {
            read_eh_frame_hdr(info, image);
            c->images.push_back(image);
          }
        } catch (...) {
          if (fresh) c->self->written_.erase(key);  // not written: the next refresh tries again
          c->error = std::current_exception();
          return 1;
        }
        return 0;
      },
      &ctx);
  if (ctx.error) std::rethrow_exception(ctx.error);
  std::sort(ctx.ranges.begin(), ctx.ranges.end(),
            [](const ModuleRange& a, const ModuleRange& b) { return a.lo < b.lo; });
  ranges_ = std::move(ctx.ranges);
  std::sort(ctx.images.begin(), ctx.images.end(),
            [](const ModuleImage& a, const ModuleImage& b) { return a.lo < b.lo; });
  images_ = std::move(ctx.images);
  adds_ = ctx.adds;
  subs_ = ctx.subs;
  last_refresh_ns_ = clock_ns(CLOCK_MONOTONIC);
}

const ModuleRange* ModuleMap::find(uintptr_t pc) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), pc,
                             [](uintptr_t v, const ModuleRange& r) { return v < r.lo; });
  if (it == ranges_.begin()) return nullptr;
  --it;
  return pc < it->hi ? &*it : nullptr;
}

const ModuleImage* ModuleMap::find_image(uintptr_t addr) const {
  auto it = std::upper_bound(images_.begin(), images_.end(), addr,
                             [](uintptr_t v, const ModuleImage& m) { return v < m.lo; });
  if (it == images_.begin()) return nullptr;
  --it;
  return addr < it->hi ? &*it : nullptr;
}

bool ModuleMap::loader_changed() const {
  struct Counts {
    unsigned long long adds = 0, subs = 0;
  } now;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t size, void* data) -> int {
        auto* n = static_cast<Counts*>(data);
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
          n->adds = info->dlpi_adds;
          n->subs = info->dlpi_subs;
        }
        return 1;  // the counters are the same in every entry
      },
      &now);
  return now.adds != adds_ || now.subs != subs_;
}

}  // namespace stepscope::collector
