#!/usr/bin/env bash
# Unpacks Debian sid's CPython 3.14, with the glibc and libraries it needs, into a cache folder: Debian 12 has
# no CPython 3.14, and the frame reader (collector/src/python) is checked against every CPython it supports
# (tests/python/python_frames_test.cpp picks this one up). Nothing is installed system-wide: the interpreter's
# loader and library path point into the folder (patchelf).
#
#   scripts/python-sid.sh [DEST]     DEST default ~/.cache/stepscope/cpython-sid; prints the interpreter's path
set -euo pipefail
DEST=${1:-$HOME/.cache/stepscope/cpython-sid}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
V=3.14
PKGS="libc6 python$V-minimal python$V libpython$V-minimal libpython$V-stdlib libmpdec4 libssl3t64 libzstd1 libffi8
      libexpat1"
if ! command -v patchelf >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patchelf >/dev/null
  else
    echo "python-sid: patchelf is missing (apt-get install patchelf)" >&2
    exit 2
  fi
fi
tmp=$(mktemp -d "$(dirname "$DEST")/.cpython-sid.XXXXXX" 2>/dev/null || mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsS "$MIRROR/dists/sid/main/binary-amd64/Packages.xz" | xz -dc >"$tmp/Packages"
mkdir -p "$tmp/root"
for p in $PKGS; do
  f=$(awk -v p="$p" '$1 == "Package:" { hit = ($2 == p) } hit && $1 == "Filename:" { print $2; exit }' "$tmp/Packages")
  [[ -n $f ]] || { echo "python-sid: no package $p in sid" >&2; exit 2; }
  curl -fsS -o "$tmp/pkg.deb" "$MIRROR/$f"
  dpkg-deb -x "$tmp/pkg.deb" "$tmp/root"
done
lib=$DEST/usr/lib/x86_64-linux-gnu
patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$lib" "$tmp/root/usr/bin/python$V"
rm -rf "$DEST"
mkdir -p "$(dirname "$DEST")"
mv "$tmp/root" "$DEST"
"$DEST/usr/bin/python$V" -c 'import sys, ssl, ctypes, sqlite3, lzma; assert sys.version_info[:2] == (3, 14)' ||
  { echo "python-sid: the unpacked CPython $V does not run" >&2; exit 2; }
echo "$DEST/usr/bin/python$V"
