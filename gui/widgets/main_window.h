// The stepscope-gui window: the timeline in the middle; findings, details, call tree, flame graph and kernel
// statistics in dock panels; search in the tool bar; loading in the background with progress.
#pragma once

#include <QFutureWatcher>
#include <QMainWindow>
#include <memory>

#include "stepscope/gui/item_models.h"
#include "stepscope/gui/timeline_model.h"
#include "trace_loader.h"

class QLabel;
class QLineEdit;
class QProgressBar;
class QSortFilterProxyModel;
class QTableView;
class QTextBrowser;
class QTreeView;
class QComboBox;

namespace stepscope::gui {

class TimelineView;
class FlameGraphWidget;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void open_file(const QString& path);
  void set_model(std::shared_ptr<const TimelineModel> model, const QString& title = {});
  // Tests and screenshots: compute panels and draw lists on the GUI thread (and no modal error box).
  void set_synchronous(bool on);
  // Why the last open_file() failed (the loader's one-line error), empty after a success.
  const QString& load_error() const { return load_error_; }
  // The status bar's line (what was loaded, how long it took, what was left out and why).
  QString status_text() const;
  // Why the file open was not analysed (LoadResult::not_analyzed), empty when it was.
  const QString& not_analyzed() const { return not_analyzed_; }
  // The status bar's lasting note beside the line (shown while the file open was not analysed).
  QString analysis_note() const;

  TimelineView* timeline() const { return timeline_; }
  QTableView* findings_view() const { return findings_view_; }
  QTableView* kernels_view() const { return kernels_view_; }
  QTableView* steps_view() const { return steps_view_; }
  const StepsModel& steps_model() const { return *steps_; }
  QTreeView* call_tree_view() const { return tree_view_; }
  FlameGraphWidget* flame_graph() const { return flame_; }
  QTextBrowser* details() const { return details_; }
  QLineEdit* search_box() const { return search_; }
  const KernelStatsModel& kernel_stats_model() const { return *kernel_stats_; }
  const CallTreeModel& call_tree_model() const { return *call_tree_; }
  TraceLoader& loader() { return *loader_; }

  // Selects finding `row` (of the findings model): shades its steps, shows its evidence and, with `zoom`, zooms
  // to them.
  void select_finding(int row, bool zoom = true);
  // Selects step `row` (of the steps model): zooms to it, shades it and shows its breakdown and explanation.
  void select_step(int row);
  // Brings the Steps panel to the front (--select-slowest-step when no step is slow: the list says so itself).
  void show_steps();

 signals:
  void model_loaded(bool ok);

 protected:
  void closeEvent(QCloseEvent*) override;
  void dragEnterEvent(QDragEnterEvent*) override;
  void dropEvent(QDropEvent*) override;

 private:
  void build_ui();
  void on_loaded(const LoadResult& r);
  void on_event_selected(std::optional<EventRef> e);
  // `caption`: what the range is, for the call tree's label ("" says it from the times: a selection, the
  // whole run).
  void on_range(int64_t t0, int64_t t1, bool selected = true, const QString& caption = {});
  void update_call_tree_direction();

  std::shared_ptr<const TimelineModel> model_;
  TimelineView* timeline_ = nullptr;
  TraceLoader* loader_ = nullptr;
  FindingsModel* findings_ = nullptr;
  QSortFilterProxyModel* findings_proxy_ = nullptr;
  QTableView* findings_view_ = nullptr;
  StepsModel* steps_ = nullptr;
  QSortFilterProxyModel* steps_proxy_ = nullptr;
  QTableView* steps_view_ = nullptr;
  KernelStatsModel* kernel_stats_ = nullptr;
  QSortFilterProxyModel* kernels_proxy_ = nullptr;
  QTableView* kernels_view_ = nullptr;
  QLineEdit* kernels_filter_ = nullptr;
  QLabel* kernels_note_ = nullptr;  // why the table is empty, when it is
  QString loaded_status_,
      loaded_status_tip_;  // the status line of the load, shown again when nothing is selected
  // Nothing selected (Esc, a click on empty space): no finding or step row, no shading, the run's notes in
  // the details and the load's status line.
  void clear_selection();
  // The range the panels show when nothing is selected: the framed steps, else the whole run.
  void show_default_range();
  CallTreeModel* call_tree_ = nullptr;
  QTreeView* tree_view_ = nullptr;
  QComboBox* tree_direction_ = nullptr;
  FlameGraphWidget* flame_ = nullptr;
  QTextBrowser* details_ = nullptr;
  QLineEdit* search_ = nullptr;
  QLabel* search_count_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* status_ = nullptr;
  QLabel* analysis_note_ = nullptr;  // "not analysed", kept while the file is open; the reason in its tooltip
  QLabel* range_label_ = nullptr;
  bool synchronous_ = false;
  QString load_error_;
  QString not_analyzed_;  // LoadResult::not_analyzed of the file open
  bool show_collector_threads_ = false;

  struct RangeResult {
    CallTree top_down, bottom_up;
    std::vector<KernelStat> stats;
    RangeBreakdown breakdown;
    int64_t t0 = 0, t1 = 0;
    bool selected = false;  // a range the user selected (not the whole trace at load)
    QString caption;        // the call tree's label: what the range is
  };
  QFutureWatcher<std::shared_ptr<RangeResult>>* range_watcher_ = nullptr;
  std::shared_ptr<RangeResult> range_result_;
  void apply_range(std::shared_ptr<RangeResult> r);
};

}  // namespace stepscope::gui
