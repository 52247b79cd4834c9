// Loading any input stepscope understands into the in-memory trace model.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "stepscope/store/records.h"
#include "stepscope/store/store.h"

namespace stepscope::analyzer {

// How a load went, for tests and benches.
struct LoadReport {
  // A JSON trace parsed as it was read (a plain file) or inflated (gzip): its text never held whole.
  bool streamed = false;
  uint64_t text_buffer_bytes = 0;  // then: the chunk buffers the text went through, all together
};

struct LoadOptions {
  // Called now and then with (bytes done, bytes total) for big inputs; may be empty.
  std::function<void(uint64_t, uint64_t)> progress;
  // Threads parsing a Kineto/Chrome JSON trace of 1 MiB or more (0: the machine's cores, at most 8; 1: one).
  unsigned threads = 0;
  LoadReport* report = nullptr;  // filled in when set
};

// Loads a stepscope store, Kineto/Chrome trace JSON (plain, .gz, .zst) or an Nsight Systems SQLite export
// (plain or .gz), detected by content. Throws store::StoreError ("FILE: reason") on bad input.
store::Trace load_trace(const std::string& path, const LoadOptions& options = {});

// A stepscope store as load_trace reads it; `kernels` false leaves its kernels out (the store's each_kernel
// and kernel_at read them).
store::Trace load_store(const store::StoreReader& store, bool kernels = true);

// Several files into one trace (e.g. repeated runs or ranks); string tables are merged.
store::Trace load_traces(const std::vector<std::string>& paths, const LoadOptions& options = {});

// Appends every row of `from` to `into`, remapping string ids, frame and stack ids.
void merge_into(store::Trace& into, const store::Trace& from);
// Puts every table of a merged trace back in time order (stable: equal starts keep their merge order).
void sort_by_time(store::Trace& t);

}  // namespace stepscope::analyzer
