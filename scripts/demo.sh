#!/usr/bin/env bash
# The demo: drafter end to end on the bundled stories260k model, a few minutes on 2 cores.
#   1. distill: greedy 96-token continuations of 400 story prompts, with hidden states captured
#   2. train Medusa-1 heads and an EAGLE-3 draft layer on them, with the default settings
#   3. eval: real speculative decoding on 40 held-out prompts against the plain baseline
# Medusa trains with its defaults; the demo caps EAGLE-3 at 12 epochs (its default is 40, about
# 10 minutes on 2 cores) to stay within a few minutes: the defaults accept more
# (docs/performance.md).
# Usage: scripts/demo.sh BIN MODEL OUTDIR   (rerunning with the same build resumes or reuses
# finished steps; OUTDIR made by another build of drafter is started over, since its defaults
# may differ)
set -euo pipefail
bin=${1:-bin/drafter}
model=${2:-models/stories260k}
out=${3:-demo-out}
step() { printf '\n== %s\n' "$*"; }

build=$(sha256sum "$bin" | cut -c1-16)
if { [ -e "$out/drafter-build" ] || [ -e "$out/distill/manifest.json" ]; } &&
  [ "$(cat "$out/drafter-build" 2>/dev/null)" != "$build" ]; then
  step "$out was made by another build of drafter: starting over"
  rm -rf "$out"
fi
mkdir -p "$out/reports"
echo "$build" >"$out/drafter-build"

step "drafter inspect --model $model"
"$bin" inspect --model "$model"

step "drafter distill (400 prompts, 96 greedy tokens each)"
"$bin" distill --model "$model" --prompts data/prompts/stories-train.jsonl --out "$out/distill" \
  --max-new-tokens 96 --temperature 0 --batch 8

for method in medusa eagle3; do
  if [ -f "$out/$method/drafter.json" ]; then
    step "drafter train $method: already trained in $out/$method"
    continue
  fi
  resume=""
  [ -f "$out/$method/checkpoint.safetensors" ] && resume="--resume"
  cap=""
  [ "$method" = eagle3 ] && cap="--epochs 12"
  step "drafter train $method $cap"
  "$bin" train "$method" --model "$model" --data "$out/distill" --out "$out/$method" \
    $cap $resume
done

evalrun() {
  local name=$1; shift
  step "drafter eval $name"
  "$bin" eval --model "$model" --prompts data/prompts/stories-eval.jsonl --max-new-tokens 96 \
    --temperature 0 --report "$out/reports/$name.json" --quiet "$@"
}
evalrun medusa-chain  --drafter "$out/medusa" --mode chain
evalrun medusa-tree   --drafter "$out/medusa" --mode tree
evalrun eagle3-chain4 --drafter "$out/eagle3" --mode chain --depth 4
evalrun eagle3-chain7 --drafter "$out/eagle3" --mode chain --depth 7
evalrun eagle3-tree   --drafter "$out/eagle3" --mode tree --depth 7 --topk 8 --total-tokens 60 \
  --plot "$out/plots" --min-acceptance 1.5

step "comparison (temperature 0, 40 held-out prompts, 96 new tokens)"
go run ./scripts/compare "$out"/reports/*.json
