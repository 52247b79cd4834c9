#include "import/kineto_importer.h"

#include "import/kineto_parser.h"

namespace stepscope::analyzer::import {

store::Trace KinetoImporter::import(const char* json, size_t size) {
  return parse_kineto_json(json, size, file_, progress_, options_);
}

store::Trace KinetoImporter::import_stream(size_t size, const std::function<size_t(char*, size_t)>& read,
                                           KinetoParseReport* report) {
  return parse_kineto_stream(size, read, file_, progress_, options_, report);
}

}  // namespace stepscope::analyzer::import
