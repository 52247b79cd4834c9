// The collector installs stepscope's Python hooks (python/stepscope/_autohook.py, embedded in the library) in
// every CPython process it records, without PYTHONPATH or sitecustomize (docs/python.md, "How the hooks get
// in").
//
// At process start (the LD_PRELOAD constructor, before the interpreter exists) arm() registers a PEP 578
// audit hook: the interpreter's first audit event after it is initialized (`cpython.run_file`,
// `cpython.run_module`, `cpython.run_command`, … just before the program's first line) runs the installation
// on that thread with the GIL held. In a running interpreter (attach) arm() schedules it with
// Py_AddPendingCall: the main thread runs it at its next bytecode boundary. Forked children inherit installed
// hooks; exec'ed children arm again.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace stepscope::collector::python_hooks {

// Looks for CPython in the process and arms the installation; in a later recording window, brings the hooks
// back in with that window's regexes. wait_func/step_func are the --data-wait-func/--step-func regexes. Never
// throws; the outcome is in status().
void arm(const std::string& wait_func, const std::string& step_func);

// A recording window closed: a pending call takes every hook out again (patched framework methods, the
// --step-func/--data-wait-func trampolines or sys.monitoring tool, the import hook), so the program runs as it
// did before the attach. The audit hook stays (CPython cannot remove one) and returns at its first comparisons.
void disarm();

// For a libpython loaded after the collector started (a C/C++ program that embeds Python with dlopen): the
// collector thread calls it now and then; once the interpreter is initialized it arms the installation with
// a pending call, as arm() does for attach. Before that it does nothing (no audit hook from a thread that is
// not the interpreter's). True once nothing is left to do (armed, done, or no CPython will come this way).
bool arm_if_late(const std::string& wait_func, const std::string& step_func);

// One line for the recording's meta `python.hooks`: "installed (cpython.run_file)", "pending: …",
// "failed (…): why", "unsupported: CPython 3.7 …", "none: no CPython in this process".
std::string status();

// python.func_hooks (how --data-wait-func/--step-func hook, from the Python helper) and
// python.hook_ns_per_step_call / python.hook_ns_per_wait_call (what one hooked call of each kind costs the
// program, measured at install) while such hooks are in place.
void add_meta(std::map<std::string, std::string>& meta);

}  // namespace stepscope::collector::python_hooks
