// The block codec where it is not linked (the collector: its parts are rows, WriterOptions::packed = false).
#include "packed.h"
#include "stepscope/store/store.h"

namespace stepscope::store::packed {

bool available() {
  return false;
}

std::string encode(const Layout& layout, const int64_t*, size_t) {
  throw StoreError("",
                   std::string("cannot pack ") + layout.table + ": this part of stepscope writes rows only");
}

void decode(const Layout& layout, std::string_view, int64_t, std::vector<int64_t>&, const std::string& file) {
  throw StoreError(
      file, std::string("a packed store (schema 5 or later): this part of stepscope reads rows only (") +
                layout.packed_table + ")");
}

}  // namespace stepscope::store::packed
