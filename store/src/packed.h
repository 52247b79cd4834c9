// Packed event tables (schema v5, ranges since v6): rows of int64 columns stored as blocks, one SQLite row
// per block of up to kBlockRows rows. docs/schema.md ("Packed tables") is the format's contract.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stepscope::store::packed {

inline constexpr size_t kBlockRows = 8192;
// A block that claims more rows than a writer puts in one is damage, not data (decoding would allocate for
// it).
inline constexpr int64_t kMaxBlockRows = kBlockRows;

// How a column's value is predicted before its difference is stored: from the same column of the row before
// (the first row's prediction is 0), or from another column of the same row (end_ns from start_ns, a stack
// node's parent from its id).
struct Column {
  const char* name;
  int predictor = -1;  // -1: the row before; k >= 0: column k of this row (k < this column)
};

struct Layout {
  const char* table;         // the table as readers know it: "kernels"
  const char* packed_table;  // where its blocks are: "packed_kernels"
  std::vector<Column> columns;
  int hi_column = 0;  // a block's lo is the least of column 0, its hi the greatest of this one (0 or 1)
  int since = 5;      // the schema version that first packs this table (older stores keep it as rows)
};

const Layout& kernels();
const Layout& api_calls();
const Layout& samples();
const Layout& stacks();
const Layout& ranges();
// Every packed table, in the order above.
const std::vector<const Layout*>& layouts();

// Whether this library packs (stepscope_store) or writes and reads rows only (the collector's).
bool available();

// Encodes `rows` rows of `layout.columns.size()` values each (row-major) as one block's data.
std::string encode(const Layout& layout, const int64_t* values, size_t rows);

// Decodes one block into `out` (row-major, appended). Throws StoreError(file, "corrupt store: …") when the
// data is not a block of `rows` rows of this layout.
void decode(const Layout& layout, std::string_view data, int64_t rows, std::vector<int64_t>& out,
            const std::string& file);

}  // namespace stepscope::store::packed
