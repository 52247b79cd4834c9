#!/usr/bin/env bash
# Runs each libFuzzer target for N executions from seeds made of small real traces, one target a core, and
# prints a table:
# target, executions, executions/s, coverage (edges), features, crashes (crash/leak/timeout/OOM artifacts).
#
#   bench/fuzz/run.sh [RUNS] [TARGET...]      RUNS defaults to 20000 (the CI setting); goal: 1000000 each
#   STEPSCOPE_FUZZ_SECONDS=S                   also stop each target after S seconds (whichever comes first)
#
# Builds build-fuzz/ with clang (-DSTEPSCOPE_FUZZ=ON: libFuzzer + ASan + UBSan) unless STEPSCOPE_FUZZ_BUILD=0;
# STEPSCOPE_FUZZ_BUILD_ONLY=1 builds and stops. STEPSCOPE_FUZZ_DIR=DIR takes the targets from another tree
# (scripts/test.sh --sanitize: build-asan/, where clang builds them beside the sanitized suite).
# A hang is an input that takes more than 1 s; a leak is reported by LeakSanitizer at the end of an input.
# Crash inputs are kept under build-fuzz/fuzz-work/TARGET/; each one found becomes a test under tests/fuzz-crashes/.
# Exit status 1 when any target crashed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
runs=${1:-20000}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(nsys_sqlite kineto_json store_reader decompress)  # the longest first
traces=${STEPSCOPE_TRACES_DIR:-$root/../shared/traces}
build=${STEPSCOPE_FUZZ_DIR:-$root/build-fuzz}
jobs=${STEPSCOPE_FUZZ_JOBS:-$(nproc)}

if [[ ${STEPSCOPE_FUZZ_BUILD:-1} != 0 ]]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTEPSCOPE_FUZZ=ON \
    -DSTEPSCOPE_WITH_GUI=OFF -DSTEPSCOPE_WITH_CUDA=OFF -DSTEPSCOPE_TRACES_DIR="$traces" >/dev/null
  cmake --build "$build" -j"$jobs" --target "${targets[@]/#/fuzz_}" >/dev/null
fi
[[ ${STEPSCOPE_FUZZ_BUILD_ONLY:-0} == 1 ]] && exit 0  # scripts/test.sh --sanitize-build: the build only

work=$build/fuzz-work
mkdir -p "$work"
cli=${STEPSCOPE_CLI:-$root/build-test/cli/stepscope}
python3 bench/fuzz/make_seeds.py "$traces" "$work/seeds" "$cli" >/dev/null

# One target a core (STEPSCOPE_FUZZ_JOBS, default nproc): each libFuzzer process is single-threaded, so run one
# after the other the targets left the machine's other cores idle (the CI's time). Each target writes its row
# into its own folder; the table is printed in the targets' order once all are done.
run_target() {
  local t=$1 dir=$work/$1
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  local log=$dir/log.txt start end rc=0
  start=$(date +%s.%N)
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/fuzz/fuzz_$t" -runs="$runs" -max_total_time="${STEPSCOPE_FUZZ_SECONDS:-0}" -timeout=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus" "$work/seeds/$t" >"$log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  local execs cov ft crashes secs rate
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  crashes=$(find "$dir" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | wc -l)
  secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
  rate=$(awk -v n="${execs:-0}" -v s="$secs" 'BEGIN { printf "%d", (s > 0 ? n / s : 0) }')
  printf '%-14s %10s %10s %8s %8s %8s %s\n' "$t" "${execs:-?}" "$rate" "${cov:-?}" "${ft:-?}" "$crashes" "$secs" >"$dir/row"
  echo "$rc $crashes" >"$dir/status"
}

for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run_target "$t" &
done
wait

printf '%-14s %10s %10s %8s %8s %8s %s\n' target execs execs/s cov ft crashes "seconds"
failed=0
for t in "${targets[@]}"; do
  dir=$work/$t
  cat "$dir/row" 2>/dev/null || echo "$t: no result (see $dir/log.txt)"
  read -r rc crashes <"$dir/status" 2>/dev/null || { rc=1 crashes=0; }
  if [[ $rc -ne 0 || $crashes -ne 0 ]]; then
    failed=1
    echo "  fuzz_$t exited $rc; log: $dir/log.txt" >&2
    grep -m3 -E 'ERROR|SUMMARY|runtime error' "$dir/log.txt" >&2 || true
  fi
done
exit $failed
