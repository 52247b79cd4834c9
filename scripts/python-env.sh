#!/usr/bin/env bash
# Creates or refreshes the Python virtual environment used by the Python-aware tests and samples:
# numpy, torch (run on CPU), tensorflow-cpu, py-spy, and the packages of the integrations' tests (transformers,
# lightning, mlflow-skinny, tensorboard, nbclient, ipykernel, mcp), all from PyPI.
#
#   scripts/python-env.sh            # venv at $STEPSCOPE_PYTHON_VENV or ~/.cache/stepscope/venv
#   STEPSCOPE_PYTHON=python3.12 scripts/python-env.sh   # pick the interpreter
#
# torch on PyPI is the CUDA build; its pip requirements pull ~3 GB of nvidia-* wheels that a CPU-only run
# never loads. We first install torch without those and check that `import torch` works and runs a CPU op;
# only if it does not do we install torch's full requirement set. Reuses the venv when everything imports.
# Exits non-zero with a one-line reason when the environment cannot be made (no network, no wheel for this
# Python, disk full); tests then print "SKIPPED: ..." instead of passing silently.
set -u -o pipefail

VENV="${STEPSCOPE_PYTHON_VENV:-$HOME/.cache/stepscope/venv}"
PY="${STEPSCOPE_PYTHON:-python3}"
LOG="${VENV%/}.log"

die() { echo "python-env: $*" >&2; exit 1; }
say() { echo "python-env: $*"; }

have() { "$VENV/bin/python" -c "$1" >/dev/null 2>&1; }
check_numpy() { have 'import numpy'; }
check_torch() { have 'import torch; x = torch.ones(4, 4); assert float((x @ x).sum()) == 64.0'; }
check_tf() { have 'import tensorflow as tf; assert [int(x) for x in tf.data.Dataset.range(3).map(lambda v: v * 2)] == [0, 2, 4]'; }
check_pyspy() { [ -x "$VENV/bin/py-spy" ]; }

command -v "$PY" >/dev/null 2>&1 || die "no Python interpreter '$PY' found"
mkdir -p "$(dirname "$VENV")" || die "cannot create $(dirname "$VENV")"

if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PY -c 'import sys; print(sys.executable, sys.version.split()[0])')"
  "$PY" -m venv "$VENV" || die "python -m venv failed for $VENV"
fi

pip_install() {
  # Quiet pip; its full output goes to the log next to the venv.
  "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input "$@" >>"$LOG" 2>&1
}

start=$(date +%s)
: >"$LOG"

check_numpy || { say "installing numpy"; pip_install numpy || die "pip could not install numpy (see $LOG)"; }
check_pyspy || { say "installing py-spy"; pip_install py-spy || say "warning: py-spy not installed (see $LOG)"; }

if ! check_torch; then
  say "installing torch without its nvidia-* wheels (CPU use only)"
  t0=$(date +%s)
  if pip_install --no-deps torch; then
    # torch's non-CUDA requirements, read from the installed wheel's metadata.
    deps=$("$VENV/bin/python" - <<'EOF'
import importlib.metadata as md, re
out = []
for r in md.requires("torch") or []:
    name = re.split(r"[ ;<>=!~\[]", r, 1)[0]
    if name.startswith(("nvidia-", "triton", "cuda-")) or "extra ==" in r:
        continue
    out.append(r.split(";")[0].strip())
print("\n".join(out))
EOF
)
    # shellcheck disable=SC2086
    [ -n "$deps" ] && { mapfile -t dep_list <<<"$deps"; pip_install "${dep_list[@]}"; }
  fi
  if check_torch; then
    say "torch works on CPU without nvidia-* wheels ($(( $(date +%s) - t0 )) s)"
  else
    say "torch needs its full requirement set here; installing it (large)"
    pip_install torch || die "pip could not install torch (see $LOG)"
    check_torch || die "torch installed but 'import torch' fails (see $LOG)"
    say "torch installed with its full requirements ($(( $(date +%s) - t0 )) s)"
  fi
fi

if ! check_tf; then
  say "installing tensorflow-cpu"
  t0=$(date +%s)
  pip_install tensorflow-cpu || die "pip could not install tensorflow-cpu (see $LOG)"
  check_tf || die "tensorflow-cpu installed but 'import tensorflow' fails (see $LOG)"
  say "tensorflow-cpu installed ($(( $(date +%s) - t0 )) s)"
fi

# What docs/integrations.md's tests drive: the trainer callbacks (transformers, Lightning), the experiment trackers
# `report --format metrics` feeds (MLflow's client, TensorBoard's event files), a notebook run headless (nbclient
# with ipykernel) and `stepscope mcp`'s SDK. Optional: a test whose package is missing says SKIPPED.
optional() {  # optional "what" 'python check' pip-args...
  local what="$1" check="$2"
  shift 2
  have "$check" && return 0
  say "installing $what"
  pip_install "$@" && have "$check" || say "warning: $what not installed (see $LOG): its tests say SKIPPED"
}
optional "transformers and lightning" 'import transformers, accelerate, lightning' transformers accelerate lightning
optional "mlflow-skinny and tensorboard" 'import mlflow, tensorboard' mlflow-skinny tensorboard
optional "nbclient and ipykernel" 'import nbclient, nbformat, ipykernel' nbclient nbformat ipykernel
optional "the MCP Python SDK" 'import mcp' mcp

# Holistic Trace Analysis, the peer bench/hta_compare holds stepscope's breakdowns against: a venv of its own
# (it pins pandas/plotly versions of its own), beside the main one. Optional: its test says SKIPPED without it.
HTA_VENV="${STEPSCOPE_HTA_VENV:-$(dirname "$VENV")/hta-venv}"
if ! "$HTA_VENV/bin/python" -c 'import hta' >/dev/null 2>&1; then
  say "installing HolisticTraceAnalysis into $HTA_VENV"
  { [ -x "$HTA_VENV/bin/python" ] || "$PY" -m venv "$HTA_VENV"; } &&
    "$HTA_VENV/bin/python" -m pip install --disable-pip-version-check --no-input HolisticTraceAnalysis==0.5.0 >>"$LOG" 2>&1 ||
    say "warning: HolisticTraceAnalysis not installed (see $LOG): bench.hta_compare will say SKIPPED"
fi

# CPython 3.14 from Debian sid, unpacked beside the venv (Debian 12 has none): the frame reader's test runs it
# when it is there. Optional: without it that test covers the other versions.
SID_PY="$(dirname "$VENV")/cpython-sid/usr/bin/python3.14"
if ! "$SID_PY" -c 'import sys' >/dev/null 2>&1; then
  say "unpacking CPython 3.14 from Debian sid (scripts/python-sid.sh)"
  bash "$(dirname "$0")/python-sid.sh" "$(dirname "$VENV")/cpython-sid" >>"$LOG" 2>&1 ||
    say "warning: CPython 3.14 not unpacked (see $LOG): python_frames_test covers 3.9-3.13 only"
fi

say "ready: $VENV ($("$VENV/bin/python" -c 'import sys, numpy, torch, tensorflow as tf; print(sys.version.split()[0], "numpy", numpy.__version__, "torch", torch.__version__, "tensorflow", tf.__version__)' 2>/dev/null)) in $(( $(date +%s) - start )) s"
