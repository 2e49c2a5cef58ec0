#!/usr/bin/env bash
# The acceptance measurement of docs/acceptance.md: drafter end to end on the bundled
# stories260k model with every training default, on the 8400 distilled prompts of
# data/prompts/stories-train-8k.jsonl, evaluated on the 40 held-out prompts of the demo at
# temperature 0 and at temperature 1. About 30 minutes on 2 cores.
#   1. distill: greedy 96-token continuations of the 8400 prompts (the serving temperature is 0)
#   2. train Medusa-1 heads and an EAGLE-3 draft with no flag but the data
#   3. eval: Medusa chain (every head, and 4) and tree, EAGLE-3 chain 4, chain 7 and tree, at
#      temperature 0 and 1
# Usage: scripts/acceptance.sh BIN MODEL OUTDIR [PROMPTS]   (rerunning resumes or reuses
# finished steps, as scripts/demo.sh does)
set -euo pipefail
bin=${1:-bin/drafter}
model=${2:-models/stories260k}
out=${3:-acceptance-out}
prompts=${4:-data/prompts/stories-train-8k.jsonl}
step() { printf '\n== %s\n' "$*"; }

build=$(sha256sum "$bin" | cut -c1-16)
if { [ -e "$out/drafter-build" ] || [ -e "$out/distill/manifest.json" ]; } &&
  [ "$(cat "$out/drafter-build" 2>/dev/null)" != "$build" ]; then
  step "$out was made by another build of drafter: starting over"
  rm -rf "$out"
fi
mkdir -p "$out/reports"
echo "$build" >"$out/drafter-build"

step "drafter distill ($prompts, 96 greedy tokens each)"
"$bin" distill --model "$model" --prompts "$prompts" --out "$out/distill" \
  --max-new-tokens 96 --temperature 0 --batch 8 --quiet

for method in medusa eagle3; do
  if [ -f "$out/$method/drafter.json" ]; then
    step "drafter train $method: already trained in $out/$method"
    continue
  fi
  resume=""
  [ -f "$out/$method/checkpoint.safetensors" ] && resume="--resume"
  step "drafter train $method (defaults)"
  "$bin" train "$method" --model "$model" --data "$out/distill" --out "$out/$method" --quiet $resume
done

evalrun() {
  local name=$1 temp=$2; shift 2
  step "drafter eval $name (temperature $temp)"
  "$bin" eval --model "$model" --prompts data/prompts/stories-eval.jsonl --max-new-tokens 96 \
    --temperature "$temp" --seed 1 --report "$out/reports/$name-t$temp.json" --quiet "$@"
}
for temp in 0 1; do
  evalrun medusa-chain "$temp" --drafter "$out/medusa" --mode chain
  evalrun medusa-chain4 "$temp" --drafter "$out/medusa" --mode chain --depth 4
  evalrun medusa-tree "$temp" --drafter "$out/medusa" --mode tree
  evalrun eagle3-chain4 "$temp" --drafter "$out/eagle3" --mode chain --depth 4
  evalrun eagle3-chain7 "$temp" --drafter "$out/eagle3" --mode chain --depth 7
  evalrun eagle3-tree "$temp" --drafter "$out/eagle3" --mode tree --depth 7 --topk 8 --total-tokens 60
done

step "comparison (40 held-out prompts, 96 new tokens)"
go run ./scripts/compare "$out"/reports/*-t0.json "$out"/reports/*-t1.json
