/* stepscope.h — mark training steps and data-pipeline waits for `stepscope record`.
 *
 * Header-only C/C++. The collector functions are looked up at run time (dlsym(RTLD_DEFAULT)), so a program
 * built with this header needs no library at link time and runs unchanged without the collector: every call is
 * then a cheap no-op (one cached pointer test).
 *
 *   for (;;) {
 *     stepscope_data_wait_begin();  next_batch();  stepscope_data_wait_end();
 *     train_step();
 *     stepscope_step();             // a step boundary: step i spans boundary i .. boundary i+1
 *   }
 *
 * Link with -ldl on glibc < 2.34. */
#ifndef STEPSCOPE_H_
#define STEPSCOPE_H_

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <dlfcn.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*stepscope_source_fn_)(const char*);
typedef void (*stepscope_void_fn_)(void);

/* Resolved once per translation unit; (void*)1 marks "looked up, absent". */
static void* stepscope_lookup_(void** cache, const char* name) {
  void* p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (!p) {
    p = dlsym(RTLD_DEFAULT, name);
    if (!p) p = (void*)1;
    __atomic_store_n(cache, p, __ATOMIC_RELEASE);
  }
  return p == (void*)1 ? (void*)0 : p;
}

/* A step boundary, now, on the calling thread. */
static inline void stepscope_step(void) {
  static void* fn;
  stepscope_source_fn_ f = (stepscope_source_fn_)stepscope_lookup_(&fn, "stepscope_collector_step");
  if (f) f("api");
}

/* The calling thread starts waiting for input data (next batch). */
static inline void stepscope_data_wait_begin(void) {
  static void* fn;
  stepscope_source_fn_ f = (stepscope_source_fn_)stepscope_lookup_(&fn, "stepscope_collector_data_wait_begin");
  if (f) f("api");
}

/* The wait begun by the last stepscope_data_wait_begin() on this thread ends. */
static inline void stepscope_data_wait_end(void) {
  static void* fn;
  stepscope_void_fn_ f = (stepscope_void_fn_)stepscope_lookup_(&fn, "stepscope_collector_data_wait_end");
  if (f) f();
}

/* 1 when the collector is loaded and recording. */
static inline int stepscope_active(void) {
  static void* fn;
  int (*f)(void) = (int (*)(void))stepscope_lookup_(&fn, "stepscope_collector_active");
  return f ? f() : 0;
}

#ifdef __cplusplus
}
#endif
#endif /* STEPSCOPE_H_ */
