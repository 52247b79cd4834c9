#!/usr/bin/env bash
# Records real programs many times under the sampler and counts what must never happen: hangs (a run that
# outlives its timeout), crashes (killed by a signal, or an exit code other than the plain run's), changed
# output (stdout differs from a plain run) and stores that do not open (issue 21; docs/reliability.md).
#
#   scripts/stress-record.sh N [BUILD_DIR]     N runs of each category (BUILD_DIR default build-test)
#
# Categories: torch — an import-heavy PyTorch program (numpy, torch, ssl, sqlite3, ctypes, lzma, bz2; 50
# matmuls; with Python's faulthandler on, whose small alternate signal stack the handler then runs on); storm —
# 4 threads malloc/free, one throws C++ exceptions, two dlopen/dlclose a library with thread-local data; each
# again with tcmalloc and jemalloc preloaded; and `stepscope attach` + detach to each while it runs. Every run
# has the handler guard preloaded (collector/tests/safety; unless STRESS_GUARD=0): a forbidden call inside the
# sampling handler aborts the run, which counts as a crash.
# Environment: STRESS_CPU_HZ (5000), STRESS_JOBS (2 runs at a time), STRESS_TIMEOUT (120 s), STRESS_LOG
# (/tmp/stepscope-stress: logs of failed runs only, each with a `result` file), STRESS_CATEGORIES
# (space-separated subset), STRESS_RUNS_OF ("CATEGORY=M ...": M runs of those categories instead of N),
# STRESS_GUARD (1; 0 runs without the guard, to count the hangs of a handler the guard would abort at once).
# BUILD_DIR may be relative to the repository or absolute. Exit 1 when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: scripts/stress-record.sh N [BUILD_DIR]}
BUILD=${2:-build-test}
[[ $BUILD == /* ]] || BUILD=$PWD/$BUILD
HZ=${STRESS_CPU_HZ:-5000}
JOBS=${STRESS_JOBS:-2}
TIMEOUT=${STRESS_TIMEOUT:-120}
LOG=${STRESS_LOG:-/tmp/stepscope-stress}
VENV=${STEPSCOPE_PYTHON_VENV:-$HOME/.cache/stepscope/venv}
CLI=$BUILD/cli/stepscope
GUARD=$BUILD/collector/tests/safety/libstepscope_handler_guard.so
STORM=$BUILD/collector/tests/safety/storm_target
WITH_GUARD=${STRESS_GUARD:-1}
LIBDIR=/usr/lib/x86_64-linux-gnu
TCMALLOC=$LIBDIR/libtcmalloc_minimal.so.4
JEMALLOC=$LIBDIR/libjemalloc.so.2

for f in "$CLI" "$GUARD" "$STORM"; do
  [[ -e $f ]] || { echo "stress-record: $f is missing: build $BUILD first (cmake --build $BUILD)" >&2; exit 2; }
done
if [[ ! -e $JEMALLOC && $(id -u) -eq 0 ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libjemalloc2 >/dev/null 2>&1 || true
fi
rm -rf "$LOG"
mkdir -p "$LOG"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

TORCH_PY='import numpy, torch, json, heapq, ssl, sqlite3, ctypes, lzma, bz2; x = torch.randn(256, 256); [x @ x for _ in range(50)]; print("ok")'
# For attach: the same imports, then work until the attach has detached (it creates $STRESS_UNTIL), 0.3 s more
# so the program runs on past the detach, and at most 60 s (the bound only counts when the attach fails; a stress
# run in the background at the lowest priority, as CI's, may wait long for the CPU).
TORCH_LONG_PY='import numpy, torch, json, heapq, ssl, sqlite3, ctypes, lzma, bz2, os, time; x = torch.randn(256, 256); t = time.time()
until = os.environ.get("STRESS_UNTIL", "")
while time.time() - t < 60 and not os.path.exists(until): [x @ x for _ in range(50)]
t = time.time()
while time.time() - t < 0.3: [x @ x for _ in range(50)]
print("ok")'
have_torch=0
"$VENV/bin/python" -c 'import torch' >/dev/null 2>&1 && have_torch=1

declare -A SKIP RUNS
for kv in ${STRESS_RUNS_OF:-}; do RUNS[${kv%%=*}]=${kv#*=}; done
CATEGORIES=(torch storm torch+tcmalloc storm+tcmalloc torch+jemalloc storm+jemalloc attach-torch attach-storm)
[[ -n ${STRESS_CATEGORIES:-} ]] && read -r -a CATEGORIES <<<"$STRESS_CATEGORIES"
for c in "${CATEGORIES[@]}"; do
  [[ $c == *torch* && $have_torch == 0 ]] && SKIP[$c]="no torch in $VENV (run scripts/python-env.sh)"
  [[ $c == *tcmalloc* && ! -e $TCMALLOC ]] && SKIP[$c]="no $TCMALLOC (Debian's libtcmalloc-minimal4)"
  [[ $c == *jemalloc* && ! -e $JEMALLOC ]] && SKIP[$c]="no $JEMALLOC (Debian's libjemalloc2)"
done

program() {  # the command of a category, one word per line
  case $1 in
    # faulthandler on, as under pytest and torchrun: the main thread's alternate signal stack is its ~10 KiB.
    torch) printf '%s\n' "$VENV/bin/python" -X faulthandler -c "$TORCH_PY" ;;
    torch*) printf '%s\n' "$VENV/bin/python" -c "$TORCH_PY" ;;
    storm*) printf '%s\n' "$STORM" 1.0 ;;
    attach-torch) printf '%s\n' "$VENV/bin/python" -c "$TORCH_LONG_PY" ;;
    attach-storm) printf '%s\n' "$STORM" 60.0 ;;  # STORM_UNTIL: until the detach
  esac
}
preload_of() {  # the allocator first, then the guard (unless STRESS_GUARD=0)
  local guard=$GUARD
  [[ $WITH_GUARD == 0 ]] && guard=
  case $1 in
    *tcmalloc) echo "$TCMALLOC${guard:+:$guard}" ;;
    *jemalloc) echo "$JEMALLOC${guard:+:$guard}" ;;
    *) echo "$guard" ;;
  esac
}

# One run: prints "hang", "crash", "changed", "store" or "ok" into $WORK/<category>.<i>.result.
one_run() {
  local cat=$1 i=$2 dir="$WORK/$1.$2"
  mkdir -p "$dir"
  local -a cmd
  mapfile -t cmd < <(program "$cat")
  local preload result=ok rc
  preload=$(preload_of "$cat")
  local expected
  expected=$(cat "$WORK/$cat.expected")
  if [[ $cat == attach-* ]]; then
    STRESS_UNTIL="$dir/detached" STORM_UNTIL="$dir/detached" LD_PRELOAD=$preload \
      STEPSCOPE_HANDLER_GUARD_REPORT="$dir/guard" "${cmd[@]}" >"$dir/out" 2>"$dir/err" &
    local pid=$!
    sleep 0.7
    timeout -s KILL "$TIMEOUT" "$CLI" attach "$pid" --no-gpu --cpu-hz "$HZ" --duration 1 -o "$dir/r.db" \
      >"$dir/attach.out" 2>"$dir/attach.err"
    rc=$?
    touch "$dir/detached"
    if [[ $rc -ne 0 ]]; then result=crash; [[ $rc -eq 137 ]] && result=hang; fi
    # The program must finish by itself: wait for it, bounded.
    local waited=0
    while kill -0 "$pid" 2>/dev/null && ((waited < TIMEOUT * 10)); do sleep 0.1; waited=$((waited + 1)); done
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid" 2>/dev/null
      result=hang
    fi
    wait "$pid"
    rc=$?
  else
    LD_PRELOAD=$preload STEPSCOPE_HANDLER_GUARD_REPORT="$dir/guard" timeout -s KILL "$TIMEOUT" \
      "$CLI" record --no-gpu --cpu-hz "$HZ" -o "$dir/r.db" -- "${cmd[@]}" >"$dir/out" 2>"$dir/err"
    rc=$?
    [[ $rc -eq 137 ]] && result=hang
  fi
  if [[ $result == ok ]]; then
    if [[ $rc -ne 0 ]]; then result=crash
    elif [[ $(cat "$dir/out") != "$expected" ]]; then result=changed
    elif ! "$CLI" info "$dir/r.db" >/dev/null 2>&1; then result=store
    fi
  fi
  echo "$result" >"$WORK/$cat.$i.result"
  if [[ $result == ok ]]; then rm -rf "$dir"; else echo "$result exit=$rc" >"$dir/result"; mv "$dir" "$LOG/$cat.$i"; fi
}

start=$(date +%s)
declare -A SECS  # each category's wall time, with its plain run: where a CI run's stress time went
for c in "${CATEGORIES[@]}"; do
  if [[ -n ${SKIP[$c]:-} ]]; then echo "stress-record: $c skipped: ${SKIP[$c]}"; continue; fi
  c_start=$(date +%s)
  mapfile -t cmd < <(program "$c")
  # The plain run's output is what every recorded run must print.
  STRESS_UNTIL=/ STORM_UNTIL=/ LD_PRELOAD=$(preload_of "$c" | sed "s|:*$GUARD||") "${cmd[@]}" >"$WORK/$c.expected" 2>/dev/null ||
    { echo "stress-record: the plain run of $c failed" >&2; exit 2; }
  for ((i = 0; i < ${RUNS[$c]:-$N}; ++i)); do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n; done
    one_run "$c" "$i" &
  done
  wait
  SECS[$c]=$(($(date +%s) - c_start))
done
elapsed=$(($(date +%s) - start))

printf '%-18s %6s %6s %6s %8s %6s %8s\n' category runs hangs crashes changed store seconds
fail=0 total_ok=0 total_bad=0
for c in "${CATEGORIES[@]}"; do
  [[ -n ${SKIP[$c]:-} ]] && continue
  runs=0 hang=0 crash=0 changed=0 store=0
  for f in "$WORK/$c".*.result; do
    [[ -e $f ]] || continue
    runs=$((runs + 1))
    case $(cat "$f") in
      hang) hang=$((hang + 1)) ;; crash) crash=$((crash + 1)) ;; changed) changed=$((changed + 1)) ;; store) store=$((store + 1)) ;;
    esac
  done
  printf '%-18s %6d %6d %6d %8d %6d %8d\n' "$c" "$runs" "$hang" "$crash" "$changed" "$store" "${SECS[$c]:-0}"
  bad=$((hang + crash + changed + store))
  total_bad=$((total_bad + bad))
  total_ok=$((total_ok + runs - bad))
  ((bad > 0)) && fail=1
done
guard_note="guard preloaded"
[[ $WITH_GUARD == 0 ]] && guard_note="no guard (STRESS_GUARD=0)"
echo "stress-record: $N runs per category${STRESS_RUNS_OF:+ ($STRESS_RUNS_OF)} at ${HZ} Hz, $guard_note, in ${elapsed} s; logs of failed runs in $LOG"
echo "stress: $total_ok passed, $total_bad failed"
# Each failed run's evidence where the CI prints this output (its log folder stays on the CI machine).
for d in "$LOG"/*/; do
  [[ -e $d/result ]] || continue
  echo "stress: failed run $(basename "$d"): $(cat "$d/result")"
  for f in attach.err err guard; do
    [[ -s $d/$f ]] && tail -n 6 "$d/$f" | cut -c1-300 | sed "s|^|  $f: |"
  done
done
exit $fail
