// Writes kernels in committed batches forever, printing the committed row count after each commit.
// store crash test SIGKILLs it and checks the file holds at least that many rows.
#include <cstdio>

#include "stepscope/store/store.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  using namespace stepscope::store;
  StoreWriter w(argv[1]);
  StringId name = w.intern("crash_kernel");
  int64_t committed = 0;
  for (int64_t i = 0;; ++i) {
    Kernel k;
    k.start = i * 10;
    k.end = i * 10 + 5;
    k.name = name;
    w.add(k);
    if ((i + 1) % 1000 == 0) {
      w.flush();
      committed = i + 1;
      std::printf("committed %lld\n", static_cast<long long>(committed));
      std::fflush(stdout);
    }
  }
}
