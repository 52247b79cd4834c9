// Python frames of CPython 3.9–3.14, read from inside the process.
//
// The signal handler calls capture_current_thread(): it reads the interrupted thread's own frame chain with
// fault-safe reads (process_vm_readv on our own pid: a bad pointer makes the read fail, never the target)
// and keeps only raw code-object pointers and instruction offsets. The collector thread turns them into
// function / file / line later with resolve(), which re-validates the code object (it may have been freed
// since) and caches what it read. See docs/python.md.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace stepscope::collector::python {

struct RawPyFrame {
  uint64_t code;  // address of the PyCodeObject
  // The code object's (qualified) name and file name strings as they were at the sample, and a digest of their
  // heads (length, kind, first characters). The code object may be freed, and its address and its strings'
  // reused, before the collector thread reads it (a module's top-level code ends with its import; a program
  // that compiles code in a loop): resolve() names the frame only when what it reads matches the digest.
  uint64_t name, file;
  uint32_t names_digest;
  int32_t first_line;
  int32_t instr_offset;  // index of the executing instruction in code units (2 bytes each); -1 unknown
  uint8_t is_entry;      // the outermost Python frame run by one _PyEval_EvalFrameDefault call
};

// capture_current_thread()'s working memory, preallocated with each thread's state: not on the handler's
// stack, which may be the program's own small alternate stack (sampling/signal_handler.h).
struct CaptureScratch {
  static constexpr int kBatch = 32;             // code objects whose headers one read fetches
  static constexpr size_t kHeaderBytes = 128;   // a code object's fields from its type to its last name field
  static constexpr size_t kStringBytes = 64;    // a string's header and its first characters
  static constexpr size_t kWindowBytes = 8192;  // a window of the thread's frame data stack (3.11+)
  unsigned char window[kWindowBytes];
  iovec local[kBatch], remote[kBatch];
  unsigned char headers[kBatch][kHeaderBytes];
  iovec string_local[2 * kBatch], string_remote[2 * kBatch];
  unsigned char strings[2 * kBatch][kStringBytes];
};

// Finds CPython in the process (libpython or a python executable that exports its symbols) and picks the
// struct layout of its version. Call in the collector thread. False when there is no supported CPython;
// calling it again later retries (a program may load libpython after start).
bool init();

// Async-signal-safe: no locks, no allocation. Innermost frame first; returns the count written (0 when the
// thread runs no Python or init() did not succeed). `scratch` is the calling thread's own.
int capture_current_thread(RawPyFrame* out, int max, CaptureScratch& scratch);

// True when pc lies inside _PyEval_EvalFrameDefault: the native frames where Python frames are spliced in
// (each such native frame runs the Python frames up to and including the next is_entry frame).
bool is_eval_frame(uint64_t pc);

// Collector thread only. Fills qualified function name, file and line; line 0 when the instruction has none or
// the code object was freed since the sample (its name and file are then read from the strings the sample
// saw, when those are still whole). False when nothing readable is left (the frame is shown as unknown).
// Results are cached per code object.
bool resolve(const RawPyFrame& f, std::string& function, std::string& file, int& line);

// "CPython 3.11 (libpython3.11.so.1.0)" once init() succeeded, else why not. For the record summary.
std::string describe();

// PY_VERSION_HEX-style major/minor of the CPython found (0x030B0000 for 3.11), 0 when none.
uint32_t version_hex();

}  // namespace stepscope::collector::python
