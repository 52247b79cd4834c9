// Loads a trace on a worker thread: load_trace (any input stepscope reads), analyze, and the timeline
// model, reporting progress; the window stays responsive. A newer load supersedes an older one.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

struct LoadResult {
  std::shared_ptr<const TimelineModel> model;
  QString error;  // "FILE: reason" when loading failed
  QString path;
  // A directory of one job's ranks: the cross-rank analysis (analyzer::analyze_ranks), also in model->cross_rank().
  std::shared_ptr<const analyzer::MultiRankAnalysis> ranks;
  double load_s = 0, ranks_s = 0, analyze_s = 0, build_s = 0;
};

// The whole pipeline, synchronously (the worker body; tests and the benchmark call it directly).
// `progress(permille, stage)` may be empty.
LoadResult load_timeline(const QString& path, const std::function<void(int, const QString&)>& progress = {});

class TraceLoader : public QObject {
  Q_OBJECT
 public:
  explicit TraceLoader(QObject* parent = nullptr);
  ~TraceLoader() override;
  void load(const QString& path);
  bool busy() const { return watcher_.isRunning(); }
  void wait();

 signals:
  void progress(int permille, QString stage);
  void loaded(stepscope::gui::LoadResult result);

 private:
  QFutureWatcher<LoadResult> watcher_;
  std::shared_ptr<std::atomic<int>> generation_ = std::make_shared<std::atomic<int>>(0);
  int started_generation_ = 0;
};

}  // namespace stepscope::gui

Q_DECLARE_METATYPE(stepscope::gui::LoadResult)
