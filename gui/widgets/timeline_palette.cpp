#include "timeline_palette.h"

#include "stepscope/gui/timeline_model.h"

namespace stepscope::gui {

TimelinePalette TimelinePalette::from(const QPalette& app) {
  TimelinePalette p;
  p.dark = app.color(QPalette::Window).lightness() < 128;
  if (p.dark) {
    p.background = QColor(0x1e, 0x1f, 0x22);
    p.alternate = QColor(0x24, 0x25, 0x29);
    p.gutter = QColor(0x2b, 0x2d, 0x31);
    p.group_header = QColor(0x34, 0x37, 0x3d);
    p.text = QColor(0xe6, 0xe6, 0xe6);
    p.muted_text = QColor(0x9a, 0x9a, 0xa0);
    p.grid = QColor(0x3a, 0x3c, 0x42);
    p.selection = QColor(0xff, 0xff, 0xff);
    p.time_selection = QColor(0x4f, 0x8c, 0xff, 50);
    p.highlight = QColor(0xff, 0xc1, 0x07, 40);
    p.flow = QColor(0xff, 0x80, 0x40);
    p.gpu_busy = QColor(0x4c, 0xc0, 0x7a);
    p.host_busy = QColor(0x6f, 0x9f, 0xd8);
    p.straggler = QColor(0x7a, 0x2e, 0x2e);
    p.rank_path = QColor(0xff, 0x6b, 0x6b);
  } else {
    p.background = QColor(0xfb, 0xfb, 0xfc);
    p.alternate = QColor(0xf2, 0xf3, 0xf5);
    p.gutter = QColor(0xe9, 0xeb, 0xee);
    p.group_header = QColor(0xdc, 0xdf, 0xe4);
    p.text = QColor(0x1d, 0x1d, 0x1f);
    p.muted_text = QColor(0x5f, 0x63, 0x68);
    p.grid = QColor(0xd5, 0xd8, 0xdc);
    p.selection = QColor(0x00, 0x00, 0x00);
    p.time_selection = QColor(0x1a, 0x73, 0xe8, 40);
    p.highlight = QColor(0xff, 0xb3, 0x00, 45);
    p.flow = QColor(0xd9, 0x48, 0x0f);
    p.gpu_busy = QColor(0x1e, 0x8e, 0x4e);
    p.host_busy = QColor(0x3a, 0x6e, 0xb5);
    p.straggler = QColor(0xf6, 0xc9, 0xc4);
    p.rank_path = QColor(0xc6, 0x28, 0x28);
  }
  return p;
}

QColor TimelinePalette::event_colour(uint32_t key, bool muted) const {
  QColor c;
  if ((key & TimelineModel::kSpecialMask) == TimelineModel::kSpecialMask) {
    const uint32_t kind = key & 0xFFFF0000u, low = key & 0xFFFFu;
    if (kind == TimelineModel::kMemcpyKey) {
      c = low == static_cast<uint32_t>(store::CopyKind::HtoD)   ? QColor(0x2e, 0x9d, 0x5b)
          : low == static_cast<uint32_t>(store::CopyKind::DtoH) ? QColor(0xc0, 0x39, 0x2b)
                                                                : QColor(0x8e, 0x6c, 0xc9);
    } else if (kind == TimelineModel::kMemsetKey) {
      c = QColor(0x7f, 0x8c, 0x8d);
    } else if (kind == TimelineModel::kDataWaitKey) {
      c = QColor(0xe6, 0x7e, 0x22);
    } else if (kind == TimelineModel::kSyncKey) {
      c = QColor(0xc0, 0x39, 0x2b);
    } else if (kind == TimelineModel::kStepKey) {
      // input, launch, sync, host, gpu, unknown
      static const QColor bound[] = {QColor(0xe6, 0x7e, 0x22), QColor(0x8e, 0x44, 0xad), QColor(0xc0, 0x39, 0x2b),
                                     QColor(0x29, 0x80, 0xb9), QColor(0x27, 0xae, 0x60), QColor(0x95, 0xa5, 0xa6)};
      c = bound[std::min<uint32_t>(low, 5)];
    } else if (kind == TimelineModel::kPathKey) {
      // analyzer::PathKind: GPU compute, communication, memory; launch, host, data wait, sync, other — the
      // step bar's colours (GPU green, launch purple, host blue, data orange, sync red).
      static const QColor path[] = {QColor(0x27, 0xae, 0x60), QColor(0x16, 0xa0, 0x85), QColor(0x8e, 0x6c, 0xc9),
                                    QColor(0x8e, 0x44, 0xad), QColor(0x29, 0x80, 0xb9), QColor(0xe6, 0x7e, 0x22),
                                    QColor(0xc0, 0x39, 0x2b), QColor(0x95, 0xa5, 0xa6)};
      c = path[std::min<uint32_t>(low, 7)];
    } else if (kind == TimelineModel::kGraphKey) {
      // A CUDA graph replay: calmer than the kernels inside it (which take a hue from their name), one hue a graph.
      c = QColor::fromHsv(static_cast<int>((low * 47u + 200u) % 360u), 70, dark ? 150 : 200);
    } else if (kind == TimelineModel::kRankPathKey) {
      // The job's critical path across ranks: a rank's own work (host blue, as the step bar's host), the transfer
      // (communication teal, as the critical path's).
      c = low ? QColor(0x16, 0xa0, 0x85) : QColor(0x29, 0x80, 0xb9);
    } else if (kind == TimelineModel::kRankWaitKey) {
      c = QColor(0xc0, 0x39, 0x2b);  // a collective that waited for the straggler: the colour of a wait (sync)
    } else if (kind == TimelineModel::kFindingKey) {
      c = low == 2 ? QColor(0xd3, 0x2f, 0x2f) : low == 1 ? QColor(0xf5, 0x7c, 0x00) : QColor(0xfb, 0xc0, 0x2d);
    } else {
      c = QColor(0x95, 0xa5, 0xa6);
    }
  } else {
    // Same name, same colour: a hue from a hash of the string id, with fixed saturation and value so
    // neighbouring kernels stay distinguishable yet calm.
    uint32_t h = key * 2654435761u;
    const int hue = static_cast<int>((h >> 8) % 360);
    c = QColor::fromHsv(hue, dark ? 120 : 110, dark ? 185 : 225);
  }
  if (muted) {
    c = dark ? c.darker(150) : c.lighter(125);
    c.setHsv(c.hue(), c.saturation() / 2, c.value());
  }
  return c;
}

QColor TimelinePalette::text_on(const QColor& fill) const {
  return fill.lightness() > 140 ? QColor(0x10, 0x10, 0x10) : QColor(0xf5, 0xf5, 0xf5);
}

}  // namespace stepscope::gui
