// libFuzzer target: Nsight Systems SQLite export → store::Trace, as `stepscope import x.sqlite` reads it.
#include <cstdint>

#include "fuzz_file.h"
#include "import/nsys_sqlite_importer.h"
#include "stepscope/store/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stepscope;
  const std::string& path = fuzz::scratch_path("nsys.sqlite");
  fuzz::write_input(path, data, size);
  try {
    if (store::sniff_file(path) == store::FileKind::NsysSqlite)
      analyzer::import::NsysSqliteImporter(path, "fuzz.sqlite").import();
  } catch (const store::StoreError&) {
  }
  return 0;
}
