// Current schema (v4) DDL and column lists shared by writer and reader.
#pragma once

namespace stepscope::store::schema {

// Tables, created when a store is created.
extern const char* const kCreateTables;
// Time-range indexes, created at close (after the bulk inserts, which they would slow down).
extern const char* const kCreateIndexes;

}  // namespace stepscope::store::schema
