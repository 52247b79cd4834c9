#!/usr/bin/env bash
# stepscope-gui's refusals (issue 26, item 6): one `stepscope-gui:` line and exit 2, never a hang or an abort;
# --screenshot without a display runs offscreen by itself.
#   cli_refusals.sh GUI RECORDINGS_DIR SCRATCH
set -u
gui=$1 rec=$2 scratch=$3
rm -rf "$scratch" && mkdir -p "$scratch" || exit 1
fails=0
expect() {  # expect RC "EXACT STDERR LINE" -- ARGS...
  local want_rc=$1 want=$2
  shift 3
  local got rc
  timeout 60 "$@" >/dev/null 2>"$scratch/stderr"
  rc=$?
  got=$(grep -v 'propagateSizeHints\|XDG_RUNTIME_DIR' "$scratch/stderr")
  if [[ $rc != "$want_rc" || $got != "$want" ]]; then
    echo "FAIL: $*: exit $rc (want $want_rc), stderr [$got] (want [$want])"
    fails=$((fails + 1))
  else
    echo "ok: $*"
  fi
}
export QT_QPA_PLATFORM=offscreen
expect 2 "stepscope-gui: $scratch/nope.db: no such file" -- "$gui" "$scratch/nope.db" --screenshot "$scratch/x.png"
echo "not a trace" >"$scratch/notes.txt"
expect 2 "stepscope-gui: $scratch/notes.txt: unrecognized format (expected a stepscope store, Kineto/Chrome trace JSON or an Nsight Systems SQLite export; plain, .gz or .zst)" \
  -- "$gui" "$scratch/notes.txt" --screenshot "$scratch/x.png"
[[ -e $scratch/x.png ]] && { echo "FAIL: a refused run wrote $scratch/x.png"; fails=$((fails + 1)); }
if [[ -f $rec/h100-2026-11-22/sync_stall.db.xz ]]; then
  xz -dc "$rec/h100-2026-11-22/sync_stall.db.xz" >"$scratch/sync_stall.db"
  db=$scratch/sync_stall.db
  expect 2 "stepscope-gui: $scratch/no/dir/z.png: no such directory $scratch/no/dir" -- "$gui" "$db" --screenshot "$scratch/no/dir/z.png"
  expect 2 "stepscope-gui: --select-finding no-such-rule: no such finding in $db (it has sync-stall)" \
    -- "$gui" "$db" --select-finding no-such-rule --screenshot "$scratch/y.png"
  # No display: a screenshot goes offscreen by itself (and is a real PNG); a window is refused in one line.
  unset QT_QPA_PLATFORM
  expect 0 "" -- env -u DISPLAY -u WAYLAND_DISPLAY "$gui" "$db" --select-finding sync-stall --screenshot "$scratch/w.png"
  if [[ $(head -c 8 "$scratch/w.png" | od -An -tx1 | tr -d ' \n') != 89504e470d0a1a0a ]]; then
    echo "FAIL: $scratch/w.png is not a PNG"
    fails=$((fails + 1))
  fi
  expect 2 "stepscope-gui: no display (DISPLAY and WAYLAND_DISPLAY are unset): run it in a desktop session or over ssh -X, or save a picture with --screenshot PNG" \
    -- env -u DISPLAY -u WAYLAND_DISPLAY QT_QPA_PLATFORM=xcb "$gui" "$db"
else
  echo "SKIPPED: no H100 recordings at $rec (the cases that need a store)"
fi
exit $((fails > 0))
