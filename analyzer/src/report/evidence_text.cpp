// A finding's evidence for the terminal and for Markdown, read the way the HTML renders it: one labelled line per
// figure (times with units, shares as percentages), aligned tables for lists of records, names shortened. The
// full JSON stays in `--format json` and `analyze --json`.
#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>

#include "report/evidence_keys.h"
#include "report/report_util.h"
#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"

namespace stepscope::analyzer {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;

using evidence::kMaxEvidenceRows;
constexpr size_t kMaxNameChars = 80;

using evidence::is_name;
using evidence::label_of;

class TextRenderer {
 public:
  explicit TextRenderer(bool markdown) : md_(markdown) {}

  std::string object(simdjson::dom::object obj, const std::string& indent, std::string_view outer = {}) const {
    std::vector<std::pair<std::string, std::string>> rows;
    std::string tables;
    for (auto field : obj) {
      const std::string inner_key = evidence::nested_key(outer, field.key);
      const std::string_view key = inner_key;
      const element v = field.value;
      if (v.is_array() && records(v)) {
        tables += table(label_of(key), v.get_array().value_unsafe(), indent);
      } else if (v.is_object()) {
        rows.push_back({label_of(key), ""});
        tables += (md_ ? indent + "- **" + cell(label_of(key)) + "**\n" : indent + label_of(key) + ":\n") +
                  object(v.get_object().value_unsafe(), indent + "  ", key);
      } else {
        rows.push_back({label_of(key), scalar(key, v)});
      }
    }
    std::string out;
    size_t width = 0;
    for (const auto& [label, value] : rows)
      if (!value.empty()) width = std::max(width, label.size());
    for (const auto& [label, value] : rows) {
      if (value.empty()) continue;
      out += md_ ? fmt::format("{}- {}: {}\n", indent, cell(label), value)
                 : fmt::format("{}{:<{}}  {}\n", indent, label, width, value);
    }
    return out + tables;
  }

 private:
  std::string cell(std::string_view s) const { return md_ ? markdown_escape(s) : report_util::printable(s); }

  std::string name(std::string_view full) const {
    const std::string shown = report_util::shorten(short_symbol(full), kMaxNameChars);
    return md_ ? markdown_code_span(valid_utf8(shown), in_table_) : report_util::printable(shown);
  }

  std::string scalar(std::string_view key, const element& v) const {
    switch (v.type()) {
      case element_type::STRING: {
        const std::string_view s = v.get_string().value_unsafe();
        return is_name(key) ? name(s) : cell(evidence::worded_value(key, s));
      }
      case element_type::BOOL: return v.get_bool().value_unsafe() ? "yes" : "no";
      case element_type::NULL_VALUE: return "-";
      case element_type::INT64:
      case element_type::UINT64:
      case element_type::DOUBLE: {
        return evidence::number(key, v.get_double().value_unsafe());
      }
      case element_type::ARRAY: {
        std::string out;
        size_t n = 0;
        const simdjson::dom::array items = v.get_array().value_unsafe();
        const size_t total = items.size();
        for (element x : items) {
          if (n == kMaxEvidenceRows) {
            out += fmt::format(" … {} more", total - n);
            break;
          }
          if (n++) out += x.type() == element_type::STRING && is_name(key) ? " → " : ", ";
          out += x.is_object() || x.is_array() ? cell(simdjson::minify(x)) : scalar(key, x);
        }
        return out.empty() ? "-" : out;
      }
      case element_type::OBJECT: return cell(simdjson::minify(v));
    }
    return {};
  }

  static bool records(const element& v) {
    const simdjson::dom::array items = v.get_array().value_unsafe();
    for (element x : items) return x.is_object();
    return false;
  }

  std::string table(const std::string& title, simdjson::dom::array arr, const std::string& indent) const {
    std::vector<std::string> keys;
    for (element x : arr) {
      if (!x.is_object()) continue;
      const simdjson::dom::object record = x.get_object().value_unsafe();
      for (auto f : record)
        if (std::find(keys.begin(), keys.end(), f.key) == keys.end()) keys.emplace_back(f.key);
    }
    std::vector<std::vector<std::string>> cells;
    std::vector<bool> numeric(keys.size(), true), filled(keys.size(), false);
    const size_t total = arr.size();
    in_table_ = md_;
    for (element x : arr) {
      if (cells.size() == kMaxEvidenceRows) break;
      auto obj = x.get_object();
      std::vector<std::string> row;
      for (size_t c = 0; c < keys.size(); ++c) {
        element v;
        const bool has = !obj.error() && obj.value_unsafe().at_key(keys[c]).get(v) == simdjson::SUCCESS;
        if (has && !(v.is_int64() || v.is_uint64() || v.is_double())) numeric[c] = false;
        if (has && !v.is_null() && !(v.is_string() && v.get_string().value_unsafe().empty()))
          filled[c] = true;
        row.push_back(has ? scalar(keys[c], v) : "");
      }
      cells.push_back(std::move(row));
    }
    in_table_ = false;
    // A column no shown row fills (an "op" the recording had none of) is left out, as the HTML does.
    for (size_t c = keys.size(); c-- > 0;)
      if (!filled[c]) {
        keys.erase(keys.begin() + long(c));
        numeric.erase(numeric.begin() + long(c));
        for (auto& row : cells) row.erase(row.begin() + long(c));
      }
    std::string out;
    if (md_) {
      out += indent + "- **" + cell(title) + "**\n\n" + indent + "  |";
      for (const auto& k : keys) out += " " + cell(label_of(k)) + " |";
      out += "\n" + indent + "  |";
      for (size_t c = 0; c < keys.size(); ++c) out += numeric[c] ? "---:|" : "---|";
      out += "\n";
      for (const auto& row : cells) {
        out += indent + "  |";
        for (const auto& v : row) out += " " + v + " |";
        out += "\n";
      }
      out += "\n";
    } else {
      std::vector<size_t> width(keys.size());
      for (size_t c = 0; c < keys.size(); ++c) {
        width[c] = label_of(keys[c]).size();
        for (const auto& row : cells) width[c] = std::max(width[c], display_width(row[c]));
      }
      out += indent + title + ":\n" + indent + "  ";
      for (size_t c = 0; c < keys.size(); ++c) out += pad(label_of(keys[c]), width[c], numeric[c]) + "  ";
      while (!out.empty() && out.back() == ' ') out.pop_back();
      out += "\n";
      for (const auto& row : cells) {
        out += indent + "  ";
        for (size_t c = 0; c < keys.size(); ++c) out += pad(row[c], width[c], numeric[c]) + "  ";
        while (!out.empty() && out.back() == ' ') out.pop_back();
        out += "\n";
      }
    }
    if (total > cells.size()) out += indent + fmt::format("  … {} more\n", total - cells.size());
    return out;
  }

  // Columns count characters, not bytes ("µs", "→").
  static size_t display_width(std::string_view s) {
    size_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n;
  }
  static std::string pad(const std::string& s, size_t width, bool right) {
    const size_t w = display_width(s);
    const std::string fill(width > w ? width - w : 0, ' ');
    return right ? fill + s : s + fill;
  }

  bool md_;
  mutable bool in_table_ = false;  // Markdown: rendering a table's cells
};

std::string render(std::string_view evidence_json, bool markdown, const std::string& indent) {
  if (evidence_json.empty() || evidence_json == "{}") return {};
  simdjson::dom::parser parser;
  simdjson::padded_string padded(evidence_json);
  simdjson::dom::element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS || !root.is_object())
    return indent + report_util::printable(evidence_json) + "\n";
  return TextRenderer(markdown).object(root.get_object().value_unsafe(), indent);
}

}  // namespace

std::string render_evidence_text(std::string_view evidence_json, std::string_view indent) {
  return render(evidence_json, false, std::string(indent));
}

std::string render_evidence_markdown(std::string_view evidence_json) { return render(evidence_json, true, ""); }

}  // namespace stepscope::analyzer
