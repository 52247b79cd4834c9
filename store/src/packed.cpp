#include "packed.h"

#include "stepscope/store/store.h"

namespace stepscope::store::packed {

// Column order is the row layout's (docs/schema.md), so a row decodes to what `SELECT *` gave in schema v4.
// clang-format off
const Layout& kernels() {
  static const Layout l{"kernels", "packed_kernels",
                        {{"start_ns"}, {"end_ns", 0}, {"device"}, {"context"}, {"stream"}, {"correlation"},
                         {"grid_x"}, {"grid_y"}, {"grid_z"}, {"block_x"}, {"block_y"}, {"block_z"}, {"registers"},
                         {"shared_memory"}, {"name"}, {"graph_id"}, {"pid"}, {"graph_node_id"}},
                        1};
  return l;
}
const Layout& api_calls() {
  static const Layout l{"api_calls", "packed_api_calls",
                        {{"start_ns"}, {"end_ns", 0}, {"pid"}, {"tid"}, {"kind"}, {"name"}, {"correlation"},
                         {"return_code"}, {"stack"}},
                        1};
  return l;
}
const Layout& samples() {
  static const Layout l{"samples", "packed_samples",
                        {{"time_ns"}, {"pid"}, {"tid"}, {"stack"}, {"on_cpu"}, {"periods"}}, 0};
  return l;
}
const Layout& stacks() {
  static const Layout l{"stacks", "packed_stacks", {{"id"}, {"parent", 0}, {"frame"}}, 0};
  return l;
}
const Layout& ranges() {
  static const Layout l{"ranges", "packed_ranges",
                        {{"start_ns"}, {"end_ns", 0}, {"pid"}, {"tid"}, {"domain"}, {"name"}, {"depth"}, {"source"},
                         {"correlation"}},
                        1, 6};
  return l;
}
// clang-format on
const std::vector<const Layout*>& layouts() {
  static const std::vector<const Layout*> all{&kernels(), &api_calls(), &samples(), &stacks(), &ranges()};
  return all;
}

}  // namespace stepscope::store::packed
