// The timeline: a ruler, track titles in a left gutter and the tracks of a TimelineModel, painted from
// level-of-detail draw lists built on a worker thread (the last finished list is re-projected while the
// next one is built, so panning and zooming never wait for it).
#pragma once

#include <QAbstractScrollArea>
#include <QFontMetrics>
#include <QFutureWatcher>
#include <QLineF>
#include <functional>
#include <memory>
#include <optional>

#include "stepscope/gui/timeline_layout.h"
#include "stepscope/gui/timeline_model.h"
#include "timeline_palette.h"

namespace stepscope::gui {

// A child widget that paints through a callback (the ruler above the tracks).
class PaintForwarder : public QWidget {
 public:
  PaintForwarder(QWidget* parent, std::function<void(QPainter&)> paint) : QWidget(parent), paint_(std::move(paint)) {}

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  std::function<void(QPainter&)> paint_;
};

class TimelineView : public QAbstractScrollArea {
  Q_OBJECT
 public:
  static constexpr int kGutterWidth = 210;
  static constexpr int kRulerHeight = 26;

  explicit TimelineView(QWidget* parent = nullptr);
  ~TimelineView() override;

  // A track's title as the gutter draws it in `width`: too long, its name loses its end but not the row's id
  // or what the row holds ("thread 25738 (pyt… · data waits"; elided in the middle it read "thread 25738
  // (p…n) · data waits").
  static QString gutter_title(const QFontMetrics& fm, const QString& title, int width);

  void set_model(std::shared_ptr<const TimelineModel> model);
  const std::shared_ptr<const TimelineModel>& model() const { return model_; }
  const TimelineLayout& layout() const { return layout_; }
  // Collapsed groups and opened "other threads" rows; kept across models (keyed by group title).
  const LayoutState& layout_state() const { return layout_state_; }
  void set_layout_state(LayoutState state);
  // What a click on a group header or an "N other threads" row does.
  void toggle_group(const std::string& group);
  void toggle_others(const std::string& group);
  // Opens or closes the CUDA graph replays of a GPU stream track (their kernels under their blocks), or of all.
  void toggle_graphs(int track);
  void set_all_graphs_open(bool open);
  const Viewport& viewport_range() const { return vp_; }

  // Shows [t0, t1] with `padding` of the span added on each side.
  void zoom_to(double t0, double t1, double padding = 0.02);
  void zoom_to_all();
  // The steps after start-up (TimelineModel::steady_extent), else everything: what a file opens on.
  void zoom_to_steps();
  // Zooms to the time selection, else the selected event.
  void zoom_to_selection();

  void select_event(std::optional<EventRef> e, bool scroll_into_view = false);
  const std::optional<EventRef>& selected_event() const { return selected_; }
  void set_time_selection(std::optional<std::pair<int64_t, int64_t>> range);
  const std::optional<std::pair<int64_t, int64_t>>& time_selection() const { return time_selection_; }
  // Bands shaded across every track (a finding's steps and evidence); kept as their union, sorted.
  void set_highlights(std::vector<std::pair<int64_t, int64_t>> ranges);
  const std::vector<std::pair<int64_t, int64_t>>& highlights() const { return highlights_; }

  // Highlights events whose name contains `text` (case-insensitive); returns how many match.
  size_t set_search(const QString& text);
  // Selects and shows the next/previous match after the current selection.
  bool next_match(bool backwards = false);

  // Tests and the benchmark: build draw lists on the GUI thread, so a paint shows the current viewport.
  void set_synchronous(bool on) { synchronous_ = on; }
  // viewport() coordinates of time `t` in `track`/`lane` (the middle of the lane).
  QPoint point_for(double t, int track, int lane) const;
  // Where event `e` is painted, in viewport() coordinates (null when folded away).
  QRectF rect_of(EventRef e) const;
  // A directory of ranks: the lines joining the job's critical path from one rank's lane to the next (the end of
  // a round on one rank to the start of the next round on another), in viewport() coordinates.
  std::vector<QLineF> rank_path_links() const;
  // The event under a viewport() position, as a click would find it.
  std::optional<Hit> hit_at(QPoint viewport_pos) const;
  const TimelinePalette& palette_colours() const { return colours_; }
  // The ruler above the tracks: a left drag on it selects a time range.
  QWidget* ruler() const { return ruler_; }
  // Builds and records the draw list for the current viewport now (benchmark hook); returns it.
  const DrawList& rebuild_now();

 signals:
  void event_selected(std::optional<stepscope::gui::EventRef> event);
  // A click on a CPU sample (trace.samples row): the details show its stack (event_selected(nullopt) before
  // it).
  void sample_selected(quint32 sample_row);
  void time_range_selected(qint64 t0, qint64 t1);
  void viewport_changed();
  void layout_state_changed();

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void mouseDoubleClickEvent(QMouseEvent*) override;
  void keyPressEvent(QKeyEvent*) override;
  bool viewportEvent(QEvent*) override;
  bool eventFilter(QObject* watched, QEvent* event) override;
  void changeEvent(QEvent*) override;
  void scrollContentsBy(int dx, int dy) override;

 private:
  int content_width() const;
  int scroll_y() const;
  std::vector<int> visible_tracks() const;
  void view_changed();
  void request_draw_list();
  void on_draw_list_ready();
  void clamp_viewport();
  void update_scrollbar();
  void relayout();
  void paint_ruler(QPainter& p);
  void paint_tracks(QPainter& p, const DrawList& dl);
  void paint_flow(QPainter& p);
  void paint_rank_path(QPainter& p);
  QString tooltip_at(QPoint pos) const;
  bool matches_search(EventRef e) const;

  std::shared_ptr<const TimelineModel> model_;
  TimelineLayout layout_;
  LayoutState layout_state_;
  Viewport vp_;
  TimelinePalette colours_;
  std::optional<EventRef> selected_;
  std::optional<std::pair<int64_t, int64_t>> time_selection_;
  std::vector<std::pair<int64_t, int64_t>> highlights_;
  std::vector<char> search_names_;  // per string id: does the name match
  std::vector<EventRef> search_hits_;
  bool search_active_ = false;

  PaintForwarder* ruler_ = nullptr;
  std::shared_ptr<const DrawList> current_;
  QFutureWatcher<std::shared_ptr<const DrawList>>* watcher_ = nullptr;
  bool rebuild_pending_ = false;
  bool synchronous_ = false;

  enum class Drag { None, Pan, Select };
  Drag drag_ = Drag::None;
  QPoint press_pos_, last_pos_;
  bool moved_ = false;
  double select_anchor_ = 0;
};

}  // namespace stepscope::gui
