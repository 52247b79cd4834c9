// Colours of the timeline, a dark and a light set chosen from the application palette (which follows the
// system theme), so the timeline matches the rest of the window.
#pragma once

#include <QColor>
#include <QPalette>
#include <cstdint>

namespace stepscope::gui {

struct TimelinePalette {
  bool dark = false;
  QColor background, alternate, gutter, group_header, text, muted_text, grid, selection, time_selection, highlight,
      flow;
  // Zoomed-out lanes: the busy share per pixel of a GPU stream, of a thread's calls and ranges.
  QColor gpu_busy, host_busy;
  // A directory of ranks: the straggler's group headers and lane, and the job's critical path joining its rounds.
  QColor straggler, rank_path;

  static TimelinePalette from(const QPalette& app);
  // Fill for an event with TimelineModel::colour_key `key`; merged blocks are drawn `muted`.
  QColor event_colour(uint32_t key, bool muted) const;
  // Text colour that reads on `fill`.
  QColor text_on(const QColor& fill) const;
};

}  // namespace stepscope::gui
