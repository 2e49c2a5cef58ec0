#!/usr/bin/env bash
# ptx.sh [OUTDIR]: compiles every pkg/tensor/cuda/kernels/*.cu to PTX for
# sm_80 with clang (no CUDA toolkit: compat.h supplies the builtins), one
# OUTDIR/<name>.ptx per file (default pkg/tensor/cuda/ptx, the committed copy
# that the Go package embeds).
#
# The output must be byte-identical from run to run and machine to machine
# (CI regenerates it and fails on a diff): clang runs inside the kernels
# directory on relative paths, without debug info, so no path, user or date
# reaches the PTX. +ptx70 selects PTX ISA 7.0 (CUDA 11.0, the first with
# sm_80); without a CUDA installation clang would pick an older ISA that lacks
# the *_sync warp intrinsics. Every driver since 11.0 JIT-compiles it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/pkg/tensor/cuda/kernels
out=${1:-$root/pkg/tensor/cuda/ptx}
CLANG=${CLANG:-clang-16}
command -v "$CLANG" >/dev/null || { echo "ptx.sh: $CLANG not found (scripts/setup.sh installs clang-16)" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$src"
shopt -s nullglob
files=(*.cu)
[ ${#files[@]} -gt 0 ] || { echo "ptx.sh: no kernels in $src" >&2; exit 1; }
for f in "${files[@]}"; do
  name=${f%.cu}
  "$CLANG" -x cuda --cuda-gpu-arch=sm_80 --cuda-device-only -nocudainc -nocudalib \
    -Xclang -target-feature -Xclang +ptx70 -S -O3 -Wall -Wextra \
    "$f" -o "$out/$name.ptx.tmp"
  mv "$out/$name.ptx.tmp" "$out/$name.ptx"
done
