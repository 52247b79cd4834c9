// Qt item models over the timeline data (QtCore only, no widgets): findings, kernel statistics of a
// range and a call tree. Every model gives Qt::DisplayRole text and a numeric SortRole for sorting proxies.
#pragma once

#include <QAbstractItemModel>
#include <QAbstractTableModel>
#include <memory>

#include "stepscope/gui/range_stats.h"
#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

inline constexpr int SortRole = Qt::UserRole + 1;

class FindingsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Severity, Rule, Steps, Saving, Share, Summary, ColumnCount };
  explicit FindingsModel(QObject* parent = nullptr);
  void set_model(std::shared_ptr<const TimelineModel> model);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  std::shared_ptr<const TimelineModel> model_;
};

// Every step with its duration, its breakdown (one column per analyzer::step_categories() entry), its bound and,
// for steps slower than the median by more than the run's noise, the flag and the explanation of what grew.
class StepsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum FixedColumn { Step, Duration, OverMedian, FirstCategory };
  explicit StepsModel(QObject* parent = nullptr);
  void set_model(std::shared_ptr<const TimelineModel> model);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  int bound_column() const;
  int explanation_column() const { return bound_column() + 1; }
  // Position in TimelineModel::steps() of a row.
  int step_position(int row) const;
  bool is_slow(int row) const;
  // A warm-up step, or a slow step made slow by one-time work (SlowStep::startup).
  bool is_startup(int row) const;
  // What --select-slowest-step picks: the slowest slow step that is not start-up, else the slowest start-up one;
  // -1 when no step is slow.
  int slowest_slow_row() const;
  // The explanation of a slow step (empty when not slow or not among those explained).
  QString explanation(int row) const;
  // False for an analysed run without GPU activity: its categories are the host's (step_category_label()) and
  // only the wait for input and the training thread's own work are shown.
  bool has_gpu() const { return !model_ || !model_->analysis() || model_->analysis()->summary.has_gpu; }

 private:
  std::shared_ptr<const TimelineModel> model_;
  std::vector<const analyzer::StepBreakdown*> rows_;  // analysed steps, else empty (stored steps only)
};

class KernelStatsModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, Count, Total, Mean, Min, Max, Share, ColumnCount };
  explicit KernelStatsModel(QObject* parent = nullptr);
  void set_stats(std::vector<KernelStat> stats);
  const std::vector<KernelStat>& stats() const { return stats_; }
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;

 private:
  std::vector<KernelStat> stats_;
  int64_t gpu_ns_ = 0;  // the table's summed GPU time: the share column's whole
};

class CallTreeModel : public QAbstractItemModel {
  Q_OBJECT
 public:
  enum Column { Function, Self, Total, ColumnCount };
  explicit CallTreeModel(QObject* parent = nullptr);
  void set_tree(CallTree tree);
  const CallTree& tree() const { return tree_; }
  QModelIndex index(int row, int column, const QModelIndex& parent = {}) const override;
  QModelIndex parent(const QModelIndex& child) const override;
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation o, int role = Qt::DisplayRole) const override;
  // The tree node an index shows (0, the root, for an invalid index).
  int32_t node_of(const QModelIndex& index) const;
  // Every level ordered by the column (a view's header click); a tree set later keeps the order. Expanded
  // rows stay expanded (persistent indexes follow their nodes).
  void sort(int column, Qt::SortOrder order = Qt::AscendingOrder) override;

 private:
  QString weight(double w) const;
  CallTree tree_;
  int sort_column_ = Total;
  Qt::SortOrder sort_order_ = Qt::DescendingOrder;
};

}  // namespace stepscope::gui
