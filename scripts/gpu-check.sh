#!/usr/bin/env bash
# The checks that need a real GPU, as one script for a lent GPU machine (which has no Go): the
# device conformance suite and greedy parity on the GPU, the whole pipeline (distill, train both
# methods, eval) on a random-weight Llama-3.2-1B-shaped checkpoint (scripts/random-pipeline.sh),
# then the speeds: the forward benchmarks, the copy bandwidth and cuBLAS's bf16 rate, and
# drafter bench --random's table for the Llama-3.2-1B and Llama-3.1-8B shapes, all written to one
# file (about 8 minutes on one GPU; every step has its own time limit). Build its inputs here
# first:
#
#   make gpu-check-build        # bin/drafter and the test binaries, into build/gpu-check/
#
# then run on the GPU machine, from the repository root (carry build/gpu-check and bin):
#
#   scripts/gpu-check.sh [OUT]  # OUT: the table's file, default $OUT/gpu-check.md or gpu-check.md
#
# cuBLAS: DRAFTER_CUDA_LIBS, else the first folder holding libcublas.so.1[3-1] among the Python
# packages (PyTorch's nvidia-cublas wheel) and the usual CUDA folders.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=bin/drafter
tests=build/gpu-check
out=${1:-${OUT:-.}/gpu-check.md}
mkdir -p "$(dirname "$out")"
log=$(dirname "$out")/gpu-check.log
: >"$log"

if [ -z "${DRAFTER_CUDA_LIBS:-}" ]; then
  for d in $(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
    /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu; do
    f=$(find "$d" -maxdepth 4 -name 'libcublas.so.1[123]' 2>/dev/null | sort -r | head -1)
    if [ -n "$f" ]; then export DRAFTER_CUDA_LIBS=$(dirname "$f"); break; fi
  done
fi
# The real driver (the CUDA tests run on whatever DRAFTER_LIBCUDA names).
export DRAFTER_LIBCUDA=${DRAFTER_LIBCUDA:-libcuda.so.1} DRAFTER_REQUIRE_CUDA=1
echo "DRAFTER_CUDA_LIBS=${DRAFTER_CUDA_LIBS:-unset}" | tee -a "$log"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$log"

status=0
run() { # name command...: runs, logs, records pass/fail
  local name=$1; shift
  echo "== $name: $*" >>"$log"
  # timeout runs programs: a function of this script (exported) runs through bash.
  if declare -F "$1" >/dev/null; then set -- bash -c '"$@"' _ "$@"; fi
  if timeout 240 "$@" >>"$log" 2>&1; then echo "| $name | pass |" >>"$out.checks"; else
    echo "| $name | FAIL (see $(basename "$log")) |" >>"$out.checks"; status=1; fi
}
: >"$out.checks"

"$bin" devices | tee -a "$log"
run "conformance suite (tensortest.Ops) on cuda:0" "$tests/cuda.test" -test.run 'TestConformance' -test.v
parity() { # model: greedy ids of cpu and cuda equal
  local model=$1 a b
  a=$("$bin" generate --device cpu --model "$model" --prompt "Once upon a time" --max-new-tokens 64 --json) || return 1
  b=$("$bin" generate --device cuda --model "$model" --prompt "Once upon a time" --max-new-tokens 64 --json) || return 1
  python3 - "$a" "$b" <<'PY'
import json, sys
a, b = (json.loads(x)["generated_ids"] for x in sys.argv[1:3])
print("cpu ", a); print("cuda", b)
sys.exit(0 if a == b else 1)
PY
}
export -f parity
export bin
run "greedy parity stories260k (f32), cpu vs cuda" parity models/stories260k
# The pipeline on a random 1B-shape checkpoint written by drafter bench --save (2.5 GB, removed
# after): every stage loads a real-sized model on the GPU.
pipe=$(dirname "$out")/gpu-check-pipeline
run "pipeline (bench --save, distill, train medusa and eagle3, eval) on random llama3-1b, cuda" \
  scripts/random-pipeline.sh "$bin" llama3-1b cuda "$pipe"
rm -rf "$pipe/model"

# Speeds: prefill and decode tokens/s of the bundled and the 60M model on the GPU, the copy
# bandwidth and cuBLAS's bf16 rate.
DRAFTER_BENCH_DEVICE=cuda timeout 300 "$tests/model.test" -test.run '^$' -test.bench 'Prefill|Decode' \
  -test.benchtime 20x >"$out.bench" 2>&1 || status=1
timeout 120 "$tests/cuda.test" -test.run '^$' -test.bench 'Copy|GemmBF16' -test.benchtime 10x >>"$out.bench" 2>&1 || status=1
# drafter bench --random's table, at its default sizes, for the 1B and the 8B shape.
: >"$out.random"
# Building the 8B model draws its 8 billion random weights on one host thread (a minute or two).
for shape in llama3-1b:150 llama3-8b:300; do
  limit=${shape#*:}
  shape=${shape%:*}
  echo "== bench --random $shape" >>"$log"
  if timeout "$limit" "$bin" bench --random "$shape" --device cuda >"$out.table" 2>>"$log"; then
    { echo '```'; cat "$out.table"; echo '```'; echo; } >>"$out.random"
  else
    echo "drafter bench --random $shape: FAIL (see $(basename "$log"))" >>"$out.random"
    echo >>"$out.random"
    status=1
  fi
done
rm -f "$out.table"

{
  echo "# gpu-check $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
  echo
  echo "| check | result |"
  echo "|---|---|"
  cat "$out.checks"
  echo
  echo "| benchmark | metrics |"
  echo "|---|---|"
  grep '^Benchmark' "$out.bench" | awk '{name=$1; $1=""; $2=""; print "| " name " |" $0 " |"}'
  echo
  echo "## drafter bench --random (random weights, bf16, default sizes)"
  echo
  cat "$out.random"
} >"$out"
rm -f "$out.checks" "$out.random"
cat "$out"
exit $status
