#!/usr/bin/env bash
# Records each CUDA sample with and without its cure under `stepscope record`, analyzes every recording
# and prints the findings side by side, checked against what samples/README.md says each must show.
#
#   scripts/record-samples.sh [BUILD_DIR [OUT_DIR]]     # defaults: build, BUILD_DIR/record-samples
#
# Each variant is also run once without the collector, so the table shows the collector's overhead on the
# sample's own step time (the "time: ... step median" line every sample prints, CUDA and PyTorch). The PyTorch
# samples join in when the venv of scripts/python-env.sh (or $STEPSCOPE_PYTHON) has a torch that sees the GPU. input_bound and
# torch_dataloader size themselves to the machine (their "sizing:" lines are printed after the table); the
# recorded run is given the plain run's sizing (--gpu-passes, --decode-us; --width, --decode-ms).
# Needs a CUDA GPU: without one it says so and exits 3 (scripts/demo.sh then analyzes the bundled traces).
# Exit codes: 0 every finding as expected; 1 some recording or finding differs from the expectation;
# 2 usage or missing build outputs; 3 no GPU on this machine.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
build=${1:-$root/build}
out=${2:-$build/record-samples}

if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi

has_gpu=0
if [[ -e /dev/nvidia0 ]]; then has_gpu=1; fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then has_gpu=1; fi
if ((!has_gpu)); then
  echo "record-samples: no CUDA GPU on this machine (no /dev/nvidia0, no 'nvidia-smi -L' listing): the CUDA samples cannot run here" >&2
  exit 3
fi

ss=$build/cli/stepscope
bin=$build/samples/cuda
for f in "$ss" "$bin/launch_bound" "$bin/input_bound" "$bin/small_gemm_loop" "$bin/sync_stall"; do
  if [[ ! -x $f ]]; then
    echo "record-samples: $f is missing: build first (cmake --build $build)" >&2
    exit 2
  fi
done
command -v python3 >/dev/null 2>&1 || { echo "record-samples: python3 is needed to read the analysis JSON" >&2; exit 2; }
mkdir -p "$out"

# The variants, their expected findings and cures: samples/variants.txt (scripts/gpu_proof.py reads it too).
# The PyTorch ones (py:) join in where the venv (scripts/python-env.sh) has a torch that sees the GPU.
venv=${STEPSCOPE_PYTHON_VENV:-$HOME/.cache/stepscope/venv}
py=${STEPSCOPE_PYTHON:-$venv/bin/python}  # an interpreter of its own (a GPU machine's python3 with torch)
with_torch=0
if [[ -x $py ]] && "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  with_torch=1
else
  echo "record-samples: no torch with CUDA in $py: skipping the PyTorch samples" >&2
fi
variants=()
while IFS='|' read -r name sample args must mustnot _cure; do
  [[ -z $name || $name == \#* ]] && continue
  [[ $sample == py:* ]] && ((!with_torch)) && continue
  variants+=("$name|$sample|$args|$must|$mustnot")
done <"$root/samples/variants.txt"

step_median() { sed -n 's/^time: [^:]*: step median \([0-9.]*\) us.*/\1/p' "$1" | head -1; }

status=0
rows=()
for v in "${variants[@]}"; do
  IFS='|' read -r name sample args must mustnot <<<"$v"
  if [[ $sample == py:* ]]; then
    cmd=("$py" "$root/samples/python/${sample#py:}")
  else
    cmd=("$bin/$sample")
  fi
  # shellcheck disable=SC2086
  "${cmd[@]}" $args >"$out/$name.plain.log" 2>&1
  plain_rc=$?
  # The self-sizing samples: the recorded run does the plain run's work, so the overhead column compares like
  # with like (sizing under the collector would measure a slower step and choose other work).
  sized=()
  case $sample in
    input_bound) p=$(sed -n 's/^sizing: [a-z]*: [0-9]* decode workers\{0,1\}, \([0-9]*\) GPU passes per step$/\1/p' "$out/$name.plain.log")
      d=$(sed -n 's/^time: decode [0-9]* rounds x [0-9.]* us = ~\([0-9.]*\) us per batch.*/\1/p' "$out/$name.plain.log")
      [[ -n $p && -n $d ]] && sized=(--gpu-passes "$p" --decode-us "$d") ;;
    py:torch_dataloader.py) d=$(sed -n 's/^torch_dataloader: .* width=\([0-9]*\) decode_ms=\([0-9.]*\)$/\1 \2/p' "$out/$name.plain.log")
      [[ -n $d ]] && sized=(--width "${d% *}" --decode-ms "${d#* }") ;;
  esac
  # shellcheck disable=SC2086
  "$ss" record -o "$out/$name.db" -- "${cmd[@]}" $args "${sized[@]}" >"$out/$name.record.log" 2>&1
  rec_rc=$?
  if ((plain_rc != 0 || rec_rc != 0)); then
    echo "record-samples: $name: plain run exited $plain_rc, recorded run exited $rec_rc (logs in $out)" >&2
    status=1
    continue
  fi
  if ! "$ss" analyze --json "$out/$name.db" >"$out/$name.json" 2>"$out/$name.analyze.err"; then
    echo "record-samples: $name: stepscope analyze failed: $(head -1 "$out/$name.analyze.err")" >&2
    status=1
    continue
  fi
  "$ss" analyze "$out/$name.db" >"$out/$name.report.txt" 2>&1
  row=$(python3 - "$out/$name.json" "$(step_median "$out/$name.plain.log")" \
        "$(step_median "$out/$name.record.log")" "$must" "$mustnot" "$name" <<'EOF'
import json, sys
path, plain, recorded, must, mustnot, name = sys.argv[1:7]
a = json.load(open(path))
found = {f["rule"]: f for f in a.get("findings", [])}
cells = [f'{r}({f.get("severity", "?")}, {100 * f.get("share", 0):.0f}%)' for r, f in found.items()] or ["-"]
missing = [r for r in must.split() if r not in found]
unwanted = [r for r in mustnot.split() if r in found]
verdict = "as expected" if not missing and not unwanted else \
    "UNEXPECTED: " + ", ".join([f"missing {r}" for r in missing] + [f"has {r}" for r in unwanted])
over = ""
if plain and recorded:
    over = f"{100 * (float(recorded) / float(plain) - 1):+.1f}%"
s = a.get("summary", {})
print("\t".join([name, plain or "?", recorded or "?", over or "?", str(s.get("steps", "?")),
                 s.get("step_source", "?"), " ".join(cells), verdict]))
EOF
  )
  rows+=("$row")
  [[ $row == *UNEXPECTED* ]] && status=1
done

printf '\n%-24s %12s %12s %9s %6s %-10s %s\n' variant plain_us recorded_us overhead steps source "findings (severity, share of step time) -> verdict"
for r in "${rows[@]}"; do
  IFS=$'\t' read -r name plain rec over steps src cells verdict <<<"$r"
  printf '%-24s %12s %12s %9s %6s %-10s %s -> %s\n' "$name" "$plain" "$rec" "$over" "$steps" "$src" "$cells" "$verdict"
done
echo
# What the self-sizing samples measured and chose on this machine (from the plain runs).
for name in input_bound input_bound_prefetch torch_dataloader torch_dataloader_workers; do
  [[ -f $out/$name.plain.log ]] && sed -n "s/^sizing: /$name: /p" "$out/$name.plain.log"
done
echo
echo "Recordings, analyses (.json, .report.txt) and logs: $out"
exit $status
