#!/usr/bin/env bash
# llamacpp-compare.sh: compare drafter's forward speed with llama.cpp's on the
# same machine, the same weights and 2 threads, with the weights stored as
# float32, bfloat16 and float16.
#
# Usage: scripts/llamacpp-compare.sh LLAMA_CPP_BUILD_DIR [ROUNDS]
#
# LLAMA_CPP_BUILD_DIR is a CPU build of llama.cpp holding bin/llama-bench,
# bin/llama-batched-bench and bin/llama-quantize (build it yourself, outside
# this repository). The script writes float32 GGUF files of the 60M random
# benchmark model and of models/stories260k with `go run ./scripts/gguf`, and
# converts them to BF16 and F16 with llama-quantize; pkg/model's benchmarks
# round the same float32 weights to bf16/f16 the same way (to nearest, ties
# to even) and keep them in that dtype, as a bf16 safetensors checkpoint is
# kept. Then it runs, ROUNDS times (default 3) and
# interleaved so that a load spike hits both sides alike:
#   drafter:   pkg/model's BenchmarkPrefill (512-token prompt) and
#              BenchmarkDecode (1 and 8 sequences), for each dtype, with
#              OpenBLAS and pure Go;
#   llama.cpp: llama-bench -t 2 -p 512 -n 128 (prefill, one-sequence decode)
#              and llama-batched-bench -t 2 -npp 16 -ntg 128 -npl 8
#              (aggregate decode tokens/s over 8 sequences).
# It prints the median tokens/s of each and the load average before and after.
#
# By default llama.cpp waits for work without spinning (OMP_WAIT_POLICY=passive,
# --poll 0): on a shared, oversubscribed machine its default busy-waiting
# threads run 10 to 60 times slower, which would measure the load rather than
# the engine. LLAMA_SPIN=1 keeps llama.cpp's defaults (right on an idle machine).
#
# Environment: THREADS (default 2), PREFILL_BENCHTIME (default 3x),
# DECODE_BENCHTIME (default 128x, the length of llama-bench's tg128),
# BACKENDS (default "openblas go"), DTYPES (default "f32 bf16 f16"),
# WORK (scratch folder, default a new one).
set -euo pipefail

if [[ $# -lt 1 || ! -d $1 ]]; then
	echo "usage: $0 LLAMA_CPP_BUILD_DIR [ROUNDS]" >&2
	exit 2
fi
build=$(cd "$1" && pwd)
rounds=${2:-3}
threads=${THREADS:-2}
prefill_bt=${PREFILL_BENCHTIME:-3x}
decode_bt=${DECODE_BENCHTIME:-128x}
backends=${BACKENDS:-openblas go}
dtypes=${DTYPES:-f32 bf16 f16}
llama_env=(OMP_WAIT_POLICY=passive) llama_poll=(--poll 0)
if [[ ${LLAMA_SPIN:-0} == 1 ]]; then llama_env=() llama_poll=(); fi
bench=$build/bin/llama-bench
batched=$build/bin/llama-batched-bench
quantize=$build/bin/llama-quantize
for b in "$bench" "$batched" "$quantize"; do
	[[ -x $b ]] || { echo "$0: $b is missing: build llama.cpp's llama-bench, llama-batched-bench and llama-quantize" >&2; exit 1; }
done
for d in $dtypes; do
	case $d in f32 | bf16 | f16) ;; *) echo "$0: unknown dtype $d (want f32, bf16 or f16)" >&2; exit 2 ;; esac
done
command -v jq >/dev/null || { echo "$0: jq is required to read llama.cpp's JSON output" >&2; exit 1; }

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
res=$work/results.tsv # model metric side value
: >"$res"

echo "== writing GGUF files and test binaries into $work" >&2
go run ./scripts/gguf -bench60m -seed 1 -o "$work/random60M.gguf"
go run ./scripts/gguf -model models/stories260k -o "$work/stories260k.gguf"
# Model names as the benchmarks spell them: random60M, random60M-bf16, ...
models=()
for m in random60M stories260k; do
	for d in $dtypes; do
		if [[ $d == f32 ]]; then
			models+=("$m")
		else
			models+=("$m-$d")
			"$quantize" "$work/$m.gguf" "$work/$m-$d.gguf" "${d^^}" >/dev/null 2>&1 ||
				{ echo "$0: llama-quantize $m to ${d^^} failed" >&2; exit 1; }
		fi
	done
done
coretype=$(go run ./scripts/coretype)
for be in $backends; do
	case $be in
	openblas) go test -c -o "$work/model-openblas.test" ./pkg/model ;;
	go) CGO_ENABLED=0 go test -c -o "$work/model-go.test" ./pkg/model ;;
	*) echo "$0: unknown backend $be (want openblas or go)" >&2; exit 2 ;;
	esac
done

load() { cut -d' ' -f1-3 /proc/loadavg; }
load_before=$(load)

# ours BACKEND: run the model benchmarks and append tokens/s to $res.
ours() {
	local be=$1 env=()
	# OpenBLAS with the kernels the drafter binary would load (it sets
	# OPENBLAS_CORETYPE); the pure-Go test binary is built without cgo.
	[[ $be == openblas ]] && env=($coretype)
	(
		cd pkg/model
		env "${env[@]}" GOMAXPROCS="$threads" "$work/model-$be.test" -test.run '^$' -test.bench 'Prefill' -test.benchtime "$prefill_bt"
		env "${env[@]}" GOMAXPROCS="$threads" "$work/model-$be.test" -test.run '^$' -test.bench 'Decode' -test.benchtime "$decode_bt"
	) | awk -v side="drafter-$be" '
		/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name)
			for (i = 2; i <= NF; i++) if ($i == "tokens/s") v = $(i-1)
			split(name, p, "/")
			if (p[1] == "BenchmarkPrefill") metric = "prefill512"
			else if (p[3] == "seqs=1") metric = "decode-1"
			else if (p[3] == "seqs=8") metric = "decode-8"
			else next
			print p[2], metric, side, v
		}' >>"$res"
}

# llama MODEL: run llama-bench and llama-batched-bench and append tokens/s.
llama() {
	local m=$1 f=$work/$1.gguf
	env "${llama_env[@]}" "$bench" -m "$f" -t "$threads" "${llama_poll[@]}" -p 512 -n 128 -r 3 -o jsonl 2>/dev/null |
		jq -r --arg m "$m" 'if .n_prompt > 0 then "\($m) prefill512 llama.cpp \(.avg_ts)" else "\($m) decode-1 llama.cpp \(.avg_ts)" end' >>"$res"
	env "${llama_env[@]}" "$batched" -m "$f" -t "$threads" "${llama_poll[@]}" -c 2048 -b 2048 -ub 512 -npp 16 -ntg 128 -npl 8 --output-format jsonl 2>/dev/null |
		grep '^{' | jq -r --arg m "$m" '"\($m) decode-8 llama.cpp \(.speed_tg)"' >>"$res"
}

for ((r = 1; r <= rounds; r++)); do
	echo "== round $r/$rounds (load $(load))" >&2
	for be in $backends; do ours "$be"; done
	for m in "${models[@]}"; do llama "$m"; done
done
load_after=$(load)

# Median per (model, metric, side), then one row per (model, metric).
sides="llama.cpp"
for be in $backends; do sides="$sides drafter-$be"; done
echo
echo "tokens/s, median of $rounds interleaved rounds, $threads threads, weights as $dtypes; $(nproc) cores;" \
	"llama.cpp waiting: $([[ ${LLAMA_SPIN:-0} == 1 ]] && echo 'default (spinning)' || echo 'passive, --poll 0');" \
	"load average before $load_before, after $load_after; llama.cpp $(git -C "$build/.." rev-parse --short HEAD 2>/dev/null || echo '?')"
awk -v sides="$sides" -v modelnames="${models[*]}" '
	{ key = $1 SUBSEP $2 SUBSEP $3; n[key]++; v[key, n[key]] = $4; models[$1]; }
	function median(key,   k, i, j, t, a) {
		k = n[key]; if (!k) return "-"
		for (i = 1; i <= k; i++) a[i] = v[key, i]
		for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] + 0 > a[j] + 0; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return (k % 2) ? a[(k+1)/2] : (a[k/2] + a[k/2+1]) / 2
	}
	END {
		ns = split(sides, s, " ")
		printf "%-17s %-11s", "model", "metric"
		for (i = 1; i <= ns; i++) printf " %16s", s[i]
		for (i = 2; i <= ns; i++) printf " %14s", s[i] "/llama"
		printf "\n"
		nm = split(modelnames, ms, " "); split("prefill512 decode-1 decode-8", mt, " ")
		for (a = 1; a <= nm; a++) for (b = 1; b <= 3; b++) {
			printf "%-17s %-11s", ms[a], mt[b]
			for (i = 1; i <= ns; i++) { x[i] = median(ms[a] SUBSEP mt[b] SUBSEP s[i]); printf " %16s", (x[i] == "-") ? "-" : sprintf("%.1f", x[i]) }
			for (i = 2; i <= ns; i++) printf " %14s", (x[i] == "-" || x[1] == "-" || x[1] == 0) ? "-" : sprintf("%.2fx", x[i] / x[1])
			printf "\n"
		}
	}' "$res"
echo "(raw results: $res)"
