// libFuzzer target: the store reader (every command opens stores through it).
#include <cstdint>

#include "fuzz_file.h"
#include "stepscope/store/store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stepscope;
  const std::string& path = fuzz::scratch_path("store.db");
  fuzz::write_input(path, data, size);
  try {
    store::StoreReader reader(path);
    (void)reader.meta();
    store::Trace t = reader.load();
    (void)t;
  } catch (const store::StoreError&) {
  }
  return 0;
}
