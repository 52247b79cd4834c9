#!/usr/bin/env bash
# Writes `stepscope analyze --json` of every trace and recording in ../shared (and of each rank directory as one
# job) into OUT_DIR, one file each, for a refactoring that must not change behaviour: take a snapshot before and
# after, then `diff -r BEFORE AFTER` (issue 54: byte-identical).
#   scripts/analysis-snapshot.sh OUT_DIR [STEPSCOPE]   (default: build-test/cli/stepscope)
set -euo pipefail
out=${1:?usage: scripts/analysis-snapshot.sh OUT_DIR [STEPSCOPE]}
cli=${2:-build-test/cli/stepscope}
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${STEPSCOPE_SHARED:-$root/../shared}
[[ -x $cli ]] || { echo "analysis-snapshot: $cli: not an executable (build it first)" >&2; exit 2; }
[[ -d $shared/traces ]] || { echo "analysis-snapshot: $shared/traces: no such directory" >&2; exit 2; }
mkdir -p "$out"
# A fixed folder: the decompressed stores' paths are in the JSON (source_file), the same in every snapshot.
tmp=${TMPDIR:-/tmp}/stepscope-analysis-snapshot
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
n=0 failed=0
while IFS= read -r -d '' f; do
  rel=${f#"$shared"/}
  name=$(echo "$rel" | tr '/' '_')
  if [[ $f == *.xz ]]; then  # the recordings' stores are kept xz-compressed: analyze reads SQLite, gzip, zstd
    xz -dc "$f" > "$tmp/${name%.xz}"
    f=$tmp/${name%.xz}
  fi
  # The file's own analysis; an input analyze refuses keeps its one-line error and exit status in the snapshot.
  if "$cli" analyze --json "$f" > "$out/$name.json" 2> "$out/$name.err"; then :; else
    echo "exit $?" >> "$out/$name.err"
    failed=$((failed + 1))
  fi
  n=$((n + 1))
done < <(find "$shared/traces" "$shared/recordings" -type f \
  \( -name '*.json' -o -name '*.json.gz' -o -name '*.json.zst' -o -name '*.db' -o -name '*.db.xz' \
     -o -name '*.sqlite' -o -name '*.sqlite.gz' \) -print0 | sort -z)
# Directories of ranks, as one job.
for d in "$shared"/traces/param; do
  [[ -d $d ]] || continue
  "$cli" analyze --json "$d" > "$out/dir_$(basename "$d").json" 2> "$out/dir_$(basename "$d").err" || true
  n=$((n + 1))
done
echo "analysis-snapshot: $n analyses in $out ($failed refused or failed, their errors kept)"
