// The multi-rank result as "stepscope.multirank/1" JSON, text, Markdown and HTML (docs/multi-rank.md).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "report/report_util.h"
#include "stepscope/analyzer/analysis_json.h"
#include "stepscope/analyzer/json_writer.h"
#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::analyzer {
namespace {

double us(int64_t ns) {
  return double(ns) / 1000.0;
}
std::string ms(int64_t ns) {
  return fmt::format("{:.3f}", double(ns) / 1e6);
}

std::string rank_label(const RankResult& r) {
  return r.rank >= 0 ? std::to_string(r.rank) : std::filesystem::path(r.file).filename().string();
}

// Per rank, its figures summed over the aligned steps (what the per-rank tables show).
struct RankRow {
  int64_t step = 0, compute = 0, comm = 0, exposed = 0, data = 0, host = 0, wait = 0, caused = 0;
};

std::vector<RankRow> rank_rows(const MultiRankAnalysis& m) {
  std::vector<RankRow> rows(m.ranks.size());
  for (const auto& a : m.steps)
    for (size_t r = 0; r < m.ranks.size(); ++r) {
      if (const RankStep* s = find_step(m.ranks[r], a.index)) {
        rows[r].step += s->dur_ns, rows[r].compute += s->compute_ns, rows[r].comm += s->comm_ns;
        rows[r].exposed += s->exposed_comm_ns, rows[r].data += s->data_wait_ns, rows[r].host += s->host_ns;
      }
      rows[r].wait += a.wait_ns[r], rows[r].caused += a.caused_ns[r];
    }
  return rows;
}

const char* kHeader[] = {"rank",    "step ms",         "compute ms",
                         "comm ms", "exposed comm ms", "data wait ms",
                         "host ms", "waited ms",       "others waited for it ms"};

std::vector<std::string> row_cells(const MultiRankAnalysis& m, size_t r, const RankRow& x) {
  const int64_t k = std::max<int64_t>(1, int64_t(m.steps.size()));
  return {rank_label(m.ranks[r]), ms(x.step / k), ms(x.compute / k), ms(x.comm / k),  ms(x.exposed / k),
          ms(x.data / k),         ms(x.host / k), ms(x.wait / k),    ms(x.caused / k)};
}

// The critical path's parts of the ranks that are on it: "ranks": [{rank, compute_us, data_wait_us, host_us,
// comm_us, share}], most first.
void write_path(JsonWriter& w, const std::vector<AlignedStep::PathPart>& path, const std::vector<RankResult>& ranks) {
  int64_t total = 0;
  for (const auto& p : path) total += p.total();
  std::vector<size_t> order;
  for (size_t r = 0; r < path.size(); ++r)
    if (path[r].total() > 0) order.push_back(r);
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return path[x].total() > path[y].total(); });
  w.key("ranks").begin_array();
  for (size_t r : order)
    w.begin_object()
        .kv("rank", ranks[r].rank)
        .kv("compute_us", us(path[r].compute_ns))
        .kv("data_wait_us", us(path[r].data_wait_ns))
        .kv("host_us", us(path[r].host_ns))
        .kv("comm_us", us(path[r].comm_ns))
        .kv("share", total > 0 ? double(path[r].total()) / double(total) : 0.0)
        .end_object();
  w.end_array();
}

// "The job's critical path (mean step 51.883 ms): rank 1 host 62.1%, rank 0 comm 20.3%, …": the largest parts
// first, parts under 1% left out.
std::string path_line(const MultiRankAnalysis& m) {
  if (m.job_path_ns <= 0) return {};
  struct Item {
    std::string rank;
    const char* what;
    int64_t ns;
  };
  std::vector<Item> items;
  for (size_t r = 0; r < m.job_path.size(); ++r) {
    const auto& p = m.job_path[r];
    const std::string label = rank_label(m.ranks[r]);
    items.push_back({label, "compute", p.compute_ns});
    items.push_back({label, "data wait", p.data_wait_ns});
    items.push_back({label, "host", p.host_ns});
    items.push_back({label, "communication", p.comm_ns});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& x, const Item& y) { return x.ns > y.ns; });
  std::string parts;
  for (const auto& i : items) {
    const double share = double(i.ns) / double(m.job_path_ns);
    if (share < 0.01) break;
    parts += fmt::format("{}rank {} {} {:.1f}%", parts.empty() ? "" : ", ", i.rank, i.what, 100.0 * share);
  }
  return fmt::format("The job's critical path, {} ms a step (mean): {}\n", ms(m.job_path_ns), parts);
}

}  // namespace

std::string multirank_to_json(const MultiRankAnalysis& m) {
  std::string out;
  JsonWriter w(out);
  w.begin_object().kv("schema", "stepscope.multirank/1");
  w.key("ranks").begin_array();
  for (const auto& r : m.ranks) {
    w.begin_object().kv("rank", r.rank).kv("world_size", r.world_size).kv("local_rank", r.local_rank);
    w.kv("host", r.host).kv("file", r.file).kv("step_source", r.step_source).kv("comm_source", r.comm_source);
    w.key("steps").begin_array();
    for (const auto& s : r.steps) {
      w.begin_object().kv("index", s.index).kv("start_us", us(s.start_ns)).kv("dur_us", us(s.dur_ns));
      w.kv("compute_us", us(s.compute_ns))
          .kv("comm_us", us(s.comm_ns))
          .kv("exposed_comm_us", us(s.exposed_comm_ns));
      w.kv("data_wait_us", us(s.data_wait_ns)).kv("host_us", us(s.host_ns));
      w.key("collectives").begin_array();
      for (const auto& c : s.collectives) {
        const HostCallId& h = s.host_call(c);
        w.begin_object()
            .kv("kind", to_string(c.kind))
            .kv("start_us", us(c.start_ns))
            .kv("dur_us", us(c.dur_ns))
            .kv("exposed_us", us(c.exposed_ns))
            .kv("name", c.name)
            .kv("bytes", h.bytes)
            .kv("group", h.group)
            .kv("seq", h.seq)
            .end_object();
      }
      w.end_array().end_object();
    }
    w.end_array().end_object();
  }
  w.end_array();
  w.key("steps").begin_array();
  for (const auto& a : m.steps) {
    w.begin_object()
        .kv("index", a.index)
        .kv("median_dur_us", us(a.median_dur_ns))
        .kv("max_dur_us", us(a.max_dur_ns));
    w.kv("matched_collectives", a.matched_collectives)
        .kv("critical_exposed_comm_us", us(a.critical_exposed_ns));
    w.key("wait_us").begin_array();
    for (auto v : a.wait_ns) w.value(us(v));
    w.end_array().key("caused_us").begin_array();
    for (auto v : a.caused_ns) w.value(us(v));
    w.end_array();
    w.key("critical_path").begin_object().kv("dur_us", us(a.path_ns));
    write_path(w, a.path, m.ranks);
    w.key("rounds").begin_array();
    for (const auto& r : a.path_rounds)
      w.begin_object()
          .kv("rank", m.ranks[r.rank].rank)
          .kv("start_us", us(r.start_ns))
          .kv("arrive_us", us(r.arrive_ns))
          .kv("end_us", us(r.end_ns))
          .end_object();
    w.end_array().end_object().end_object();
  }
  w.end_array();
  w.kv("job_step_us", us(m.job_step_ns));
  w.key("critical_path").begin_object().kv("dur_us", us(m.job_path_ns));
  write_path(w, m.job_path, m.ranks);
  w.end_object();
  w.key("what_if").begin_array();
  for (const auto& x : m.what_if)
    w.begin_object()
        .kv("change", x.change)
        .kv("rank", x.rank)
        .kv("job_step_us", us(x.job_step_ns))
        .kv("rule", x.rule)
        .kv("rank_saving_us", us(x.rank_saving_ns))
        .end_object();
  w.end_array();
  w.key("findings").begin_array();
  for (const auto& f : m.findings) w.raw(finding_to_json(f));
  w.end_array();
  w.key("notes").begin_array();
  for (const auto& n : m.notes) w.value(n);
  w.end_array().end_object();
  out += "\n";
  return out;
}

std::string render_multirank_report(const MultiRankAnalysis& m, ReportFormat format) {
  if (format == ReportFormat::Json) return multirank_to_json(m);
  const auto rows = rank_rows(m);
  std::string o;
  const size_t world = m.ranks.size();
  const std::string head = fmt::format("{} rank(s), {} step(s) aligned by step index", world, m.steps.size());
  // What-if across ranks: the job's step after each rank-level change.
  std::string what_if;
  // The straggler's pace and the cures that buy the job the most (the rest are in the JSON).
  constexpr size_t kShownCures = 5;
  size_t cures = 0, hidden = 0;
  for (const auto& x : m.what_if) {
    if (x.rule != "straggler" && (x.job_step_ns >= m.job_step_ns || cures++ >= kShownCures)) {
      ++hidden;
      continue;
    }
    if (x.rule == "straggler")
      what_if += fmt::format("What-if: the job's step, {} ms (median), would be {} ms with rank {} {}\n",
                             ms(m.job_step_ns), ms(x.job_step_ns), x.rank, x.change.str());
    else
      what_if += fmt::format(
          "What-if: the job's step, {} ms (median), would be {} ms with {} cured on rank {} (which saves "
          "that rank "
          "{} ms a step)\n",
          ms(m.job_step_ns), ms(x.job_step_ns), x.rule.str(), x.rank, ms(x.rank_saving_ns));
  }
  if (hidden)
    what_if += fmt::format("({} more rank-level cure(s) buy the job less or nothing: all of them in the JSON, {})\n",
                           hidden, report_util::kJsonHint);
  what_if = path_line(m) + what_if;
  const std::string legend =
      "Per rank, mean over the aligned steps: compute is the union of its non-communication GPU work; "
      "exposed comm "
      "the communication kernels' time with no compute beside them; waited the time its collectives waited "
      "for a "
      "later rank; the last column the collective time the other ranks would save had it arrived with them.";
  if (format == ReportFormat::Text) {
    o += head + "\n\nPer rank\n";
    o += fmt::format("{:>5} {:>9} {:>11} {:>9} {:>16} {:>13} {:>9} {:>10} {:>24}\n", kHeader[0], kHeader[1],
                     kHeader[2], kHeader[3], kHeader[4], kHeader[5], kHeader[6], kHeader[7], kHeader[8]);
    for (size_t r = 0; r < world; ++r) {
      auto c = row_cells(m, r, rows[r]);
      o += fmt::format("{:>5} {:>9} {:>11} {:>9} {:>16} {:>13} {:>9} {:>10} {:>24}\n", c[0], c[1], c[2], c[3],
                       c[4], c[5], c[6], c[7], c[8]);
    }
    o += legend + "\n";
    if (!what_if.empty()) o += "\n" + what_if;
    if (m.findings.empty())
      o += "\nNo cross-rank findings.\n";
    else
      o += "\nFindings, largest estimated saving first:\n";
    int i = 0;
    for (const auto& f : m.findings) {
      o += fmt::format(
          "\n{}. [{}] {}: {}\n   est. saving {:.3f} ms per affected step ({:.1f}% of step time), {} "
          "step(s)\n",
          ++i, store::to_string(f.severity), f.rule, f.summary, f.est_savings_us_per_step / 1000.0,
          100.0 * f.share, f.steps.size());
      std::string ind = "   ";
      for (char ch : f.suggestion) ind += ch == '\n' ? std::string("\n   ") : std::string(1, ch);
      o += ind + "\n";
    }
    for (const auto& n : m.notes) o += "note: " + n + "\n";
    return o;
  }
  if (format == ReportFormat::Markdown) {
    o += "## stepscope: several ranks\n\n" + head + "\n\n### Per rank\n\n|";
    for (const char* h : kHeader) o += fmt::format(" {} |", h);
    o += "\n|";
    for (size_t i = 0; i < std::size(kHeader); ++i) o += i == 0 ? "---|" : "---:|";
    o += "\n";
    for (size_t r = 0; r < world; ++r) {
      o += "|";
      for (const auto& c : row_cells(m, r, rows[r])) o += " " + c + " |";
      o += "\n";
    }
    o += "\n" + legend + "\n\n";
    // One list item a line: Markdown joins lines that are only separated by a newline into one paragraph.
    for (size_t p = 0; p < what_if.size();) {
      const size_t e = std::min(what_if.find('\n', p), what_if.size());
      if (e > p) o += "- " + what_if.substr(p, e - p) + "\n";
      p = e + 1;
    }
    if (!what_if.empty()) o += "\n";
    o += "### Cross-rank findings\n\n";
    if (m.findings.empty()) o += "None.\n";
    for (const auto& f : m.findings)
      o += fmt::format("- **{}** ({}): {} — est. saving {:.3f} ms per affected step\n", f.rule,
                       store::to_string(f.severity), f.summary, f.est_savings_us_per_step / 1000.0);
    for (const auto& n : m.notes) o += "\n> " + n + "\n";
    return o;
  }
  // HTML: one self-contained page, no script.
  o += "<!doctype html><html><head><meta charset=\"utf-8\"><title>stepscope: several ranks</title><style>"
       "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
       "padding:2px 8px;text-align:right}pre{background:#f4f4f4;padding:8px}</style></head><body>";
  o += "<h1>stepscope: several ranks</h1><p>" + html_escape(head) + "</p><h2>Per rank</h2><table><tr>";
  for (const char* h : kHeader) o += "<th>" + std::string(h) + "</th>";
  o += "</tr>";
  for (size_t r = 0; r < world; ++r) {
    o += "<tr>";
    for (const auto& c : row_cells(m, r, rows[r])) o += "<td>" + html_escape(c) + "</td>";
    o += "</tr>";
  }
  o += "</table><p>" + html_escape(legend) + "</p>";
  if (!what_if.empty()) o += "<p>" + html_escape(what_if) + "</p>";
  o += "<h2>Cross-rank findings</h2>";
  if (m.findings.empty()) o += "<p>None.</p>";
  for (const auto& f : m.findings)
    o += fmt::format("<h3>{} ({})</h3><p>{}</p><p>est. saving {:.3f} ms per affected step</p><pre>{}</pre>",
                     f.rule, store::to_string(f.severity), html_escape(f.summary),
                     f.est_savings_us_per_step / 1000.0, html_escape(f.suggestion));
  for (const auto& n : m.notes) o += "<p><i>" + html_escape(n) + "</i></p>";
  o += "</body></html>\n";
  return o;
}

namespace {

// RFC 4180 field: quoted when it holds a comma, quote or line break.
std::string csv_field(std::string_view v) {
  if (v.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(v);
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string rank_steps_csv(const std::vector<RankResult>& ranks, const std::string& job) {
  std::string o =
      "job,rank,world_size,local_rank,host,file,step,start_ns,dur_ns,compute_ns,comm_ns,exposed_comm_ns,"
      "data_wait_ns,host_ns,collectives\n";
  for (const auto& r : ranks)
    for (const auto& s : r.steps)
      o += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(job), r.rank, r.world_size,
                       r.local_rank, csv_field(r.host.str()), csv_field(r.file), s.index, s.start_ns,
                       s.dur_ns, s.compute_ns, s.comm_ns, s.exposed_comm_ns, s.data_wait_ns, s.host_ns,
                       s.collectives.size());
  return o;
}

std::string rank_collectives_csv(const std::vector<RankResult>& ranks, const std::string& job) {
  std::string o = "job,rank,step,kind,ordinal,start_ns,dur_ns,exposed_ns,kernel\n";
  for (const auto& r : ranks)
    for (const auto& s : r.steps) {
      int64_t ordinal[kCollectiveKinds] = {};
      for (const auto& c : s.collectives)
        o += fmt::format("{},{},{},{},{},{},{},{},{}\n", csv_field(job), r.rank, s.index, to_string(c.kind),
                         ordinal[int(c.kind)]++, c.start_ns, c.dur_ns, c.exposed_ns, csv_field(c.name.str()));
    }
  return o;
}

}  // namespace stepscope::analyzer
