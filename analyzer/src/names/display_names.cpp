#include "stepscope/analyzer/display_names.h"

#include <cxxabi.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "format/units.h"

namespace stepscope::analyzer {

namespace {

bool starts_with(std::string_view s, size_t i, std::string_view p) { return s.substr(i, p.size()) == p; }

// Index just past the bracket that closes the one at `open` (nesting counted over <>, (), [], {}), or npos.
size_t skip_group(std::string_view s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
    else if (c == '>' || c == ')' || c == ']' || c == '}') {
      if (c == '>' && i > 0 && s[i - 1] == '-') continue;  // "->" inside a signature
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

bool looks_like_cpp(std::string_view s) {
  const unsigned char c0 = static_cast<unsigned char>(s[0]);
  if (!(std::isalpha(c0) || c0 == '_' || c0 == '~' || c0 == ':' || starts_with(s, 0, "(anonymous namespace)::")))
    return false;  // "<script>", "[memcpy]"
  if (s.find("::") == std::string_view::npos && s.find(" (") != std::string_view::npos) return false;  // "data wait (python)"
  return s.find("::") != std::string_view::npos || s.find('<') != std::string_view::npos ||
         (s.find('(') != std::string_view::npos && s.back() == ')');
}

}  // namespace

std::string full_symbol(std::string_view name) {
  if (name.size() < 3 || name[0] != '_' || name[1] != 'Z') return std::string(name);
  int status = 0;
  const std::string mangled(name);
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : mangled;
}

namespace {

constexpr size_t kMaxKeptTemplateArgs = 24;

// "0", "4, 128", "true, 2u": numbers and booleans only.
bool numeric_list(std::string_view a) {
  size_t i = 0;
  bool any = false;
  while (i < a.size()) {
    while (i < a.size() && (a[i] == ' ' || a[i] == ',')) ++i;
    if (i >= a.size()) break;
    if (a.compare(i, 4, "true") == 0) {
      i += 4;
    } else if (a.compare(i, 5, "false") == 0) {
      i += 5;
    } else {
      if (a[i] == '-') ++i;
      const size_t d = i;
      while (i < a.size() && a[i] >= '0' && a[i] <= '9') ++i;
      if (i == d) return false;
      while (i < a.size() && (a[i] == 'u' || a[i] == 'l' || a[i] == 'U' || a[i] == 'L')) ++i;
    }
    any = true;
    if (i < a.size() && a[i] != ',' && a[i] != ' ') return false;
  }
  return any;
}

}  // namespace

std::string short_symbol(std::string_view raw) {
  const std::string full = full_symbol(raw);
  const std::string_view s = full;
  if (s.empty() || !looks_like_cpp(s)) return full;
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (starts_with(s, i, " [clone ")) break;  // compiler clones (.isra.0, .cold) are one function to the reader
    if (starts_with(s, i, "(anonymous namespace)::")) {
      i += 23;
      continue;
    }
    if (starts_with(s, i, "{anonymous}::")) {
      i += 13;
      continue;
    }
    if (starts_with(s, i, "operator") && (i == 0 || s[i - 1] == ':' || s[i - 1] == ' ')) {
      // The operator's own symbol is not a bracket: copy it whole ("operator()", "operator<<", "operator new").
      out += "operator";
      i += 8;
      if (starts_with(s, i, "()")) {
        out += "()";
        i += 2;
      } else {
        while (i < s.size() && std::string_view("<>=!+-*/%^&|~,[]").find(s[i]) != std::string_view::npos) out += s[i++];
      }
      continue;
    }
    const char c = s[i];
    if (c == '<' || c == '(') {
      const size_t end = skip_group(s, i);
      if (end == std::string_view::npos) {  // unbalanced: keep the rest as it is
        out.append(s.substr(i));
        break;
      }
      const bool empty = end == i + 2;
      // Numeric template arguments are what tells kernel variants apart (op_kernel<0> … op_kernel<29>, tile
      // sizes): short lists of numbers and booleans stay.
      if (c == '<' && !empty && end - i <= kMaxKeptTemplateArgs + 2 && numeric_list(s.substr(i + 1, end - i - 2))) {
        out.append(s.substr(i, end - i));
        i = end;
        continue;
      }
      out += c == '<' ? (empty ? "<>" : "<…>") : (empty ? "()" : "(…)");
      i = end;
      continue;
    }
    out += c;
    ++i;
  }
  // Drop a return type: the text before the last top-level space ahead of the parameter list.
  const size_t params = out.find("(…)") != std::string::npos ? out.find("(…)") : out.find("()");
  if (params != std::string::npos && out.find("operator") == std::string::npos) {
    // The last space outside kept template arguments ("gemm_tile<128, 64, true>(…)").
    size_t space = std::string::npos;
    int depth = 0;
    for (size_t k = 0; k < params; ++k) {
      if (out[k] == '<') ++depth;
      else if (out[k] == '>' && depth > 0) --depth;
      else if (out[k] == ' ' && depth == 0) space = k;
    }
    if (space != std::string::npos) out.erase(0, space + 1);
  }
  return out;
}

namespace {

// Base names many packages share: "__init__.py" alone does not say whose. A fixed list, not "ambiguous in
// this trace", so that a frame has the same name in every run and `diff` matches it.
bool common_python_basename(std::string_view base) {
  static constexpr std::string_view kCommon[] = {"__init__.py", "__main__.py", "utils.py",   "util.py",
                                                 "common.py",   "base.py",     "core.py",    "functional.py",
                                                 "module.py",   "_utils.py",   "helpers.py", "main.py"};
  for (std::string_view c : kCommon)
    if (base == c) return true;
  return false;
}

// The path below a sys.path root: after the last "site-packages/" or "dist-packages/", else after the
// standard library's "lib/pythonX.Y/"; empty when the path has none.
std::string_view below_sys_path_root(std::string_view file) {
  for (std::string_view root : {std::string_view("/site-packages/"), std::string_view("/dist-packages/")})
    if (size_t at = file.rfind(root); at != std::string_view::npos) return file.substr(at + root.size());
  if (size_t at = file.rfind("/lib/python"); at != std::string_view::npos) {
    size_t i = at + 11;  // past "/lib/python"
    while (i < file.size() && (std::isdigit(static_cast<unsigned char>(file[i])) || file[i] == '.')) ++i;
    if (i > at + 11 && i < file.size() && file[i] == '/') return file.substr(i + 1);
  }
  return {};
}

}  // namespace

std::string python_file_name(std::string_view file) {
  const size_t slash = file.find_last_of('/');
  const std::string_view base = slash == std::string_view::npos ? file : file.substr(slash + 1);
  if (slash == std::string_view::npos || !common_python_basename(base)) return std::string(base);
  // As py-spy names it: the module's path in its package ("torch/autograd/__init__.py").
  if (std::string_view below = below_sys_path_root(file); below.size() > base.size())
    return std::string(below);
  // Outside any package root: at least the folder it is in ("myproject/utils.py").
  const size_t parent = slash == 0 ? std::string_view::npos : file.find_last_of('/', slash - 1);
  return std::string(parent == std::string_view::npos ? file : file.substr(parent + 1));
}

std::string python_frame_name(std::string_view function, std::string_view file, int64_t line) {
  const std::string shown = python_file_name(file);
  std::string out(function.empty() ? std::string_view("<module>") : function);
  if (shown.empty()) return out;
  out += " (";
  out += shown;
  if (line > 0) out += ":" + std::to_string(line);
  out += ")";
  return out;
}

std::string byte_count_name(double bytes) {
  return units::format_bytes(bytes);
}

std::string data_wait_source_words(std::string_view source) {
  if (source.empty()) return "unknown source";
  if (source == "dataloader") return "DataLoader";
  if (source == "api") return "stepscope API";  // stepscope.data_wait(), stepscope_data_wait_begin/end
  if (source == "nvtx") return "NVTX";
  if (source == "data-wait-func" || source == "python") return "--data-wait-func";
  return std::string(source);  // "tf.data", and whatever an importer names
}

std::string address_frame_name(std::string_view module, int64_t offset) {
  const size_t slash = module.find_last_of('/');
  std::string out(module.empty() ? std::string_view("??") : slash == std::string_view::npos ? module : module.substr(slash + 1));
  char buf[32];
  std::snprintf(buf, sizeof buf, "+0x%llx", static_cast<unsigned long long>(offset));
  return out + buf;
}

bool is_profiler_python_frame(const store::Trace& t, const store::Frame& f) {
  return f.kind == store::FrameKind::Python && t.str(f.file).rfind("<stepscope-collector>/", 0) == 0;
}

bool is_profiler_owned_python_frame(const store::Trace& t, const store::Frame& f) {
  if (f.kind != store::FrameKind::Python) return false;
  const std::string& file = t.str(f.file);
  return file == "<stepscope-collector>/hooks_bootstrap.py" || file == "<stepscope-collector>/line";
}

std::string frame_display_name(const store::Trace& t, const store::Frame& f, bool full) {
  const std::string sym = t.str(f.symbol);
  if (f.kind == store::FrameKind::Python) return python_frame_name(sym, t.str(f.file), f.line);
  if (sym.empty()) return address_frame_name(t.str(f.module), f.address);
  return full ? full_symbol(sym) : short_symbol(sym);
}

}  // namespace stepscope::analyzer
