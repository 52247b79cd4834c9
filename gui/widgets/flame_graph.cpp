#include "flame_graph.h"

#include <QApplication>
#include <QHelpEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include "stepscope/gui/timeline_layout.h"

namespace stepscope::gui {

FlameGraphWidget::FlameGraphWidget(QWidget* parent) : QWidget(parent) { setMouseTracking(true); }

void FlameGraphWidget::set_tree(CallTree top_down) {
  tree_ = std::move(top_down);
  focus_ = 0;
  layout_boxes();
  update();
}

void FlameGraphWidget::set_focus(int32_t node) {
  focus_ = (node >= 0 && static_cast<size_t>(node) < tree_.nodes().size()) ? node : 0;
  layout_boxes();
  update();
}

void FlameGraphWidget::layout_boxes() {
  boxes_.clear();
  const auto& nodes = tree_.nodes();
  if (nodes.empty() || nodes[focus_].total <= 0) return;
  const double w = std::max(1, width());
  const double scale = w / nodes[focus_].total;
  // The focused node's ancestors as full-width bars on top, then its subtree.
  std::vector<int32_t> chain;
  for (int32_t n = focus_; n > 0; n = nodes[n].parent) chain.push_back(n);
  int depth = 0;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it, ++depth)
    boxes_.push_back({QRectF(0, depth * kRowHeight, w, kRowHeight - 1), *it});
  struct Pending {
    int32_t node;
    double x;
    int depth;
  };
  std::vector<Pending> stack;
  double x = 0;
  for (int32_t c : nodes[focus_].children) {
    stack.push_back({c, x, depth});
    x += nodes[c].total * scale;
  }
  while (!stack.empty()) {
    Pending p = stack.back();
    stack.pop_back();
    const double bw = nodes[p.node].total * scale;
    if (bw < 1.0) continue;  // hidden below a pixel
    boxes_.push_back({QRectF(p.x, p.depth * kRowHeight, bw, kRowHeight - 1), p.node});
    double cx = p.x;
    for (int32_t c : nodes[p.node].children) {
      stack.push_back({c, cx, p.depth + 1});
      cx += nodes[c].total * scale;
    }
  }
  int max_depth = 0;
  for (const Box& b : boxes_) max_depth = std::max(max_depth, int(b.rect.bottom()) + 1);
  setMinimumHeight(std::max(60, max_depth + 2));
}

void FlameGraphWidget::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const TimelinePalette colours = TimelinePalette::from(QApplication::palette());
  p.fillRect(rect(), colours.background);
  if (boxes_.empty()) {
    p.setPen(colours.muted_text);
    p.drawText(rect(), Qt::AlignCenter, tr("No CPU samples or host ranges in the selected range"));
    return;
  }
  const QFontMetrics fm(font());
  for (const Box& b : boxes_) {
    const auto& n = tree_.nodes()[b.node];
    const QColor fill = colours.event_colour(static_cast<uint32_t>(std::max(0, n.name)) * 7919u + 13u, false);
    p.fillRect(b.rect, fill);
    if (b.rect.width() > 24) {
      p.setPen(colours.text_on(fill));
      p.drawText(b.rect.adjusted(3, 0, -2, 0), Qt::AlignVCenter | Qt::AlignLeft,
                 fm.elidedText(QString::fromStdString(tree_.name(n)), Qt::ElideRight, int(b.rect.width()) - 5));
    }
  }
}

int32_t FlameGraphWidget::node_at(QPoint pos) const {
  for (const Box& b : boxes_)
    if (b.rect.contains(pos)) return b.node;
  return -1;
}

void FlameGraphWidget::mousePressEvent(QMouseEvent* e) {
  const int32_t n = node_at(e->pos());
  if (n < 0) return;
  // Clicking the focused node (or an ancestor bar) goes up; anything else zooms into it.
  set_focus(n == focus_ ? tree_.nodes()[n].parent : n);
}

bool FlameGraphWidget::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const int32_t n = node_at(he->pos());
    if (n < 0) {
      QToolTip::hideText();
      return true;
    }
    const auto& node = tree_.nodes()[n];
    const double root = tree_.nodes()[0].total;
    auto w = [&](double v) {
      return tree_.weighted_by_time() ? QString::fromStdString(format_duration(v))
                                      : tr("%1 samples").arg(static_cast<qlonglong>(v));
    };
    QToolTip::showText(he->globalPos(),
                       tr("%1\ntotal %2 (%3 %)\nself %4")
                           .arg(QString::fromStdString(tree_.full_name(node)), w(node.total))
                           .arg(root > 0 ? node.total / root * 100 : 0, 0, 'f', 1)
                           .arg(w(node.self)),
                       this);
    return true;
  }
  if (e->type() == QEvent::Resize) layout_boxes();
  return QWidget::event(e);
}

}  // namespace stepscope::gui
