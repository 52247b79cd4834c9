#!/usr/bin/env bash
# Builds everything into build-test/ and runs the whole suite (the README's test command; CI runs this).
#   scripts/test.sh --sanitize   instead: the suite built with ASan + UBSan (build-asan/; tests labelled plain_only,
#                                whose subject is no instrumented code, left out), the collector's
#                                ring/drain test with TSan (build-tsan/), and each libFuzzer target for
#                                STEPSCOPE_FUZZ_RUNS (20000) executions (build-fuzz/); see docs/reliability.md
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
sanitize=0
[[ ${1:-} == --sanitize ]] && sanitize=1

if [[ $(id -u) -eq 0 ]]; then
  bash scripts/install-deps.sh
else
  bash scripts/install-deps.sh || echo "test.sh: continuing with what is installed"
fi
# The Python tests need torch and tensorflow-cpu in a cached virtual environment; they skip (saying why)
# when it cannot be made.
if [[ -x scripts/python-env.sh ]]; then
  bash scripts/python-env.sh || echo "test.sh: Python environment incomplete; framework tests will say SKIPPED"
fi

jobs=$(nproc)
if [[ $sanitize == 1 ]]; then
  # The collector library is injected into arbitrary programs (python, sh): a sanitizer runtime cannot be
  # preloaded into them, so `stepscope record` in the sanitized suite injects the plain build's library, and
  # its concurrency is proven by the TSan ring test below.
  cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
  cmake --build build-test -j"$jobs" --target stepscope_collector stepscope
  # -O1: the usual sanitizer setting (fast enough to run, short stack traces stay exact). -g1: line tables, all a
  # sanitizer report prints, at a fraction of -g's compile and link time. No CUDA samples: nvcc's host code is
  # not instrumented and no test of this build runs them.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEPSCOPE_SANITIZE=address,undefined \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DSTEPSCOPE_CUDA_SAMPLES=OFF
  cmake --build build-asan -j"$jobs"
  (cd build-asan &&
    STEPSCOPE_COLLECTOR_LIB="$root/build-test/collector/libstepscope_collector.so" \
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0" \
    LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --output-on-failure -j"$jobs" --timeout 1200 --label-exclude plain_only)
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEPSCOPE_SANITIZE=thread
  cmake --build build-tsan -j"$jobs" --target collector_ring_test
  TSAN_OPTIONS="halt_on_error=1" build-tsan/collector/tests/collector_ring_test
  STEPSCOPE_CLI="$root/build-test/cli/stepscope" bash bench/fuzz/run.sh "${STEPSCOPE_FUZZ_RUNS:-20000}"
  exit 0
fi
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-test -j"$jobs"
cd build-test
ctest --output-on-failure -j"$jobs" --timeout 600
