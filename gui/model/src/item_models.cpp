#include "stepscope/gui/item_models.h"

#include <algorithm>

#include "stepscope/gui/timeline_layout.h"

namespace stepscope::gui {

namespace {
QString dur(double ns) { return QString::fromStdString(format_duration(ns)); }
}  // namespace

// ---- FindingsModel

FindingsModel::FindingsModel(QObject* parent) : QAbstractTableModel(parent) {}

void FindingsModel::set_model(std::shared_ptr<const TimelineModel> model) {
  beginResetModel();
  model_ = std::move(model);
  endResetModel();
}

int FindingsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !model_ ? 0 : static_cast<int>(model_->findings().size());
}
int FindingsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant FindingsModel::data(const QModelIndex& index, int role) const {
  if (!model_ || !index.isValid() || index.row() >= rowCount()) return {};
  const FindingInfo& f = model_->findings()[index.row()];
  if (role == Qt::ToolTipRole) {
    QString tip = QString::fromStdString(f.summary);
    if (!f.suggestion.empty()) tip += "\n\n" + QString::fromStdString(f.suggestion);
    return tip;
  }
  const bool sort = role == SortRole;
  if (role != Qt::DisplayRole && !sort) return {};
  switch (index.column()) {
    case Severity:
      if (sort) return f.severity == "high" ? 2 : f.severity == "medium" ? 1 : 0;
      return QString::fromStdString(f.severity);
    case Rule: return QString::fromStdString(f.rule);
    case Steps: {
      if (sort) return static_cast<qlonglong>(f.steps.size());
      if (f.steps.empty()) return QString("—");
      if (f.steps.size() == 1) return QString::number(f.steps.front());
      return QString("%1 (%2–%3)").arg(f.steps.size()).arg(f.steps.front()).arg(f.steps.back());
    }
    case Saving:
      if (sort) return f.est_savings_us_per_step;
      return dur(f.est_savings_us_per_step * 1000.0);
    case Share:
      if (sort) return f.share;
      return QString::number(f.share * 100.0, 'f', 1) + " %";
    case Summary: return QString::fromStdString(f.summary);
  }
  return {};
}

QVariant FindingsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"Severity", "Rule", "Steps", "Saving/step", "Share", "Summary"};
  return section >= 0 && section < ColumnCount ? QString(names[section]) : QVariant();
}

// ---- KernelStatsModel

KernelStatsModel::KernelStatsModel(QObject* parent) : QAbstractTableModel(parent) {}

void KernelStatsModel::set_stats(std::vector<KernelStat> stats, int64_t range_ns) {
  beginResetModel();
  stats_ = std::move(stats);
  range_ns_ = range_ns;
  endResetModel();
}

int KernelStatsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(stats_.size());
}
int KernelStatsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant KernelStatsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const KernelStat& s = stats_[index.row()];
  if (role == Qt::ToolTipRole && index.column() == Name) return QString::fromStdString(s.name);
  if (role == Qt::TextAlignmentRole && index.column() != Name)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  const bool sort = role == SortRole;
  if (role != Qt::DisplayRole && !sort) return {};
  const double share = range_ns_ > 0 ? double(s.total_ns) / double(range_ns_) : 0.0;
  switch (index.column()) {
    case Name: return QString::fromStdString(s.name);
    case Count: return sort ? QVariant(static_cast<qlonglong>(s.count)) : QVariant(QString::number(s.count));
    case Total: return sort ? QVariant(static_cast<qlonglong>(s.total_ns)) : QVariant(dur(double(s.total_ns)));
    case Mean: return sort ? QVariant(s.mean_ns()) : QVariant(dur(s.mean_ns()));
    case Min: return sort ? QVariant(static_cast<qlonglong>(s.min_ns)) : QVariant(dur(double(s.min_ns)));
    case Max: return sort ? QVariant(static_cast<qlonglong>(s.max_ns)) : QVariant(dur(double(s.max_ns)));
    case Share: return sort ? QVariant(share) : QVariant(QString::number(share * 100.0, 'f', 1) + " %");
  }
  return {};
}

QVariant KernelStatsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"Name", "Count", "Total", "Mean", "Min", "Max", "% of range"};
  return section >= 0 && section < ColumnCount ? QString(names[section]) : QVariant();
}

// ---- CallTreeModel

CallTreeModel::CallTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

void CallTreeModel::set_tree(CallTree tree) {
  beginResetModel();
  tree_ = std::move(tree);
  endResetModel();
}

int32_t CallTreeModel::node_of(const QModelIndex& index) const {
  return index.isValid() ? static_cast<int32_t>(index.internalId()) : 0;
}

QModelIndex CallTreeModel::index(int row, int column, const QModelIndex& parent) const {
  if (row < 0 || column < 0 || column >= ColumnCount) return {};
  if (parent.isValid() && parent.column() != 0) return {};
  const auto& n = tree_.nodes()[node_of(parent)];
  if (row >= static_cast<int>(n.children.size())) return {};
  return createIndex(row, column, static_cast<quintptr>(n.children[row]));
}

QModelIndex CallTreeModel::parent(const QModelIndex& child) const {
  if (!child.isValid()) return {};
  const int32_t p = tree_.nodes()[node_of(child)].parent;
  if (p <= 0) return {};
  const auto& siblings = tree_.nodes()[tree_.nodes()[p].parent].children;
  const int row = static_cast<int>(std::find(siblings.begin(), siblings.end(), p) - siblings.begin());
  return createIndex(row, 0, static_cast<quintptr>(p));
}

int CallTreeModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() && parent.column() != 0) return 0;
  return static_cast<int>(tree_.nodes()[node_of(parent)].children.size());
}

int CallTreeModel::columnCount(const QModelIndex&) const { return ColumnCount; }

QString CallTreeModel::weight(double w) const {
  const double total = tree_.nodes()[0].total;
  const QString pct = total > 0 ? QString(" (%1 %)").arg(w / total * 100.0, 0, 'f', 1) : QString();
  if (tree_.weighted_by_time()) return dur(w) + pct;
  return QString::number(static_cast<qlonglong>(w)) + pct;
}

QVariant CallTreeModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid()) return {};
  const auto& n = tree_.nodes()[node_of(index)];
  if (role == Qt::ToolTipRole && index.column() == Function) return QString::fromStdString(tree_.name(n));
  if (role == Qt::TextAlignmentRole && index.column() != Function)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  if (role == SortRole) {
    switch (index.column()) {
      case Function: return QString::fromStdString(tree_.name(n));
      case Self: return n.self;
      case Total: return n.total;
    }
  }
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Function: return QString::fromStdString(tree_.name(n));
    case Self: return weight(n.self);
    case Total: return weight(n.total);
  }
  return {};
}

QVariant CallTreeModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  const bool time = tree_.weighted_by_time();
  switch (section) {
    case Function: return QString("Function");
    case Self: return time ? QString("Self time") : QString("Self samples");
    case Total: return time ? QString("Total time") : QString("Total samples");
  }
  return {};
}

}  // namespace stepscope::gui
