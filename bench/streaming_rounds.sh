#!/usr/bin/env bash
# Weight streaming in decode against this machine's read roof, taken seconds apart (issue 29's
# goal: a one-sequence decode step streams the weights at >= 85% of `membw`'s read bandwidth). On
# a machine whose bandwidth drifts by ±30% within minutes (bench/README.md, "The AVX2 engine and
# llama.cpp") one roof and one decode run minutes apart cannot be set against each other, so each
# round runs `membw`'s 2-thread read roof and an `engine_bench` batch-1 decode at an empty context
# back to back (order alternating), per ISA path, and the ratio is taken per round:
#   streaming = decode_weight_bytes_per_step / (ms_per_step) / read_gb_s
# (every weight matrix read once a step, the embedding one row; the step's other work counts
# against it, so this is a lower bound). Prints one JSON line per round and a summary (median,
# min–max of the per-round ratios). Never asserts; run on an idle machine.
#   bench/streaming_rounds.sh [--rounds 5] [--model DIR] [--threads 2] [--isa avx2|native|both] [--dtype fp32|bf16]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${YOCO_BUILD_DIR:-build}
ROUNDS=5 MODEL=/tmp/yoco-peers/models-mid-gret/transformer THREADS=2 ISA=both DTYPE=fp32
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --model) MODEL=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --isa) ISA=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    *) echo "streaming_rounds.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for need in "$MODEL/params.json" "$BUILD/bench/engine_bench" "$BUILD/bench/membw"; do
  [[ -e $need ]] || { echo "streaming_rounds.sh: $need missing" >&2; exit 2; }
done
isas=()
[[ $ISA == avx2 || $ISA == both ]] && isas+=(avx2)
if [[ $ISA == native || $ISA == both ]] && grep -qw avx512f /proc/cpuinfo; then isas+=(native); fi
roof() {
  "${env[@]}" "$BUILD/bench/membw" --threads "$THREADS" --gib 1 --reps 3 --batches 1 --crc-mib 1 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["read"][-1]["read_gb_s"])'
}
decode() {
  "${env[@]}" "$BUILD/bench/engine_bench" --model "$MODEL" --threads "$THREADS" --dtype "$DTYPE" --json \
    --prefill-lens 1 --repeats 1 --decode-batches 1 --decode-context 1 --decode-steps 48 2>/dev/null |
    python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["decode_weight_bytes_per_step"] / (d["decode"][0]["ms_per_step"] * 1e6))'
}
lines=()
for ((r = 0; r < ROUNDS; r++)); do
  for isa in "${isas[@]}"; do
    env=(env -u YOCO_CPU_ISA)
    [[ $isa == avx2 ]] && env=(env YOCO_CPU_ISA=avx2)
    if ((r % 2 == 0)); then g=$(roof); s=$(decode); else s=$(decode); g=$(roof); fi
    line=$(printf '{"round": %d, "isa": "%s", "read_gb_s": %s, "decode_weight_gb_s": %s}' "$r" "$isa" "$g" "$s")
    echo "$line"
    lines+=("$line")
  done
done
printf '%s\n' "${lines[@]}" | python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
for isa in sorted({r["isa"] for r in rows}):
    rs = [r for r in rows if r["isa"] == isa]
    ratio = [r["decode_weight_gb_s"] / r["read_gb_s"] for r in rs]
    med = lambda k: statistics.median(r[k] for r in rs)
    print("%s: read roof %.1f GB/s, decode streams %.1f GB/s (medians); streaming / roof %.0f%% (per round %.0f–%.0f%%, %d rounds)"
          % (isa, med("read_gb_s"), med("decode_weight_gb_s"), 100 * statistics.median(ratio), 100 * min(ratio),
             100 * max(ratio), len(rs)))'
