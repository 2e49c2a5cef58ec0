#!/usr/bin/env bash
# Issue 30's acceptance table: EAGLE-3, DFlash and DSpark trained with their defaults on the same
# distilled data of the bundled stories260k model, evaluated on the 40 held-out prompts of the
# demo, each at the temperature its data was distilled at (0 and 1), with a chain of 4 drafts and
# with the whole block (7 drafts: EAGLE-3's chain of 7, DFlash's block of 8, DSpark's block of 7).
# The report's draft/round column is the drafter's time per verification round in target decode
# steps. Every temperature-0 run must equal plain greedy decoding (eval checks it).
#   1. distill PROMPTS at temperature 0 and at temperature 1 (96 new tokens each), capturing
#      every hidden layer of the tiny target (so each method finds the layers it defaults to)
#   2. train eagle3, dflash and dspark on each capture with no flag but the data
#   3. eval chain 4 and the full block at the capture's temperature, and DSpark's full block with
#      its draft-length schedules (sps, and a confidence threshold of 0.5)
# Usage: scripts/block-acceptance.sh BIN MODEL OUTDIR [PROMPTS] [N]   (N prompts of PROMPTS,
# default the first 2000 of data/prompts/stories-train-8k.jsonl; rerunning reuses finished steps)
set -euo pipefail
bin=${1:-bin/drafter}
model=${2:-models/stories260k}
out=${3:-block-acceptance-out}
prompts=${4:-data/prompts/stories-train-8k.jsonl}
n=${5:-2000}
step() { printf '\n== %s\n' "$*"; }

mkdir -p "$out/reports"
head -n "$n" "$prompts" >"$out/prompts.jsonl"
for temp in 0 1; do
  step "drafter distill ($n prompts, temperature $temp)"
  "$bin" distill --model "$model" --prompts "$out/prompts.jsonl" --out "$out/cap-t$temp" \
    --max-new-tokens 96 --temperature "$temp" --batch 8 --layers 1,2,3,4,5 --quiet
  for method in eagle3 dflash dspark; do
    dir="$out/$method-t$temp"
    if [ -f "$dir/drafter.json" ]; then
      step "drafter train $method (temperature-$temp data): already trained"
      continue
    fi
    resume=""
    [ -f "$dir/checkpoint.safetensors" ] && resume="--resume"
    step "drafter train $method (temperature-$temp data, defaults)"
    "$bin" train "$method" --model "$model" --data "$out/cap-t$temp" --out "$dir" --quiet $resume
  done
  for method in eagle3 dflash dspark; do
    for depth in 4 7; do
      step "drafter eval $method chain $depth (temperature $temp)"
      "$bin" eval --model "$model" --prompts data/prompts/stories-eval.jsonl --max-new-tokens 96 \
        --temperature "$temp" --seed 1 --report "$out/reports/$method-chain$depth-t$temp.json" --quiet \
        --drafter "$out/$method-t$temp" --mode chain --depth "$depth"
    done
  done
  # DSpark's draft-length schedules on its calibrated confidences (the fixed block is chain 7).
  for schedule in sps "threshold --confidence-threshold 0.5"; do
    name=${schedule%% *}
    step "drafter eval dspark chain 7, --schedule $schedule (temperature $temp)"
    "$bin" eval --model "$model" --prompts data/prompts/stories-eval.jsonl --max-new-tokens 96 \
      --temperature "$temp" --seed 1 --report "$out/reports/dspark-$name-t$temp.json" --quiet \
      --drafter "$out/dspark-t$temp" --mode chain --schedule $schedule
  done
done

step "comparison (40 held-out prompts, 96 new tokens)"
go run ./scripts/compare "$out"/reports/*-t0.json "$out"/reports/*-t1.json
