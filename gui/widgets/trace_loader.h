// Loads a trace on a worker thread: load_trace (any input stepscope reads), analyze, and the timeline
// model, reporting progress; the window stays responsive. A newer load supersedes an older one.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <atomic>
#include <memory>
#include <optional>

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

// Whether the window analyses a store as it opens it. The analysis reads the store's rows (kernels, API
// calls, samples) and keeps its own state beside them: `need_bytes` is what the window measured per row at
// its peak (the constants below). It runs when that is within `budget_bytes`: STEPSCOPE_ANALYSIS_MEMORY_MB
// when set and not empty (0: never), else half of memory_available(), else no limit. Otherwise the timeline
// is read from the store without its kernels' and API calls' rows and shows the steps and findings the store
// holds. Throws std::invalid_argument for a variable that is not a whole number of megabytes up to 2^40.
struct AnalysisBudget {
  uint64_t kernels = 0, api_calls = 0, samples = 0;
  uint64_t need_bytes = 0, budget_bytes = 0;
  bool set_by_environment = false;
  bool fits() const { return budget_bytes > 0 && need_bytes <= budget_bytes; }
};
// The window's peak while it loads and analyses a store, per row (`bench_gui_frame --from gui`, Release; its
// peak RSS in bytes over the rows): 220 bytes a kernel (its 120-byte row; 10M kernels without launches: 218,
// 50M with 5M ranges: 215), 350 an API call (its 72-byte row and the host timeline, step and replay state of a
// launch: 2M and 4M kernels each with its launch, 561 and 549 a pair). Samples are not measured: twice their
// 48-byte row.
inline constexpr uint64_t kAnalysisBytesPerKernel = 220;
inline constexpr uint64_t kAnalysisBytesPerApiCall = 350;
inline constexpr uint64_t kAnalysisBytesPerSample = 96;

struct LoadResult {
  std::shared_ptr<const TimelineModel> model;
  QString error;  // "FILE: reason" when loading failed
  // Why the analysis did not run (the store too big for the memory at hand) and what to do; its figures.
  QString not_analyzed;
  std::optional<AnalysisBudget> over_budget;
  QString path;
  // A directory of one job's ranks: the cross-rank analysis (analyzer::analyze_ranks), also in model->cross_rank().
  std::shared_ptr<const analyzer::MultiRankAnalysis> ranks;
  double load_s = 0, ranks_s = 0, analyze_s = 0, build_s = 0;
};

// The store's counts and the budget, as the window weighs them.
AnalysisBudget analysis_budget(const store::StoreReader& store);
// What this process may still take, in bytes: MemAvailable, or less where a cgroup (v2) limits the process
// (memory.max less memory.current: a container's limit, which MemAvailable does not show); 0 when unknown.
uint64_t memory_available();
// The one line the window shows for a store left unanalysed: how much, against what, and what to do; and its
// short form for the status line.
QString not_analyzed_reason(const AnalysisBudget& budget);
QString not_analyzed_brief(const AnalysisBudget& budget);

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
