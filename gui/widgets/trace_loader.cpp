#include "trace_loader.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QMetaObject>
#include <QtConcurrent/QtConcurrent>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::gui {

namespace {
// A number in a file (a cgroup's memory.max is "max" when unlimited); 0 when there is none.
uint64_t number_in(const std::string& file) {
  std::ifstream in(file);
  uint64_t v = 0;
  return in >> v ? v : 0;
}

QString size_text(uint64_t bytes) {
  if (bytes >= 1000'000'000) return QString::number(double(bytes) / 1e9, 'f', 2) + " GB";
  return QString::number((bytes + 999'999) / 1000'000) + " MB";
}
}  // namespace

uint64_t memory_available() {
  uint64_t available = 0;
  {
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("MemAvailable:", 0) == 0) {
        available = std::strtoull(line.c_str() + 13, nullptr, 10) * 1024;  // "MemAvailable:   123 kB"
        break;
      }
  }
  // cgroup v2: "0::/path" in /proc/self/cgroup; its limit and use under /sys/fs/cgroup/path.
  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    const std::string dir = "/sys/fs/cgroup" + line.substr(3);
    if (const uint64_t max = number_in(dir + "/memory.max")) {
      const uint64_t used = number_in(dir + "/memory.current");
      const uint64_t left = max > used ? max - used : 0;
      available = available ? std::min(available, left) : left;
    }
    break;
  }
  return available;
}

AnalysisBudget analysis_budget(const store::StoreReader& store) {
  AnalysisBudget b;
  b.kernels = store.kernel_count();
  b.api_calls = store.api_call_count();
  b.samples = store.sample_count();
  // A damaged store's counts may be anything: the sum saturates rather than wraps to a small need.
  const double need = double(b.kernels) * kAnalysisBytesPerKernel +
                      double(b.api_calls) * kAnalysisBytesPerApiCall +
                      double(b.samples) * kAnalysisBytesPerSample;
  b.need_bytes = need >= 1.8e19 ? UINT64_MAX : uint64_t(need);
  if (const char* v = std::getenv("STEPSCOPE_ANALYSIS_MEMORY_MB"); v && *v) {
    const std::string text(v);
    uint64_t mb = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mb);
    if (ec == std::errc::result_out_of_range ||
        (ec == std::errc() && end == text.data() + text.size() && mb > (uint64_t(1) << 40)))
      throw std::invalid_argument("STEPSCOPE_ANALYSIS_MEMORY_MB=" + text + ": more than 2^40 megabytes");
    if (ec != std::errc() || end != text.data() + text.size())
      throw std::invalid_argument(
          "STEPSCOPE_ANALYSIS_MEMORY_MB=" + text +
          ": not a whole number of megabytes (0: open stores without their analysis)");
    b.budget_bytes = mb << 20;
    b.set_by_environment = true;
  } else if (const uint64_t available = memory_available()) {
    b.budget_bytes = available / 2;
  } else {
    b.budget_bytes = UINT64_MAX;
  }
  return b;
}

QString not_analyzed_reason(const AnalysisBudget& b) {
  return QObject::tr(
             "not analysed: %1 kernels, %2 API calls and %3 samples need ~%4 with the analysis, over the "
             "%5 allowed (%6) — the timeline alone, with the steps and findings the store holds; "
             "`stepscope analyze --write-findings FILE` where there is memory stores the findings")
      .arg(b.kernels)
      .arg(b.api_calls)
      .arg(b.samples)
      .arg(size_text(b.need_bytes),
           b.set_by_environment && b.budget_bytes == 0 ? QObject::tr("none") : size_text(b.budget_bytes),
           b.set_by_environment
               ? QObject::tr("STEPSCOPE_ANALYSIS_MEMORY_MB")
               : QObject::tr("half the memory available; STEPSCOPE_ANALYSIS_MEMORY_MB sets it"));
}

QString not_analyzed_brief(const AnalysisBudget& b) {
  return QObject::tr("not analysed: ~%1 needed with the analysis, %2 allowed")
      .arg(size_text(b.need_bytes),
           b.set_by_environment && b.budget_bytes == 0 ? QObject::tr("none") : size_text(b.budget_bytes));
}

LoadResult load_timeline(const QString& path, const std::function<void(int, const QString&)>& progress) {
  LoadResult r;
  r.path = path;
  auto say = [&](int permille, const QString& stage) {
    if (progress) progress(permille, stage);
  };
  try {
    QElapsedTimer timer;
    timer.start();
    say(0, QObject::tr("Loading %1").arg(path));
    analyzer::LoadOptions options;
    options.progress = [&](uint64_t done, uint64_t total) {
      if (total) say(int(std::min<uint64_t>(700, done * 700 / total)), QObject::tr("Loading"));
    };
    // A directory: the ranks of one job, one group per rank, aligned at step starts (docs/multi-rank.md).
    const bool dir = QFileInfo(path).isDir();
    const std::vector<std::string> files =
        dir ? analyzer::expand_rank_inputs({path.toStdString()}) : std::vector<std::string>();
    // A plain store is read through the reader the timeline keeps (build_from_store, below): one open file,
    // so a store replaced under the same name while this loads is not mixed with the one loaded.
    std::shared_ptr<store::StoreReader> reader;
    if (!dir && store::sniff_file(path.toStdString()) == store::FileKind::Store)
      reader = std::make_shared<store::StoreReader>(path.toStdString());
    // A store whose rows and analysis would not fit: its timeline alone, its kernels and API calls read into
    // columns, never all as rows, and the reason said.
    if (reader) {
      AnalysisBudget budget;
      try {
        budget = analysis_budget(*reader);
      } catch (const std::invalid_argument& e) {  // the environment's, not the file's
        r.error = QString::fromStdString(e.what());
        return r;
      }
      if (!budget.fits()) {
        say(100, QObject::tr("Building timeline"));
        try {
          r.model = TimelineModel::build_from_store(reader);
        } catch (const store::StoreError&) {
          // Rows added since they were counted (a store still being written): counted and read once more, not
          // read whole as rows, which would not fit; a second change is said.
          r.model = TimelineModel::build_from_store(std::make_shared<store::StoreReader>(path.toStdString()));
        }
        r.build_s = timer.nsecsElapsed() / 1e9;
        r.not_analyzed = not_analyzed_reason(budget);
        r.over_budget = budget;
        say(1000, QObject::tr("Done"));
        return r;
      }
    }
    auto trace = std::make_shared<store::Trace>(dir      ? analyzer::merge_ranks_for_timeline(files)
                                                : reader ? analyzer::load_store(*reader)
                                                         : analyzer::load_trace(path.toStdString(), options));
    r.load_s = timer.nsecsElapsed() / 1e9;
    timer.restart();
    // One job's ranks: the cross-rank analysis `analyze DIR` prints (straggler, exposed communication, the job's
    // critical path, what-if), shown first.
    if (dir && trace->meta.count("ranks")) {
      say(650, QObject::tr("Analyzing the ranks together"));
      analyzer::MultiRankOptions ropt;
      ropt.keep_rank_findings = true;  // the ranks' own verdicts replace the merged trace's (below)
      auto ranks = std::make_shared<analyzer::MultiRankAnalysis>(analyzer::analyze_ranks(files, ropt));
      if (ranks->not_one_job.empty()) r.ranks = std::move(ranks);
      r.ranks_s = timer.nsecsElapsed() / 1e9;
      timer.restart();
    }
    say(700, QObject::tr("Analyzing"));
    analyzer::AnalyzeOptions aopt;
    aopt.critical_path_segments = true;  // the "Critical path" track
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace, aopt));
    // Analyzed as one program the ranks' GPUs read as one busy GPU: the steps' labels and the findings are the
    // ranks' own.
    if (r.ranks) analyzer::adopt_rank_verdicts(*analysis, *r.ranks, trace->meta);
    r.analyze_s = timer.nsecsElapsed() / 1e9;
    timer.restart();
    say(850, QObject::tr("Building timeline"));
    // A store keeps its kernels and API calls: the timeline holds them as columns and reads a row back when
    // it is clicked (~100 bytes a kernel and ~44 a call less). Imports, compressed stores and ranks keep
    // their rows, and so does a store still being written, whose rows grew while they were read (refused
    // before anything is moved).
    if (reader) {
      const size_t kernels = trace->kernels.size(), calls = trace->api_calls.size();
      try {
        r.model = TimelineModel::build_from_store(reader, trace, analysis);
      } catch (const store::StoreError&) {
        if (trace->kernels.size() != kernels || trace->api_calls.size() != calls)
          throw;  // moved: nothing to fall back on
      }
    }
    if (!r.model) r.model = TimelineModel::build(trace, analysis, r.ranks);
    r.build_s = timer.nsecsElapsed() / 1e9;
    say(1000, QObject::tr("Done"));
  } catch (const store::StoreError& e) {
    r.error = QString::fromStdString(e.what());
  } catch (const std::exception& e) {
    r.error = path + ": " + QString::fromStdString(e.what());
  }
  return r;
}

TraceLoader::TraceLoader(QObject* parent) : QObject(parent) {
  qRegisterMetaType<LoadResult>();
  connect(&watcher_, &QFutureWatcherBase::finished, this, [this] {
    LoadResult r = watcher_.result();
    if (started_generation_ == generation_->load()) emit loaded(r);
  });
}

TraceLoader::~TraceLoader() {
  *generation_ = -1;
  watcher_.waitForFinished();
}

void TraceLoader::wait() { watcher_.waitForFinished(); }

void TraceLoader::load(const QString& path) {
  // A load in flight finishes on its own; its result is dropped.
  // A load in flight runs to its end in the pool; its progress and result are dropped.
  started_generation_ = ++*generation_;
  const int gen = started_generation_;
  auto generation = generation_;
  TraceLoader* target = this;
  watcher_.setFuture(QtConcurrent::run([path, gen, generation, target]() {
    return load_timeline(path, [&](int permille, const QString& stage) {
      if (generation->load() != gen) return;
      QMetaObject::invokeMethod(target, [target, permille, stage] { emit target->progress(permille, stage); },
                                Qt::QueuedConnection);
    });
  }));
}

}  // namespace stepscope::gui
