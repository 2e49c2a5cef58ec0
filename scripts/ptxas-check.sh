#!/usr/bin/env bash
# ptxas-check.sh [--update]: checks the committed PTX of pkg/tensor/cuda/ptx.
#
#   1. regenerates the PTX into a temporary directory (scripts/ptx.sh) and
#      fails, naming the file, if it differs from what is committed;
#   2. assembles every PTX file for sm_80 and sm_90 with NVIDIA's ptxas -v and
#      writes one line per kernel and architecture (registers, shared memory,
#      stack frame, spill stores, spill loads) to resources.txt, failing if it
#      differs from the committed one, or if a kernel spills registers and is
#      not listed in pkg/tensor/cuda/ptx/spill-exempt.txt (one kernel per
#      line, with the reason in a # comment).
# With --update it writes the PTX and resources.txt into the tree instead.
#
# ptxas comes from PyPI's nvidia-cuda-nvcc-cu12 wheel (no CUDA install),
# unpacked into build/ptxas. scripts/setup.sh downloads the wheel into
# build/wheels; failing that this script tries pip itself. With no wheel and
# no way to get one, step 2 is skipped with the reason printed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ptxdir=$root/pkg/tensor/cuda/ptx
update=0
[ "${1:-}" = "--update" ] && update=1

WHEEL_VERSION=12.9.86
ptxas=$root/build/ptxas/bin/ptxas

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- 1. the PTX
if [ $update = 1 ]; then
  "$root/scripts/ptx.sh" "$ptxdir"
  gen=$ptxdir
else
  "$root/scripts/ptx.sh" "$tmp/ptx"
  gen=$tmp/ptx
  status=0
  for f in "$gen"/*.ptx; do
    name=$(basename "$f")
    if [ ! -f "$ptxdir/$name" ]; then
      echo "ptx-check: pkg/tensor/cuda/ptx/$name is missing: run make ptx and commit it" >&2
      status=1
    elif ! cmp -s "$f" "$ptxdir/$name"; then
      echo "ptx-check: pkg/tensor/cuda/ptx/$name differs from its source: run make ptx and commit it" >&2
      diff "$ptxdir/$name" "$f" | head -20 >&2 || true
      status=1
    fi
  done
  for f in "$ptxdir"/*.ptx; do
    [ -e "$f" ] || continue
    [ -f "$gen/$(basename "$f")" ] || { echo "ptx-check: pkg/tensor/cuda/ptx/$(basename "$f") has no source .cu: delete it" >&2; status=1; }
  done
  [ $status = 0 ] || exit 1
  echo "ptx-check: the committed PTX matches its sources"
fi

# ---- 2. ptxas
find_ptxas() {
  [ -x "$ptxas" ] && return 0
  local whl
  whl=$(ls "$root"/build/wheels/nvidia_cuda_nvcc_cu12-"$WHEEL_VERSION"-*.whl 2>/dev/null | head -1 || true)
  if [ -z "$whl" ]; then
    local pip=""
    if command -v pip >/dev/null 2>&1; then pip="pip"; elif command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then pip="python3 -m pip"; fi
    [ -n "$pip" ] || { skip="no nvidia-cuda-nvcc-cu12 wheel in build/wheels and no pip to download it"; return 1; }
    $pip download --quiet --no-deps --only-binary=:all: --dest "$root/build/wheels" "nvidia-cuda-nvcc-cu12==$WHEEL_VERSION" >&2 ||
      { skip="pip could not download nvidia-cuda-nvcc-cu12==$WHEEL_VERSION"; return 1; }
    whl=$(ls "$root"/build/wheels/nvidia_cuda_nvcc_cu12-"$WHEEL_VERSION"-*.whl | head -1)
  fi
  mkdir -p "$root/build/ptxas/bin"
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("nvidia/cuda_nvcc/bin/ptxas"))' "$whl" >"$ptxas.tmp"
  elif command -v unzip >/dev/null 2>&1; then
    unzip -p "$whl" nvidia/cuda_nvcc/bin/ptxas >"$ptxas.tmp"
  else
    skip="neither python3 nor unzip to unpack $whl"
    return 1
  fi
  chmod +x "$ptxas.tmp"
  mv "$ptxas.tmp" "$ptxas"
}

skip=""
if ! find_ptxas; then
  if [ -n "${DRAFTER_REQUIRE_PTXAS:-}" ]; then
    echo "ptx-check: DRAFTER_REQUIRE_PTXAS is set but ptxas cannot be had: $skip" >&2
    exit 1
  fi
  echo "ptx-check: ptxas part skipped: $skip"
  exit 0
fi

# One line per entry function: ptxas -v prints "Compiling entry function 'K'
# for 'sm_XX'", then K's "N bytes stack frame, S bytes spill stores, L bytes
# spill loads" and "Used R registers, ..., M bytes smem" (smem absent when 0).
res=$tmp/resources.txt
{
  echo "# kernel arch registers shared_bytes stack_bytes spill_stores spill_loads (ptxas $WHEEL_VERSION -v; make ptx writes it)"
  for f in "$gen"/*.ptx; do
    for arch in sm_80 sm_90; do
      "$ptxas" -v -arch=$arch "$f" -o /dev/null 2>&1 | awk -v arch=$arch '
        /Compiling entry function/ { split($0, q, "\047"); entry = q[2]; next }
        /Function properties for/ { fp = $NF; next }
        /bytes stack frame/ && fp == entry { stack = $1; st = $5; ld = $9; next }
        /Used [0-9]+ registers/ && entry != "" {
          regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
          smem = 0
          if (match($0, /[0-9]+ bytes smem/)) { smem = substr($0, RSTART, RLENGTH); sub(/ .*/, "", smem) }
          print entry, arch, regs, smem, stack + 0, st + 0, ld + 0
          entry = ""; stack = st = ld = 0
        }'
    done
  done | LC_ALL=C sort
} >"$res"

status=0
exempt=$ptxdir/spill-exempt.txt
while read -r kernel arch regs smem stack st ld; do
  case $kernel in "#"*) continue ;; esac
  if [ "$st" != 0 ] || [ "$ld" != 0 ]; then
    if [ -f "$exempt" ] && sed 's/#.*//' "$exempt" | grep -qx "[[:space:]]*$kernel[[:space:]]*"; then
      echo "ptx-check: $kernel spills on $arch ($st bytes stored, $ld loaded): exempt"
    else
      echo "ptx-check: $kernel spills registers on $arch ($st bytes stored, $ld loaded)" >&2
      status=1
    fi
  fi
done <"$res"

if [ $update = 1 ]; then
  cp "$res" "$ptxdir/resources.txt"
  echo "ptx: wrote pkg/tensor/cuda/ptx/*.ptx and resources.txt"
elif ! cmp -s "$res" "$ptxdir/resources.txt"; then
  echo "ptx-check: pkg/tensor/cuda/ptx/resources.txt differs from ptxas's report: run make ptx and commit it" >&2
  diff "$ptxdir/resources.txt" "$res" >&2 || true
  status=1
else
  echo "ptx-check: resources.txt matches ptxas ($(grep -vc '^#' "$res") kernel/arch pairs)"
fi
exit $status
