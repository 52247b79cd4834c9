// GPU windows (`stepscope record --gpu-window N/M`): CUDA activity is traced for the first N steps of every M,
// switched at step boundaries. Before the first boundary the run is traced, so a run without step markers or
// with fewer than N steps is traced whole.
#pragma once

#include <cstdint>

namespace stepscope::collector::cupti {

enum class WindowSwitch { None, Off, On };

// At the boundary that completes `steps` steps (1, 2, ...): switch tracing off, on, or leave it.
inline WindowSwitch window_switch(int64_t steps, int n, int m) {
  if (n <= 0 || m <= n) return WindowSwitch::None;  // "all"
  const int64_t pos = steps % m;
  if (pos == n) return WindowSwitch::Off;
  if (pos == 0) return WindowSwitch::On;
  return WindowSwitch::None;
}

}  // namespace stepscope::collector::cupti
