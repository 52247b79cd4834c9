#!/usr/bin/env bash
# Installs what stepscope needs to build and test, from Debian's packages (and CUPTI from PyPI where the
# machine's CUDA toolkit lacks it). Idempotent: installs only what is missing; `apt-get update` at most once.
# Not root: prints the exact apt-get line and exits 1.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git python3 python3-venv python3-pip python3-numpy python3-dev
  libsqlite3-dev sqlite3 libunwind-dev libdw-dev libelf-dev zlib1g-dev libzstd-dev libdeflate-dev libisal-dev
  libsimdjson-dev libcli11-dev libfmt-dev catch2
  qt6-base-dev libgl-dev xvfb xauth fonts-dejavu-core
  chromium linux-perf google-perftools libgoogle-perftools-dev libjemalloc2
  clang libclang-rt-14-dev zstd ccache
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done

if ((${#missing[@]})); then
  line="apt-get install -y --no-install-recommends ${missing[*]}"
  if [[ $(id -u) -ne 0 ]]; then
    echo "install-deps: missing Debian packages; run as root:" >&2
    echo "  apt-get update && $line" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "install-deps: Debian packages present"
fi

# CUPTI: use the CUDA toolkit's where it has one; otherwise fetch NVIDIA's wheels from PyPI into a cache folder
# that CMake finds (STEPSCOPE_CUPTI_ROOT, default below). The collector builds without CUPTI when neither exists.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUPTI_CACHE=${STEPSCOPE_CUPTI_ROOT:-$HOME/.cache/stepscope/cupti}
if [[ -f $CUDA_HOME/include/cupti.h && -e $CUDA_HOME/lib64/libcupti.so ]]; then
  echo "install-deps: CUPTI found in $CUDA_HOME"
elif [[ -f $CUPTI_CACHE/include/cupti.h && -e $CUPTI_CACHE/lib/libcupti.so ]]; then
  echo "install-deps: CUPTI found in $CUPTI_CACHE"
else
  echo "install-deps: no CUPTI in $CUDA_HOME; fetching nvidia-cuda-cupti from PyPI into $CUPTI_CACHE"
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps -d "$tmp" "nvidia-cuda-cupti==13.0.85" "nvidia-cuda-runtime==13.0.96"; then
    mkdir -p "$CUPTI_CACHE"
    for w in "$tmp"/*.whl; do python3 -m zipfile -e "$w" "$tmp/x"; done
    cp -r "$tmp"/x/nvidia/cu13/include "$tmp"/x/nvidia/cu13/lib "$CUPTI_CACHE"/
    ln -sf libcupti.so.13 "$CUPTI_CACHE/lib/libcupti.so"
    echo "install-deps: CUPTI installed in $CUPTI_CACHE"
  else
    echo "install-deps: could not fetch CUPTI from PyPI; building without GPU collection" >&2
  fi
  rm -rf "$tmp"
fi
