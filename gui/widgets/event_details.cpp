#include "event_details.h"

#include <QStringList>
#include <algorithm>
#include <climits>
#include <string_view>

#include "stepscope/analyzer/display_names.h"
#include "stepscope/analyzer/report.h"
#include "stepscope/analyzer/step_outliers.h"
#include "stepscope/gui/timeline_layout.h"

namespace stepscope::gui {

namespace {

QString h(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }
QString dur(double ns) { return QString::fromStdString(format_duration(ns)); }

QString row(const QString& k, const QString& v) { return "<tr><td><b>" + k + "</b></td><td>" + v + "</td></tr>"; }

QString bytes(int64_t b) {
  return QString::fromStdString(analyzer::byte_count_name(double(b)));
}

// The launching call, the ops around it and the CPU stack nearest to it.
QString host_side(const TimelineModel& m, uint32_t api_row) {
  QString out = "<h4>Launched by</h4><table>";
  store::ApiCall a;
  try {
    a = m.api_call(api_row);  // built from a store: read back from it
  } catch (const store::StoreError& err) {
    return out + row("details", h(err.what())) + "</table>";
  }
  out += row("API call", h(m.trace().str(a.name)) + " (" + store::to_string(a.kind) + ")");
  out += row("at", dur(double(a.start - m.begin())) + ", " + dur(double(a.end - a.start)));
  out += row("thread", QString("%1 / %2").arg(m.shown_pid(a.pid)).arg(a.tid));
  out += "</table>";
  auto encl = m.enclosing_ranges(a.pid, a.tid, a.start, a.end);
  if (!encl.empty()) {
    out += "<h4>Inside</h4><ol>";
    for (EventRef e : encl)
      if (!(e.kind == EventKind::ApiCall && e.row == api_row)) out += "<li>" + h(m.name_of(e)) + "</li>";
    out += "</ol>";
  }
  if (auto s = m.sample_near(a.pid, a.tid, (a.start + a.end) / 2, std::max<int64_t>(5'000'000, a.end - a.start))) {
    const auto& sample = m.trace().samples[*s];
    out += QString("<h4>CPU stack</h4><p><i>sample %1 from the call</i></p><ol>")
               .arg(dur(double(std::abs(sample.time - (a.start + a.end) / 2))));
    for (uint32_t f : m.stack_frames(sample.stack)) out += "<li><code>" + h(m.frame_name(f)) + "</code></li>";
    out += "</ol>";
  }
  return out;
}

// "captured from a stream", "built node by node", … — how a graph came to be, in words.
const char* graph_kind_words(store::GraphKind k) {
  switch (k) {
    case store::GraphKind::Capture: return "captured from a stream";
    case store::GraphKind::Explicit: return "built node by node";
    case store::GraphKind::Instantiated: return "executable";
    case store::GraphKind::Clone: return "a clone";
    default: return "of unknown origin";
  }
}

// A graph in one line: "7 · executable, instantiated from graph 5 (captured from a stream)".
QString graph_line(const TimelineModel& m, int64_t pid, int64_t graph_id) {
  QString out = QString::number(graph_id);
  const store::Graph* g = m.graph_row(pid, graph_id);
  if (!g) return out;
  out += QString(" · ") + graph_kind_words(g->kind);
  if (g->source_graph_id) {
    out += QString(g->kind == store::GraphKind::Clone ? ", cloned from graph %1" : ", instantiated from graph %1")
               .arg(g->source_graph_id);
    if (const store::Graph* src = m.graph_row(pid, g->source_graph_id)) out += QString(" (") + graph_kind_words(src->kind) + ")";
  }
  return out;
}

QString stack_list(const TimelineModel& m, int64_t stack) {
  QString out = "<ol>";
  for (uint32_t f : m.stack_frames(stack)) out += "<li><code>" + h(m.frame_name(f)) + "</code></li>";
  return out + "</ol>";
}

const char* kWholeReplay =
    "not recorded: this recording holds one interval a replay (gpu.graph_records = graph), so there is nothing to "
    "open";

// A replayed kernel, copy or memset: its graph, its node and the stack that captured (or created) that node.
QString graph_side(const TimelineModel& m, EventRef e, int64_t pid, int64_t graph_id, int64_t node_id) {
  QString out = "<h4>CUDA graph</h4><table>";
  out += row("graph", graph_line(m, pid, graph_id));
  const auto replay = m.replay_of(e);
  if (replay) {
    const GraphReplay& g = m.replays()[*replay];
    out += row("replay", QString("at %1, %2 rows, launch correlation %3")
                             .arg(dur(double(g.start - m.begin())))
                             .arg(g.count)
                             .arg(g.correlation));
    if (g.whole) {
      out += row("inside", kWholeReplay);
      return out + "</table>";
    }
  }
  const GraphNodeOrigin o = m.graph_node_origin(pid, node_id);
  if (!node_id) {
    out += row("node", "not recorded");
    return out + "</table>";
  }
  if (!o.node) {
    out += row("node", QString("%1 (no graph_nodes row: the recording did not see the node created)").arg(node_id));
    return out + "</table>";
  }
  QString node = QString("%1 · %2 node").arg(node_id).arg(store::to_string(o.node->kind));
  if (o.captured != o.node)
    node += QString(", cloned from node %1 of graph %2").arg(o.captured->node_id).arg(o.captured->graph_id);
  out += row("node", node);
  out += "</table>";
  const bool captured = o.captured_graph && o.captured_graph->kind == store::GraphKind::Capture;
  out += QString("<h4>%1</h4>").arg(captured ? "Captured at" : "Node created at");
  out += o.captured->stack ? stack_list(m, o.captured->stack) : QString("<p>no stack recorded for the node</p>");
  return out;
}

// A replay block: its graph, what ran inside it (or that nothing inside was recorded), where the graph came from.
QString replay_side(const TimelineModel& m, uint32_t r) {
  const GraphReplay& g = m.replays()[r];
  QString out;
  out += row("device / stream", QString("%1 / %2").arg(m.shown_device(g.device)).arg(g.stream));
  out += row("graph", graph_line(m, g.pid, g.graph_id));
  out += row("correlation", QString::number(g.correlation));
  if (g.whole) {
    out += row("inside", kWholeReplay);
  } else {
    const auto rows = m.replay_records(r);
    int kernels = 0, copies = 0, memsets = 0;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (EventRef e : rows) {
      kernels += e.kind == EventKind::Kernel;
      copies += e.kind == EventKind::Memcpy;
      memsets += e.kind == EventKind::Memset;
      busy.emplace_back(m.start_of(e), m.end_of(e));
    }
    std::sort(busy.begin(), busy.end());
    int64_t covered = 0, cs = 0, ce = INT64_MIN;
    for (const auto& [a, b] : busy) {
      if (a > ce) {
        if (ce > cs) covered += ce - cs;
        cs = a, ce = b;
      } else {
        ce = std::max(ce, b);
      }
    }
    if (ce > cs) covered += ce - cs;
    out += row("inside", QString("%1 kernels, %2 copies, %3 memsets").arg(kernels).arg(copies).arg(memsets));
    if (g.end > g.start)
      out += row("GPU busy", dur(double(covered)) + QString(" (%1 % of the replay)").arg(100.0 * double(covered) / double(g.end - g.start), 0, 'f', 1));
    out += row("open", "double-click the block, or click ▸ beside the stream, to see them under it");
    out += "</table><h4>Ran</h4><ol>";
    constexpr size_t kShown = 32;
    for (size_t i = 0; i < rows.size() && i < kShown; ++i) {
      const store::Trace& t = m.trace();
      const EventRef e = rows[i];
      const int64_t node = e.kind == EventKind::Kernel   ? m.kernel(e.row).graph_node_id
                           : e.kind == EventKind::Memcpy ? t.memcpys[e.row].graph_node_id
                                                         : t.memsets[e.row].graph_node_id;
      out += "<li>" + h(m.name_of(e)) + QString(" · node %1 · %2</li>").arg(node).arg(dur(double(m.end_of(e) - m.start_of(e))));
    }
    if (rows.size() > kShown) out += QString("<li>… %1 more</li>").arg(rows.size() - kShown);
    out += "</ol><table>";
  }
  // Where the graph was captured or built: its own stack, else the graph it was instantiated from.
  const store::Graph* gr = m.graph_row(g.pid, g.graph_id);
  for (int guard = 0; gr && !gr->stack && gr->source_graph_id && guard < 8; ++guard) gr = m.graph_row(g.pid, gr->source_graph_id);
  if (gr && gr->stack)
    out += QString("</table><h4>Graph %1 %2 at</h4>")
               .arg(gr->graph_id)
               .arg(gr->kind == store::GraphKind::Capture ? "captured" : "created") +
           stack_list(m, gr->stack) + "<table>";
  return out;
}

}  // namespace

namespace {

// The interpreter's own machinery between Python frames (libpython's evaluator, vectorcall): folded in a
// sample's stack, where they are most of its 72 frames and the Python ones the 13th and the 53rd.
bool interpreter_frame(const store::Trace& t, const store::Frame& f) {
  if (f.kind == store::FrameKind::Python) return false;
  const std::string& module = t.str(f.module);
  const std::string_view base = std::string_view(module).substr(module.rfind('/') + 1);
  return base.rfind("libpython", 0) == 0 || base.rfind("python3", 0) == 0 || base.rfind("python", 0) == 0;
}

QString sample_when(const store::Sample& smp) {
  return smp.on_cpu ? QString("on CPU")
                    : QString("off CPU (blocked or waiting: a <code>--wall</code> sample)");
}

}  // namespace

QString sample_details_html(const TimelineModel& m, uint32_t sample_row) {
  const store::Trace& t = m.trace();
  const store::Sample& smp = t.samples.at(sample_row);
  QString out = "<h3>CPU sample</h3><table>";
  out += row("at", dur(double(smp.time - m.begin())));
  out += row("thread", h(m.thread_label(smp.pid, smp.tid)));
  out += row("state", sample_when(smp));
  if (smp.periods > 1)
    out += row("periods", QString::number(smp.periods) + " (timer expiries merged into one signal)");
  out += "</table>";
  const auto frames = m.stack_frames(smp.stack);
  if (frames.empty()) return out + "<p>No stack was recorded for this sample.</p>";
  QString python;
  for (uint32_t f : frames)
    if (t.frames[f].kind == store::FrameKind::Python)
      python += "<li><code>" + h(m.frame_name(f)) + "</code></li>";
  if (!python.isEmpty()) out += "<h4>Python stack (innermost first)</h4><ol>" + python + "</ol>";
  out += QString("<h4>Stack (innermost first, %1 frames)</h4><ol>").arg(frames.size());
  // Interpreter frames folded only between two Python frames: above the outermost one they are the program's
  // start-up, below the innermost the native call it made.
  size_t first_python = frames.size(), last_python = frames.size();
  for (size_t i = 0; i < frames.size(); ++i)
    if (t.frames[frames[i]].kind == store::FrameKind::Python) {
      if (first_python == frames.size()) first_python = i;
      last_python = i;
    }
  for (size_t i = 0; i < frames.size();) {
    const store::Frame& f = t.frames[frames[i]];
    if (i > first_python && i < last_python && interpreter_frame(t, f)) {
      size_t j = i;
      while (j < last_python && interpreter_frame(t, t.frames[frames[j]])) ++j;
      out += QString("<li><i>… %1 interpreter frame%2</i></li>").arg(j - i).arg(j - i == 1 ? "" : "s");
      i = j;
      continue;
    }
    const QString name = h(m.frame_name(frames[i]));
    out += f.kind == store::FrameKind::Python ? "<li><b><code>" + name + "</code></b></li>"
                                              : "<li><code>" + name + "</code></li>";
    ++i;
  }
  return out + "</ol>";
}

QString sample_tooltip(const TimelineModel& m, uint32_t sample_row) {
  const store::Trace& t = m.trace();
  const store::Sample& smp = t.samples.at(sample_row);
  QString tip =
      QString("CPU sample at %1, %2 · click for its whole stack")
          .arg(dur(double(smp.time - m.begin())), smp.on_cpu ? QString("on CPU") : QString("off CPU"));
  const auto frames = m.stack_frames(smp.stack);
  int python = 0;
  for (uint32_t f : frames)
    if (t.frames[f].kind == store::FrameKind::Python && python++ < 8)
      tip += "\n  " + QString::fromStdString(m.frame_name(f));
  if (python > 8) tip += QString("\n  … %1 more Python frames").arg(python - 8);
  if (!frames.empty()) tip += python ? "\n native, innermost:" : "";
  const int most = python ? 3 : 12;
  int native = 0;
  for (size_t i = 0; i < frames.size() && native < most; ++i)
    if (t.frames[frames[i]].kind != store::FrameKind::Python) {
      tip += "\n  " + QString::fromStdString(m.frame_name(frames[i]));
      ++native;
    }
  return tip;
}

QString event_details_html(const TimelineModel& m, EventRef e) {
  const store::Trace& t = m.trace();
  const int64_t s = m.start_of(e), en = m.end_of(e);
  QString out = "<h3>" + h(m.name_of(e)) + "</h3><table>";
  if (const std::string full = m.full_name_of(e); full != m.name_of(e)) out += row("full name", "<code>" + h(full) + "</code>");
  out += row("kind", to_string(e.kind));
  // From the trace's start, as the ruler reads; the clock's raw value only in the tooltip-sized detail.
  out += row("start", dur(double(s - m.begin())) + " after the first event");
  out += row("duration", dur(double(en - s)));
  std::optional<uint32_t> api;
  QString graph;  // a replayed row: its graph, node and capture stack
  switch (e.kind) {
    case EventKind::Kernel: {
      // Built from a store, the kernel's row is read back from it: a store damaged since says so here.
      store::Kernel k;
      try {
        k = m.kernel(e.row);
      } catch (const store::StoreError& err) {
        out += row("details", h(err.what()));
        break;
      }
      out += row("device / stream", QString("%1 / %2").arg(m.shown_device(k.device)).arg(k.stream));
      out += row("grid", QString("%1 × %2 × %3").arg(k.grid_x).arg(k.grid_y).arg(k.grid_z));
      out += row("block", QString("%1 × %2 × %3").arg(k.block_x).arg(k.block_y).arg(k.block_z));
      if (k.registers) out += row("registers", QString::number(k.registers));
      if (k.shared_memory) out += row("shared memory", bytes(k.shared_memory));
      out += row("correlation", QString::number(k.correlation));
      api = m.launching_api_call(e);
      if (k.graph_id) graph = graph_side(m, e, k.pid, k.graph_id, k.graph_node_id);
      break;
    }
    case EventKind::Memcpy: {
      const auto& c = t.memcpys[e.row];
      out += row("device / stream", QString("%1 / %2").arg(m.shown_device(c.device)).arg(c.stream));
      out += row("bytes", bytes(c.bytes));
      if (en > s) out += row("bandwidth", QString::number(double(c.bytes) / double(en - s), 'f', 2) + " GB/s");
      out += row("memory", QString("%1 → %2").arg(store::to_string(c.src_kind), store::to_string(c.dst_kind)));
      out += row("correlation", QString::number(c.correlation));
      api = m.launching_api_call(e);
      if (c.graph_id) graph = graph_side(m, e, c.pid, c.graph_id, c.graph_node_id);
      break;
    }
    case EventKind::Memset: {
      const auto& c = t.memsets[e.row];
      out += row("device / stream", QString("%1 / %2").arg(m.shown_device(c.device)).arg(c.stream));
      out += row("bytes", bytes(c.bytes));
      out += row("correlation", QString::number(c.correlation));
      api = m.launching_api_call(e);
      if (c.graph_id) graph = graph_side(m, e, c.pid, c.graph_id, c.graph_node_id);
      break;
    }
    case EventKind::GraphReplay:
      out += replay_side(m, e.row);
      api = m.launching_api_call(e);
      break;
    case EventKind::ApiCall: {
      store::ApiCall a;
      try {
        a = m.api_call(e.row);  // built from a store: read back from it
      } catch (const store::StoreError& err) {
        out += row("details", h(err.what()));
        break;
      }
      out += row("thread", QString("%1 / %2").arg(m.shown_pid(a.pid)).arg(a.tid));
      out += row("correlation", QString::number(a.correlation));
      if (a.return_code) out += row("return code", QString::number(a.return_code));
      auto launched = m.launched_by(e.row);
      for (EventRef g : launched)
        out += row("launched", h(m.name_of(g)) + " at " + dur(double(m.start_of(g) - m.begin())) + QString(" (+%1 after the call)").arg(dur(double(m.start_of(g) - a.start))));
      break;
    }
    case EventKind::Range: {
      const auto& r = t.ranges[e.row];
      out += row("source", store::to_string(r.source));
      if (!t.str(r.domain).empty()) out += row("domain", h(t.str(r.domain)));
      out += row("thread", QString("%1 / %2").arg(m.shown_pid(r.pid)).arg(r.tid));
      if (r.correlation) out += row("correlation", QString::number(r.correlation));
      break;
    }
    case EventKind::Sync: {
      const auto& y = t.syncs[e.row];
      out += row("type", store::to_string(y.type));
      out += row("thread", QString("%1 / %2").arg(m.shown_pid(y.pid)).arg(y.tid));
      if (y.stream >= 0) out += row("stream", QString::number(y.stream));
      break;
    }
    case EventKind::DataWait: {
      const auto& w = t.data_waits[e.row];
      out += row("recorded by", h(m.wait_sources(e.row)));
      out += row("thread", QString("%1 / %2").arg(m.shown_pid(w.pid)).arg(w.tid));
      break;
    }
    case EventKind::Step: {
      const StepInfo& st = m.steps()[e.row];
      out += row("bound", st.bound.empty() ? QString("not analyzed") : h(st.bound));
      if (m.analysis()) {
        // The rows the slow steps were judged on (the GPU's time where the host runs ahead).
        const auto& rows = analyzer::step_rows(*m.analysis());
        for (const auto& b : rows)
          if (b.index == st.index && b.dur_ns > 0) {
            auto pct = [&](int64_t v) { return dur(double(v)) + QString(" (%1 %)").arg(100.0 * v / b.dur_ns, 0, 'f', 1); };
            const auto& o = m.analysis()->step_outliers;
            const bool has_gpu = m.analysis()->summary.has_gpu;
            for (const auto& c : analyzer::step_categories()) {
              // Without GPU activity only the wait for input and the own work, in the host's words.
              const std::string_view key = c.key;
              if (!has_gpu && key != "data_wait" && key != "host_idle") continue;
              QString v = pct(b.*(c.field));
              if (o.median_ns > 0) {  // the median step's figure beside it
                std::vector<int64_t> all;
                for (const auto& x : rows) all.push_back(x.*(c.field));
                v += " · median " + dur(double(analyzer::median_of_steps(std::move(all))));
              }
              out += row(analyzer::step_category_label(c, has_gpu), v);
            }
            if (has_gpu) out += row("kernels", QString::number(b.kernels));  // "kernels 0" on a CPU run
            if (o.median_ns > 0) {
              out += row(o.gpu_time ? "vs median step (GPU's time)" : "vs median step",
                         QString("%1%2 (median %3; slow above +%4)")
                                               .arg(b.dur_ns >= o.median_ns ? "+" : "−")
                                               .arg(dur(double(std::llabs(b.dur_ns - o.median_ns))))
                                               .arg(dur(double(o.median_ns)))
                                               .arg(dur(double(o.threshold_ns))));
              for (const auto& slow : o.slow)
                if (slow.index == b.index) out += row("<b>slow</b>", h(slow.explanation));
            }
          }
      }
      break;
    }
    case EventKind::Finding: out += "</table>" + finding_details_html(m, e.row) + "<table>"; break;
    case EventKind::PathSegment: {
      const auto& sg = m.analysis()->critical_path.path[e.row];
      out += row("on the critical path", h(analyzer::to_string(sg.kind)));
      out += row("what", h(std::string(sg.what)));
      out += row("step", QString::number(sg.step));
      break;
    }
    case EventKind::RankPath: {
      // Which rank the job waited on, and for what: its own work up to its arrival, or the transfer after it.
      const CrossRank& cr = *m.cross_rank();
      const RankPathSegment& sg = cr.path[e.row];
      const auto& a = *std::find_if(cr.analysis->steps.begin(), cr.analysis->steps.end(),
                                    [&](const analyzer::AlignedStep& x) { return x.index == sg.step; });
      out += row("rank", h(m.rank_name(sg.rank)) + (int(sg.rank) == cr.straggler ? " (the straggler)" : ""));
      out += row("part", sg.transfer ? "transfer: the collective's time after the last rank arrived"
                                     : "own work: from the previous collective's completion (or the rank's step "
                                       "start) to its arrival at the next collective, the last to arrive");
      out += row("length", dur(double(sg.end - sg.start)));
      const bool tail = sg.round + 1 == a.path_rounds.size();
      out += row("round", QString("%1 of %2%3").arg(sg.round + 1).arg(a.path_rounds.size()).arg(tail ? " (the longest tail after the last collective)" : ""));
      out += row("step", QString("%1 (the job's critical path: %2)").arg(sg.step).arg(dur(double(a.path_ns))));
      const analyzer::RankStep* own = analyzer::find_step(cr.analysis->ranks[sg.rank], sg.step);
      if (own) out += row("into the rank's step", dur(double(sg.start - cr.shift[sg.rank] - own->start_ns)));
      break;
    }
    case EventKind::RankWait: {
      const CrossRank& cr = *m.cross_rank();
      const DelayedCollective& d = cr.delayed[e.row];
      out += row("rank", h(m.rank_name(d.rank)));
      out += row("collective", h(d.call->name) + " (" + analyzer::to_string(d.call->kind) + ")");
      out += row("waited for", h(m.rank_name(uint32_t(cr.straggler))) + ", the last to arrive: " + dur(double(d.wait_ns)));
      out += row("step", QString::number(d.step));
      break;
    }
  }
  out += "</table>" + graph;
  if (api) out += host_side(m, *api);
  return out;
}

// The lines of `analyze DIR`'s report that say what the job gains (its what-if lines), with its critical path
// line first when asked; "" without a cross-rank analysis.
static QString job_lines_html(const TimelineModel& m, bool with_path) {
  QString lines;
  if (const CrossRank* cr = m.cross_rank())
    for (const QString& l : QString::fromStdString(cr->report).split('\n'))
      if ((with_path && l.startsWith("The job's critical path")) || l.startsWith("What-if:") ||
          l.contains("more rank-level cure"))
        lines += "<p>" + l.toHtmlEscaped() + "</p>";
  return lines;
}

QString finding_details_html(const TimelineModel& m, size_t i) {
  const FindingInfo& f = m.findings().at(i);
  QString out = "<h3>" + h(f.rule) + " <small>(" + h(f.severity) + ")</small></h3>";
  out += "<p>" + h(f.summary) + "</p>";
  // Code as written, never wrapped: a wrapped line made "// not" end one line and "cudaDeviceSynchronize()" stand
  // alone as a statement, the call the advice says to remove. The pane scrolls sideways.
  if (!f.suggestion.empty()) out += "<p><b>Change:</b></p><pre>" + h(f.suggestion) + "</pre>";
  out += "<table>";
  out += row("steps", QString::number(f.steps.size()));
  out += row("est. saving", dur(f.est_savings_us_per_step * 1000.0) + " per affected step");
  // What `analyze` prints beside the estimate: the steps replayed with the cure (the nearer figure when the
  // two differ, docs/critical-path.md).
  if (!f.replayed_cure.empty())
    out += row("replayed", "saves " + dur(std::max(0.0, f.replayed_saving_us) * 1000.0) + " a step " +
                               h(analyzer::cure_phrase(f.replayed_cure)) + " (step " +
                               dur((f.replayed_step_us + f.replayed_saving_us) * 1000.0) + " → " +
                               dur(f.replayed_step_us * 1000.0) + ")");
  out += "</table>";
  if (!f.replay_note.empty()) out += "<p><i>" + h(f.replay_note) + "</i></p>";
  if (const analyzer::Analysis* a = m.analysis(); a && !f.cross_rank)
    if (std::string note = analyzer::warmup_share_note(*a); !note.empty())
      out += "<p><i>" + h(note) + "</i></p>";
  // One rank's finding in a folder of ranks: its saving is that rank's step; the job gains what the job's
  // what-if says (a rank's 8.39 ms a step moved the job's step by 0.10 ms).
  if (m.cross_rank() && !f.cross_rank) {
    const QString lines = job_lines_html(m, false);
    out += "<p><i>The saving above is this rank's own step. What the job gains:</i></p>" +
           (lines.isEmpty() ? QString("<p>(no what-if for the job)</p>") : lines);
  }
  // Labelled rows and small tables; a kernel or call name is a link that highlights its occurrences.
  if (!f.evidence_json.empty() && f.evidence_json != "{}")
    out += "<p><b>Evidence</b></p>" + QString::fromStdString(analyzer::render_evidence_html(f.evidence_json, kHighlightScheme));
  if (f.cross_rank) out += job_html(m);
  return out;
}

QString job_html(const TimelineModel& m) {
  const CrossRank* cr = m.cross_rank();
  if (!cr) return {};
  // What `analyze DIR` says of the job: its critical path and what-if lines first, then the whole report.
  return "<h3>The job</h3>" + job_lines_html(m, true) + "<p><b>stepscope analyze DIR</b></p><pre>" +
         QString::fromStdString(cr->report).toHtmlEscaped() + "</pre>";
}

QString run_notes_html(const TimelineModel& m) {
  if (m.cross_rank() && m.findings().empty()) return job_html(m);
  if (m.event_count() == 0)
    return "<p>This file holds no events: nothing to draw or analyze (a program that ended before its first "
           "sample, or a recording window that closed at once).</p>";
  QString out;
  for (const auto& n : m.run_notes()) out += "<p>" + h(n) + "</p>";
  if (m.analysis() && m.findings().empty()) {
    out += "<p>No findings.</p>";
    // Slow steps are no finding but are what a user looks for next: said, not left to the Steps tab.
    const auto& slow = m.analysis()->step_outliers.slow;
    const size_t steady =
        size_t(std::count_if(slow.begin(), slow.end(), [](const auto& s) { return !s.startup; }));
    if (steady > 0)
      out += QString(
                 "<p>%1 step%2 slower than the median by more than the run's noise (▲ in Steps, each with "
                 "what grew).</p>")
                 .arg(steady)
                 .arg(steady == 1 ? " was" : "s were");
  }
  return out;
}

QString range_details_html(const TimelineModel& m, const RangeBreakdown& b, const std::vector<KernelStat>& kernels,
                           const CallTree& bottom_up) {
  constexpr size_t kTop = 5;
  const double span = double(std::max<int64_t>(1, b.t1 - b.t0));
  auto pct = [&](int64_t ns) { return dur(double(ns)) + QString(" (%1 %)").arg(100.0 * double(ns) / span, 0, 'f', 1); };
  QString out = "<h3>Selection " + dur(span) + "</h3><table>";
  out += row("from", dur(double(b.t0 - m.begin())) + " to " + dur(double(b.t1 - m.begin())));
  if (!m.analysis() || m.analysis()->summary.has_gpu) out += row("GPU busy", pct(b.gpu_busy_ns));
  for (const auto& [label, ns] : b.idle) out += row(QString::fromStdString(label), pct(ns));
  if (!b.idle.empty() && b.in_steps_ns < b.t1 - b.t0)
    out += row("outside steps", dur(double(b.t1 - b.t0 - b.in_steps_ns)) + " (not split)");
  out += "</table>";
  if (!kernels.empty()) {
    out += "<p><b>Top kernels</b></p><table border=\"1\" cellspacing=\"0\" cellpadding=\"2\"><tr><th>kernel</th><th>count</th><th>total</th></tr>";
    for (size_t i = 0; i < kernels.size() && i < kTop; ++i)
      out += QString("<tr><td>%1</td><td align=\"right\">%2</td><td align=\"right\">%3</td></tr>")
                 .arg(h(kernels[i].name))
                 .arg(kernels[i].count)
                 .arg(dur(double(kernels[i].total_ns)));
    out += "</table>";
  }
  const auto& root = bottom_up.nodes().front();
  if (!root.children.empty() && bottom_up.weighted_by_time()) {
    out +=
        "<p><b>Top host functions</b> <small>(time in host ranges)</small></p><table border=\"1\" "
        "cellspacing=\"0\" cellpadding=\"2\">";
    for (size_t i = 0; i < root.children.size() && i < kTop; ++i) {
      const auto& n = bottom_up.nodes()[root.children[i]];
      out +=
          QString("<tr><td>%1</td><td align=\"right\">%2</td></tr>").arg(h(bottom_up.name(n)), dur(n.total));
    }
    out += "</table>";
  } else if (!root.children.empty()) {
    // As `analyze` counts a thread's functions: a sample at its innermost Python function where it has one (a
    // Python program's table listed numpy's and libpython's native leaves with bare counts).
    const auto functions = bottom_up.innermost_functions();
    const double samples = std::max(1.0, root.total);
    out +=
        "<p><b>Top host functions</b> <small>(CPU samples: each at its innermost Python function, else its "
        "native function)</small></p><table border=\"1\" cellspacing=\"0\" cellpadding=\"2\"><tr><th>"
        "function</th><th>samples</th><th>share</th></tr>";
    for (size_t i = 0; i < functions.size() && i < kTop; ++i) {
      const auto& n = bottom_up.nodes()[size_t(functions[i].node)];
      out +=
          QString("<tr><td title=\"%1\">%2</td><td align=\"right\">%3</td><td align=\"right\">%4 %</td></tr>")
              .arg(h(bottom_up.full_name(n)), h(bottom_up.name(n)))
              .arg(functions[i].weight, 0, 'f', 0)
              .arg(100.0 * functions[i].weight / samples, 0, 'f', 1);
    }
    out += "</table>";
  }
  return out;
}

}  // namespace stepscope::gui
