#include "report/report_util.h"

#include <fmt/format.h>
#include <simdjson.h>

#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

namespace {

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 when invalid (overlong, surrogate, > U+10FFFF).
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t len = 0;
  uint32_t min = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// Calls emit(code point, bytes) for each character, with U+FFFD for every invalid byte.
template <class Emit>
void for_each_char(std::string_view s, Emit emit) {
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    size_t len = utf8_sequence(s, i, cp);
    if (len == 0) {
      emit(0xFFFDu, std::string_view("\xEF\xBF\xBD"));
      i += 1;
    } else {
      emit(cp, s.substr(i, len));
      i += len;
    }
  }
}

// The markup both HTML and XML escape the same way; false for any other character.
bool escape_markup(uint32_t cp, std::string& out) {
  switch (cp) {
    case '&': out += "&amp;"; return true;
    case '<': out += "&lt;"; return true;
    case '>': out += "&gt;"; return true;
    case '"': out += "&quot;"; return true;
    default: return false;
  }
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for_each_char(s, [&](uint32_t, std::string_view bytes) { out += bytes; });
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for_each_char(s, [&](uint32_t cp, std::string_view bytes) {
    if (escape_markup(cp, out)) return;
    if (cp == '\'') out += "&#39;";
    else if (cp == 0) out += "\xEF\xBF\xBD";  // NUL is a parse error in HTML
    else out += bytes;
  });
  return out;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for_each_char(s, [&](uint32_t cp, std::string_view bytes) {
    if (escape_markup(cp, out)) return;
    if (cp == '\'') out += "&apos;";
    // XML 1.0 Char: #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | [#x10000-#x10FFFF]
    else if (cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) || (cp >= 0xE000 && cp <= 0xFFFD) ||
             cp >= 0x10000)
      out += bytes;
    else
      out += "\xEF\xBF\xBD";
  });
  return out;
}

std::string markdown_code_span(std::string_view s, bool in_table) {
  std::string body;
  for (char c : s) {
    if (c == '\n' || c == '\r')
      body += ' ';
    else if (c == '|' && in_table)
      body += "\\|";
    else
      body += c;
  }
  // Markdown has no empty code span: `` reads as two backticks. Nothing to show is nothing.
  if (body.empty()) return body;
  size_t run = 0, longest = 0;
  for (char c : body) longest = std::max(longest, run = c == '`' ? run + 1 : 0);
  const std::string fence(longest + 1, '`');
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
  return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

std::string markdown_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 16);
  for_each_char(s, [&](uint32_t cp, std::string_view bytes) {
    switch (cp) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '|': out += "\\|"; break;
      case '\n':
      case '\r':
      case '\t': out += ' '; break;
      case '\\': case '`': case '*': case '_': case '[': case ']': case '#': case '~': case '!':
        out += '\\';
        out += static_cast<char>(cp);
        break;
      default:
        if (cp < 0x20)
          out += ' ';
        else
          out += bytes;
    }
  });
  return out;
}

bool parse_report_format(std::string_view name, ReportFormat& out) {
  if (name == "text" || name == "txt") out = ReportFormat::Text;
  else if (name == "md" || name == "markdown") out = ReportFormat::Markdown;
  else if (name == "html") out = ReportFormat::Html;
  else if (name == "json") out = ReportFormat::Json;
  else if (name == "metrics") out = ReportFormat::Metrics;
  else return false;
  return true;
}

void write_file_atomically(const std::string& path, std::string_view content) {
  if (path != "-") return store::write_file_atomically(path, content);
  // A full disk or a closed reader under `> out.json` must not pass as a written report (it exited 0).
  errno = 0;
  const bool whole = std::fwrite(content.data(), 1, content.size(), stdout) == content.size();
  if (std::fflush(stdout) != 0 || !whole || std::ferror(stdout))
    throw store::StoreError("standard output",
                            std::string("cannot write: ") + (errno ? std::strerror(errno) : "write error"));
}

namespace report_util {

const char* bound_name(Bound b) { return to_string(b); }

std::string printable(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for_each_char(s, [&](uint32_t cp, std::string_view bytes) {
    bool control = cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0);
    if (control && !(keep_newlines && (cp == '\n' || cp == '\t')))
      out += "\xEF\xBF\xBD";
    else
      out += bytes;
  });
  return out;
}

std::string shorten(std::string_view s, size_t max_chars) {
  std::string v = valid_utf8(s);
  // Character boundaries (UTF-8 lead bytes).
  std::vector<size_t> starts;
  for (size_t i = 0; i < v.size(); ++i)
    if ((static_cast<unsigned char>(v[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.size() <= max_chars || max_chars < 5) return v;
  size_t head = (max_chars - 1) * 2 / 3, tail = max_chars - 1 - head;
  std::string out = v.substr(0, starts[head]);
  out += "…";
  out += v.substr(starts[starts.size() - tail]);
  return out;
}

namespace {

void pretty(const simdjson::dom::element& e, std::string& out, int indent) {
  using simdjson::dom::element_type;
  auto pad = [&](int n) { out.append(static_cast<size_t>(n) * 2, ' '); };
  switch (e.type()) {
    case element_type::OBJECT: {
      simdjson::dom::object obj = e.get_object().value_unsafe();
      if (obj.size() == 0) {
        out += "{}";
        return;
      }
      out += "{\n";
      bool first = true;
      for (auto field : obj) {
        if (!first) out += ",\n";
        first = false;
        pad(indent + 1);
        out += '"';
        JsonWriter::escape_into(out, field.key);
        out += "\": ";
        pretty(field.value, out, indent + 1);
      }
      out += '\n';
      pad(indent);
      out += '}';
      return;
    }
    case element_type::ARRAY: {
      simdjson::dom::array arr = e.get_array().value_unsafe();
      if (arr.size() == 0) {
        out += "[]";
        return;
      }
      // Short arrays of scalars stay on one line.
      bool scalars = true;
      for (auto v : arr)
        if (v.is_object() || v.is_array()) scalars = false;
      if (scalars && arr.size() <= 12) {
        out += '[';
        bool first = true;
        for (auto v : arr) {
          if (!first) out += ", ";
          first = false;
          pretty(v, out, indent);
        }
        out += ']';
        return;
      }
      out += "[\n";
      bool first = true;
      for (auto v : arr) {
        if (!first) out += ",\n";
        first = false;
        pad(indent + 1);
        pretty(v, out, indent + 1);
      }
      out += '\n';
      pad(indent);
      out += ']';
      return;
    }
    case element_type::STRING: {
      out += '"';
      JsonWriter::escape_into(out, e.get_string().value_unsafe());
      out += '"';
      return;
    }
    default:
      out += simdjson::minify(e);
  }
}

}  // namespace

std::string pretty_json(std::string_view json) {
  if (json.empty()) return std::string(json);
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return std::string(json);
  std::string out;
  pretty(root, out, 0);
  return out;
}

std::string code_fence_for(std::string_view content) {
  size_t longest = 0, run = 0;
  for (char c : content) {
    run = (c == '`') ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  return std::string(std::max<size_t>(3, longest + 1), '`');
}

const char* host_words(StepPart p) {
  return step_category_label(*find_step_category(p == StepPart::Input ? "data_wait" : "host_idle"), false);
}

std::string capitalized(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
  return s;
}

std::string grew_words(const SlowStep& s, bool has_gpu) {
  const StepCategory* c = find_step_category(s.category);
  if (!c) return "—";
  return std::string(step_category_label(*c, has_gpu)) + " +" +
         format_us(double(s.category_ns - s.category_median_ns) / 1e3);
}

std::string not_running_words(const SlowStep& s) {
  return "not running: +" + format_us(double(s.off_cpu_ns - s.off_cpu_median_ns) / 1e3) + " off CPU";
}

std::string more_slow_steps_words(const StepOutliers& o) {
  if (o.slow_count <= int64_t(o.slow.size())) return {};
  return fmt::format("{} more slow steps, shorter than these: the {} longest are explained",
                     o.slow_count - int64_t(o.slow.size()), o.slow.size());
}

}  // namespace report_util
}  // namespace stepscope::analyzer
