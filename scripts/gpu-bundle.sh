#!/usr/bin/env bash
# Packs what scripts/gpu-proof.sh needs from a Release build into DEST (< 16 MiB), laid out as the build tree,
# so it can travel to a GPU machine that has a newer Linux, a driver, CUDA 13 and PyTorch but no compiler for
# this tree: stripped binaries, and in DEST/deps the shared libraries they need that glibc and libstdc++ do not
# provide (gpu-proof.sh puts on LD_LIBRARY_PATH only those the GPU machine lacks).
#
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j
#   scripts/gpu-bundle.sh build .gpu-bundle       # DEST in a folder git ignores (echo /.gpu-bundle/ >> .git/info/exclude)
#   # on the GPU machine, in this repository's root:
#   scripts/gpu-proof.sh .gpu-bundle /tmp/proof
set -euo pipefail
[[ $# -eq 2 ]] || { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
build=$1 dest=$2
files=(cli/stepscope collector/libstepscope_collector.so samples/cuda/launch_bound samples/cuda/input_bound
       samples/cuda/small_gemm_loop samples/cuda/sync_stall bench/gpu_overhead/libstepscope_cupti_count.so
       bench/gpu_overhead/stepscope_cupti_reattach_probe)
for f in "${files[@]}"; do
  [[ -f $build/$f ]] || { echo "gpu-bundle: $build/$f is missing: build Release with CUDA first" >&2; exit 2; }
done
rm -rf "$dest"
mkdir -p "$dest/deps"
for f in "${files[@]}"; do
  mkdir -p "$dest/$(dirname "$f")"
  # The CUDA samples keep their line tables: the proof checks the lines their stacks name.
  case $f in samples/*) cp "$build/$f" "$dest/$f" ;; *) strip --strip-unneeded -o "$dest/$f" "$build/$f" ;; esac
done
# Optional: what one sampling signal costs there (bench/signal_cost), beside this VM's figure, and the Python
# workloads' overhead (bench/overhead --python; gpu-proof.sh runs it with STEPSCOPE_PROOF_PYTHON_ROUNDS).
for f in bench/signal_cost/signal_cost_bench bench/overhead/overhead_bench; do
  [[ -f $build/$f ]] || continue
  mkdir -p "$dest/$(dirname "$f")"
  strip --strip-unneeded -o "$dest/$f" "$build/$f"
done
# libunwind is dlopen'ed by the collector: ldd cannot see it.
extra=$(ldconfig -p | sed -n 's/.*libunwind-x86_64\.so\.8 (.*) => //p' | head -1)
deps=$( { for f in "${files[@]}"; do ldd "$build/$f"; done; [[ -n $extra ]] && ldd "$extra" && echo " x => $extra (0)"; } |
  sed -n 's/.* => \(\/[^ ]*\) .*/\1/p' | sort -u)
for lib in $deps; do
  # glibc's own, the C++ runtime (a newer one serves), and the CUDA toolkit's (the GPU machine has CUDA 13).
  case $lib in /usr/local/cuda*) continue ;; esac
  case $(basename "$lib") in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libutil.so*|libresolv.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) continue ;;
    libcuda.so*|libcudart.so*|libcupti.so*|libcublas*|libnvrtc*|libnvJitLink*) continue ;;
  esac
  strip --strip-unneeded -o "$dest/deps/$(basename "$lib")" "$(readlink -f "$lib")"
done
size=$(du -sb "$dest" | cut -f1)
echo "gpu-bundle: $dest: $((size / 1024)) KiB ($(ls "$dest/deps" | wc -l) libraries: $(ls "$dest/deps" | tr '\n' ' '))"
((size < 16 * 1024 * 1024)) || { echo "gpu-bundle: $dest is over 16 MiB" >&2; exit 1; }
