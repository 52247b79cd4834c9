// Loads a shared library into a running process with ptrace and calls one function of it (x86-64 Linux).
// Internal to the attach side of the collector (stepscope attach); see docs/collector.md, "Attaching".
// inject() orchestrates the units: process_status (checks), process_maps (libc and dlopen in the target),
// tracee_threads (stop every thread), remote_call (registers, remote mmap, running the stub), remote_memory
// (writing the page), x86_assembler (the stub's bytes).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "process_status.h"  // read_status, read_stat, explain_ptrace_failure: attach.cpp uses them too
#include "stepscope/collector/attach.h"

namespace stepscope::collector::attach {

struct InjectRequest {
  pid_t pid = 0;
  std::string library;   // absolute path, opened by the target (so the target's mount namespace must see it)
  std::string function;  // extern "C" long function(const char* argument), looked up with dlsym in the library
  std::string argument;  // its argument; "{page}" is replaced by the address of the injected page (hex)
  int timeout_ms = 20000;  // for the injected call (dlopen and the function); the process is not waited on otherwise
};

struct InjectResult {
  long function_result = 0;
  std::string function_message;  // when function_result is not 0: the C string it points to in the target
  int64_t stopped_all_ns = 0;   // every thread stopped: first interrupt to the last thread resumed
  int64_t stopped_caller_ns = 0;  // the thread that ran the call: its interrupt to its detach
  int threads = 0;              // threads stopped
  int retries = 0;              // rounds resumed because no thread was at a safe point
  uint64_t page = 0;            // the injected page (left mapped: the library unmaps it once the call returned)
};

// Stops every thread of `pid` (PTRACE_SEIZE + PTRACE_INTERRUPT, re-listing /proc/PID/task until stable), picks a
// thread at a safe point (not inside libc or the dynamic loader, or blocked in a system call), saves its
// registers and extended state, maps one page with an injected mmap system call, writes a stub there that calls
// dlopen(library) + dlsym(function) + function(argument) and stops on int3, resumes the other threads, runs the
// stub, restores the thread exactly (an interrupted system call restarts as it would have) and detaches.
// Throws AttachError with a one-line reason (no such process, permissions and which setting forbids ptrace,
// already traced, seccomp, exited meanwhile, dlopen's error).
InjectResult inject(const InjectRequest& request);

}  // namespace stepscope::collector::attach
