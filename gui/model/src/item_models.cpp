#include "stepscope/gui/item_models.h"

#include <algorithm>
#include <climits>

#include "stepscope/analyzer/step_outliers.h"
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
      // A directory of ranks: the cross-rank findings lead (the view sorts by severity, highest first).
      if (sort) return (f.cross_rank ? 3 : 0) + severity_rank(f.severity);
      return QString::fromStdString(f.severity);
    case Rule: return QString::fromStdString(f.rule);
    case Steps: {
      if (sort) return static_cast<qlonglong>(f.steps.size());
      if (f.steps.empty()) return QString("—");
      // "1 (7)" as "6 (0–5)": a bare step index read as a count ("0" for a finding of step 0).
      if (f.steps.size() == 1) return QString("1 (%1)").arg(f.steps.front());
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

// ---- StepsModel

StepsModel::StepsModel(QObject* parent) : QAbstractTableModel(parent) {}

void StepsModel::set_model(std::shared_ptr<const TimelineModel> model) {
  beginResetModel();
  model_ = std::move(model);
  rows_.clear();
  // The rows every view shows: the steps in the GPU's time where the host runs ahead (the slow steps are judged
  // on them, StepOutliers::gpu_time).
  if (model_ && model_->analysis())
    for (const auto& s : analyzer::step_rows(*model_->analysis())) rows_.push_back(&s);
  endResetModel();
}

int StepsModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !model_) return 0;
  return static_cast<int>(rows_.empty() ? model_->steps().size() : rows_.size());
}
int StepsModel::bound_column() const { return FirstCategory + static_cast<int>(analyzer::step_categories().size()); }
int StepsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : explanation_column() + 1; }

int StepsModel::step_position(int row) const {
  if (!model_ || row < 0 || row >= rowCount()) return -1;
  return rows_.empty() ? row : model_->step_position(rows_[row]->index);
}

bool StepsModel::is_slow(int row) const {
  if (rows_.empty() || row < 0 || row >= rowCount()) return false;
  const auto& o = model_->analysis()->step_outliers;
  return o.median_ns > 0 && rows_[row]->dur_ns - o.median_ns > o.threshold_ns;
}

bool StepsModel::is_startup(int row) const {
  if (rows_.empty() || row < 0 || row >= rowCount()) return false;
  if (rows_[row]->warmup) return true;
  for (const auto& s : model_->analysis()->step_outliers.slow)
    if (s.index == rows_[row]->index) return s.startup;
  return false;
}

int StepsModel::slowest_slow_row() const {
  int best = -1;
  for (int r = 0; r < rowCount(); ++r) {
    if (!is_slow(r)) continue;
    // Start-up is slow once and nothing in the loop changes it: a steady slow step comes first.
    if (best < 0 || (is_startup(best) && !is_startup(r)) ||
        (is_startup(best) == is_startup(r) && rows_[r]->dur_ns > rows_[best]->dur_ns))
      best = r;
  }
  return best;
}

QString StepsModel::explanation(int row) const {
  if (!is_slow(row)) return {};
  for (const auto& s : model_->analysis()->step_outliers.slow)
    if (s.index == rows_[row]->index) return QString::fromStdString(s.explanation);
  return tr("slower than the median step by more than the run's noise (only the 20 slowest are explained)");
}

QVariant StepsModel::data(const QModelIndex& index, int role) const {
  if (!model_ || !index.isValid() || index.row() >= rowCount()) return {};
  const int row = index.row(), col = index.column();
  if (role == Qt::ToolTipRole) return explanation(row);
  const bool sort = role == SortRole;
  if (role != Qt::DisplayRole && !sort) return {};
  if (rows_.empty()) {  // stored steps, not analysed: index and duration only
    const StepInfo& s = model_->steps()[row];
    if (col == Step) return sort ? QVariant(static_cast<qlonglong>(s.index)) : QVariant(QString::number(s.index));
    if (col == Duration) return sort ? QVariant(static_cast<qlonglong>(s.end - s.start)) : QVariant(dur(double(s.end - s.start)));
    return sort ? QVariant(0) : QVariant();
  }
  const analyzer::StepBreakdown& s = *rows_[row];
  const auto& o = model_->analysis()->step_outliers;
  auto ns = [&](int64_t v) { return sort ? QVariant(static_cast<qlonglong>(v)) : QVariant(dur(double(v))); };
  if (col == Step) {
    if (sort) return static_cast<qlonglong>(s.index);
    if (is_slow(row)) return is_startup(row) ? QString("%1 ▲ start-up").arg(s.index) : QString("%1 ▲").arg(s.index);
    return s.warmup ? QString("%1 start-up").arg(s.index) : QString::number(s.index);
  }
  if (col == Duration) return ns(s.dur_ns);
  if (col == OverMedian) {
    if (o.median_ns <= 0) return sort ? QVariant(0) : QVariant(QString("—"));
    const int64_t d = s.dur_ns - o.median_ns;
    if (sort) return static_cast<qlonglong>(d);
    if (d == 0) return QString("median");  // "+0 ns" read as a measured difference
    return (d > 0 ? "+" : "−") + dur(double(d > 0 ? d : -d));
  }
  const auto& cats = analyzer::step_categories();
  if (col >= FirstCategory && col < FirstCategory + static_cast<int>(cats.size())) return ns(s.*(cats[col - FirstCategory].field));
  if (col == bound_column()) return QString(bound_name(s.bound));
  if (col == explanation_column()) {
    // Sorted by how much the step grew; the cell leads with what grew: "step 103 took 228 ms, 156 ms over the
    // median step (71.6 ms): " is in the row already and cut the cause off at 1600 px (the tooltip keeps it).
    if (sort) return is_slow(row) ? static_cast<qlonglong>(s.dur_ns - o.median_ns) : qlonglong(LLONG_MIN);
    const QString e = explanation(row);
    const int lead = e.indexOf(QStringLiteral(" over the median step ("));
    const int colon = lead < 0 ? -1 : e.indexOf(QStringLiteral("): "), lead);
    return colon < 0 ? e : e.mid(colon + 3);
  }
  return {};
}

QVariant StepsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  const auto& cats = analyzer::step_categories();
  if (section == Step) return tr("Step");
  if (section == Duration) return tr("Duration");
  if (section == OverMedian) return tr("vs median");
  if (section >= FirstCategory && section < FirstCategory + static_cast<int>(cats.size())) {
    // Headers are capitalized as the reports' are ("Waiting for input", not the sentence form).
    QString label = QString(analyzer::step_category_label(cats[section - FirstCategory], has_gpu()));
    if (!label.isEmpty()) label[0] = label[0].toUpper();
    return label;
  }
  if (section == bound_column()) return tr("Bound");
  if (section == explanation_column()) return tr("What grew (slow steps)");
  return {};
}

// ---- KernelStatsModel

KernelStatsModel::KernelStatsModel(QObject* parent) : QAbstractTableModel(parent) {}

void KernelStatsModel::set_stats(std::vector<KernelStat> stats) {
  beginResetModel();
  stats_ = std::move(stats);
  gpu_ns_ = 0;
  for (const auto& s : stats_) gpu_ns_ += s.total_ns;
  endResetModel();
}

int KernelStatsModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : static_cast<int>(stats_.size());
}
int KernelStatsModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant KernelStatsModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount()) return {};
  const KernelStat& s = stats_[index.row()];
  if (role == Qt::ToolTipRole && index.column() == Name)
    return QString::fromStdString(s.full_name.empty() ? s.name : s.full_name);
  if (role == Qt::TextAlignmentRole && index.column() != Name)
    return QVariant::fromValue(Qt::Alignment(Qt::AlignRight | Qt::AlignVCenter));
  const bool sort = role == SortRole;
  if (role != Qt::DisplayRole && !sort) return {};
  // Of the GPU time the table lists (nsys' "Time (%)"): of the range's wall time, a 12.7 s run's kernels all
  // read "0.0 %".
  const double share = gpu_ns_ > 0 ? double(s.total_ns) / double(gpu_ns_) : 0.0;
  switch (index.column()) {
    case Name: return QString::fromStdString(s.name);
    case Count: return sort ? QVariant(static_cast<qlonglong>(s.count)) : QVariant(QString::number(s.count));
    case Total: return sort ? QVariant(static_cast<qlonglong>(s.total_ns)) : QVariant(dur(double(s.total_ns)));
    case Mean: return sort ? QVariant(s.mean_ns()) : QVariant(dur(s.mean_ns()));
    case Min: return sort ? QVariant(static_cast<qlonglong>(s.min_ns)) : QVariant(dur(double(s.min_ns)));
    case Max: return sort ? QVariant(static_cast<qlonglong>(s.max_ns)) : QVariant(dur(double(s.max_ns)));
    case Share:
      if (sort) return share;
      if (share > 0 && share < 0.001) return QStringLiteral("< 0.1 %");
      return QString::number(share * 100.0, 'f', 1) + " %";
  }
  return {};
}

QVariant KernelStatsModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole && section == Share)
    return tr(
        "Its share of the GPU time in this table: the kernels', copies' and memsets' summed durations in "
        "the range");
  if (role != Qt::DisplayRole) return {};
  static const char* names[] = {"Name", "Count", "Total", "Mean", "Min", "Max", "% of GPU time"};
  return section >= 0 && section < ColumnCount ? QString(names[section]) : QVariant();
}

// ---- CallTreeModel

CallTreeModel::CallTreeModel(QObject* parent) : QAbstractItemModel(parent) {}

namespace {

CallTree::Order call_tree_order(int column) {
  return column == CallTreeModel::Function ? CallTree::Order::Name
         : column == CallTreeModel::Self   ? CallTree::Order::Self
                                           : CallTree::Order::Total;
}

}  // namespace

void CallTreeModel::set_tree(CallTree tree) {
  beginResetModel();
  tree_ = std::move(tree);
  if (sort_column_ != Total || sort_order_ != Qt::DescendingOrder)  // a new tree comes ordered by total
    tree_.sort_children(call_tree_order(sort_column_), sort_order_ == Qt::DescendingOrder);
  endResetModel();
}

void CallTreeModel::sort(int column, Qt::SortOrder order) {
  if (column < 0 || column >= ColumnCount) return;
  sort_column_ = column, sort_order_ = order;
  emit layoutAboutToBeChanged({}, QAbstractItemModel::VerticalSortHint);
  const QModelIndexList before = persistentIndexList();
  tree_.sort_children(call_tree_order(column), order == Qt::DescendingOrder);
  QModelIndexList after;
  after.reserve(before.size());
  for (const QModelIndex& i : before) {
    const int32_t node = node_of(i);
    const auto& siblings = tree_.nodes()[size_t(tree_.nodes()[size_t(node)].parent)].children;
    const int row = int(std::find(siblings.begin(), siblings.end(), node) - siblings.begin());
    after.push_back(createIndex(row, i.column(), static_cast<quintptr>(node)));
  }
  changePersistentIndexList(before, after);
  emit layoutChanged({}, QAbstractItemModel::VerticalSortHint);
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
  if (role == Qt::ToolTipRole && index.column() == Function) return QString::fromStdString(tree_.full_name(n));
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
