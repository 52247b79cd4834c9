#include "packed.h"

#include "stepscope/store/store.h"

namespace stepscope::store::packed {

namespace {

Layout make(const char* table, std::vector<Column> columns, int hi) {
  Layout l;
  l.table = table;
  l.packed_table = nullptr;
  l.columns = std::move(columns);
  l.hi_column = hi;
  return l;
}

}  // namespace

// Column order is the row layout's (docs/schema.md), so a row decodes to what `SELECT *` gave in schema v4.
// clang-format off
const Layout& kernels() {
  static const Layout l = [] {
    Layout k = make("kernels",
                    {{"start_ns"}, {"end_ns", 0}, {"device"}, {"context"}, {"stream"}, {"correlation"},
                     {"grid_x"}, {"grid_y"}, {"grid_z"}, {"block_x"}, {"block_y"}, {"block_z"}, {"registers"},
                     {"shared_memory"}, {"name"}, {"graph_id"}, {"pid"}, {"graph_node_id"}},
                    1);
    k.packed_table = "packed_kernels";
    return k;
  }();
  return l;
}
const Layout& api_calls() {
  static const Layout l = [] {
    Layout a = make("api_calls",
                    {{"start_ns"}, {"end_ns", 0}, {"pid"}, {"tid"}, {"kind"}, {"name"}, {"correlation"},
                     {"return_code"}, {"stack"}},
                    1);
    a.packed_table = "packed_api_calls";
    return a;
  }();
  return l;
}
const Layout& samples() {
  static const Layout l = [] {
    Layout s = make("samples", {{"time_ns"}, {"pid"}, {"tid"}, {"stack"}, {"on_cpu"}, {"periods"}}, 0);
    s.packed_table = "packed_samples";
    return s;
  }();
  return l;
}
const Layout& stacks() {
  static const Layout l = [] {
    Layout s = make("stacks", {{"id"}, {"parent", 0}, {"frame"}}, 0);
    s.packed_table = "packed_stacks";
    return s;
  }();
  return l;
}
// clang-format on
const std::vector<const Layout*>& layouts() {
  static const std::vector<const Layout*> all{&kernels(), &api_calls(), &samples(), &stacks()};
  return all;
}

}  // namespace stepscope::store::packed
