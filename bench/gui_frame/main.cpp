// bench_gui_frame [--kernels N] [--ranges N] [--launches yes] [--open-events N] [--from store|gui|trace]:
// renders the real TimelineView offscreen for a synthetic trace (N kernels on 8 streams + ranges on 4
// threads) at full zoom-out, mid and deep zoom and prints ms per frame, the open time of a store with
// --open-events events, and memory, beside the goals. The big trace is written to a store and the model built
// from it (TimelineModel::build_from_store), with --from gui opened as the window opens a store (load_trace,
// the analysis, the model from the store with that trace), or with
// --from trace held as rows in memory (as an import is).
#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QPainter>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "stepscope/analyzer/load.h"
#include "stepscope/gui/timeline_layout.h"
#include "stepscope/gui/timeline_model.h"
#include "stepscope/store/store.h"
#include "timeline_view.h"
#include "trace_loader.h"

using namespace stepscope;

namespace {

long status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  return 0;
}

// Kernels of 2–40 µs with 0.5–20 µs gaps, round-robin over 8 streams; ranges nested 3 deep on 4 threads.
// `intern(text)` gives a string id, `kernel(k)` and `range(r)` take the rows: into a Trace or a store.
// With `launches`, each kernel has its cudaLaunchKernel call (2 µs, 9 µs before it) on a launch thread per
// stream.
template <class Intern, class AddKernel, class AddCall, class AddRange>
void synthetic(int64_t kernels, int64_t ranges, bool launches, Intern intern, AddKernel kernel, AddCall call,
               AddRange range) {
  std::mt19937_64 rng(42);
  std::vector<store::StringId> names;
  for (int i = 0; i < 200; ++i) names.push_back(intern("kernel_" + std::to_string(i) + "_sm80_xmma_gemm"));
  const store::StringId launch = launches ? intern("cudaLaunchKernel") : 0;
  std::vector<int64_t> cursor(8, 0);
  for (int64_t i = 0; i < kernels; ++i) {
    const int s = int(i % 8);
    store::Kernel k;
    k.start = cursor[s] + 500 + int64_t(rng() % 19500);
    k.end = k.start + 2000 + int64_t(rng() % 38000);
    cursor[s] = k.end;
    k.stream = 7 + s;
    k.correlation = i + 1;
    k.name = names[rng() % names.size()];
    kernel(k);
    if (launches) {
      store::ApiCall a;
      a.start = k.start - 9000;
      a.end = a.start + 2000;
      a.pid = 1;
      a.tid = 100 + s;
      a.name = launch;
      a.correlation = k.correlation;
      call(a);
    }
  }
  const int64_t span = *std::max_element(cursor.begin(), cursor.end());
  std::vector<store::StringId> rnames;
  for (int i = 0; i < 50; ++i) rnames.push_back(intern("aten::op_" + std::to_string(i)));
  const int64_t per_thread = ranges / 4 / 3;  // triples: outer, middle, inner
  for (int th = 0; th < 4; ++th) {
    const int64_t step = std::max<int64_t>(1, span / std::max<int64_t>(1, per_thread));
    for (int64_t i = 0; i < per_thread; ++i) {
      const int64_t s = i * step;
      for (int d = 0; d < 3; ++d) {
        store::Range r;
        r.start = s + d * step / 10;
        r.end = s + step - d * step / 10 - 1;
        r.pid = 1;
        r.tid = 10 + th;
        r.depth = d;
        r.name = rnames[rng() % rnames.size()];
        r.source = store::RangeSource::Op;
        range(r);
      }
    }
  }
}

std::shared_ptr<store::Trace> synthetic_trace(int64_t kernels, int64_t ranges, bool launches) {
  auto t = std::make_shared<store::Trace>();
  t->kernels.reserve(size_t(kernels));
  if (launches) t->api_calls.reserve(size_t(kernels));
  t->ranges.reserve(size_t(ranges));
  synthetic(
      kernels, ranges, launches, [&](const std::string& s) { return t->intern(s); },
      [&](const store::Kernel& k) { t->kernels.push_back(k); },
      [&](const store::ApiCall& a) { t->api_calls.push_back(a); },
      [&](const store::Range& r) { t->ranges.push_back(r); });
  return t;
}

// The same rows written to a store one at a time, never all in memory.
void synthetic_store(int64_t kernels, int64_t ranges, bool launches, const std::string& path) {
  store::remove_store_files(path);
  store::StoreWriter w(path);
  synthetic(
      kernels, ranges, launches, [&](const std::string& s) { return w.intern(s); },
      [&](const store::Kernel& k) { w.add(k); }, [&](const store::ApiCall& a) { w.add(a); },
      [&](const store::Range& r) { w.add(r); });
  w.close();
}

struct FrameStats {
  double mean_ms = 0, max_ms = 0;
  size_t items = 0, visited = 0, busy_columns = 0;
};

// Renders `frames` frames, panning one pixel per frame so each builds a new draw list.
FrameStats render(gui::TimelineView& view, QImage& img, double t0, double t1, int frames) {
  FrameStats st;
  view.zoom_to(t0, t1, 0);
  double total = 0;
  {  // warm-up frame (font caches), not counted
    QPainter p(&img);
    view.render(&p);
  }
  for (int f = 0; f < frames; ++f) {
    const double d = (t1 - t0) / img.width() * f;
    view.zoom_to(t0 + d, t1 + d, 0);
    QElapsedTimer timer;
    timer.start();
    {
      QPainter p(&img);
      view.render(&p);
    }
    const double ms = timer.nsecsElapsed() / 1e6;
    total += ms;
    st.max_ms = std::max(st.max_ms, ms);
  }
  const gui::DrawList& dl = view.rebuild_now();
  st.items = dl.items.size();
  st.visited = dl.events_visited;
  st.busy_columns = dl.busy_columns;
  st.mean_ms = total / frames;
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t kernels = 10'000'000, ranges = 1'000'000, open_events = 1'000'000;
  bool from_store = true, as_gui = false, launches = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--kernels")) kernels = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--ranges")) ranges = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--open-events")) open_events = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--launches"))
      launches = !std::strcmp(argv[i + 1], "yes");
    else if (!std::strcmp(argv[i], "--from")) {
      from_store = std::strcmp(argv[i + 1], "trace") != 0;
      as_gui = !std::strcmp(argv[i + 1], "gui");
    }
  }
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);

  // Open time: a store file of `open_events` events as the GUI opens one: load_trace, then the timeline model
  // built from the store with that trace (its kernels moved into columns).
  double open_load_s = 0, open_build_s = 0;
  const std::string tmp = std::filesystem::temp_directory_path().string();
  {
    const std::string path = tmp + "/bench_gui_frame_open.stepscope";
    synthetic_store(open_events * 9 / 10, open_events / 10, false, path);
    QElapsedTimer timer;
    timer.start();
    auto trace = std::make_shared<store::Trace>(analyzer::load_trace(path));
    open_load_s = timer.nsecsElapsed() / 1e9;
    timer.restart();
    auto m = gui::TimelineModel::build_from_store(std::make_shared<store::StoreReader>(path), trace);
    open_build_s = timer.nsecsElapsed() / 1e9;
    store::remove_store_files(path);
  }

  // The big trace: written to a store and built from it (kernels streamed into columns, never all rows in
  // memory), or with --from trace held as rows (store::Trace) as imports and merged ranks are.
  const std::string big = tmp + "/bench_gui_frame_big.stepscope";
  const long rss0 = status_kb("VmRSS:");
  QElapsedTimer timer;
  timer.start();
  std::shared_ptr<store::Trace> trace;
  if (from_store)
    synthetic_store(kernels, ranges, launches, big);
  else
    trace = synthetic_trace(kernels, ranges, launches);
  const double gen_s = timer.nsecsElapsed() / 1e9;
  const long rss_trace = status_kb("VmRSS:");
  const double store_mb = from_store ? double(std::filesystem::file_size(big)) / 1048576.0 : 0;
  timer.restart();
  std::shared_ptr<const gui::TimelineModel> model;
  if (as_gui) {  // what the window does: load_trace, analyze, then the model from the store with that trace
    gui::LoadResult r = gui::load_timeline(QString::fromStdString(big));
    if (!r.error.isEmpty()) {
      std::fprintf(stderr, "bench_gui_frame: %s\n", qPrintable(r.error));
      return 2;
    }
    model = r.model;
    if (!r.not_analyzed.isEmpty()) std::printf("the window: %s\n", qPrintable(r.not_analyzed));
  } else {
    model = from_store ? gui::TimelineModel::build_from_store(std::make_shared<store::StoreReader>(big))
                       : gui::TimelineModel::build(trace);
  }
  const double build_s = timer.nsecsElapsed() / 1e9;
  trace.reset();  // the model keeps it
  const long rss_model = status_kb("VmRSS:");

  gui::TimelineView view;
  view.set_synchronous(true);
  view.resize(1600, 1000);
  view.setAttribute(Qt::WA_DontShowOnScreen);
  view.show();
  QApplication::processEvents();
  view.set_model(model);
  QImage img(view.size(), QImage::Format_ARGB32_Premultiplied);
  const double b = double(model->begin()), e = double(model->end()), span = e - b;
  const double mid = b + span / 2;
  struct Level {
    const char* name;
    double t0, t1;
  } levels[] = {{"full zoom-out", b, e},
                {"mid (1/1000 of span)", mid, mid + span / 1000},
                {"deep (100 µs)", mid, mid + 100'000}};
  std::printf(
      "bench_gui_frame: %lld kernels on 8 streams%s + %lld ranges on 4 threads, %zu events, %zu tracks, "
      "view 1600x1000 (%d px of time), built from %s\n",
      (long long)kernels, launches ? " with their launch calls" : "", (long long)ranges, model->event_count(),
      model->tracks().size(), view.viewport_range().width,
      as_gui       ? "a store as the window opens one (load_trace, analyze, columns)"
      : from_store ? "a store (kernels and API calls as columns)"
                   : "a trace in memory (rows)");
  std::printf("%-22s %10s %10s %10s %12s %12s %8s\n", "zoom", "ms/frame", "max ms", "blocks", "lane steps", "busy columns",
              "goal");
  for (const Level& l : levels) {
    FrameStats st = render(view, img, l.t0, l.t1, 20);
    std::printf("%-22s %10.2f %10.2f %10zu %12zu %12zu %8s\n", l.name, st.mean_ms, st.max_ms, st.items, st.visited,
                st.busy_columns, "≤ 16");
  }
  std::printf("\n%-44s %10s %10s\n", "", "measured", "goal");
  std::printf("%-44s %9.2f s %10s\n", "open 1M-event store (load_trace + model)", open_load_s + open_build_s, "≤ 2 s");
  std::printf("%-44s %9.2f s\n", "  of which load_trace", open_load_s);
  std::printf("%-44s %9.2f s\n", "  of which timeline model build", open_build_s);
  std::printf("%-44s %9.2f s\n",
              as_gui       ? "load_timeline (load, analyze, model)"
              : from_store ? "timeline model build from the store"
                           : "timeline model build, big trace",
              build_s);
  std::printf("%-44s %9.2f s\n", from_store ? "(synthetic store written)" : "(synthetic trace generation)",
              gen_s);
  if (from_store) std::printf("%-44s %8.0f MB\n", "  store file", store_mb);
  std::printf("%-44s %8.0f MB\n", "process RSS before the big trace (Qt, 1M test)", rss0 / 1024.0);
  if (!from_store) std::printf("%-44s %8.0f MB\n", "trace rows in memory", (rss_trace - rss0) / 1024.0);
  std::printf("%-44s %8.0f MB\n", from_store ? "timeline model (all of it)" : "timeline model (lanes) on top",
              (rss_model - rss_trace) / 1024.0);
  std::printf("%-44s %8.0f MB\n", "  of which lane columns (counted)", model->lane_bytes() / 1048576.0);
  if (const gui::KernelColumns* c = model->kernel_columns())
    std::printf("%-44s %8.0f MB\n", "  of which kernel columns (counted)", c->bytes() / 1048576.0);
  if (const gui::ApiCallColumns* c = model->api_call_columns(); c && c->size())
    std::printf("%-44s %8.0f MB\n", "  of which API call columns (counted)", c->bytes() / 1048576.0);
  // Issue 53: 50M events in 4 GB; below that the goal set for 10M + 1M held as rows.
  const bool fifty = kernels * (launches ? 2 : 1) + ranges >= 50'000'000;
  std::printf("%-44s %8.0f MB %10s\n", "process peak RSS", status_kb("VmHWM:") / 1024.0,
              fifty ? "≤ 4096 MB" : "≤ 1536 MB");
  if (from_store) store::remove_store_files(big);
  return 0;
}
