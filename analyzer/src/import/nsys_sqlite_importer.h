// Nsight Systems SQLite export (`nsys export --type sqlite`, schema 2.x and 3.x) → store::Trace.
// Tables and columns drift between versions: every query is built from what the file has.
#pragma once

#include <string>

#include "stepscope/store/records.h"

namespace stepscope::analyzer::import {

class NsysSqliteImporter {
 public:
  // `db_path` is the SQLite file to open (perhaps a decompressed temporary); `source_file` names the
  // user's file in errors and meta.
  NsysSqliteImporter(std::string db_path, std::string source_file)
      : db_path_(std::move(db_path)), file_(std::move(source_file)) {}
  store::Trace import();

 private:
  std::string db_path_, file_;
};

}  // namespace stepscope::analyzer::import
