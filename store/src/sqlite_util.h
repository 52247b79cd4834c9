// Thin RAII over the SQLite C API, shared by writer and reader.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <utility>

#include "stepscope/store/store.h"

namespace stepscope::store::detail {

class Statement {
 public:
  Statement() = default;
  Statement(sqlite3* db, const std::string& sql, const std::string& file) : db_(db), file_(file) {
    if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK)
      throw StoreError(file, std::string("SQLite: ") + sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(Statement&& o) noexcept : db_(o.db_), stmt_(o.stmt_), file_(std::move(o.file_)) { o.stmt_ = nullptr; }
  Statement& operator=(Statement&& o) noexcept {
    std::swap(db_, o.db_);
    std::swap(stmt_, o.stmt_);
    std::swap(file_, o.file_);
    return *this;
  }
  sqlite3_stmt* get() const { return stmt_; }
  void bind(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
  void bind(int i, const std::string& v) { sqlite3_bind_text(stmt_, i, v.data(), int(v.size()), SQLITE_TRANSIENT); }
  void bind_static(int i, std::string_view v) {
    sqlite3_bind_text(stmt_, i, v.data(), int(v.size()), SQLITE_STATIC);
  }
  // Steps a statement that returns no rows; resets it for reuse.
  int run() {
    int rc = sqlite3_step(stmt_);
    sqlite3_reset(stmt_);
    return rc;
  }
  bool step_row() { return sqlite3_step(stmt_) == SQLITE_ROW; }
  // SQLite turns text that is no number into 0; in a store every such column is numeric, so that is a damaged
  // or hand-edited file, not a zero (checked only for 0, the one value the conversion can hide behind).
  int64_t col_int(int i) const {
    const int64_t v = sqlite3_column_int64(stmt_, i);
    if (v == 0) {
      const int type = sqlite3_column_type(stmt_, i);
      if (type == SQLITE_TEXT || type == SQLITE_BLOB)
        throw StoreError(file_, std::string("corrupt store: column ") + sqlite3_column_name(stmt_, i) +
                                    " holds " + (type == SQLITE_TEXT ? "text" : "a blob") + " where a number belongs");
    }
    return v;
  }
  double col_double(int i) const { return sqlite3_column_double(stmt_, i); }
  std::string col_text(int i) const {
    auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, i));
    return p ? std::string(p, size_t(sqlite3_column_bytes(stmt_, i))) : std::string();
  }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::string file_;  // named in errors
};

inline void exec(sqlite3* db, const char* sql, const std::string& file) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    throw StoreError(file, "SQLite: " + msg);
  }
}

}  // namespace stepscope::store::detail
