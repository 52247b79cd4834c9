#include "copied_stack_unwinder.h"

#include <dlfcn.h>
#include <elf.h>
#include <libunwind.h>
#include <link.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace stepscope::collector::unwind {

struct CopiedStackUnwinder::Sample {
  CopiedStackUnwinder* self;
  const Registers* regs;
  const uint8_t* stack;
  uintptr_t sp;
  size_t bytes;
  bool capped;
  bool truncated;
};

namespace {

// libunwind's remote (generic) API, resolved from a library opened RTLD_LOCAL: its _Unwind_* compatibility
// symbols must not interpose libgcc_s's in the target (C++ exceptions).
struct Api {
  unw_addr_space_t (*create_addr_space)(unw_accessors_t*, int);
  void (*destroy_addr_space)(unw_addr_space_t);
  int (*set_caching_policy)(unw_addr_space_t, unw_caching_policy_t);
  int (*set_cache_size)(unw_addr_space_t, size_t, int);
  void (*flush_cache)(unw_addr_space_t, unw_word_t, unw_word_t);
  int (*init_remote)(unw_cursor_t*, unw_addr_space_t, void*);
  int (*step)(unw_cursor_t*);
  int (*get_reg)(unw_cursor_t*, int, unw_word_t*);
  int (*search_unwind_table)(unw_addr_space_t, unw_word_t, unw_dyn_info_t*, unw_proc_info_t*, int, void*);
};
Api api{};
bool api_loaded = false;
bool quiet_masks = false;  // libunwind's cache lock no longer makes system calls (below)

// Debian's libunwind is built without HAVE___CACHE_PER_THREAD, so its rule cache is the global one, whose lock
// blocks every signal around each lookup: two sigprocmask system calls a frame, 90% of an unwind's cost
// (measured: 19.1 µs for a 35-frame stack, 39,341 calls in a 0.6 s recording). They guard against a signal
// handler re-entering libunwind on the same thread; the collector thread takes no signals at all (all
// blocked), so on it they are skipped. libunwind-x86_64's own PLT slot for sigprocmask is bound to this
// wrapper; every other thread (a program that loads the same library) still gets the real call.
__thread bool t_unwinding __attribute__((tls_model("initial-exec"))) = false;

int sigprocmask_unless_unwinding(int how, const sigset_t* set, sigset_t* old) {
  if (t_unwinding) {
    if (old) sigemptyset(old);
    return 0;
  }
  return sigprocmask(how, set, old);
}

// Points libunwind-x86_64's PLT slot for sigprocmask at the wrapper. Only when the slot is outside RELRO
// (writable after loading, as Debian links it); otherwise nothing changes and unwinding stays slower.
bool quiet_libunwind_masks(void* handle) {
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_ld) return false;
  const uintptr_t base = lm->l_addr;
  // glibc relocates most d_ptr entries of the dynamic section in place; a value below the load address is
  // still an offset.
  auto ptr = [base](ElfW(Addr) v) { return v < base ? base + v : v; };
  const ElfW(Rela)* rel = nullptr;
  size_t rel_bytes = 0;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  for (const ElfW(Dyn)* d = lm->l_ld; d->d_tag != DT_NULL; ++d) {
    if (d->d_tag == DT_JMPREL) rel = reinterpret_cast<const ElfW(Rela)*>(ptr(d->d_un.d_ptr));
    else if (d->d_tag == DT_PLTRELSZ) rel_bytes = d->d_un.d_val;
    else if (d->d_tag == DT_SYMTAB) symtab = reinterpret_cast<const ElfW(Sym)*>(ptr(d->d_un.d_ptr));
    else if (d->d_tag == DT_STRTAB) strtab = reinterpret_cast<const char*>(ptr(d->d_un.d_ptr));
    else if (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_BIND_NOW)) return false;  // full RELRO
    else if (d->d_tag == DT_FLAGS_1 && (d->d_un.d_val & DF_1_NOW)) return false;
  }
  if (!rel || !symtab || !strtab) return false;
  for (size_t i = 0; i < rel_bytes / sizeof(ElfW(Rela)); ++i) {
    if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT) continue;
    if (std::strcmp(strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name, "sigprocmask") != 0) continue;
    auto* slot = reinterpret_cast<void**>(base + rel[i].r_offset);
    __atomic_store_n(slot, reinterpret_cast<void*>(&sigprocmask_unless_unwinding), __ATOMIC_RELEASE);
    return true;
  }
  return false;
}

bool load_api(std::string& why) {
  if (api_loaded) return true;
  // Loaded by the program already: leave its instance exactly as it is.
  const bool programs_own = dlopen("libunwind-x86_64.so.8", RTLD_NOW | RTLD_NOLOAD) != nullptr;
  void* h = dlopen("libunwind-x86_64.so.8", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    why = std::string("cannot load libunwind-x86_64.so.8 (Debian's libunwind8): ") + dlerror();
    return false;
  }
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (!fn) {
      ok = false;
      why = std::string("libunwind-x86_64.so.8 lacks ") + name;
    }
  };
  sym(api.create_addr_space, "_Ux86_64_create_addr_space");
  sym(api.destroy_addr_space, "_Ux86_64_destroy_addr_space");
  sym(api.set_caching_policy, "_Ux86_64_set_caching_policy");
  sym(api.set_cache_size, "_Ux86_64_set_cache_size");
  sym(api.flush_cache, "_Ux86_64_flush_cache");
  sym(api.init_remote, "_Ux86_64_init_remote");
  sym(api.step, "_Ux86_64_step");
  sym(api.get_reg, "_Ux86_64_get_reg");
  sym(api.search_unwind_table, "_Ux86_64_dwarf_search_unwind_table");
  api_loaded = ok;
  if (ok && !programs_own) quiet_masks = quiet_libunwind_masks(h);
  return ok;
}

using Sample = CopiedStackUnwinder::Sample;

int find_proc_info_cb(unw_addr_space_t, unw_word_t ip, unw_proc_info_t* pi, int need, void* arg) {
  auto* s = static_cast<Sample*>(arg);
  return s->self->find_proc_info(ip, pi, need, arg);
}

void put_unwind_info_cb(unw_addr_space_t, unw_proc_info_t*, void*) {}  // libunwind frees what it allocated

int get_dyn_info_list_addr_cb(unw_addr_space_t, unw_word_t*, void*) { return -UNW_ENOINFO; }

int access_mem_cb(unw_addr_space_t, unw_word_t addr, unw_word_t* value, int write, void* arg) {
  if (write) return -UNW_EINVAL;
  auto* s = static_cast<Sample*>(arg);
  uint64_t v = 0;
  const int rc = s->self->access_mem(addr, &v, *s);
  *value = v;
  return rc;
}

int access_reg_cb(unw_addr_space_t, unw_regnum_t reg, unw_word_t* value, int write, void* arg) {
  if (write || reg < 0 || reg >= kRegisterCount) return -UNW_EBADREG;
  *value = static_cast<const Sample*>(arg)->regs->r[reg];
  return 0;
}

int access_fpreg_cb(unw_addr_space_t, unw_regnum_t, unw_fpreg_t*, int, void*) { return -UNW_EBADREG; }
int resume_cb(unw_addr_space_t, unw_cursor_t*, void*) { return -UNW_EINVAL; }
int get_proc_name_cb(unw_addr_space_t, unw_word_t, char*, size_t, unw_word_t*, void*) { return -UNW_ENOINFO; }

unw_accessors_t accessors = {find_proc_info_cb, put_unwind_info_cb, get_dyn_info_list_addr_cb, access_mem_cb,
                             access_reg_cb,     access_fpreg_cb,    resume_cb,                 get_proc_name_cb};

}  // namespace

namespace {
// One libunwind address space for the life of the process, shared by the unwinders of successive recording
// windows (one at a time, all on the collector thread): libunwind never unmaps a resized rule cache, so an
// address space per window leaked ~5 MiB each (attach: 20 windows grew the target by 7.7 MB).
unw_addr_space_t g_address_space = nullptr;
}  // namespace

CopiedStackUnwinder::~CopiedStackUnwinder() = default;

bool CopiedStackUnwinder::init(std::string& why) {
  if (as_) return true;
  if (!load_api(why)) return false;
  if (!g_address_space) {
    unw_addr_space_t as = api.create_addr_space(&accessors, 0);
    if (!as) {
      why = "libunwind could not create an address space";
      return false;
    }
    // A cache of unwind rules by PC, large enough for a big program's hot code (libunwind's default holds
    // 128). Twice: libunwind 1.6's first call finds the cache unallocated and sets it up at the default size,
    // ignoring the size asked; only a second call resizes it. Once, a PyTorch loop searched the unwind tables
    // for the same return addresses every ~25 samples (26,000 searches in 5,000 samples).
    api.set_caching_policy(as, UNW_CACHE_GLOBAL);
    api.set_cache_size(as, 1 << 13, 0);
    if (api.set_cache_size(as, 1 << 14, 0) != 0) std::fprintf(stderr, "set_cache_size failed\n");
    g_address_space = as;
  }
  as_ = g_address_space;
  flush_due_ = true;  // rules a previous window cached may belong to objects unloaded since
  return true;
}

void CopiedStackUnwinder::flush() { flush_due_ = true; }

bool CopiedStackUnwinder::skips_signal_masks() { return quiet_masks; }

int CopiedStackUnwinder::find_proc_info(uintptr_t ip, void* proc_info, int need_unwind_info, void* arg) {
  ++table_searches_;
  const ModuleImage* m = modules_.find_image(ip);
  if (!m || !m->eh_frame_hdr || ip < m->text_lo || ip >= m->text_hi) return -UNW_ENOINFO;
  unw_dyn_info_t di{};
  di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
  di.start_ip = m->text_lo;
  di.end_ip = m->text_hi;
  di.u.rti.segbase = m->eh_frame_hdr;
  di.u.rti.table_data = m->fde_table;
  di.u.rti.table_len = m->fde_count * 8 / sizeof(unw_word_t);
  return api.search_unwind_table(static_cast<unw_addr_space_t>(as_), ip, &di,
                                 static_cast<unw_proc_info_t*>(proc_info), need_unwind_info, arg);
}

bool CopiedStackUnwinder::read_process(uintptr_t addr, uint64_t* value) {
  uint8_t bytes[8];
  for (size_t done = 0; done < 8;) {
    const uintptr_t at = addr + done, base = at & ~uintptr_t(kLineBytes - 1);
    Line& line = lines_[(base / kLineBytes) % kLines];
    if (!line.valid || line.base != base) {
      ++memory_reads_;
      line.base = base;
      line.valid = read_own_memory(line.data, base, kLineBytes);  // a line never crosses a page
      if (!line.valid) return false;
    }
    const size_t off = at - base, n = std::min<size_t>(8 - done, kLineBytes - off);
    std::memcpy(bytes + done, line.data + off, n);
    done += n;
  }
  std::memcpy(value, bytes, 8);
  return true;
}

int CopiedStackUnwinder::access_mem(uintptr_t addr, uint64_t* value, const Sample& s) {
  if (addr >= s.sp && addr - s.sp + 8 <= s.bytes) {
    std::memcpy(value, s.stack + (addr - s.sp), 8);
    return 0;
  }
  // Objects' code and unwind tables are read where they are mapped; anything else is stack the copy does not
  // hold (its current contents are not the sample's) or memory the unwind has no business reading.
  ++object_reads_;
  // libunwind reads tables and code a byte at a time, mostly in one object: remember the last one found.
  if (addr - image_lo_ >= image_span_ || image_generation_ != modules_.last_refresh_ns()) {
    const ModuleImage* m = modules_.find_image(addr);
    image_lo_ = m ? m->lo : 0;
    image_span_ = m ? m->hi - m->lo : 0;
    image_generation_ = modules_.last_refresh_ns();
  }
  if (addr - image_lo_ < image_span_ && read_process(addr, value)) return 0;
  if (s.capped && addr >= s.sp + s.bytes) const_cast<Sample&>(s).truncated = true;
  return -UNW_EINVAL;
}

CopiedStackUnwinder::Result CopiedStackUnwinder::unwind(const Registers& regs, const uint8_t* stack, size_t bytes,
                                                        bool capped, uintptr_t* out, int max) {
  Result r;
  if (max <= 0) return r;
  out[r.frames++] = regs.r[kRegIp];
  if (!as_ || bytes == 0) return r;
  auto* as = static_cast<unw_addr_space_t>(as_);
  if (flush_due_) {
    api.flush_cache(as, 0, 0);
    for (Line& l : lines_) l.valid = false;
    flush_due_ = false;
  }
  Sample s{this, &regs, stack, static_cast<uintptr_t>(regs.r[kRegSp]), bytes, capped, false};
  struct Unwinding {
    Unwinding() { t_unwinding = true; }
    ~Unwinding() { t_unwinding = false; }
  } unwinding;
  unw_cursor_t cursor;
  if (api.init_remote(&cursor, as, &s) < 0) return r;
  uint64_t last_sp = s.sp;
  while (r.frames < max && api.step(&cursor) > 0) {
    unw_word_t ip = 0, sp = 0;
    if (api.get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
    api.get_reg(&cursor, UNW_REG_SP, &sp);
    // A frame that does not move the stack pointer up is a loop (a bad frame-pointer guess), unless it is the
    // same function's caller.
    if (sp < last_sp || (sp == last_sp && ip == out[r.frames - 1])) break;
    last_sp = sp;
    out[r.frames++] = ip;
  }
  // Stopped by `max` with frames left: cut like a stack deeper than the window.
  if (r.frames == max && api.step(&cursor) > 0) s.truncated = true;
  r.truncated = s.truncated;
  return r;
}

}  // namespace stepscope::collector::unwind
