// Installs the Python hooks from inside the collector; see python_hooks.h and docs/python.md.
//
// CPython's C API is reached through dlsym (the collector links no libpython): only functions exported by
// every CPython 3.9-3.14, called with the GIL held on the interpreter's own thread (audit hooks and pending
// calls run there). The Python side (hooks_bootstrap.py) catches everything, so no exception ever reaches the
// program.
#include "python_hooks.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "core/collector_internal.h"
#include "core/collector_state.h"
#include "python_embedded.h"

namespace stepscope::collector::python_hooks {
namespace {

using PyObj = void;
constexpr int kPyFileInput = 257;  // Py_file_input, the same in every version

struct CApi {
  int (*is_initialized)() = nullptr;
  int (*add_pending_call)(int (*)(void*), void*) = nullptr;
  int (*add_audit_hook)(int (*)(const char*, PyObj*, void*), void*) = nullptr;
  PyObj* (*dict_new)() = nullptr;
  int (*dict_set_item_string)(PyObj*, const char*, PyObj*) = nullptr;
  PyObj* (*dict_get_item_string)(PyObj*, const char*) = nullptr;
  PyObj* (*eval_get_builtins)() = nullptr;
  PyObj* (*unicode_from_string)(const char*) = nullptr;
  const char* (*unicode_as_utf8)(PyObj*) = nullptr;
  PyObj* (*tuple_new)(long) = nullptr;
  int (*tuple_set_item)(PyObj*, long, PyObj*) = nullptr;
  PyObj* (*compile_string)(const char*, const char*, int, void*, int) = nullptr;  // Py_CompileStringExFlags
  PyObj* (*eval_code)(PyObj*, PyObj*, PyObj*) = nullptr;
  PyObj* (*tuple_get_item)(PyObj*, long) = nullptr;
  PyObj* (*call_object_args)(PyObj*, ...) = nullptr;  // PyObject_CallFunctionObjArgs
  void (*inc_ref)(PyObj*) = nullptr;
  void (*dec_ref)(PyObj*) = nullptr;
  void (*err_clear)() = nullptr;
  int (*gil_ensure)() = nullptr;  // PyGILState_STATE is an enum
  void (*gil_release)(int) = nullptr;
  PyObj* (*eval_get_frame)() = nullptr;  // the thread's running frame (borrowed), or null
  PyObj* (*get_attr_string)(PyObj*, const char*) = nullptr;

  template <typename F>
  static void get(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
  }
  bool load() {
    get(is_initialized, "Py_IsInitialized");
    get(add_pending_call, "Py_AddPendingCall");
    get(add_audit_hook, "PySys_AddAuditHook");
    get(dict_new, "PyDict_New");
    get(dict_set_item_string, "PyDict_SetItemString");
    get(dict_get_item_string, "PyDict_GetItemString");
    get(eval_get_builtins, "PyEval_GetBuiltins");
    get(unicode_from_string, "PyUnicode_FromString");
    get(unicode_as_utf8, "PyUnicode_AsUTF8");
    get(tuple_new, "PyTuple_New");
    get(tuple_set_item, "PyTuple_SetItem");
    get(compile_string, "Py_CompileStringExFlags");
    get(eval_code, "PyEval_EvalCode");
    get(tuple_get_item, "PyTuple_GetItem");
    get(call_object_args, "PyObject_CallFunctionObjArgs");
    get(inc_ref, "Py_IncRef");
    get(dec_ref, "Py_DecRef");
    get(err_clear, "PyErr_Clear");
    get(gil_ensure, "PyGILState_Ensure");  // optional: only the wake-up below uses them
    get(gil_release, "PyGILState_Release");
    get(eval_get_frame, "PyEval_GetFrame");  // optional: without them sync() cannot tell where it runs
    get(get_attr_string, "PyObject_GetAttrString");
    return is_initialized && add_pending_call && add_audit_hook && dict_new && dict_set_item_string &&
           dict_get_item_string && eval_get_builtins && unicode_from_string && unicode_as_utf8 && tuple_new &&
           tuple_set_item && compile_string && eval_code && tuple_get_item && call_object_args && inc_ref && dec_ref &&
           err_clear;
  }
};

// kArmed: an audit hook waits for the interpreter's start; kReady: the interpreter runs, and pending calls bring the
// hooks in and out to match `want` (sync()).
enum State : int { kNone, kArmed, kReady, kFailed };

// Constant-initialized: arm() runs from the library's constructor, before this file's dynamic initializers.
CApi api;
std::atomic<int> state{kNone};
std::atomic<bool> want{false};         // a recording window is open: the hooks belong in the program
std::atomic<bool> sync_queued{false};  // a pending call to sync() is queued
std::atomic<bool> forward_exec{false};  // pass "exec" audit events to exec_callback
std::mutex status_mu;
// The GIL guards these: only sync() and the audit hook (both with it held) touch them.
bool in_place = false;              // install() ran and uninstall() did not since
bool audit_hook_added = false;      // PEP 578 hooks cannot be removed: one per process
PyObj* exec_callback = nullptr;     // _autohook._on_exec while the hooks need "exec" events (3.9-3.12)

struct Texts {
  std::string status = "none: the collector did not look for CPython";  // guarded by status_mu
  std::string wait_func, step_func;  // guarded by status_mu: the open window's regexes
  std::string func_hooks;            // guarded by status_mu: how --data-wait-func/--step-func hook, from Python
  int64_t hook_ns_per_step_call = -1, hook_ns_per_wait_call = -1;  // guarded by status_mu
};
Texts& texts() {
  static Texts* t = new Texts();  // never destroyed: an audit event may come during exit
  return *t;
}

void set_status(std::string s) {
  std::lock_guard<std::mutex> lk(status_mu);
  texts().status = std::move(s);
}

std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&arm), &info) && info.dli_fname) return info.dli_fname;
  return {};
}

// Runs hooks_bootstrap.py with its inputs as globals; GIL held. Returns its one-line status; `callback` gets a
// new reference to the exec-event callable it left, or nullptr.
// Compiles `code` under `file` and runs it in `globals`; GIL held. The file name is what the profiler's own
// frames are known by in samples (is_profiler_python_frame), where "<string>" would read as the program's.
PyObj* run_source(const char* code, const char* file, PyObj* globals) {
  PyObj* compiled = api.compile_string(code, file, kPyFileInput, nullptr, -1);
  if (!compiled) return nullptr;
  PyObj* r = api.eval_code(compiled, globals, globals);
  api.dec_ref(compiled);
  return r;
}

std::string run_bootstrap(const char* how, PyObj** callback) {
  *callback = nullptr;
  PyObj* globals = api.dict_new();
  if (!globals) {
    api.err_clear();
    return "failed: no memory for a dict";
  }
  std::string wait_func, step_func;
  {
    std::lock_guard<std::mutex> lk(status_mu);
    wait_func = texts().wait_func, step_func = texts().step_func;
  }
  bool ok = api.dict_set_item_string(globals, "__builtins__", api.eval_get_builtins()) == 0;
  auto set_str = [&](const char* key, const std::string& value) {
    PyObj* v = api.unicode_from_string(value.c_str());
    ok = ok && v && api.dict_set_item_string(globals, key, v) == 0;
    if (v) api.dec_ref(v);
  };
  set_str("_lib", library_path());
  set_str("_wait_func", wait_func);
  set_str("_step_func", step_func);
  set_str("_how", how);
  PyObj* sources = api.dict_new();
  ok = ok && sources;
  for (size_t i = 0; ok && i < kEmbeddedModuleCount; ++i) {
    const EmbeddedModule& m = kEmbeddedModules[i];
    PyObj* pair = api.tuple_new(2);
    PyObj* file = api.unicode_from_string(m.file);
    PyObj* text = api.unicode_from_string(m.source);
    ok = pair && file && text;
    if (ok) {
      api.tuple_set_item(pair, 0, file);  // steals the references
      api.tuple_set_item(pair, 1, text);
      file = text = nullptr;
      ok = api.dict_set_item_string(sources, m.name, pair) == 0;
    }
    for (PyObj* o : {pair, file, text})
      if (o) api.dec_ref(o);
  }
  if (ok) ok = api.dict_set_item_string(globals, "_sources", sources) == 0;
  if (sources) api.dec_ref(sources);
  std::string result = "failed: could not pass the embedded sources to Python";
  if (ok) {
    PyObj* r = run_source(kBootstrapSource, "<stepscope-collector>/hooks_bootstrap.py", globals);
    if (r) {
      api.dec_ref(r);
      PyObj* s = api.dict_get_item_string(globals, "_status");  // borrowed
      const char* text = s ? api.unicode_as_utf8(s) : nullptr;
      result = text ? text : "failed: the bootstrap left no status";
      if (PyObj* cb = api.dict_get_item_string(globals, "_on_exec")) {  // borrowed; absent when not needed
        api.inc_ref(cb);
        *callback = cb;
      }
    } else {
      result = std::string("failed (") + how + "): the bootstrap raised";
    }
  }
  api.err_clear();  // whatever happened, the program's own code continues with no exception set
  api.dec_ref(globals);
  return result;
}

// Runs a line of Python in a fresh namespace; GIL held. Nothing it raises reaches the program.
void run_line(const char* code) {
  PyObj* globals = api.dict_new();
  if (!globals) {
    api.err_clear();
    return;
  }
  if (api.dict_set_item_string(globals, "__builtins__", api.eval_get_builtins()) == 0)
    if (PyObj* r = run_source(code, "<stepscope-collector>/line", globals)) api.dec_ref(r);
  api.err_clear();
  api.dec_ref(globals);
}

int on_audit_event(const char* event, PyObj* args, void*);

// Whether the frame Python is running (that a pending call or an audit event interrupted) is importlib's own:
// the bootstrap imports, and an import run inside _ModuleLock.acquire on CPython 3.9-3.11 deletes the outer
// acquire's `_blocking_on[tid]` entry, whose own `del` then raises KeyError into the program's import (seen:
// 1 attach in 150 during `import torch`); inside release or _get_module_lock it can deadlock on the module's
// lock. Any other frame imports as a module's body does. GIL held.
bool running_importlib() {
  if (!api.eval_get_frame || !api.get_attr_string) return false;
  PyObj* frame = api.eval_get_frame();
  if (!frame) return false;  // no Python frame: called from C (the interpreter's start, a C thread)
  bool inside = false;
  if (PyObj* code = api.get_attr_string(frame, "f_code")) {
    if (PyObj* file = api.get_attr_string(code, "co_filename")) {
      const char* name = api.unicode_as_utf8(file);
      // Frozen ("<frozen importlib._bootstrap>", "<frozen zipimport>") or, under -X frozen_modules=off, the
      // files themselves.
      inside = name && (std::strncmp(name, "<frozen importlib.", 18) == 0 || std::strcmp(name, "<frozen zipimport>") == 0 ||
                        std::strstr(name, "/importlib/_bootstrap") != nullptr);
      api.dec_ref(file);
    }
    api.dec_ref(code);
  }
  api.err_clear();
  return inside;
}

void schedule_later();

// Brings the hooks in or takes them out to match `want`; on the interpreter's thread with the GIL held.
void sync(const char* how) {
  sync_queued.store(false);
  const bool wanted = want.load();
  // Not while importlib's own code runs: the bootstrap imports, and both install and uninstall change
  // sys.meta_path, which importlib's _find_spec may be iterating over (an element skipped or seen twice).
  if (wanted != in_place && running_importlib()) {
    if (wanted) set_status("pending: the main thread was running importlib's own code; the collector asks again");
    if (std::getenv("STEPSCOPE_PYTHON_DEBUG"))
      std::fprintf(stderr, "stepscope: python hooks: importlib's own code is running; again in 10 ms\n");
    schedule_later();
    return;
  }
  if (wanted && !in_place) {
    PyObj* callback = nullptr;
    const std::string result = run_bootstrap(how, &callback);
    set_status(result);
    in_place = result.rfind("installed", 0) == 0;
    if (callback) {
      exec_callback = callback;
      // attach: the process has no audit hook of ours yet (record adds it before the interpreter starts)
      if (!audit_hook_added && api.add_audit_hook(on_audit_event, nullptr) == 0) audit_hook_added = true;
      api.err_clear();
      forward_exec.store(audit_hook_added);
    }
    if (std::getenv("STEPSCOPE_PYTHON_DEBUG"))
      std::fprintf(stderr, "stepscope: python hooks %s\n", result.c_str());
  } else if (!wanted && in_place) {
    forward_exec.store(false);
    if (exec_callback) api.dec_ref(exec_callback);
    exec_callback = nullptr;
    run_line("import sys\nm = sys.modules.get('_stepscope._autohook')\nif m is not None: m.uninstall()\n");
    in_place = false;
    std::lock_guard<std::mutex> lk(status_mu);
    texts().func_hooks.clear();
    texts().hook_ns_per_step_call = texts().hook_ns_per_wait_call = -1;
  }
}

// PEP 578 audit hook: stays registered for the life of the process (hooks cannot be removed). Before the
// installation it waits for the interpreter's start; afterwards it returns at its first comparisons, except for
// "exec" events while the hooks want them (a module's code about to run: 3.9-3.12 find the functions to hook).
int on_audit_event(const char* event, PyObj* args, void*) {
  if (forward_exec.load(std::memory_order_relaxed)) {
    if (exec_callback && event[0] == 'e' && std::strcmp(event, "exec") == 0) {
      if (PyObj* code = api.tuple_get_item(args, 0)) {
        if (PyObj* r = api.call_object_args(exec_callback, code, nullptr)) api.dec_ref(r);
      }
      api.err_clear();
    }
    return 0;
  }
  if (state.load(std::memory_order_relaxed) != kArmed) return 0;
  if (!api.is_initialized()) return 0;  // site and the standard library still being set up
  int expected = kArmed;
  if (state.compare_exchange_strong(expected, kReady)) sync(event);
  return 0;
}

int on_pending_call(void*) {
  sync("pending call");
  return 0;
}

// Py_AddPendingCall made on a thread other than Python's main thread does not wake the main thread on CPython
// 3.9-3.11: the eval breaker is recomputed from the calling thread's view, so a single-threaded loop that
// never drops the GIL runs the call only at its end (seen: `record --paused` + `start` on a busy loop got no
// hooks). A thread of ours asking for the GIL makes the main thread drop it; taking it back, the main thread
// recomputes the breaker as itself and runs the call at its next bytecode.
void* wake_main_thread(void*) {
  mark_collector_thread(sys_gettid());
  api.gil_release(api.gil_ensure());
  return nullptr;
}

// A short-lived detached thread of ours, every signal blocked: never the target of the program's signals or ours.
void spawn_helper(void* (*body)(void*)) {
  if (!real_pthread_create) return;
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  real_pthread_create(&t, &attr, body, nullptr);
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void start_wake_up() {
  if (api.gil_ensure && api.gil_release) spawn_helper(wake_main_thread);
}

// Queues a sync() on the interpreter's main thread (and wakes it: see start_wake_up).
void schedule() {
  if (sync_queued.exchange(true)) return;
  if (api.add_pending_call(on_pending_call, nullptr) != 0) {
    sync_queued.store(false);
    set_status("failed: Py_AddPendingCall refused (its queue is full)");
    return;
  }
  start_wake_up();
}

constexpr long kRetryNs = 10000000;  // after a sync() left for later: the main thread is elsewhere by then

void* sync_again(void*) {
  mark_collector_thread(sys_gettid());
  timespec ts{0, kRetryNs};
  nanosleep(&ts, nullptr);
  if (api.is_initialized()) schedule();  // not into an interpreter that is finalizing
  return nullptr;
}

// Queues another sync() a little later, from a thread of ours: the pending calls' queue would run one queued
// from inside a pending call again at once, and the collector thread may be gone (the window closed).
void schedule_later() { spawn_helper(sync_again); }

}  // namespace

void arm(const std::string& wait_func, const std::string& step_func) {
  {
    std::lock_guard<std::mutex> lk(status_mu);
    texts().wait_func = wait_func;
    texts().step_func = step_func;
  }
  const int st = state.load();
  if (st == kFailed) return;
  if (st == kArmed || st == kReady) {  // a later window: bring them back in
    want.store(true);
    if (st == kReady) {
      set_status("pending: the main thread has run no Python since the window opened");
      schedule();
    }
    return;
  }
  if (const char* off = std::getenv("STEPSCOPE_PYTHON_HOOKS"); off && std::strcmp(off, "0") == 0) {
    set_status("off: STEPSCOPE_PYTHON_HOOKS=0");  // bench/overhead measures the hooks' own cost with it
    return;
  }
  if (!api.load()) {
    auto version = reinterpret_cast<const char* (*)()>(dlsym(RTLD_DEFAULT, "Py_GetVersion"));
    if (!version) {
      set_status("none: no CPython in this process");
    } else {
      std::string v = version();
      v = v.substr(0, v.find(' '));
      set_status("unsupported: CPython " + v +
                 " has no audit hooks or pending calls to install them with (3.8+)");
    }
    return;
  }
  want.store(true);
  if (!api.is_initialized()) {
    state.store(kArmed);
    set_status("pending: the interpreter raised no event after its start-up");
    if (api.add_audit_hook(on_audit_event, nullptr) != 0) {
      api.err_clear();
      state.store(kFailed);
      set_status("failed: PySys_AddAuditHook refused the hook");
      return;
    }
    audit_hook_added = true;  // before the interpreter exists: no other thread runs Python yet
    return;
  }
  state.store(kReady);
  set_status("pending: the main thread has run no Python since the collector arrived");
  schedule();
}

void disarm() {
  want.store(false);
  if (state.load() == kReady) schedule();  // kArmed: the interpreter never started; nothing is in place
}

bool arm_if_late(const std::string& wait_func, const std::string& step_func) {
  if (state.load() != kNone) return true;
  if (!api.load() || !api.is_initialized()) return false;  // not loaded, or not started: look again later
  arm(wait_func, step_func);  // also where STEPSCOPE_PYTHON_HOOKS=0 turns them off
  return true;
}

std::string status() {
  std::lock_guard<std::mutex> lk(status_mu);
  return texts().status;
}

void add_meta(std::map<std::string, std::string>& meta) {
  std::lock_guard<std::mutex> lk(status_mu);
  if (texts().func_hooks.empty()) return;
  meta["python.func_hooks"] = texts().func_hooks;
  meta["python.hook_ns_per_step_call"] = std::to_string(texts().hook_ns_per_step_call);
  meta["python.hook_ns_per_wait_call"] = std::to_string(texts().hook_ns_per_wait_call);
}

void set_hook_cost(int64_t step_ns, int64_t wait_ns, const char* info) {
  std::lock_guard<std::mutex> lk(status_mu);
  texts().func_hooks = info ? info : "";
  texts().hook_ns_per_step_call = step_ns;
  texts().hook_ns_per_wait_call = wait_ns;
}

}  // namespace stepscope::collector::python_hooks

// The Python helper reports how its --data-wait-func/--step-func hooks work and what one hooked call of each kind
// costs (python/stepscope/_autohook.py measures it at install); the analyzer takes that out as the profiler's cost.
extern "C" __attribute__((visibility("default"))) void stepscope_collector_python_hook_cost(int64_t step_ns,
                                                                                          int64_t wait_ns,
                                                                                          const char* info) {
  stepscope::collector::python_hooks::set_hook_cost(step_ns, wait_ns, info);
}
