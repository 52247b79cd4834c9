#include "schema.h"

namespace stepscope::store::schema {

// Keep docs/schema.md in step with this text. Tables every store has:
const char* const kCreateTables = R"SQL(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings(id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE processes(pid INTEGER NOT NULL, name INTEGER NOT NULL, parent_pid INTEGER NOT NULL);
CREATE TABLE threads(pid INTEGER NOT NULL, tid INTEGER NOT NULL, name INTEGER NOT NULL,
  collector INTEGER NOT NULL DEFAULT 0);
CREATE TABLE devices(id INTEGER NOT NULL, name INTEGER NOT NULL, cc_major INTEGER NOT NULL, cc_minor INTEGER NOT NULL,
  sm_count INTEGER NOT NULL, memory_bytes INTEGER NOT NULL, vendor INTEGER NOT NULL);
CREATE TABLE memcpys(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, device INTEGER NOT NULL,
  stream INTEGER NOT NULL, correlation INTEGER NOT NULL, bytes INTEGER NOT NULL, copy_kind INTEGER NOT NULL,
  src_kind INTEGER NOT NULL, dst_kind INTEGER NOT NULL, pid INTEGER NOT NULL,
  graph_id INTEGER NOT NULL DEFAULT 0, graph_node_id INTEGER NOT NULL DEFAULT 0);
CREATE TABLE memsets(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, device INTEGER NOT NULL,
  stream INTEGER NOT NULL, correlation INTEGER NOT NULL, bytes INTEGER NOT NULL, mem_kind INTEGER NOT NULL,
  pid INTEGER NOT NULL, graph_id INTEGER NOT NULL DEFAULT 0, graph_node_id INTEGER NOT NULL DEFAULT 0);
CREATE TABLE syncs(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
  type INTEGER NOT NULL, device INTEGER NOT NULL, stream INTEGER NOT NULL, correlation INTEGER NOT NULL);
CREATE TABLE frames(id INTEGER PRIMARY KEY, module INTEGER NOT NULL, symbol INTEGER NOT NULL,
  file INTEGER NOT NULL, line INTEGER NOT NULL, kind INTEGER NOT NULL, address INTEGER NOT NULL);
CREATE TABLE data_waits(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
  tid INTEGER NOT NULL, source INTEGER NOT NULL);
CREATE TABLE steps(step_index INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  source INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL);
CREATE TABLE findings(rule INTEGER NOT NULL, severity INTEGER NOT NULL, first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL, est_savings_ns REAL NOT NULL, message INTEGER NOT NULL, evidence TEXT NOT NULL);
CREATE TABLE modules(pid INTEGER NOT NULL, path INTEGER NOT NULL, build_id INTEGER NOT NULL,
  start_address INTEGER NOT NULL, end_address INTEGER NOT NULL, file_offset INTEGER NOT NULL);
CREATE TABLE gpu_windows(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, pid INTEGER NOT NULL);
CREATE TABLE graphs(pid INTEGER NOT NULL, graph_id INTEGER NOT NULL, kind INTEGER NOT NULL,
  source_graph_id INTEGER NOT NULL, created_ns INTEGER NOT NULL, stack INTEGER NOT NULL);
CREATE TABLE graph_nodes(pid INTEGER NOT NULL, graph_id INTEGER NOT NULL, node_id INTEGER NOT NULL,
  source_node_id INTEGER NOT NULL, kind INTEGER NOT NULL, created_ns INTEGER NOT NULL, stack INTEGER NOT NULL);

CREATE VIEW frames_v AS SELECT f.id, m.value AS module, s.value AS symbol, fl.value AS file, f.line, f.kind, f.address
  FROM frames f JOIN strings m ON m.id = f.module JOIN strings s ON s.id = f.symbol JOIN strings fl ON fl.id = f.file;
)SQL";

const char* const kCreateIndexes = R"SQL(
CREATE INDEX IF NOT EXISTS memcpys_by_start ON memcpys(start_ns);
CREATE INDEX IF NOT EXISTS memsets_by_start ON memsets(start_ns);
CREATE INDEX IF NOT EXISTS syncs_by_start ON syncs(start_ns);
CREATE INDEX IF NOT EXISTS data_waits_by_start ON data_waits(start_ns);
)SQL";

// Schema v4's row tables of the five largest: written by a writer that does not pack (WriterOptions::packed).
const char* const kCreateRowTables = R"SQL(
CREATE TABLE kernels(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, device INTEGER NOT NULL,
  context INTEGER NOT NULL, stream INTEGER NOT NULL, correlation INTEGER NOT NULL,
  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,
  registers INTEGER NOT NULL, shared_memory INTEGER NOT NULL, name INTEGER NOT NULL,
  graph_id INTEGER NOT NULL, pid INTEGER NOT NULL, graph_node_id INTEGER NOT NULL DEFAULT 0);
CREATE TABLE api_calls(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, pid INTEGER NOT NULL,
  tid INTEGER NOT NULL, kind INTEGER NOT NULL, name INTEGER NOT NULL, correlation INTEGER NOT NULL,
  return_code INTEGER NOT NULL, stack INTEGER NOT NULL DEFAULT 0);
CREATE TABLE stacks(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL, frame INTEGER NOT NULL);
CREATE TABLE samples(time_ns INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL, stack INTEGER NOT NULL,
  on_cpu INTEGER NOT NULL, periods INTEGER NOT NULL DEFAULT 1);
CREATE TABLE ranges(start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, pid INTEGER NOT NULL, tid INTEGER NOT NULL,
  domain INTEGER NOT NULL, name INTEGER NOT NULL, depth INTEGER NOT NULL, source INTEGER NOT NULL,
  correlation INTEGER NOT NULL);

CREATE VIEW kernels_v AS SELECT k.*, s.value AS name_text FROM kernels k JOIN strings s ON s.id = k.name;
CREATE VIEW api_calls_v AS SELECT a.*, s.value AS name_text FROM api_calls a JOIN strings s ON s.id = a.name;
CREATE VIEW ranges_v AS SELECT r.*, s.value AS name_text, d.value AS domain_text
  FROM ranges r JOIN strings s ON s.id = r.name JOIN strings d ON d.id = r.domain;
)SQL";

const char* const kCreateRowIndexes = R"SQL(
CREATE INDEX IF NOT EXISTS kernels_by_start ON kernels(start_ns);
CREATE INDEX IF NOT EXISTS api_calls_by_start ON api_calls(start_ns);
CREATE INDEX IF NOT EXISTS api_calls_by_correlation ON api_calls(correlation);
CREATE INDEX IF NOT EXISTS samples_by_time ON samples(time_ns);
CREATE INDEX IF NOT EXISTS ranges_by_start ON ranges(start_ns);
)SQL";

// Schema v6: the same five as blocks of rows (packed.h, docs/schema.md "Packed tables"; v5 packed all but
// ranges). lo and hi bound the block's rows: least start and greatest end (kernels, API calls, ranges), least
// and greatest time (samples), id (stacks).
const char* const kCreatePackedTables = R"SQL(
CREATE TABLE packed_kernels(lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE packed_api_calls(lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE packed_samples(lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE packed_stacks(lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE packed_ranges(lo INTEGER NOT NULL, hi INTEGER NOT NULL, rows INTEGER NOT NULL, data BLOB NOT NULL);
)SQL";

}  // namespace stepscope::store::schema
