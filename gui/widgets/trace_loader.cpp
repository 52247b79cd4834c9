#include "trace_loader.h"

#include <QElapsedTimer>
#include <QFileInfo>
#include <QMetaObject>
#include <QtConcurrent/QtConcurrent>

#include "stepscope/analyzer/analysis.h"
#include "stepscope/analyzer/load.h"
#include "stepscope/analyzer/multi_rank.h"

namespace stepscope::gui {

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
    auto trace = std::make_shared<store::Trace>(dir      ? analyzer::merge_ranks_for_timeline(files)
                                                : reader ? analyzer::load_store(*reader)
                                                         : analyzer::load_trace(path.toStdString(), options));
    r.load_s = timer.nsecsElapsed() / 1e9;
    timer.restart();
    // One job's ranks: the cross-rank analysis `analyze DIR` prints (straggler, exposed communication, the job's
    // critical path, what-if), shown first.
    if (dir && trace->meta.count("ranks")) {
      say(650, QObject::tr("Analyzing the ranks together"));
      auto ranks = std::make_shared<analyzer::MultiRankAnalysis>(analyzer::analyze_ranks(files));
      if (ranks->not_one_job.empty()) r.ranks = std::move(ranks);
      r.ranks_s = timer.nsecsElapsed() / 1e9;
      timer.restart();
    }
    say(700, QObject::tr("Analyzing"));
    analyzer::AnalyzeOptions aopt;
    aopt.critical_path_segments = true;  // the "Critical path" track
    auto analysis = std::make_shared<analyzer::Analysis>(analyzer::analyze(*trace, aopt));
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
