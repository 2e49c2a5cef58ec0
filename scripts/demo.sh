#!/usr/bin/env bash
# The demo: drafter end to end on the bundled stories260k model.
# Usage: scripts/demo.sh BIN MODEL OUTDIR
set -euo pipefail
bin=${1:-bin/drafter}
model=${2:-models/stories260k}
out=${3:-demo-out}
mkdir -p "$out"

echo "== drafter inspect --model $model"
"$bin" inspect --model "$model"
echo
echo "== drafter tokenize --model $model --special \"Once upon a time\""
"$bin" tokenize --model "$model" --special "Once upon a time"
