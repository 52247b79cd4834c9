// The schema's DDL (v5 packed, v4 rows), shared by writer and reader.
#pragma once

namespace stepscope::store::schema {

// Tables every store has, created when a store is created.
extern const char* const kCreateTables;
// Time-range indexes, created at close (after the bulk inserts, which they would slow down).
extern const char* const kCreateIndexes;
// Kernels, API calls, stacks and samples as rows (schema v4) and their indexes...
extern const char* const kCreateRowTables;
extern const char* const kCreateRowIndexes;
// ...or as blocks of rows (schema v5).
extern const char* const kCreatePackedTables;

}  // namespace stepscope::store::schema
