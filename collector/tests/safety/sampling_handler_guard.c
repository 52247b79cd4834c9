/* A check that cannot pass by luck (issue 21): preloaded beside the collector, this library wraps the
 * collector's sampling-signal handler and aborts the process, with one clear line, whenever the thread running
 * that handler calls malloc, calloc, realloc, free, memalign/posix_memalign/aligned_alloc, __tls_get_addr,
 * dl_iterate_phdr, pthread_mutex_lock or pthread_mutex_trylock. It knows nothing of stepscope's internals: it
 * recognises the handler by the library it lives in (dladdr; STEPSCOPE_HANDLER_GUARD_MATCH, default
 * "libstepscope_collector").
 *
 *   LD_PRELOAD=libstepscope_handler_guard.so STEPSCOPE_HANDLER_GUARD_REPORT=guard.txt stepscope record ...
 *
 * guard.txt then holds "handler_runs=N wrapped=W violations=0" (written at exit; a violation aborts first). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void __libc_free(void*);
extern void* __libc_memalign(size_t, size_t);

static __thread int t_in_handler __attribute__((tls_model("initial-exec")));
static atomic_ulong g_runs;
static atomic_int g_wrapped;
static void (*g_real_handler[_NSIG])(int, siginfo_t*, void*);

typedef int (*sigaction_fn)(int, const struct sigaction*, struct sigaction*);
typedef int (*iterate_fn)(int (*)(struct dl_phdr_info*, size_t, void*), void*);
typedef int (*mutex_fn)(pthread_mutex_t*);
typedef void* (*tls_fn)(void*);
static sigaction_fn real_sigaction;
static iterate_fn real_dl_iterate_phdr;
static mutex_fn real_mutex_lock, real_mutex_trylock;
static tls_fn real_tls_get_addr;

static void say(const char* s) {
  size_t n = strlen(s);
  while (n) {
    ssize_t w = write(2, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static void violation(const char* what) {
  char line[160];
  /* no snprintf: it may allocate; build the line by hand */
  const char* a = "stepscope-handler-guard: ";
  const char* b = " called inside the sampling signal handler (tid ";
  size_t n = 0;
  for (const char* p = a; *p && n < sizeof line - 1; ++p) line[n++] = *p;
  for (const char* p = what; *p && n < sizeof line - 1; ++p) line[n++] = *p;
  for (const char* p = b; *p && n < sizeof line - 1; ++p) line[n++] = *p;
  char digits[16];
  int nd = 0;
  long tid = syscall(SYS_gettid);
  do {
    digits[nd++] = (char)('0' + tid % 10);
    tid /= 10;
  } while (tid && nd < 15);
  while (nd && n < sizeof line - 3) line[n++] = digits[--nd];
  line[n++] = ')';
  line[n++] = '\n';
  line[n] = 0;
  say(line);
  abort();
}

#define GUARD(name)              \
  do {                           \
    if (t_in_handler) violation(name); \
  } while (0)

static void resolve(void) {
  if (!real_sigaction) real_sigaction = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
  if (!real_dl_iterate_phdr) real_dl_iterate_phdr = (iterate_fn)dlsym(RTLD_NEXT, "dl_iterate_phdr");
  if (!real_mutex_lock) real_mutex_lock = (mutex_fn)dlsym(RTLD_NEXT, "pthread_mutex_lock");
  if (!real_mutex_trylock) real_mutex_trylock = (mutex_fn)dlsym(RTLD_NEXT, "pthread_mutex_trylock");
  if (!real_tls_get_addr) real_tls_get_addr = (tls_fn)dlsym(RTLD_NEXT, "__tls_get_addr");
}

__attribute__((constructor)) static void guard_init(void) { resolve(); }

/* --- the handler wrapper ------------------------------------------------------------------------------- */

static void trampoline(int sig, siginfo_t* info, void* uc) {
  void (*h)(int, siginfo_t*, void*) = g_real_handler[sig];
  atomic_fetch_add_explicit(&g_runs, 1, memory_order_relaxed);
  t_in_handler = 1;
  if (h) h(sig, info, uc);
  t_in_handler = 0;
}

static int is_guarded_handler(void* fn) {
  Dl_info info;
  if (!fn || !dladdr(fn, &info) || !info.dli_fname) return 0;
  const char* match = getenv("STEPSCOPE_HANDLER_GUARD_MATCH");
  return strstr(info.dli_fname, match && *match ? match : "libstepscope_collector") != NULL;
}

int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  if (!real_sigaction) resolve();
  struct sigaction mine;
  const struct sigaction* use = act;
  void (*previous)(int, siginfo_t*, void*) = (sig > 0 && sig < _NSIG) ? g_real_handler[sig] : NULL;
  if (act && sig > 0 && sig < _NSIG) {
    if ((act->sa_flags & SA_SIGINFO) && act->sa_sigaction != trampoline &&
        is_guarded_handler((void*)act->sa_sigaction)) {
      g_real_handler[sig] = act->sa_sigaction;
      mine = *act;
      mine.sa_sigaction = trampoline;
      use = &mine;
      atomic_fetch_add(&g_wrapped, 1);
    }
    /* Another handler for the signal is left alone, and the wrapped one is kept: the kernel calls the new one
     * directly, and a vforked child (Python's subprocess resets handlers in one, sharing this memory) must
     * not unhook the parent's. */
  }
  int rc = real_sigaction(sig, use, old);
  /* The collector compares the installed handler with its own: show it its own, not the trampoline. */
  if (rc == 0 && old && old->sa_sigaction == trampoline && (old->sa_flags & SA_SIGINFO))
    old->sa_sigaction = act ? previous : g_real_handler[sig];
  return rc;
}

/* --- what a signal handler must never call ------------------------------------------------------------ */

void* malloc(size_t n) {
  GUARD("malloc");
  return __libc_malloc(n);
}
void* calloc(size_t a, size_t b) {
  GUARD("calloc");
  return __libc_calloc(a, b);
}
void* realloc(void* p, size_t n) {
  GUARD("realloc");
  return __libc_realloc(p, n);
}
void free(void* p) {
  GUARD("free");
  __libc_free(p);
}
void* memalign(size_t a, size_t n) {
  GUARD("memalign");
  return __libc_memalign(a, n);
}
void* aligned_alloc(size_t a, size_t n) {
  GUARD("aligned_alloc");
  return __libc_memalign(a, n);
}
int posix_memalign(void** out, size_t a, size_t n) {
  GUARD("posix_memalign");
  void* p = __libc_memalign(a, n);
  if (!p) return 12; /* ENOMEM */
  *out = p;
  return 0;
}

int dl_iterate_phdr(int (*cb)(struct dl_phdr_info*, size_t, void*), void* data) {
  GUARD("dl_iterate_phdr");
  if (!real_dl_iterate_phdr) resolve();
  return real_dl_iterate_phdr(cb, data);
}

int pthread_mutex_lock(pthread_mutex_t* m) {
  GUARD("pthread_mutex_lock");
  if (!real_mutex_lock) resolve();
  return real_mutex_lock(m);
}

int pthread_mutex_trylock(pthread_mutex_t* m) {
  GUARD("pthread_mutex_trylock");
  if (!real_mutex_trylock) resolve();
  return real_mutex_trylock(m);
}

/* Calls into ld.so's own: callers may come with a misaligned stack (glibc realigns too). Before the
 * constructor ran, the loader's definition is found the way the constructor finds it. */
__attribute__((force_align_arg_pointer)) void* __tls_get_addr(void* ti) {
  GUARD("__tls_get_addr");
  if (!real_tls_get_addr) real_tls_get_addr = (tls_fn)dlsym(RTLD_NEXT, "__tls_get_addr");
  return real_tls_get_addr(ti);
}

__attribute__((destructor)) static void guard_report(void) {
  const char* path = getenv("STEPSCOPE_HANDLER_GUARD_REPORT");
  if (!path || !*path) return;
  char line[128];
  int n = snprintf(line, sizeof line, "handler_runs=%lu wrapped=%d violations=0\n",
                   (unsigned long)atomic_load(&g_runs), atomic_load(&g_wrapped));
  /* Several processes (forked children) may share the path: one line each, appended. */
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (n > 0) (void)!write(fd, line, (size_t)n);
  close(fd);
}
