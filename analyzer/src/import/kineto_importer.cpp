#include "import/kineto_importer.h"

#include "import/kineto_parser.h"

namespace stepscope::analyzer::import {

store::Trace KinetoImporter::import(const char* json, size_t size) {
  return parse_kineto_json(json, size, file_, progress_, options_);
}

}  // namespace stepscope::analyzer::import
