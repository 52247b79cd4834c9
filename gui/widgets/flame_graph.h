// Flame graph of a top-down CallTree (root at the top, callees below, like hotspot's). Nodes narrower than
// a pixel are not drawn; clicking a node makes it the full width, clicking the top bar goes back up.
#pragma once

#include <QWidget>

#include "stepscope/gui/range_stats.h"
#include "timeline_palette.h"

namespace stepscope::gui {

class FlameGraphWidget : public QWidget {
  Q_OBJECT
 public:
  explicit FlameGraphWidget(QWidget* parent = nullptr);
  void set_tree(CallTree top_down);
  const CallTree& tree() const { return tree_; }
  int32_t focus() const { return focus_; }
  void set_focus(int32_t node);
  // Node under a widget position, or -1.
  int32_t node_at(QPoint pos) const;
  QSize sizeHint() const override { return {600, 240}; }

 protected:
  void paintEvent(QPaintEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  bool event(QEvent*) override;

 private:
  struct Box {
    QRectF rect;
    int32_t node;
  };
  void layout_boxes();
  CallTree tree_;
  int32_t focus_ = 0;
  std::vector<Box> boxes_;
  static constexpr int kRowHeight = 18;
};

}  // namespace stepscope::gui
