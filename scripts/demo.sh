#!/usr/bin/env bash
# The main job on bundled data: installs deps, builds Release into build/ (only what it runs), then
#  - analyzes and draws a real GPU recording kept in the repository (launch_bound on an H200: launch-overhead
#    high), so a machine without a GPU or ../shared shows a GPU finding too;
#  - with a CUDA GPU: records the bundled CUDA samples with and without their cure and analyzes them;
#  - without one: records the CPU-only samples (the input-bound Python sample shows a real finding) and
#    analyzes them, and analyzes real GPU traces from ../shared/traces when that folder is present.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
SECONDS=0
bash scripts/install-deps.sh
has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
if ((has_gpu)); then
  cmake --build build -j"$(nproc)"  # record-samples.sh runs the CUDA samples and the tree's tools
else
  targets=(stepscope stepscope_collector hot_loop)
  grep -q '^STEPSCOPE_WITH_GUI:BOOL=ON' build/CMakeCache.txt && targets+=(stepscope-gui)
  cmake --build build -j"$(nproc)" --target "${targets[@]}"
fi
echo "demo: built in ${SECONDS} s"
ss=$root/build/cli/stepscope
out=$root/build/demo
mkdir -p "$out"

section() { printf '\n==== %s ====\n' "$*"; }

# A real GPU recording from this repository: stepscope's own, of samples/cuda/launch_bound on one NVIDIA H200
# (tests/gpu_proof/data/h200-2026-11-26/README.md). The host issues ~31 tiny kernels a step one by one.
bundled=$root/tests/gpu_proof/data/h200-2026-11-26/launch_bound-reattach-all-api.db.xz
if [[ -f $bundled ]]; then
  section "A real GPU recording kept in the repository: launch_bound on an H200 (launch overhead)"
  xz -dc "$bundled" > "$out/h200_launch_bound.db"
  "$ss" analyze "$out/h200_launch_bound.db"
  if [[ -x $root/build/gui/stepscope-gui ]]; then
    QT_QPA_PLATFORM=offscreen "$root/build/gui/stepscope-gui" "$out/h200_launch_bound.db" \
      --screenshot "$out/h200_launch_bound.png" && echo "The timeline, drawn: $out/h200_launch_bound.png"
  fi
fi

if ((has_gpu)) && [[ -x scripts/record-samples.sh ]]; then
  section "GPU found: recording the CUDA samples with and without their cure"
  bash scripts/record-samples.sh "$root/build" "$out"
else
  section "No CUDA GPU on this machine: recording the CPU-only samples instead"
  if "$ss" --help 2>/dev/null | grep -q " record"; then
    # An interpreter with numpy: the cached venv (scripts/python-env.sh), else Debian's python3 (python3-numpy).
    python=""
    for p in "${STEPSCOPE_PYTHON_VENV:-$HOME/.cache/stepscope/venv}/bin/python" /usr/bin/python3 python3; do
      if command -v "$p" >/dev/null 2>&1 && "$p" -c "import numpy" 2>/dev/null; then python=$p; break; fi
    done
    sample=$root/samples/cpu/python_input_bound.py
    if [[ -n $python && -f $sample ]]; then
      hooks=(--data-wait-func 'Loader\.__next__$' --step-func 'train_step$')
      section "Input-bound Python trainer (slow loader, no prefetch)"
      "$ss" record -o "$out/input_bound.db" "${hooks[@]}" -- "$python" "$sample"
      "$ss" analyze "$out/input_bound.db"
      section "The cure: the same trainer with --prefetch (background thread + queue)"
      "$ss" record -o "$out/input_prefetch.db" "${hooks[@]}" -- "$python" "$sample" --prefetch
      "$ss" analyze "$out/input_prefetch.db"
    else
      echo "(no Python with numpy found: skipping the input-bound Python sample)"
    fi
    if [[ -x $root/build/samples/cpu/hot_loop ]]; then
      section "CPU sampling: a native program with one hot function"
      "$ss" record -o "$out/hot_loop.db" -- "$root/build/samples/cpu/hot_loop"
      "$ss" info "$out/hot_loop.db"
    fi
  else
    echo "(this build has no \`stepscope record\` yet)"
  fi
fi

traces=${STEPSCOPE_TRACES_DIR:-$root/../shared/traces}
if [[ -d $traces ]] && "$ss" --help 2>/dev/null | grep -q " analyze"; then
  for t in kineto/resnet50_num_workers_0.json.gz kineto/resnet50_num_workers_4.json.gz \
           hta/a100_rank0_many_small_kernels.json.gz tracelens/b200_eager.json.gz; do
    [[ -f $traces/$t ]] || continue
    section "Real trace recorded by others: $t"
    "$ss" analyze "$traces/$t"
  done
  if "$ss" --help 2>/dev/null | grep -q " diff"; then
    section "CI-style check: num_workers=4 (baseline) -> num_workers=0 (new)"
    "$ss" diff "$traces/kineto/resnet50_num_workers_4.json.gz" "$traces/kineto/resnet50_num_workers_0.json.gz" \
      --md "$out/diff.md" || echo "(diff exit code $?: 1 means a regression was found, as expected here)"
  fi
  if "$ss" --help 2>/dev/null | grep -q " report"; then
    "$ss" report "$traces/kineto/resnet50_num_workers_0.json.gz" --format html -o "$out/resnet50_num_workers_0.html"
    echo "HTML report: $out/resnet50_num_workers_0.html"
  fi
elif [[ ! -d $traces ]]; then
  echo "(no shared traces at $traces: skipping the real-trace analysis)"
fi
