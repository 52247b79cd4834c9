// Names as people read them: every view (GUI timeline, call tree, flame graph, text/Markdown/HTML reports)
// shows the short form and keeps the full name for a tooltip or the details. Stores and JSON keep full names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "stepscope/store/records.h"

namespace stepscope::analyzer {

// A C++ symbol folded for display: mangled names (_Z...) demangled first; template arguments folded to
// "<…>", parameter lists to "(…)" ("()" when empty), "(anonymous namespace)::" dropped, a leading return
// type dropped. "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, …>(int, …)"
// → "at::native::vectorized_elementwise_kernel<…>(…)". Anything that is not a C++ symbol comes back unchanged.
std::string short_symbol(std::string_view name);

// Full demangled form of a mangled name (unchanged when it is not one): for tooltips and details.
std::string full_symbol(std::string_view name);

// A Python source file as frames name it: its base name ("dataloader.py"), unless that is one many packages
// share ("__init__.py", "utils.py", "module.py", ...): then, as py-spy names it, its path below the sys.path
// root — after "site-packages/", "dist-packages/" or the standard library's "lib/pythonX.Y/"
// ("torch/autograd/__init__.py") — or, outside one, its folder and base name ("myproject/utils.py").
std::string python_file_name(std::string_view file);

// A Python frame: "function (file.py:line)" with python_file_name; "function (file.py)" without a line.
std::string python_frame_name(std::string_view function, std::string_view file, int64_t line);

// An unsymbolized native frame: "module+0xoffset" with the module's base name ("??" when unknown).
std::string address_frame_name(std::string_view module, int64_t offset);

// A stored frame as displayed: Python frames as python_frame_name, symbolized native frames short_symbol,
// others address_frame_name. `full` keeps the symbol unshortened (tooltips, details).
std::string frame_display_name(const store::Trace& trace, const store::Frame& frame, bool full = false);

// A data wait's source as the store names it (docs/schema.md: "dataloader", "tf.data", "api", "nvtx",
// "data-wait-func") in a user's words: "DataLoader", "tf.data", "stepscope API", "NVTX", "--data-wait-func";
// "unknown source" when empty; any other name as it is.
std::string data_wait_source_words(std::string_view source);

// A byte count as every view writes it: binary units, three significant figures ("240 MiB", "1.5 KiB", "512
// B").
std::string byte_count_name(double bytes);

// A Python frame of the collector's own helper (the hooks, their --step-func trampolines: files under
// "<stepscope-collector>/"): the profiler's time, never the program's function.
bool is_profiler_python_frame(const store::Trace& trace, const store::Frame& frame);
// A frame of the collector's own Python start-up (hooks_bootstrap.py, a line it runs): everything it calls is the
// profiler's too (the embedded package's import, the hooks' install), unlike a trampoline or wrapper, which calls
// the program's function.
bool is_profiler_owned_python_frame(const store::Trace& trace, const store::Frame& frame);

}  // namespace stepscope::analyzer
