// A finding's evidence as a person reads it: labelled rows for figures, small tables for lists of records
// (kernels, sequences, gap histograms, blocking calls), names shortened with the full name in a tooltip.
#include <fmt/format.h>
#include <simdjson.h>

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

using evidence::is_name;
using evidence::label_of;

class Renderer {
 public:
  explicit Renderer(std::string_view link_prefix) : link_(link_prefix) {}

  std::string name(std::string_view full) const {
    const std::string shown = short_symbol(full);
    const std::string title = full_symbol(full);
    if (link_.empty())
      return fmt::format("<code title=\"{}\">{}</code>", html_escape(title), html_escape(report_util::shorten(shown, 120)));
    std::string encoded;
    for (unsigned char c : full) {
      if (std::isalnum(c) || c == '_' || c == '.' || c == '-' || c == '~') encoded += char(c);
      else encoded += fmt::format("%{:02X}", c);
    }
    return fmt::format("<a href=\"{}{}\" title=\"{}\">{}</a>", html_escape(link_), encoded, html_escape(title),
                       html_escape(report_util::shorten(shown, 120)));
  }

  std::string scalar(std::string_view key, const element& v) const {
    switch (v.type()) {
      case element_type::STRING: {
        const std::string_view s = v.get_string().value_unsafe();
        return is_name(key) ? name(s) : html_escape(evidence::worded_value(key, s));
      }
      case element_type::BOOL: return v.get_bool().value_unsafe() ? "yes" : "no";
      case element_type::NULL_VALUE: return "—";
      case element_type::INT64:
      case element_type::UINT64:
      case element_type::DOUBLE: {
        return html_escape(evidence::number(key, v.get_double().value_unsafe()));
      }
      case element_type::ARRAY: {
        std::string out;
        size_t n = 0;
        const simdjson::dom::array items = v.get_array().value_unsafe();
        for (element x : items) {
          if (n++) out += x.type() == element_type::STRING && is_name(key) ? " → " : ", ";
          if (n > kMaxEvidenceRows) {
            out += "…";
            break;
          }
          out += x.is_object() || x.is_array() ? html_escape(simdjson::minify(x)) : scalar(key, x);
        }
        return out;
      }
      case element_type::OBJECT: return object(v.get_object().value_unsafe(), key);
    }
    return {};
  }

  // Labelled rows; arrays of records become tables after the rows.
  std::string object(simdjson::dom::object obj, std::string_view outer = {}) const {
    std::string rows, tables;
    for (auto field : obj) {
      const std::string inner_key = evidence::nested_key(outer, field.key);
      const std::string_view key = inner_key;
      const element v = field.value;
      if (v.is_array() && records(v)) {
        tables += fmt::format("<p><b>{}</b></p>", html_escape(label_of(key))) + table(v.get_array().value_unsafe());
      } else {
        rows += fmt::format("<tr><th align=\"left\">{}</th><td>{}</td></tr>", html_escape(label_of(key)), scalar(key, v));
      }
    }
    return (rows.empty() ? "" : "<table class=\"evidence\">" + rows + "</table>") + tables;
  }

 private:
  static bool records(const element& v) {
    const simdjson::dom::array items = v.get_array().value_unsafe();
    for (element x : items) return x.is_object();
    return false;
  }

  std::string table(simdjson::dom::array arr) const {
    std::vector<std::string> keys;  // columns: the first record's keys, then any new ones
    for (element x : arr) {
      if (!x.is_object()) continue;
      const simdjson::dom::object record = x.get_object().value_unsafe();
      for (auto f : record)
        if (std::find(keys.begin(), keys.end(), f.key) == keys.end()) keys.emplace_back(f.key);
    }
    // Cells first: a column no shown row fills (an "op" or "annotation" the recording had none of) is left
    // out.
    std::vector<std::vector<std::string>> cells;
    std::vector<bool> numeric_column(keys.size(), false), filled(keys.size(), false);
    size_t n = 0, total = arr.size();
    for (element x : arr) {
      if (n++ == kMaxEvidenceRows) break;
      auto obj = x.get_object();
      auto& row = cells.emplace_back();
      for (size_t c = 0; c < keys.size(); ++c) {
        element v;
        const bool has = !obj.error() && obj.value_unsafe().at_key(keys[c]).get(v) == simdjson::SUCCESS;
        if (has && (v.is_int64() || v.is_uint64() || v.is_double())) numeric_column[c] = true;
        const bool empty = !has || v.is_null() || (v.is_string() && v.get_string().value_unsafe().empty());
        row.push_back(has && !empty ? scalar(keys[c], v) : has && v.is_null() ? "—" : "");
        if (!empty) filled[c] = true;
      }
    }
    std::string out = "<table class=\"evidence\" border=\"1\" cellspacing=\"0\" cellpadding=\"2\"><tr>";
    for (size_t c = 0; c < keys.size(); ++c)
      if (filled[c]) out += "<th>" + html_escape(label_of(keys[c])) + "</th>";
    out += "</tr>";
    for (const auto& row : cells) {
      out += "<tr>";
      for (size_t c = 0; c < keys.size(); ++c)
        if (filled[c])
          out += std::string(numeric_column[c] ? "<td align=\"right\">" : "<td>") + row[c] + "</td>";
      out += "</tr>";
    }
    out += "</table>";
    if (total > kMaxEvidenceRows) out += fmt::format("<p>… {} more</p>", total - kMaxEvidenceRows);
    return out;
  }

  std::string link_;
};

}  // namespace

std::string render_evidence_html(std::string_view evidence_json, std::string_view link_prefix) {
  if (evidence_json.empty() || evidence_json == "{}") return {};
  simdjson::dom::parser parser;
  simdjson::padded_string padded(evidence_json);
  simdjson::dom::element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS || !root.is_object())
    return "<pre>" + html_escape(evidence_json) + "</pre>";
  return Renderer(link_prefix).object(root.get_object().value_unsafe());
}

}  // namespace stepscope::analyzer
