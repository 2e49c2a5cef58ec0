#!/usr/bin/env bash
# The whole pipeline on a random-weight model of a named shape: drafter bench --save writes it as
# a checkpoint, then distill, train (Medusa and EAGLE-3) and eval (chain and tree) run on it, each
# as short as still exercises the stage (8 prompts, 16 new tokens, 2 training steps, 2 eval
# prompts). The drafters learn nothing from a random target; what this shows is that every stage
# loads the shape and runs it on the device. scripts/gpu-check.sh runs it for llama3-1b on the GPU;
# cmd/drafter's TestRandomPipeline runs it for 60m on the CPU, so the script is not first run on a
# GPU machine.
#
# Usage: scripts/random-pipeline.sh BIN SHAPE DEVICE OUTDIR   (OUTDIR is emptied first)
set -euo pipefail
if [ $# -ne 4 ]; then
  echo "usage: $0 BIN SHAPE DEVICE OUTDIR" >&2
  exit 2
fi
bin=$1
shape=$2
device=$3
out=$4
cd "$(dirname "$0")/.."
step() { printf '== %s\n' "$*"; }

rm -rf "$out"
mkdir -p "$out/reports"
model=$out/model
step "bench --random $shape --save $model"
"$bin" bench --random "$shape" --save "$model"

head -n 8 data/prompts/stories-train.jsonl >"$out/train.jsonl"
head -n 2 data/prompts/stories-eval.jsonl >"$out/eval.jsonl"

step "distill (8 prompts, 16 greedy tokens, batch 8) on $device"
"$bin" distill --device "$device" --model "$model" --prompts "$out/train.jsonl" --out "$out/distill" \
  --max-new-tokens 16 --temperature 0 --batch 8 --quiet

# Medusa with the target's lm_head shared: a trained copy per head is four V x H float32 copies
# each (values, gradients, AdamW), which the short run does not need to show the stage works.
step "train medusa (2 steps) on $device"
"$bin" train medusa --device "$device" --model "$model" --data "$out/distill" --out "$out/medusa" \
  --shared-lm-head --max-steps 2 --batch-tokens 64 --quiet
step "train eagle3 (2 steps) on $device"
"$bin" train eagle3 --device "$device" --model "$model" --data "$out/distill" --out "$out/eagle3" \
  --max-steps 2 --batch-tokens 64 --max-length 64 --quiet

evalrun() {
  local name=$1
  shift
  step "eval $name on $device"
  "$bin" eval --device "$device" --model "$model" --prompts "$out/eval.jsonl" --limit 2 \
    --max-new-tokens 16 --temperature 0 --report "$out/reports/$name.json" --quiet "$@"
}
evalrun medusa-chain --drafter "$out/medusa" --mode chain
evalrun eagle3-chain4 --drafter "$out/eagle3" --mode chain --depth 4
evalrun eagle3-tree --drafter "$out/eagle3" --mode tree --depth 7 --topk 8 --total-tokens 60
step "pipeline on $shape done: reports in $out/reports"
