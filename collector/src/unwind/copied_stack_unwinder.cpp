#include "copied_stack_unwinder.h"

#include "call_site.h"

#include <dlfcn.h>
#include <elf.h>
#include <libunwind.h>
#include <link.h>
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
  uint32_t known;  // registers (bit per DWARF number) whose values are the frame's; others are unknown
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
  auto* s = static_cast<const Sample*>(arg);
  if (write || reg < 0 || reg >= kRegisterCount || !(s->known >> reg & 1)) return -UNW_EBADREG;
  *value = s->regs->r[reg];
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
  if (!m || !m->eh_frame_hdr || ip < m->text_lo || ip >= m->text_hi) {
    lookup_failed_ = true;
    return -UNW_ENOINFO;
  }
  unw_dyn_info_t di{};
  di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
  di.start_ip = m->text_lo;
  di.end_ip = m->text_hi;
  di.u.rti.segbase = m->eh_frame_hdr;
  di.u.rti.table_data = m->fde_table;
  di.u.rti.table_len = m->fde_count * 8 / sizeof(unw_word_t);
  const int rc = api.search_unwind_table(static_cast<unw_addr_space_t>(as_), ip, &di,
                                         static_cast<unw_proc_info_t*>(proc_info), need_unwind_info, arg);
  if (rc < 0) lookup_failed_ = true;
  return rc;
}

bool CopiedStackUnwinder::read_process(uintptr_t addr, uint64_t* value) {
  return read_bytes(addr, value, 8);
}

bool CopiedStackUnwinder::read_bytes(uintptr_t addr, void* dst, size_t n) {
  auto* bytes = static_cast<uint8_t*>(dst);
  for (size_t done = 0; done < n;) {
    const uintptr_t at = addr + done, base = at & ~uintptr_t(kLineBytes - 1);
    Line& line = lines_[(base / kLineBytes) % kLines];
    if (!line.valid || line.base != base) {
      ++memory_reads_;
      line.base = base;
      line.valid = read_own_memory(line.data, base, kLineBytes);  // a line never crosses a page
      if (!line.valid) return false;
    }
    const size_t off = at - base, part = std::min<size_t>(n - done, kLineBytes - off);
    std::memcpy(bytes + done, line.data + off, part);
    done += part;
  }
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

namespace {
// How far above a frame without unwind table its return address is looked for: MKL's kernels keep a few
// hundred bytes, JIT kernels up to a few KiB.
constexpr uintptr_t kScanBytes = 32 * 1024;
// Frames without unwind table one stack may cross (JIT code calling JIT code, a kernel under a driver
// without tables).
constexpr int kMaxScans = 8;
// A call into a function this far below the PC it led to is not taken as that function's call.
constexpr uintptr_t kMaxFunctionBytes = 1 << 20;
constexpr int kRegFp = 6;  // rbp
constexpr uint32_t kAllRegisters = (1u << kRegisterCount) - 1;
constexpr uint32_t kIpAndSp = (1u << kRegIp) | (1u << kRegSp);

// STEPSCOPE_SCAN_TRACE=1: a line on stderr for each return address the scan finds, to check it against an
// independent account of the frames it crossed (docs/collector.md, "Code without unwind tables").
bool scan_trace() {
  static const bool on = [] {
    const char* e = std::getenv("STEPSCOPE_SCAN_TRACE");
    return e && *e && *e != '0';
  }();
  return on;
}
}  // namespace

bool CopiedStackUnwinder::table_entry_before(const ModuleImage& m, uintptr_t pc, uintptr_t& start,
                                             uintptr_t& end) {
  // .eh_frame_hdr's table: (initial location, FDE address) pairs of sdata4 relative to the header, sorted.
  auto entry = [&](uint64_t i, int32_t& loc, int32_t& fde) {
    uint64_t v = 0;
    if (!read_process(m.fde_table + i * 8, &v)) return false;
    loc = static_cast<int32_t>(v & 0xffffffff);
    fde = static_cast<int32_t>(v >> 32);
    return true;
  };
  uint64_t lo = 0, hi = m.fde_count;  // the first entry starting after pc is in [lo, hi]
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    int32_t loc, fde;
    if (!entry(mid, loc, fde)) return false;
    if (m.eh_frame_hdr + static_cast<intptr_t>(loc) <= pc)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) {
    start = end = 0;
    return true;
  }
  int32_t loc, fde;
  if (!entry(lo - 1, loc, fde)) return false;
  start = m.eh_frame_hdr + static_cast<intptr_t>(loc);
  // The FDE's own range: length, CIE pointer, then pc_begin and pc_range in the encoding GCC, Clang and the
  // linkers write (pcrel sdata4, udata4), checked against the table's start.
  const uintptr_t f = m.eh_frame_hdr + static_cast<intptr_t>(fde);
  uint64_t head = 0, range = 0;
  if (!read_process(f, &head) || !read_process(f + 8, &range)) return false;
  if (static_cast<uint32_t>(head) == 0xffffffff) return false;  // 64-bit DWARF: not parsed
  if (f + 8 + static_cast<intptr_t>(static_cast<int32_t>(range & 0xffffffff)) != start) return false;
  end = start + (range >> 32);
  return true;
}

bool CopiedStackUnwinder::same_function(uintptr_t target, uintptr_t pc) {
  if (target > pc || pc - target >= kMaxFunctionBytes) return false;
  const ModuleRange* a = modules_.find(target);
  if (a != modules_.find(pc)) return false;
  if (!a) return true;  // both in code no object maps (JIT code): only the distance says
  const ModuleImage* m = modules_.find_image(pc);
  if (!m || !m->eh_frame_hdr || m->fde_count == 0) return true;
  uintptr_t start = 0, end = 0;
  if (!table_entry_before(*m, pc, start, end)) return false;
  if (end == 0) return true;             // before the first function the table describes
  if (pc < end) return start == target;  // a described function is entered at its start
  // In code the table does not describe: no described function may lie between. (Undescribed functions
  // side by side cannot be told apart here.)
  return target >= end;
}

CopiedStackUnwinder::Caller CopiedStackUnwinder::check_return_address(uintptr_t ra, uintptr_t callee_pc) {
  const ModuleRange* m = modules_.find(ra);
  if (!m || ra - m->lo < 8) return Caller::kNo;
  uint8_t before[8];
  if (!read_bytes(ra - 8, before, sizeof before)) return Caller::kNo;
  CallSite sites[2];
  const int n = calls_ending_at(before, ra, sites);
  bool unknown_target = false;
  for (int i = 0; i < n; ++i) {
    uintptr_t target = 0;
    if (sites[i].kind == CallSite::kDirect) {
      // A rel32 that leads out of the code is not a call but other bytes that end in e8 xx xx xx xx.
      if (!modules_.find(sites[i].target)) continue;
      target = sites[i].target;
    } else if (sites[i].kind == CallSite::kRipIndirect) {
      uint64_t t = 0;
      if (!modules_.find_image(sites[i].pointer) || !read_process(sites[i].pointer, &t) || t == 0) continue;
      target = t;
    } else {
      unknown_target = true;
      continue;
    }
    if (same_function(target, callee_pc)) return Caller::kCallsCallee;
    // Through a PLT stub: the function its GOT slot names.
    uint8_t code[16];
    uint64_t real = 0;
    const uintptr_t slot = read_bytes(target, code, sizeof code) ? plt_slot(code, target) : 0;
    if (slot && modules_.find_image(slot) && read_process(slot, &real) && same_function(real, callee_pc))
      return Caller::kCallsCallee;
    return Caller::kCallsElsewhere;
  }
  return unknown_target ? Caller::kUnknownTarget : Caller::kNo;
}

bool CopiedStackUnwinder::scan_for_caller(const Sample& s, uintptr_t from, uintptr_t callee_pc,
                                          uintptr_t& slot, uintptr_t& ra) {
  const uintptr_t end = std::min<uintptr_t>(s.sp + s.bytes, from + kScanBytes);
  for (uintptr_t at = (from + 7) & ~uintptr_t{7}; at + 8 <= end; at += 8) {
    uint64_t v;
    std::memcpy(&v, s.stack + (at - s.sp), 8);
    if (v < 0x10000 || v >= (uint64_t{1} << 47)) continue;  // not a user-space code address
    const Caller c = check_return_address(v, callee_pc);
    if (c == Caller::kNo) continue;
    if (scan_trace()) {
      const ModuleRange* m = modules_.find(v);
      uint8_t code[24] = {};
      char hex[2 * sizeof code + 1] = {};
      if (read_own_memory(code, callee_pc, sizeof code))
        for (size_t i = 0; i < sizeof code; ++i) std::snprintf(hex + 2 * i, 3, "%02x", code[i]);
      std::fprintf(stderr, "stepscope scan: callee %#lx code %s slot +%lu ra %#lx %s+%#lx call %s\n",
                   (unsigned long)callee_pc, hex, (unsigned long)(at - from), (unsigned long)v,
                   m ? modules_.path(m->index).c_str() : "?", m ? (unsigned long)(v - m->bias) : 0UL,
                   c == Caller::kCallsCallee     ? "into-callee"
                   : c == Caller::kUnknownTarget ? "indirect"
                                                 : "elsewhere");
    }
    // The first word a call could have pushed decides: a later one could skip a live frame. One whose call
    // provably went elsewhere is stale (left by an earlier call) or a tail call's: either way not shown.
    if (c == Caller::kCallsElsewhere) return false;
    slot = at;
    ra = v;
    return true;
  }
  return false;
}

bool CopiedStackUnwinder::resume_at(void* cursor_p, Sample& rs, Registers& resumed, uintptr_t from,
                                    uintptr_t slot, uintptr_t ra, uint64_t rbp_then) {
  auto* cursor = static_cast<unw_cursor_t*>(cursor_p);
  auto* as = static_cast<unw_addr_space_t>(as_);
  resumed = Registers{};
  // Looked up at the call instruction (ra - 1), as libunwind does for every caller it finds itself.
  resumed.r[kRegIp] = ra - 1;
  resumed.r[kRegSp] = slot + 8;
  rs.known = kIpAndSp;
  rs.truncated = false;
  if (api.init_remote(cursor, as, &rs) < 0) return false;
  unw_cursor_t probe = *cursor;
  lookup_failed_ = false;
  if (api.step(&probe) >= 0 || lookup_failed_) {
    rs.truncated = false;
    return true;  // the caller's rule needs no other register (or it has no table: the walk says so)
  }
  // Its rule needs the frame pointer (a frame realigned for AVX-512 or sized at run time), which the frames
  // without tables may have changed and saved below `slot`. Each value it can have had is tried: the
  // interrupted one, and each word of those frames that points into the caller's frame. Taken only when they
  // all lead to the same caller, through a call instruction.
  const uintptr_t lo = slot + 8, hi = rs.sp + rs.bytes;
  uint64_t chosen = 0;
  unw_word_t chosen_ip = 0, chosen_sp = 0;
  int callers = 0;
  long chosen_at = -2;
  auto try_fp = [&](uint64_t fp, long at) {
    if (fp < lo || fp >= hi || (fp & 7) || callers > 1) return;
    resumed.r[kRegFp] = fp;
    rs.known = kIpAndSp | (1u << kRegFp);
    if (api.init_remote(&probe, as, &rs) < 0) return;
    lookup_failed_ = false;
    if (api.step(&probe) <= 0 || lookup_failed_) return;
    unw_word_t ip = 0, sp = 0;
    if (api.get_reg(&probe, UNW_REG_IP, &ip) < 0 || api.get_reg(&probe, UNW_REG_SP, &sp) < 0) return;
    if (sp <= lo || sp > hi || (callers && ip == chosen_ip && sp == chosen_sp)) return;
    if (check_return_address(ip, ra - 1) == Caller::kNo) return;
    ++callers;
    chosen = fp;
    chosen_ip = ip;
    chosen_sp = sp;
    chosen_at = at;
  };
  try_fp(rbp_then, -1);
  for (uintptr_t at = (from + 7) & ~uintptr_t{7}; at < slot; at += 8) {
    uint64_t v;
    std::memcpy(&v, rs.stack + (at - rs.sp), 8);
    try_fp(v, long(at - from));
  }
  if (scan_trace()) {
    if (callers == 1 && chosen_at == -1)
      std::fprintf(stderr, "stepscope scan: fp interrupted\n");
    else if (callers == 1)
      std::fprintf(stderr, "stepscope scan: fp +%ld\n", chosen_at);
    else
      std::fprintf(stderr, "stepscope scan: fp none (%d callers)\n", callers);
  }
  if (callers != 1) return false;
  resumed.r[kRegFp] = chosen;
  rs.known = kIpAndSp | (1u << kRegFp);
  rs.truncated = false;
  return api.init_remote(cursor, as, &rs) >= 0;
}

CopiedStackUnwinder::Stop CopiedStackUnwinder::walk(void* cursor_p, uintptr_t* out, int max, int& frames,
                                                    uint64_t& last_sp) {
  auto* cursor = static_cast<unw_cursor_t*>(cursor_p);
  while (frames < max) {
    lookup_failed_ = false;
    const int rc = api.step(cursor);
    // No table for the frame: libunwind then guesses (the word at rsp, the frame-pointer chain) without
    // checking what it finds. The guess is not taken; the scan checks each return address instead.
    if (lookup_failed_) return Stop::kNoTable;
    if (rc < 0) return Stop::kFailed;
    if (rc == 0) return Stop::kEnd;
    unw_word_t ip = 0, sp = 0;
    if (api.get_reg(cursor, UNW_REG_IP, &ip) < 0 || ip == 0) return Stop::kEnd;
    api.get_reg(cursor, UNW_REG_SP, &sp);
    // A frame that does not move the stack pointer up is a loop, unless it is the same function's caller.
    if (sp < last_sp || (sp == last_sp && ip == out[frames - 1])) return Stop::kFailed;
    last_sp = sp;
    out[frames++] = ip;
  }
  return Stop::kFull;
}

CopiedStackUnwinder::Result CopiedStackUnwinder::unwind(const Registers& regs, const uint8_t* stack,
                                                        size_t bytes, bool capped, uintptr_t* out, int max,
                                                        const Goal& goal) {
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
  Sample s{this, &regs, stack, static_cast<uintptr_t>(regs.r[kRegSp]), bytes, capped, false, kAllRegisters};
  struct Unwinding {
    Unwinding() { t_unwinding = true; }
    ~Unwinding() { t_unwinding = false; }
  } unwinding;
  unw_cursor_t cursor;
  if (api.init_remote(&cursor, as, &s) < 0) return r;
  uint64_t last_sp = s.sp;
  Stop stop = walk(&cursor, out, max, r.frames, last_sp);
  auto reached_goal = [&](int from, int to) {
    for (int i = from; goal.reached && i < to; ++i)
      if (goal.reached(out[i], goal.ctx)) return true;
    return false;
  };
  Registers resumed{};
  Sample rs = s;  // the resumed unwinds' (the cursor refers to it until the end)
  rs.regs = &resumed;
  if (stop == Stop::kNoTable && !reached_goal(0, r.frames)) {
    // The tables ran out before the goal or the thread's entry: go on from the return address a scan of the
    // copy finds above the frame. Only rip and rsp are known there (and rbp where the caller's rule needs it,
    // above): a rule that needs another register the frames without tables may have changed stops the unwind.
    ++scans_tried_;
    const int table_frames = r.frames;
    int scanned = 0, last_scanned = -1;
    bool truncated = false;
    uintptr_t gap_from = last_sp;
    for (int round = 0; round < kMaxScans && stop == Stop::kNoTable && r.frames < max; ++round) {
      const int callee = r.frames - 1;
      const uintptr_t from = last_sp;
      // Where the frames without tables begin: the callee's own frame, or the frame below it when that one
      // was found by scanning too (an rbp pushed there belongs to the caller found next).
      if (callee != last_scanned) gap_from = from;
      uintptr_t slot = 0, ra = 0;
      // A return address names the instruction after the call: step back into the calling function.
      if (!scan_for_caller(s, from, out[callee] - (callee > 0 ? 1 : 0), slot, ra)) break;
      last_scanned = r.frames;
      out[r.frames++] = ra;
      ++scanned;
      last_sp = slot + 8;
      if (r.frames >= max) {  // full, with the caller's frames still to go: cut like a deep stack
        truncated = true;
        stop = Stop::kEnd;
        break;
      }
      if (!resume_at(&cursor, rs, resumed, gap_from, slot, ra, regs.r[kRegFp])) {
        stop = Stop::kFailed;
        break;
      }
      stop = walk(&cursor, out, max, r.frames, last_sp);
      truncated = rs.truncated;
    }
    // Kept only when it ends where a stack ends: at the goal, the thread's entry, or the copy's edge.
    // Anything else is dropped whole, back to the frames the tables gave.
    const bool kept = scanned && (goal.reached ? reached_goal(table_frames, r.frames) || truncated
                                               : stop == Stop::kEnd || stop == Stop::kFull || truncated);
    if (scan_trace())
      std::fprintf(stderr, "stepscope scan: %s, %d frames from tables, %d scanned, %d in all\n",
                   kept ? "kept" : "dropped", table_frames, scanned, r.frames);
    if (kept) {
      r.scanned = scanned;
      s.truncated = s.truncated || truncated;
    } else {
      r.frames = table_frames;
      stop = Stop::kNoTable;
    }
  }
  // Stopped by `max` with frames left: cut like a stack deeper than the window.
  if (stop == Stop::kFull && r.frames == max && api.step(&cursor) > 0) s.truncated = true;
  r.truncated = s.truncated;
  return r;
}

}  // namespace stepscope::collector::unwind
