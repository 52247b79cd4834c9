#!/usr/bin/env bash
# Builds everything into build-test/ and runs the whole suite (the README's test command; CI runs this).
#   scripts/test.sh --sanitize   instead: the suite built with ASan + UBSan by clang (build-asan/; tests labelled
#                                plain_only, whose subject is no instrumented code, and framework, whose
#                                instrumented part the framework-free tests take, left out), the collector's
#                                ring/drain test and the chunked JSON parse test with TSan (build-tsan/), and
#                                each libFuzzer target (built in
#                                build-asan/) for STEPSCOPE_FUZZ_RUNS (20000) executions or STEPSCOPE_FUZZ_SECONDS
#                                (40), whichever ends first; see docs/reliability.md
#   scripts/test.sh --sanitize-build   only the builds of --sanitize (not build-test/)
# STEPSCOPE_SANITIZED_PREBUILD=1 (.ci/run): the plain run also starts --sanitize-build in the background at the
# lowest CPU and I/O priority, so the sanitized trees are built on the cores the suite leaves idle (its tests
# wait on child processes; a test marked SERIAL runs alone). A later --sanitize waits for its ASan tree, runs the
# ASan suite while the TSan build finishes, then waits for that.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
mode=plain
case ${1:-} in
  --sanitize) mode=sanitize ;;
  --sanitize-build) mode=sanitize-build ;;
  "") ;;
  *) echo "test.sh: unknown option $1 (--sanitize, --sanitize-build)" >&2; exit 2 ;;
esac
jobs=$(nproc)
# Each phase's end on stdout (and in the background build's log): where a CI run's time went. .ci/run collects
# them (STEPSCOPE_PHASE_LOG) and prints them all at its end, passed or failed.
phase() {
  echo "test.sh: $(date +%T) $* (${SECONDS} s)"
  [[ -z ${STEPSCOPE_PHASE_LOG:-} ]] || echo "$(date +%T) test.sh${mode:+ ($mode)}: $* (${SECONDS} s)" >> "$STEPSCOPE_PHASE_LOG"
}
# The Debian packages first (the background sanitized build, started by the plain run, has them already).
if [[ $mode != sanitize-build ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    bash scripts/install-deps.sh
  else
    bash scripts/install-deps.sh || echo "test.sh: continuing with what is installed"
  fi
fi
# A compiler cache kept between runs on this machine (~/.cache/ccache, installed by install-deps.sh): a CI run
# of a change compiles what the change touched, not the ~25 CPU-minutes of the three trees. The direct mode keys
# objects by their sources, headers and flags; the Catch precompiled header needs pch_defines,time_macros.
# STEPSCOPE_CCACHE=0 turns it off.
launcher=()
if [[ ${STEPSCOPE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null 2>&1; then
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-8G}"
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
else
  # An earlier configure with the cache keeps its launcher in CMakeCache.txt: take it out.
  launcher=(-UCMAKE_C_COMPILER_LAUNCHER -UCMAKE_CXX_COMPILER_LAUNCHER -UCMAKE_CUDA_COMPILER_LAUNCHER)
fi
# build-test: RelWithDebInfo's -O2 with -g1, line tables: what symbolizing stepscope's own frames and a failure's
# backtrace need, for three quarters of -g's compile time (the code is the same). The CPU samples the tests
# record keep -g (samples/cpu).
# The CUDA samples: without a GPU the suite only checks that they say so and parse their options, so their device
# code is compiled for one architecture (Hopper) and their host code with line tables; with a GPU, for that GPU
# (native). nvcc then takes 21 s a sample, not 55 s for the five architectures of a release build.
cuda_arch=90-real
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' && cuda_arch=native
plain_config=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DCMAKE_CUDA_ARCHITECTURES="$cuda_arch"
  -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -Xcompiler=-g1 -DNDEBUG" "${launcher[@]}")
prebuild_log=$root/build-sanitize.log prebuild_pid=$root/build-sanitize.pid prebuild_status=$root/build-sanitize.status
prebuild_asan=$root/build-sanitize.asan-done

# The builds of --sanitize. The collector library is injected into arbitrary programs (python, sh): a sanitizer
# runtime cannot be preloaded into them, so `stepscope record` in the sanitized suite injects the plain build's
# library, and its concurrency is proven by the TSan ring test.
sanitized_builds() {
  # One clang tree serves the ASan + UBSan suite and the libFuzzer targets (-DSTEPSCOPE_FUZZ=ON adds the coverage
  # instrumentation). clang compiles the instrumented code in about four fifths of GCC's time and a separate
  # fuzzing tree is not built at all: the CI's time (docs/reliability.md). -O1: the usual sanitizer setting (fast
  # enough to run, short stack traces stay exact); the tests' own files get -O0 (cmake/StepscopeTesting.cmake).
  # -g1: line tables, all a sanitizer report prints. No CUDA samples: nvcc's host code is not instrumented and no
  # test of this build runs them.
  if [[ -f build-asan/CMakeCache.txt ]] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang' build-asan/CMakeCache.txt; then
    rm -rf build-asan  # configured with another compiler by an older test.sh
  fi
  CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSTEPSCOPE_SANITIZE=address,undefined -DSTEPSCOPE_FUZZ=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
    -DSTEPSCOPE_CUDA_SAMPLES=OFF "${launcher[@]}"
  cmake --build build-asan -j"$jobs"
  phase "ASan tree built (its fuzzers with it)"
  touch "$prebuild_asan"  # the ASan suite can start while the TSan build goes on
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEPSCOPE_SANITIZE=thread "${launcher[@]}"
  cmake --build build-tsan -j"$jobs" --target collector_ring_test analyzer_kineto_chunked_parse_test
  phase "TSan ring test and chunked JSON parse test built"
}

if [[ $mode == sanitize-build ]]; then
  rm -f "$prebuild_asan"
  sanitized_builds
  exit 0
fi

# The Python tests need torch and tensorflow-cpu in a cached virtual environment; they skip (saying why)
# when it cannot be made.
if [[ -x scripts/python-env.sh ]]; then
  bash scripts/python-env.sh || echo "test.sh: Python environment incomplete; framework tests will say SKIPPED"
fi

if [[ $mode == sanitize ]]; then
  # A build started in the background by the plain run: the ASan suite waits for its ASan tree only, the TSan
  # and fuzz runs for all of it (which goes on at the lowest priority beside the ASan suite); a failed build
  # fails here with its log.
  prebuild_running() { [[ -f $prebuild_pid ]] && kill -0 "$(cat "$prebuild_pid")" 2>/dev/null; }
  wait_for_prebuild() {  # $1: a file whose presence ends the wait early
    [[ -f $prebuild_pid ]] || return 0
    echo "test.sh: waiting for the sanitized build started with the suite ($prebuild_log)"
    while prebuild_running && [[ ! -f ${1:-/nonexistent} ]]; do sleep 5; done
    if ! prebuild_running; then
      rm -f "$prebuild_pid"
      if [[ $(cat "$prebuild_status" 2>/dev/null) != 0 ]]; then
        tail -50 "$prebuild_log" >&2
        echo "test.sh: the sanitized build failed (log: $prebuild_log)" >&2
        exit 1
      fi
    fi
  }
  background=0
  [[ -f $prebuild_pid ]] && background=1
  wait_for_prebuild "$prebuild_asan"
  cmake -S . -B build-test "${plain_config[@]}"
  cmake --build build-test -j"$jobs" --target stepscope_collector stepscope
  [[ $background == 1 ]] || sanitized_builds
  (cd build-asan &&
    STEPSCOPE_COLLECTOR_LIB="$root/build-test/collector/libstepscope_collector.so" \
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1:detect_stack_use_after_return=0" \
    LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
    ctest --output-on-failure -j"$jobs" --timeout 1200 --label-exclude 'plain_only|framework')
  phase "ASan suite done"
  if [[ $background == 1 ]]; then
    wait_for_prebuild
    sanitized_builds  # up to date: checks it
  fi
  TSAN_OPTIONS="halt_on_error=1" build-tsan/collector/tests/collector_ring_test
  # The Kineto importer parses big files on several threads (docs/performance.md, "Import").
  TSAN_OPTIONS="halt_on_error=1" build-tsan/analyzer/analyzer_kineto_chunked_parse_test
  phase "TSan ring test and chunked JSON parse test done"
  # STEPSCOPE_FUZZ_AFTER=PIDFILE (.ci/run: the stress, still running beside this suite at the lowest priority):
  # the fuzzers, which keep every core busy, wait for that process to end. Beside them the stress got no CPU:
  # an attach's collector did not answer within its 15 s and the attach failed (CI of d585ce8).
  if [[ -n ${STEPSCOPE_FUZZ_AFTER:-} && -f $STEPSCOPE_FUZZ_AFTER ]]; then
    while kill -0 "$(cat "$STEPSCOPE_FUZZ_AFTER")" 2>/dev/null; do sleep 2; done
    phase "waited for the background run of $STEPSCOPE_FUZZ_AFTER"
  fi
  # Each target for 20000 executions or 40 s, whichever comes first: the SQLite importer runs ~185 a second
  # under ASan, and its 108 s held the run's end for a minute after the other three were done.
  STEPSCOPE_CLI="$root/build-test/cli/stepscope" STEPSCOPE_FUZZ_DIR="$root/build-asan" STEPSCOPE_FUZZ_BUILD=0 \
    STEPSCOPE_FUZZ_SECONDS="${STEPSCOPE_FUZZ_SECONDS:-40}" bash bench/fuzz/run.sh "${STEPSCOPE_FUZZ_RUNS:-20000}"
  exit 0
fi

# LOG STATUS PIDFILE COMMAND...: COMMAND in the background at the lowest CPU and I/O priority, its output into LOG,
# its exit status into STATUS when it ends, its pid (its session's) into PIDFILE. setsid: its own session, so it
# outlives this script and a Ctrl-C of the suite does not reach it midway. A new session is a new scheduler
# autogroup, which shares the CPU fairly with the suite's whatever its processes' nice values: the group's own nice
# value is set too (/proc/self/autogroup), or the suite would get half.
in_background() {
  local log=$1 status=$2 pidfile=$3
  shift 3
  rm -f "$status"
  setsid nice -n 19 ionice -c 3 bash -c \
    'echo 19 > /proc/self/autogroup 2>/dev/null; log=$1 status=$2; shift 2; "$@" > "$log" 2>&1; echo $? > "$status"' \
    _ "$log" "$status" "$@" < /dev/null &
  echo $! > "$pidfile"
}

if [[ ${STEPSCOPE_SANITIZED_PREBUILD:-0} == 1 ]]; then
  rm -f "$prebuild_asan"
  in_background "$prebuild_log" "$prebuild_status" "$prebuild_pid" bash scripts/test.sh --sanitize-build
  echo "test.sh: building the sanitized trees in the background at the lowest priority ($prebuild_log)"
fi
phase "dependencies and Python environment ready"
cmake -S . -B build-test "${plain_config[@]}"
cmake --build build-test -j"$jobs"
phase "plain tree built"
# STEPSCOPE_BACKGROUND_STRESS=N (.ci/run): scripts/stress-record.sh N build-test beside the suite, at the lowest
# priority like the sanitized build. The suite keeps the CPU busy, so the stress does only a fraction of its runs
# meanwhile (42-53 of 160 measured) and the rest after it, ~230 s sooner than run after the suite alone
# (docs/reliability.md). Its runs may wait long for the CPU: a hang is a run that outlives 600 s (STRESS_TIMEOUT).
# The caller waits for it (build-stress.pid, .status, .log).
if [[ -n ${STEPSCOPE_BACKGROUND_STRESS:-} ]]; then
  in_background "$root/build-stress.log" "$root/build-stress.status" "$root/build-stress.pid" \
    env STRESS_TIMEOUT="${STRESS_TIMEOUT:-600}" bash scripts/stress-record.sh "$STEPSCOPE_BACKGROUND_STRESS" build-test
  echo "test.sh: stress-record.sh $STEPSCOPE_BACKGROUND_STRESS in the background at the lowest priority ($root/build-stress.log)"
fi
cd build-test
ctest --output-on-failure -j"$jobs" --timeout 600
phase "plain suite done"
