#include "timeline_view.h"

#include <QApplication>
#include <QKeyEvent>
#include <QPainter>
#include <QPainterPath>
#include <QRegularExpression>
#include <QScrollBar>
#include <QToolTip>
#include <QtConcurrent/QtConcurrent>
#include <algorithm>
#include <cmath>

#include "event_details.h"

namespace stepscope::gui {

namespace {

QString qs(const std::string& s) { return QString::fromStdString(s); }

// What a zoomed-out block of `n` items of a track is: steps only on the Steps track (the critical path's 65,790
// stretches of launch_bound read "65790 steps").
QString merged_words(TrackKind k, size_t n) {
  switch (k) {
    case TrackKind::Steps: return QObject::tr("%1 steps").arg(n);
    case TrackKind::Findings: return QObject::tr("%1 finding ranges").arg(n);
    case TrackKind::CriticalPath: return QObject::tr("%1 stretches").arg(n);
    default: return QObject::tr("%1 events").arg(n);
  }
}

// A ruler label for an offset from the trace start, with as many decimals as the tick step needs.
QString ruler_label(double offset_ns, double step_ns) {
  struct Unit {
    double ns;
    const char* name;
  };
  static const Unit units[] = {{1e9, "s"}, {1e6, "ms"}, {1e3, "µs"}, {1, "ns"}};
  const double a = std::max(std::abs(offset_ns), step_ns);
  const Unit* u = &units[3];
  for (const Unit& c : units)
    if (a >= c.ns) {
      u = &c;
      break;
    }
  int decimals = 0;
  for (double s = step_ns / u->ns; s < 0.999 && decimals < 9; s *= 10) ++decimals;
  return QString::number(offset_ns / u->ns, 'f', decimals) + " " + u->name;
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QAbstractScrollArea(parent) {
  setMouseTracking(true);
  viewport()->setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  setVerticalScrollBarPolicy(Qt::ScrollBarAsNeeded);
  setViewportMargins(0, kRulerHeight, 0, 0);
  colours_ = TimelinePalette::from(QApplication::palette());
  ruler_ = new PaintForwarder(this, [this](QPainter& p) { paint_ruler(p); });
  ruler_->installEventFilter(this);  // a drag on the ruler selects a range
  watcher_ = new QFutureWatcher<std::shared_ptr<const DrawList>>(this);
  connect(watcher_, &QFutureWatcherBase::finished, this, &TimelineView::on_draw_list_ready);
}

TimelineView::~TimelineView() { watcher_->waitForFinished(); }

void TimelineView::set_model(std::shared_ptr<const TimelineModel> model) {
  watcher_->waitForFinished();
  model_ = std::move(model);
  layout_ = model_ ? TimelineLayout(*model_, {}, layout_state_) : TimelineLayout();
  current_.reset();
  selected_.reset();
  time_selection_.reset();
  highlights_.clear();
  search_names_.clear();
  search_hits_.clear();
  search_active_ = false;
  update_scrollbar();
  verticalScrollBar()->setValue(0);
  zoom_to_all();
}

void TimelineView::set_layout_state(LayoutState state) {
  layout_state_ = std::move(state);
  relayout();
}

void TimelineView::relayout() {
  watcher_->waitForFinished();
  layout_ = model_ ? TimelineLayout(*model_, {}, layout_state_) : TimelineLayout();
  current_.reset();
  update_scrollbar();
  request_draw_list();
  viewport()->update();
}

void TimelineView::toggle_group(const std::string& group) {
  if (!layout_state_.collapsed.erase(group)) layout_state_.collapsed.insert(group);
  relayout();
  emit layout_state_changed();
}

void TimelineView::toggle_graphs(int track) {
  if (!model_ || track < 0 || size_t(track) >= model_->tracks().size()) return;
  const Track& tr = model_->tracks()[size_t(track)];
  if (!tr.graphs_open_inside) return;
  const std::string key = graph_key(tr);
  if (!layout_state_.open_graphs.erase(key)) layout_state_.open_graphs.insert(key);
  relayout();
  emit layout_state_changed();
}

void TimelineView::set_all_graphs_open(bool open) {
  if (!model_) return;
  for (const Track& tr : model_->tracks()) {
    if (!tr.graphs_open_inside) continue;
    if (open) layout_state_.open_graphs.insert(graph_key(tr));
    else layout_state_.open_graphs.erase(graph_key(tr));
  }
  relayout();
  emit layout_state_changed();
}

void TimelineView::toggle_others(const std::string& group) {
  if (!layout_state_.expanded_others.erase(group)) layout_state_.expanded_others.insert(group);
  relayout();
  emit layout_state_changed();
}

int TimelineView::content_width() const { return std::max(1, viewport()->width() - kGutterWidth); }
int TimelineView::scroll_y() const { return verticalScrollBar()->value(); }

void TimelineView::update_scrollbar() {
  const int h = layout_.total_height();
  verticalScrollBar()->setRange(0, std::max(0, h - viewport()->height()));
  verticalScrollBar()->setPageStep(viewport()->height());
  verticalScrollBar()->setSingleStep(layout_.metrics().lane_height);
}

void TimelineView::zoom_to(double t0, double t1, double padding) {
  if (t1 <= t0) t1 = t0 + 1000;
  const double pad = (t1 - t0) * padding;
  vp_.t0 = t0 - pad;
  vp_.t1 = t1 + pad;
  view_changed();
}

void TimelineView::zoom_to_steps() {
  if (auto ext = model_ ? model_->steady_extent() : std::nullopt) {
    zoom_to(double(ext->first), double(ext->second));
    return;
  }
  zoom_to_all();
}

void TimelineView::zoom_to_all() {
  if (!model_) {
    vp_ = Viewport{0, 1e6, content_width()};
    view_changed();
    return;
  }
  zoom_to(double(model_->begin()), double(model_->end()));
}

void TimelineView::zoom_to_selection() {
  if (time_selection_) {
    zoom_to(double(time_selection_->first), double(time_selection_->second));
  } else if (selected_ && model_) {
    zoom_to(double(model_->start_of(*selected_)), double(model_->end_of(*selected_)), 0.25);
  }
}

void TimelineView::clamp_viewport() {
  vp_.width = content_width();
  if (model_) vp_.clamp_to(double(model_->begin()), double(model_->end()));
}

void TimelineView::view_changed() {
  clamp_viewport();
  request_draw_list();
  viewport()->update();
  emit viewport_changed();
}

std::vector<int> TimelineView::visible_tracks() const {
  // A screen of margin above and below, so small vertical scrolls reuse the list.
  const int h = viewport()->height();
  return layout_.tracks_in(scroll_y() - h, scroll_y() + 2 * h);
}

void TimelineView::request_draw_list() {
  if (!model_) return;
  if (synchronous_ || !current_) {
    rebuild_now();
    return;
  }
  if (watcher_->isRunning()) {
    rebuild_pending_ = true;
    return;
  }
  auto model = model_;
  Viewport vp = vp_;
  auto tracks = visible_tracks();
  LodOptions options;
  options.open_graphs = layout_.open_graph_tracks();
  watcher_->setFuture(QtConcurrent::run([model, vp, tracks, options]() {
    return std::shared_ptr<const DrawList>(std::make_shared<DrawList>(build_draw_list(*model, vp, tracks, options)));
  }));
}

const DrawList& TimelineView::rebuild_now() {
  static const DrawList empty;
  if (!model_) return empty;
  vp_.width = content_width();
  LodOptions options;
  options.open_graphs = layout_.open_graph_tracks();
  current_ = std::make_shared<DrawList>(build_draw_list(*model_, vp_, visible_tracks(), options));
  return *current_;
}

void TimelineView::on_draw_list_ready() {
  auto result = watcher_->result();
  if (result && model_) current_ = result;
  viewport()->update();
  if (rebuild_pending_) {
    rebuild_pending_ = false;
    request_draw_list();
  }
}

void TimelineView::scrollContentsBy(int, int) {
  request_draw_list();
  viewport()->update();
}

void TimelineView::resizeEvent(QResizeEvent* e) {
  QAbstractScrollArea::resizeEvent(e);
  const QRect vr = viewport()->geometry();
  ruler_->setGeometry(vr.x(), vr.y() - kRulerHeight, vr.width(), kRulerHeight);
  update_scrollbar();
  if (model_) {
    // Keep the time range; more pixels show more detail.
    vp_.width = content_width();
    request_draw_list();
  }
}

void TimelineView::changeEvent(QEvent* e) {
  if (e->type() == QEvent::PaletteChange || e->type() == QEvent::ApplicationPaletteChange) {
    colours_ = TimelinePalette::from(QApplication::palette());
    viewport()->update();
  }
  QAbstractScrollArea::changeEvent(e);
}

// ---- painting

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(viewport());
  p.fillRect(viewport()->rect(), colours_.background);
  if (!model_) {
    p.setPen(colours_.muted_text);
    p.drawText(viewport()->rect(), Qt::AlignCenter, tr("Open a trace or store: File → Open, or drop a file here"));
    return;
  }
  if (synchronous_ && (!current_ || !(current_->viewport == vp_) || current_->tracks != visible_tracks()))
    rebuild_now();
  if (current_) paint_tracks(p, *current_);
  paint_rank_path(p);
  paint_flow(p);
  ruler_->update();
}

QRectF TimelineView::rect_of(EventRef e) const {
  if (!model_) return {};
  auto loc = model_->locate(e);
  if (!loc || !layout_.row_of_track(loc->track)) return {};  // folded away
  const Track& tr = model_->tracks()[size_t(loc->track)];
  if (size_t(loc->lane) >= layout_.lanes_shown(tr, loc->track)) {  // inside a closed graph replay: its block
    auto replay = model_->replay_of(e);
    return replay ? rect_of({EventKind::GraphReplay, *replay}) : QRectF();
  }
  const double x0 = kGutterWidth + vp_.x_of(double(model_->start_of(e)));
  const double x1 = std::max(x0 + 1, kGutterWidth + vp_.x_of(double(model_->end_of(e))));
  const int y = layout_.lane_y(loc->track, loc->lane) - scroll_y();
  return QRectF(x0, y, x1 - x0, layout_.metrics().lane_height - 2);
}

bool TimelineView::matches_search(EventRef e) const {
  const store::Trace& t = model_->trace();
  int64_t id = -1;
  if (e.kind == EventKind::Kernel)
    id = model_->kernel_name(e.row);
  else if (e.kind == EventKind::ApiCall)
    id = model_->api_call_name(e.row);
  else if (e.kind == EventKind::Range) id = t.ranges[e.row].name;
  if (id >= 0) return static_cast<size_t>(id) < search_names_.size() && search_names_[id];
  return false;
}

void TimelineView::paint_tracks(QPainter& p, const DrawList& dl) {
  const int w = viewport()->width(), h = viewport()->height();
  const int sy = scroll_y();
  const int lane_h = layout_.metrics().lane_height;
  const auto& tracks = model_->tracks();
  QFont small = font();
  small.setPointSizeF(std::max(6.0, font().pointSizeF() - 1));
  p.setFont(small);
  const QFontMetrics fm(small);
  const CrossRank* cross = model_->cross_rank();
  const int straggler_track = cross && cross->straggler >= 0 ? cross->track[size_t(cross->straggler)] : -2;

  // Row backgrounds and grid lines under the events.
  for (const auto& row : layout_.rows()) {
    const int y = row.y - sy;
    if (y + row.height < 0 || y > h) continue;
    if (row.track < 0) continue;
    p.fillRect(QRect(kGutterWidth, y, w - kGutterWidth, row.height), (row.track % 2) ? colours_.alternate : colours_.background);
    if (straggler_track == row.track) {  // the straggler's lane on the job's critical path
      QColor c = colours_.straggler;
      c.setAlpha(110);
      p.fillRect(QRect(kGutterWidth, y, w - kGutterWidth, row.height), c);
    }
  }
  const double step = ruler_step(vp_);
  p.setPen(colours_.grid);
  const double origin = model_ ? double(model_->begin()) : 0.0;  // the ruler's ticks (paint_ruler)
  for (double t = first_ruler_tick(vp_, origin, step); t < vp_.t1; t += step) {
    const int x = kGutterWidth + int(std::lround(vp_.x_of(t)));
    p.drawLine(x, 0, x, h);
  }
  for (const auto& [a, b] : highlights_) {
    const double x0 = std::max(0.0, vp_.x_of(double(a))), x1 = std::min(double(w), vp_.x_of(double(b)));
    if (x1 > x0) p.fillRect(QRectF(kGutterWidth + x0, 0, std::max(1.0, x1 - x0), h), colours_.highlight);
  }

  p.setClipRect(QRect(kGutterWidth, 0, w - kGutterWidth, h));
  // Narrow busy strips' bars, drawn in two calls after the loop.
  constexpr size_t kBusyImageColumns = 64;
  auto busy_colour = [&](bool gpu) {
    QColor c = gpu ? colours_.gpu_busy : colours_.host_busy;
    if (search_active_) c.setAlpha(60);
    return c;
  };
  std::vector<QRectF> gpu_bars, host_bars;
  for (const DrawItem& it : dl.items) {
    const Track& track = tracks[it.track];
    const double x0 = std::max(-2.0, vp_.x_of(it.start));
    const double x1 = std::min(double(w) + 2, std::max(vp_.x_of(it.start) + 1.0, vp_.x_of(it.end)));
    if (x1 < 0 || x0 > w - kGutterWidth) continue;
    const int y = layout_.lane_y(it.track, it.lane) - sy;
    if (y + lane_h < 0 || y > h) continue;
    const EventRef ref = track.lane_at(size_t(it.lane)).ref(it.index);
    if (it.busy >= 0 && size_t(it.busy) < dl.busy.size()) {
      // Zoomed out: how busy the lane is under each pixel, bottom-aligned bars over a faint band of the block.
      const BusyStrip& strip = dl.busy[size_t(it.busy)];
      const bool gpu = track.kind == TrackKind::GpuStream;
      QColor band = busy_colour(gpu);
      band.setAlpha(search_active_ ? 15 : 38);
      p.fillRect(QRectF(kGutterWidth + x0, y + 1, x1 - x0, lane_h - 2), band);
      // The strip's columns at the current zoom (narrower than a pixel while a zoom-out waits for its draw list).
      const double bw = strip.bucket_ns / vp_.ns_per_px();
      const double bottom = y + lane_h - 1;
      if (strip.share.size() >= kBusyImageColumns) {
        // A wide strip is painted into a small image, a pixel column a share, and drawn once: 3.4 ms a zoomed-out
        // frame of bench/gui_frame against 9.4 ms with a rectangle a column (and 50 ms at mid zoom as polygons).
        const int ih = std::max(1, lane_h - 2);
        QImage bars_img(int(strip.share.size()), ih, QImage::Format_ARGB32_Premultiplied);
        bars_img.fill(Qt::transparent);
        const QRgb rgb = qPremultiply(busy_colour(gpu).rgba());
        for (size_t k = 0; k < strip.share.size(); ++k) {
          if (strip.share[k] <= 0.f) continue;
          const int bh = std::clamp(int(std::lround(double(strip.share[k]) * ih)), 1, ih);
          for (int yy = ih - bh; yy < ih; ++yy) reinterpret_cast<QRgb*>(bars_img.scanLine(yy))[k] = rgb;
        }
        p.drawImage(QRectF(kGutterWidth + vp_.x_of(strip.t0), y + 1, double(strip.share.size()) * bw, ih), bars_img);
        continue;
      }
      auto& bars = gpu ? gpu_bars : host_bars;
      for (size_t k = 0; k < strip.share.size(); ++k) {
        if (strip.share[k] <= 0.f) continue;
        const double bx = vp_.x_of(strip.t0 + double(k) * strip.bucket_ns);
        if (bx + bw < 0 || bx > w - kGutterWidth) continue;
        const double bh = std::max(1.0, double(strip.share[k]) * (lane_h - 2));
        bars.push_back(QRectF(kGutterWidth + bx, bottom - bh, std::max(1.0, bw), bh));
      }
      continue;
    }
    QColor fill = colours_.event_colour(it.colour, it.count > 1);
    if (search_active_ && (it.count > 1 || !matches_search(ref))) fill.setAlpha(60);
    QRectF r(kGutterWidth + x0, y + 1, x1 - x0, lane_h - 2);
    // Steps tile the run: a 1 px gap between neighbours keeps 79 steps of one colour from reading as one bar.
    if (tiles_the_run(track.kind) && it.count == 1 && r.width() >= 4) r.adjust(0, 0, -1, 0);
    p.fillRect(r, fill);
    if (r.width() > 28) {
      QString label = it.count > 1 ? merged_words(track.kind, it.count) : qs(model_->name_of(ref));
      if (it.count == 1 && r.width() > 120 && track.kind != TrackKind::Steps)
        label += "  " + qs(format_duration(it.end - it.start));
      p.setPen(colours_.text_on(fill));
      const QRectF text_rect = r.adjusted(3, 0, -2, 0).intersected(QRectF(kGutterWidth, 0, w - kGutterWidth, h));
      p.drawText(text_rect, Qt::AlignVCenter | Qt::AlignLeft, fm.elidedText(label, Qt::ElideRight, int(text_rect.width())));
    }
  }
  for (auto* bars : {&gpu_bars, &host_bars}) {
    if (bars->empty()) continue;
    p.setPen(Qt::NoPen);
    p.setBrush(busy_colour(bars == &gpu_bars));
    p.drawRects(bars->data(), int(bars->size()));
    p.setBrush(Qt::NoBrush);
  }
  for (const DensityStrip& d : dl.density) {
    const auto* row = layout_.row_of_track(d.track);
    if (!row) continue;
    const int y = row->y - sy;
    if (y + row->height < 0 || y > h) continue;
    QColor c = colours_.dark ? QColor(0x5d, 0xad, 0xe2) : QColor(0x21, 0x75, 0xb8);
    for (size_t b = 0; b < d.values.size(); ++b) {
      if (!d.counts[b]) continue;
      const double x0 = vp_.x_of(d.t0 + double(b) * d.bucket_ns);
      const double bh = std::max(1.0, double(d.values[b]) * (row->height - 3));
      p.fillRect(QRectF(kGutterWidth + x0, y + row->height - 1 - bh, std::max(1.0, d.bucket_ns / vp_.ns_per_px()), bh), c);
    }
  }
  if (time_selection_) {
    const double x0 = vp_.x_of(double(time_selection_->first)), x1 = vp_.x_of(double(time_selection_->second));
    p.fillRect(QRectF(kGutterWidth + x0, 0, std::max(1.0, x1 - x0), h), colours_.time_selection);
  }
  if (selected_) {
    QRectF r = rect_of(*selected_);
    if (!r.isNull()) {
      p.setPen(QPen(colours_.selection, 2));
      p.setBrush(Qt::NoBrush);
      p.drawRect(r.adjusted(-1, 0, 1, 0));
    }
  }
  p.setClipping(false);

  // Gutter: group headers and track titles.
  p.fillRect(QRect(0, 0, kGutterWidth, h), colours_.gutter);
  // The gutter's edge first: a group header runs across it ("Job critical path across ranks", "GPU 0 rank 1 ·
  // Tesla V100-SXM2-32GB") and its fill covers the line, which cut through the title when drawn last.
  p.setPen(colours_.grid);
  p.drawLine(kGutterWidth - 1, 0, kGutterWidth - 1, h);
  QFont bold = font();
  bold.setBold(true);
  for (const auto& row : layout_.rows()) {
    const int y = row.y - sy;
    if (y + row.height < 0 || y > h) continue;
    if (row.kind == TimelineLayout::RowKind::Header) {
      // The straggler's processes and GPUs: their headers in the straggler's colour, and said.
      const bool straggler = model_->straggler_group(row.group);
      p.fillRect(QRect(0, y, w, row.height), straggler ? colours_.straggler : colours_.group_header);
      p.setFont(bold);
      p.setPen(colours_.text);
      p.drawText(QRect(6, y, w - 12, row.height), Qt::AlignVCenter | Qt::AlignLeft,
                 QString(row.open ? "▾ " : "▸ ") + qs(row.group) + (straggler ? tr("  — straggler") : QString()));
      continue;
    }
    if (row.kind == TimelineLayout::RowKind::Others) {
      p.setFont(small);
      p.setPen(colours_.text);
      p.drawText(QRect(6, y, kGutterWidth - 10, row.height), Qt::AlignVCenter | Qt::AlignLeft,
                 (row.open ? "▾ " : "▸ ") + (row.others == 1 ? tr("1 other thread") : tr("%1 other threads").arg(row.others)));
      continue;
    }
    p.setFont(small);
    p.setPen(colours_.text);
    if (row.track == straggler_track) {
      QFont b = small;
      b.setBold(true);
      p.setFont(b);
      p.fillRect(QRect(0, y, kGutterWidth - 1, row.height), colours_.straggler);
    }
    // A stream whose graph replays open: ▸ closed, ▾ open (a click on the title toggles).
    const QString title = (tracks[row.track].graphs_open_inside ? (layout_.graphs_open(row.track) ? "▾ " : "▸ ") : "") +
                          qs(tracks[row.track].title);
    p.drawText(QRect(14, y, kGutterWidth - 18, std::min(row.height, lane_h)), Qt::AlignVCenter | Qt::AlignLeft,
               gutter_title(fm, title, kGutterWidth - 18));
  }
}

std::vector<QLineF> TimelineView::rank_path_links() const {
  std::vector<QLineF> out;
  const CrossRank* cr = model_ ? model_->cross_rank() : nullptr;
  if (!cr) return out;
  const double w = viewport()->width();
  for (size_t i = 0; i + 1 < cr->path.size(); ++i) {
    const RankPathSegment &a = cr->path[i], &b = cr->path[i + 1];
    if (a.step != b.step || a.rank == b.rank) continue;  // one rank's own work then transfer: side by side already
    const QRectF ra = rect_of({EventKind::RankPath, uint32_t(i)}), rb = rect_of({EventKind::RankPath, uint32_t(i + 1)});
    if (ra.isNull() || rb.isNull()) continue;
    if ((ra.right() < kGutterWidth && rb.left() < kGutterWidth) || (ra.right() > w && rb.left() > w)) continue;
    out.emplace_back(QPointF(ra.right(), ra.center().y()), QPointF(rb.left(), rb.center().y()));
  }
  return out;
}

// The job's critical path across ranks: each hand-over from the rank that arrived last at one collective to the
// rank the job waits on next, as a line between their lanes.
void TimelineView::paint_rank_path(QPainter& p) {
  const auto links = rank_path_links();
  if (links.empty()) return;
  p.save();
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setClipRect(QRect(kGutterWidth, 0, viewport()->width() - kGutterWidth, viewport()->height()));
  p.setPen(QPen(colours_.rank_path, 1.8));
  p.setBrush(colours_.rank_path);
  for (const QLineF& l : links) {
    p.drawLine(l);
    p.drawEllipse(l.p1(), 2.5, 2.5);
    p.drawEllipse(l.p2(), 2.5, 2.5);
  }
  p.restore();
}

void TimelineView::paint_flow(QPainter& p) {
  if (!selected_ || !model_) return;
  std::vector<std::pair<EventRef, EventRef>> flows;  // API call → GPU activity
  if (auto api = model_->launching_api_call(*selected_)) flows.push_back({{EventKind::ApiCall, *api}, *selected_});
  if (selected_->kind == EventKind::ApiCall)
    for (EventRef g : model_->launched_by(selected_->row)) flows.push_back({*selected_, g});
  p.setRenderHint(QPainter::Antialiasing, true);
  p.setClipRect(QRect(kGutterWidth, 0, viewport()->width() - kGutterWidth, viewport()->height()));
  for (const auto& [from, to] : flows) {
    const QRectF a = rect_of(from), b = rect_of(to);
    if (a.isNull() || b.isNull()) continue;
    const QPointF s(a.right(), a.center().y()), e(b.left(), b.center().y());
    QPainterPath path(s);
    const double dx = std::max(20.0, std::abs(e.x() - s.x()) / 2);
    path.cubicTo(s + QPointF(dx, 0), e - QPointF(dx, 0), e);
    p.setPen(QPen(colours_.flow, 1.6));
    p.setBrush(Qt::NoBrush);
    p.drawPath(path);
    QPolygonF head;
    head << e << e + QPointF(-7, -4) << e + QPointF(-7, 4);
    p.setBrush(colours_.flow);
    p.drawPolygon(head);
  }
  p.setClipping(false);
  p.setRenderHint(QPainter::Antialiasing, false);
}

void TimelineView::paint_ruler(QPainter& p) {
  const int w = ruler_->width();
  p.fillRect(QRect(0, 0, w, kRulerHeight), colours_.gutter);
  p.setPen(colours_.grid);
  p.drawLine(0, kRulerHeight - 1, w, kRulerHeight - 1);
  if (!model_) return;
  QFont small = font();
  small.setPointSizeF(std::max(6.0, font().pointSizeF() - 1));
  p.setFont(small);
  const double step = ruler_step(vp_);
  const double origin = double(model_->begin());
  p.setClipRect(QRect(kGutterWidth, 0, w - kGutterWidth, kRulerHeight));
  // Ticks at whole steps from the first event, as they are labelled: placed at whole steps of the clock, the
  // "1.3 s" tick of a run that began at 30 ms stood at 1.27 s.
  for (double t = first_ruler_tick(vp_, origin, step); t < vp_.t1; t += step) {
    const int x = kGutterWidth + int(std::lround(vp_.x_of(t)));
    p.setPen(colours_.muted_text);
    p.drawLine(x, kRulerHeight - 8, x, kRulerHeight - 1);
    for (int k = 1; k < 5; ++k) {
      const int xm = kGutterWidth + int(std::lround(vp_.x_of(t + step * k / 5)));
      p.drawLine(xm, kRulerHeight - 4, xm, kRulerHeight - 1);
    }
    p.setPen(colours_.text);
    p.drawText(QRect(x + 3, 2, 160, kRulerHeight - 10), Qt::AlignLeft | Qt::AlignVCenter, ruler_label(t - origin, step));
  }
  if (time_selection_) {
    const double x0 = kGutterWidth + vp_.x_of(double(time_selection_->first));
    const double x1 = kGutterWidth + vp_.x_of(double(time_selection_->second));
    p.fillRect(QRectF(x0, 0, std::max(1.0, x1 - x0), kRulerHeight), colours_.time_selection);
    const QString d = qs(format_duration(double(time_selection_->second - time_selection_->first)));
    p.setPen(colours_.text);
    p.drawText(QRectF(x0, 0, std::max(80.0, x1 - x0), kRulerHeight - 8), Qt::AlignCenter, d);
  }
  p.setClipping(false);
  p.setPen(colours_.muted_text);
  p.drawText(QRect(6, 0, kGutterWidth - 12, kRulerHeight), Qt::AlignVCenter | Qt::AlignLeft,
             tr("span %1").arg(qs(format_duration(vp_.t1 - vp_.t0))));
}

// ---- geometry for tests and clicks

QPoint TimelineView::point_for(double t, int track, int lane) const {
  const int y = layout_.lane_y(track, lane) - scroll_y() + layout_.metrics().lane_height / 2;
  return QPoint(kGutterWidth + int(std::lround(vp_.x_of(t))), y);
}

std::optional<Hit> TimelineView::hit_at(QPoint v) const {
  if (!model_) return std::nullopt;
  if (v.x() < kGutterWidth || v.y() < 0) return std::nullopt;
  return hit_test(*model_, layout_, vp_, v.x() - kGutterWidth, v.y() + scroll_y());
}

QString TimelineView::tooltip_at(QPoint vpos) const {
  if (!model_ || vpos.x() < kGutterWidth) return {};
  auto hit = hit_test(*model_, layout_, vp_, vpos.x() - kGutterWidth, vpos.y() + scroll_y());
  if (hit && hit->sample_row) return sample_tooltip(*model_, *hit->sample_row);
  if (hit) {
    // Inside a merged block the hit is one of many: say so.
    if (current_) {
      const double t = vp_.time_at(vpos.x() - kGutterWidth);
      for (const DrawItem& it : current_->items)
        if (it.track == hit->track && it.lane == hit->lane && it.count > 1 && it.start <= t && t <= it.end) {
          if (tiles_the_run(model_->tracks()[size_t(it.track)].kind))
            return tr("%1 in %2 — zoom in to see them")
                .arg(merged_words(model_->tracks()[size_t(it.track)].kind, it.count))
                .arg(qs(format_duration(it.end - it.start)));
          const Lane& lane = model_->tracks()[size_t(it.track)].lane_at(size_t(it.lane));
          const auto a = int64_t(it.start), b = int64_t(it.end);
          const double busy = b > a ? 100.0 * double(lane.busy_in(a, b)) / double(b - a) : 0.0;
          return tr("%1 events in %2, busy %3 % of it — zoom in to see them")
              .arg(it.count)
              .arg(qs(format_duration(it.end - it.start)))
              .arg(busy, 0, 'f', busy < 10 ? 1 : 0);
        }
    }
    const EventRef e = hit->event;
    const double d = double(model_->end_of(e) - model_->start_of(e));
    const std::string shown = model_->name_of(e), full = model_->full_name_of(e);
    QString tip = QString("<b>%1</b><br>%2 · %3 · at %4")
                      .arg(qs(shown).toHtmlEscaped(), to_string(e.kind), qs(format_duration(d)),
                           qs(format_duration(double(model_->start_of(e) - model_->begin()))));
    if (full != shown) tip += "<br><small>" + qs(full).toHtmlEscaped() + "</small>";
    return tip;
  }
  return {};
}

// ---- interaction

void TimelineView::wheelEvent(QWheelEvent* e) {
  if (!model_) return;
  const QPoint pos = e->position().toPoint();
  const QPoint delta = e->angleDelta();
  if (e->modifiers() & Qt::ShiftModifier) {
    verticalScrollBar()->setValue(verticalScrollBar()->value() - delta.y() / 2);
  } else if (delta.x() != 0 && std::abs(delta.x()) > std::abs(delta.y())) {
    vp_.pan_px(-delta.x() / 4.0);
    view_changed();
  } else if (delta.y() != 0) {
    const double x = std::clamp(double(pos.x() - kGutterWidth), 0.0, double(content_width()));
    vp_.zoom_about(x, std::pow(0.8, delta.y() / 120.0));
    view_changed();
  }
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  press_pos_ = last_pos_ = e->pos();
  moved_ = false;
  const bool select = e->button() == Qt::RightButton ||
                      (e->button() == Qt::LeftButton && (e->modifiers() & Qt::ShiftModifier));
  if (select) {
    drag_ = Drag::Select;
    select_anchor_ = vp_.time_at(e->pos().x() - kGutterWidth);
  } else if (e->button() == Qt::LeftButton) {
    drag_ = Drag::Pan;
    setCursor(Qt::ClosedHandCursor);
  }
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if ((e->pos() - press_pos_).manhattanLength() > 3) moved_ = true;
  if (drag_ == Drag::Pan && moved_) {
    const QPoint d = e->pos() - last_pos_;
    vp_.pan_px(-d.x());
    verticalScrollBar()->setValue(verticalScrollBar()->value() - d.y());
    view_changed();
  } else if (drag_ == Drag::Select && moved_) {
    const double t = vp_.time_at(e->pos().x() - kGutterWidth);
    time_selection_ = std::make_pair(int64_t(std::min(t, select_anchor_)), int64_t(std::max(t, select_anchor_)));
    viewport()->update();
    ruler_->update();
  }
  last_pos_ = e->pos();
}

void TimelineView::mouseReleaseEvent(QMouseEvent* e) {
  const Drag was = drag_;
  drag_ = Drag::None;
  unsetCursor();
  if (was == Drag::Select && moved_ && time_selection_) {
    emit time_range_selected(time_selection_->first, time_selection_->second);
    return;
  }
  if (!moved_ && e->button() == Qt::LeftButton && model_) {
    const auto* row = layout_.row_at(e->pos().y() + scroll_y());
    if (row && row->kind == TimelineLayout::RowKind::Header) {
      toggle_group(std::string(row->group));
      return;
    }
    if (row && row->kind == TimelineLayout::RowKind::Others) {
      toggle_others(std::string(row->group));
      return;
    }
    if (row && row->track >= 0 && e->pos().x() < kGutterWidth && model_->tracks()[size_t(row->track)].graphs_open_inside) {
      toggle_graphs(row->track);
      return;
    }
    auto hit = hit_at(e->pos());
    if (hit && !hit->sample_row) {
      select_event(hit->event);
    } else if (hit && hit->sample_row) {
      // A sample is not "nothing": the finding's row and shading stay; the details show the sample.
      selected_.reset();
      viewport()->update();
      emit sample_selected(quint32(*hit->sample_row));
    } else {
      select_event(std::nullopt);
    }
  }
}

void TimelineView::mouseDoubleClickEvent(QMouseEvent* e) {
  auto hit = hit_at(e->pos());
  if (!hit || hit->sample_row || !model_) return;
  // A graph replay opens into its kernels (its stream's replays show their rows under their blocks).
  if (hit->event.kind == EventKind::GraphReplay && !layout_.graphs_open(hit->track)) toggle_graphs(hit->track);
  zoom_to(double(model_->start_of(hit->event)), double(model_->end_of(hit->event)), 0.25);
}

void TimelineView::keyPressEvent(QKeyEvent* e) {
  if (!model_) return QAbstractScrollArea::keyPressEvent(e);
  const QPoint cursor = viewport()->mapFromGlobal(QCursor::pos());
  const double anchor = (cursor.x() >= kGutterWidth && cursor.x() < viewport()->width())
                            ? double(cursor.x() - kGutterWidth)
                            : content_width() / 2.0;
  switch (e->key()) {
    case Qt::Key_W: vp_.zoom_about(anchor, 0.8); break;
    case Qt::Key_S: vp_.zoom_about(anchor, 1.25); break;
    case Qt::Key_A: vp_.pan_px(-content_width() * 0.1); break;
    case Qt::Key_D: vp_.pan_px(content_width() * 0.1); break;
    case Qt::Key_F: zoom_to_selection(); return;
    case Qt::Key_0:
    case Qt::Key_Home: zoom_to_all(); return;
    case Qt::Key_Escape:
      time_selection_.reset();
      select_event(std::nullopt);
      viewport()->update();
      update();
      return;
    default: return QAbstractScrollArea::keyPressEvent(e);
  }
  view_changed();
}

bool TimelineView::eventFilter(QObject* watched, QEvent* e) {
  if (watched != ruler_ || !model_) return QAbstractScrollArea::eventFilter(watched, e);
  const auto type = e->type();
  if (type != QEvent::MouseButtonPress && type != QEvent::MouseMove && type != QEvent::MouseButtonRelease)
    return QAbstractScrollArea::eventFilter(watched, e);
  auto* me = static_cast<QMouseEvent*>(e);
  const double t = vp_.time_at(me->position().x() - kGutterWidth);  // the ruler and the viewport share x
  if (type == QEvent::MouseButtonPress && me->button() == Qt::LeftButton) {
    drag_ = Drag::Select;
    select_anchor_ = t;
    press_pos_ = me->pos();
    moved_ = false;
  } else if (type == QEvent::MouseMove && drag_ == Drag::Select) {
    if ((me->pos() - press_pos_).manhattanLength() > 3) moved_ = true;
    if (moved_) {
      time_selection_ = std::make_pair(int64_t(std::min(t, select_anchor_)), int64_t(std::max(t, select_anchor_)));
      viewport()->update();
      ruler_->update();
    }
  } else if (type == QEvent::MouseButtonRelease && drag_ == Drag::Select) {
    drag_ = Drag::None;
    if (moved_ && time_selection_) emit time_range_selected(time_selection_->first, time_selection_->second);
  }
  return true;
}

bool TimelineView::viewportEvent(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* he = static_cast<QHelpEvent*>(e);
    const QString tip = tooltip_at(he->pos());
    if (tip.isEmpty()) QToolTip::hideText();
    else QToolTip::showText(he->globalPos(), tip, viewport());
    return true;
  }
  return QAbstractScrollArea::viewportEvent(e);
}

QString TimelineView::gutter_title(const QFontMetrics& fm, const QString& title, int width) {
  if (fm.horizontalAdvance(title) <= width) return title;
  const qsizetype cut = title.lastIndexOf(QStringLiteral(" · "));
  if (cut > 0) {
    QString head = title.left(cut), what = title.mid(cut);
    // A name before its id ("cuda-cloverleaf 1701812 · samples"): the name is shortened, never the id.
    static const QRegularExpression kTrailingId(QStringLiteral(" \\d+$"));
    if (const auto id = kTrailingId.match(head); id.hasMatch() && id.capturedStart() > 0) {
      const int room = width - fm.horizontalAdvance(id.captured() + what);
      if (room >= fm.horizontalAdvance(QStringLiteral("ab…")))
        return fm.elidedText(head.left(id.capturedStart()), Qt::ElideRight, room) + id.captured() + what;
    }
    const int room = width - fm.horizontalAdvance(what);
    if (room >= fm.horizontalAdvance(QStringLiteral("thread …")))
      return fm.elidedText(head, Qt::ElideRight, room) + what;
  }
  return fm.elidedText(title, Qt::ElideRight, width);
}

// ---- selection and search

void TimelineView::select_event(std::optional<EventRef> e, bool scroll_into_view) {
  selected_ = e;
  if (e && scroll_into_view && model_) {
    if (auto loc = model_->locate(*e)) {
      const Track& tr = model_->tracks()[loc->track];
      const bool in_closed_graph = size_t(loc->lane) >= tr.lanes.size() && tr.graphs_open_inside &&
                                   !layout_.graphs_open(loc->track);
      if (!layout_.row_of_track(loc->track) || in_closed_graph) {  // show what was folded away
        layout_state_.collapsed.erase(tr.group);
        if (tr.folded) layout_state_.expanded_others.insert(tr.group);
        if (in_closed_graph) layout_state_.open_graphs.insert(graph_key(tr));
        relayout();
        emit layout_state_changed();
      }
      const int y = layout_.lane_y(loc->track, loc->lane);
      if (y < scroll_y() || y > scroll_y() + viewport()->height() - layout_.metrics().lane_height)
        verticalScrollBar()->setValue(y - viewport()->height() / 3);
    }
    const double s = double(model_->start_of(*e)), en = double(model_->end_of(*e));
    if (en < vp_.t0 || s > vp_.t1) {
      const double span = vp_.t1 - vp_.t0;
      vp_.t0 = (s + en) / 2 - span / 2;
      vp_.t1 = vp_.t0 + span;
      view_changed();
    }
  }
  viewport()->update();
  emit event_selected(e);
}

void TimelineView::set_time_selection(std::optional<std::pair<int64_t, int64_t>> range) {
  time_selection_ = range;
  viewport()->update();
  ruler_->update();
  if (range) emit time_range_selected(range->first, range->second);
}

void TimelineView::set_highlights(std::vector<std::pair<int64_t, int64_t>> ranges) {
  // Their union: a finding's steps and its evidence ranges overlap, and overlapping translucent bands would stripe
  // the view with darker shades that mean nothing.
  std::sort(ranges.begin(), ranges.end());
  highlights_.clear();
  for (const auto& r : ranges) {
    if (!highlights_.empty() && r.first <= highlights_.back().second)
      highlights_.back().second = std::max(highlights_.back().second, r.second);
    else
      highlights_.push_back(r);
  }
  viewport()->update();
}

size_t TimelineView::set_search(const QString& text) {
  search_hits_.clear();
  search_names_.clear();
  search_active_ = !text.isEmpty() && model_;
  if (!search_active_) {
    viewport()->update();
    return 0;
  }
  const store::Trace& t = model_->trace();
  const std::string needle = text.toLower().toStdString();
  search_names_.assign(t.strings.size(), 0);
  for (size_t i = 1; i < t.strings.size(); ++i) {
    std::string s = t.strings.get(static_cast<store::StringId>(i));
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    search_names_[i] = s.find(needle) != std::string::npos;
  }
  constexpr size_t kMaxHits = 1'000'000;
  for (const Track& tr : model_->tracks())
    for (size_t li = 0; li < tr.all_lanes(); ++li) {  // a graph replay's kernels too
      const Lane& l = tr.lane_at(li);
      for (size_t i = 0; i < l.size() && search_hits_.size() < kMaxHits; ++i)
        if (matches_search(l.ref(i))) search_hits_.push_back(l.ref(i));
    }
  std::sort(search_hits_.begin(), search_hits_.end(),
            [&](EventRef a, EventRef b) { return model_->start_of(a) < model_->start_of(b); });
  viewport()->update();
  return search_hits_.size();
}

bool TimelineView::next_match(bool backwards) {
  if (search_hits_.empty() || !model_) return false;
  const int64_t from = selected_ ? model_->start_of(*selected_) : int64_t(vp_.t0);
  auto less = [&](EventRef a, int64_t t) { return model_->start_of(a) < t; };
  size_t i;
  if (!backwards) {
    i = static_cast<size_t>(std::lower_bound(search_hits_.begin(), search_hits_.end(), from + (selected_ ? 1 : 0), less) -
                            search_hits_.begin());
    if (i >= search_hits_.size()) i = 0;
  } else {
    i = static_cast<size_t>(std::lower_bound(search_hits_.begin(), search_hits_.end(), from, less) - search_hits_.begin());
    i = i == 0 ? search_hits_.size() - 1 : i - 1;
  }
  select_event(search_hits_[i], true);
  return true;
}

}  // namespace stepscope::gui

namespace stepscope::gui {
void PaintForwarder::paintEvent(QPaintEvent*) {
  QPainter p(this);
  paint_(p);
}
}  // namespace stepscope::gui
