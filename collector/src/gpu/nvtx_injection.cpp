// NVTX v3 injection: NVTX_INJECTION64_PATH names this library, so a program's first NVTX call loads it and calls
// InitializeInjectionNvtx2(); we fill NVTX's core function tables with our own handlers. Ranges are captured
// on any machine, GPU or not. Ranges whose names match --data-wait-regex also become data_waits, and
// --step-regex ranges become steps.
#include <nvtx3/nvToolsExt.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/collector_internal.h"

namespace stepscope::collector::nvtx {
namespace {

struct OpenRange {
  int64_t start;
  const std::string* name;  // interned below; never freed
  const std::string* domain;
};

std::mutex strings_mu;
std::unordered_map<std::string, const std::string*>* strings = nullptr;

const std::string* intern(const char* s) {
  std::lock_guard<std::mutex> lk(strings_mu);
  if (!strings) strings = new std::unordered_map<std::string, const std::string*>();
  std::string key(s ? s : "");
  auto it = strings->find(key);
  if (it != strings->end()) return it->second;
  auto* v = new std::string(key);
  strings->emplace(key, v);
  return v;
}

const std::string* message_of(const nvtxEventAttributes_t* a) {
  if (!a) return intern("");
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return intern(a->message.ascii);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? reinterpret_cast<const std::string*>(a->message.registered) : intern("");
    default: return intern("");
  }
}

const std::string* domain_of(nvtxDomainHandle_t d) {
  static const std::string* core = intern("");
  return d ? reinterpret_cast<const std::string*>(d) : core;
}

thread_local std::vector<OpenRange> t_stack;

std::mutex started_mu;
std::unordered_map<uint64_t, std::pair<OpenRange, int32_t>>* started = nullptr;
std::atomic<uint64_t> next_id{1};

void emit(const OpenRange& r, int64_t end, int32_t tid, int32_t depth) {
  if (!running()) return;
  const auto& cfg = config();
  const bool is_wait = std::regex_search(*r.name, cfg.data_wait_regex);
  const bool is_step = cfg.has_step_regex && std::regex_search(*r.name, cfg.step_regex);
  auto& p = pending();
  int64_t steps = -1;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    store::Range row;
    row.start = r.start;
    row.end = end;
    row.pid = getpid();
    row.tid = tid;
    row.domain = p.rows.intern(*r.domain);
    row.name = p.rows.intern(*r.name);
    row.depth = depth;
    row.source = store::RangeSource::Nvtx;
    p.rows.ranges.push_back(row);
    if (is_wait) {
      store::DataWait w;
      w.start = r.start;
      w.end = end;
      w.pid = row.pid;
      w.tid = tid;
      w.source = p.rows.intern("nvtx");
      p.rows.data_waits.push_back(w);
    }
    if (is_step) {
      store::Step s;
      s.index = p.step_sequences[{"nvtx", tid}].next_index++;
      steps = s.index + 1;
      s.start = r.start;
      s.end = end;
      s.source = p.rows.intern("nvtx");
      s.pid = row.pid;
      s.tid = tid;
      p.rows.steps.push_back(s);
    }
  }
  // Outside the lock: switching GPU windows flushes CUPTI, whose callback takes it.
  if (steps >= 0) cupti::on_step("nvtx", tid);
}

int push(const std::string* name, const std::string* domain) {
  if (!running()) return -1;
  t_stack.push_back({now_ns(), name, domain});
  return static_cast<int>(t_stack.size()) - 1;
}

int pop() {
  if (t_stack.empty()) return -1;
  OpenRange r = t_stack.back();
  t_stack.pop_back();
  const int depth = static_cast<int>(t_stack.size());
  emit(r, now_ns(), current_tid(), depth);
  return depth;
}

nvtxRangeId_t start_range(const std::string* name, const std::string* domain) {
  if (!running()) return 0;
  const uint64_t id = next_id.fetch_add(1);
  std::lock_guard<std::mutex> lk(started_mu);
  if (!started) started = new std::unordered_map<uint64_t, std::pair<OpenRange, int32_t>>();
  if (started->size() < 1000000) started->emplace(id, std::make_pair(OpenRange{now_ns(), name, domain}, current_tid()));
  return id;
}

void end_range(nvtxRangeId_t id) {
  std::pair<OpenRange, int32_t> r;
  {
    std::lock_guard<std::mutex> lk(started_mu);
    if (!started) return;
    auto it = started->find(id);
    if (it == started->end()) return;
    r = it->second;
    started->erase(it);
  }
  emit(r.first, now_ns(), r.second, 0);
}

void mark(const std::string* name, const std::string* domain) {
  if (!running()) return;
  int64_t t = now_ns();
  emit({t, name, domain}, t, current_tid(), static_cast<int32_t>(t_stack.size()));
}

// Core module.
void NVTX_API MarkEx(const nvtxEventAttributes_t* a) { mark(message_of(a), domain_of(nullptr)); }
void NVTX_API MarkA(const char* m) { mark(intern(m), domain_of(nullptr)); }
nvtxRangeId_t NVTX_API RangeStartEx(const nvtxEventAttributes_t* a) {
  return start_range(message_of(a), domain_of(nullptr));
}
nvtxRangeId_t NVTX_API RangeStartA(const char* m) { return start_range(intern(m), domain_of(nullptr)); }
void NVTX_API RangeEnd(nvtxRangeId_t id) { end_range(id); }
int NVTX_API RangePushEx(const nvtxEventAttributes_t* a) { return push(message_of(a), domain_of(nullptr)); }
int NVTX_API RangePushA(const char* m) { return push(intern(m), domain_of(nullptr)); }
int NVTX_API RangePop() { return pop(); }

// Core2 module (domains, registered strings).
void NVTX_API DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { mark(message_of(a), domain_of(d)); }
nvtxRangeId_t NVTX_API DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return start_range(message_of(a), domain_of(d));
}
void NVTX_API DomainRangeEnd(nvtxDomainHandle_t, nvtxRangeId_t id) { end_range(id); }
int NVTX_API DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  return push(message_of(a), domain_of(d));
}
int NVTX_API DomainRangePop(nvtxDomainHandle_t) { return pop(); }
nvtxStringHandle_t NVTX_API DomainRegisterStringA(nvtxDomainHandle_t, const char* s) {
  return reinterpret_cast<nvtxStringHandle_t>(const_cast<std::string*>(intern(s)));
}
nvtxDomainHandle_t NVTX_API DomainCreateA(const char* name) {
  return reinterpret_cast<nvtxDomainHandle_t>(const_cast<std::string*>(intern(name)));
}
void NVTX_API DomainDestroy(nvtxDomainHandle_t) {}

template <class F>
void set(NvtxFunctionTable table, unsigned size, unsigned id, F fn) {
  if (table && id < size + 1 && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

}  // namespace
}  // namespace stepscope::collector::nvtx

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  using namespace stepscope::collector::nvtx;
  if (!get_table) return 0;
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!cb || cb->struct_size < sizeof(NvtxExportTableCallbacks) || !cb->GetModuleFunctionTable) return 0;
  NvtxFunctionTable core = nullptr, core2 = nullptr;
  unsigned core_size = 0, core2_size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &core, &core_size)) return 0;
  set(core, core_size, NVTX_CBID_CORE_MarkEx, MarkEx);
  set(core, core_size, NVTX_CBID_CORE_MarkA, MarkA);
  set(core, core_size, NVTX_CBID_CORE_RangeStartEx, RangeStartEx);
  set(core, core_size, NVTX_CBID_CORE_RangeStartA, RangeStartA);
  set(core, core_size, NVTX_CBID_CORE_RangeEnd, RangeEnd);
  set(core, core_size, NVTX_CBID_CORE_RangePushEx, RangePushEx);
  set(core, core_size, NVTX_CBID_CORE_RangePushA, RangePushA);
  set(core, core_size, NVTX_CBID_CORE_RangePop, RangePop);
  if (cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &core2, &core2_size)) {
    set(core2, core2_size, NVTX_CBID_CORE2_DomainMarkEx, DomainMarkEx);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeStartEx, DomainRangeStartEx);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangeEnd, DomainRangeEnd);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePushEx, DomainRangePushEx);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRangePop, DomainRangePop);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainRegisterStringA, DomainRegisterStringA);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainCreateA, DomainCreateA);
    set(core2, core2_size, NVTX_CBID_CORE2_DomainDestroy, DomainDestroy);
  }
  return 1;
}
