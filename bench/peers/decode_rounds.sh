#!/usr/bin/env bash
# The decode cells of the peer table (bench/peers/peers.sh) again, interleaved and repeated: on a
# shared machine one run per cell moves by ±30% (bench/README.md, "The peer benchmark"), so each
# round runs llama.cpp F32 and our Transformer and YOCO fp32 at an empty and a --context context,
# in an order that rotates every round; the table gives each cell's median and range, and each
# ratio as the median of the per-round ratios (the two engines of one round ran seconds apart).
#   bench/peers/decode_rounds.sh [--rounds 5] [--threads 2] [--context 2048] [--steps 32] [--isa avx2|native|both]
#                                [--kv-dtype f32|bf16|both]
# --kv-dtype bf16: our engines decode from a bf16 K/V pool (16-bit K/V, as llama.cpp's default f16
# cache; docs/design.md §2.4); f32 (the default): fp32 rows, contiguous; both: each round runs our
# two models both ways (five runs a round, in a rotating order).
# Needs what peers.sh built and wrote under PEERS_WORK (run peers.sh first, same --preset).
# Writes every run as one JSON line to $OUT/rounds-HOST.jsonl and prints the table of medians
# (bench/peers/rounds_table.py, which also reads such a file again).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${YOCO_BUILD_DIR:-build}
WORK=${PEERS_WORK:-/tmp/yoco-peers}
PRESET=mid-gret ROUNDS=5 THREADS=2 CONTEXT=2048 STEPS=32 ISA=both OUT=bench/results/peers KV=f32
while [[ $# -gt 0 ]]; do
  case $1 in
    --preset) PRESET=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --context) CONTEXT=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --isa) ISA=$2; shift 2 ;;
    --kv-dtype) KV=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "decode_rounds.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
M=$WORK/models-$PRESET
for need in "$M/transformer-f32.gguf" "$M/transformer" "$M/yoco" "$BUILD/bench/engine_bench"; do
  [[ -e $need ]] || { echo "decode_rounds.sh: $need missing (run bench/peers/peers.sh --preset $PRESET first)" >&2; exit 2; }
done
builds=()
[[ $ISA == avx2 || $ISA == both ]] && builds+=(avx2)
if [[ $ISA == native || $ISA == both ]] && grep -qw avx512f /proc/cpuinfo; then builds+=(native); fi
mkdir -p "$OUT"
[[ $KV == f32 || $KV == bf16 || $KV == both ]] ||
  { echo "decode_rounds.sh: --kv-dtype $KV is not f32, bf16 or both" >&2; exit 2; }
suffix=
[[ $KV == bf16 ]] && suffix=-kv16
[[ $KV == both ]] && suffix=-kv-both
LOG=$OUT/rounds-$(hostname -s)$suffix.jsonl
: >"$LOG"
llama() {  # build -> one JSON line per context
  "$WORK/llama-$1/bin/llama-bench" -m "$M/transformer-f32.gguf" -t "$THREADS" -r 1 -o json -p 0 -n "$STEPS" \
    -d "0,$CONTEXT" | python3 -c '
import json, sys
for r in json.load(sys.stdin):
    print(json.dumps({"round": int(sys.argv[1]), "isa": sys.argv[2], "engine": "llama.cpp F32",
                      "context": r["n_depth"], "tokens_per_s": r["avg_ts"]}))' "$r" "$1"
}
ours() {  # build model kv_dtype -> one JSON line per context
  local env=(env -u YOCO_CPU_ISA)
  [[ $1 == avx2 ]] && env=(env YOCO_CPU_ISA=avx2)
  for ctx in 1 "$CONTEXT"; do
    "${env[@]}" "$BUILD/bench/engine_bench" --model "$M/$2" --threads "$THREADS" --json --prefill-lens 1 --repeats 1 \
      --decode-batches 1 --decode-context "$ctx" --decode-steps "$STEPS" --kv-dtype "$3" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)["decode"][0]
ctx = int(sys.argv[4])
kv = "" if d["kv_dtype"] == "f32" else ", bf16 K/V"
print(json.dumps({"round": int(sys.argv[1]), "isa": sys.argv[2], "engine": "ours, " + sys.argv[3] + ", fp32" + kv,
                  "kv_dtype": d["kv_dtype"], "context": 0 if ctx == 1 else ctx,
                  "tokens_per_s": d["tokens_per_s"]}))' "$r" "$1" "$2" "$ctx"
  done
}
for ((r = 0; r < ROUNDS; r++)); do
  for b in "${builds[@]}"; do
    if [[ $KV == both ]]; then jobs=(llama transformer:f32 yoco:bf16 transformer:bf16 yoco:f32)
    else jobs=(llama "transformer:$KV" "yoco:$KV"); fi
    for ((i = 0; i < r % ${#jobs[@]}; i++)); do jobs=("${jobs[@]:1}" "${jobs[0]}"); done
    echo "== round $r $b: ${jobs[*]} (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    for j in "${jobs[@]}"; do
      if [[ $j == llama ]]; then llama "$b" >>"$LOG"; else ours "$b" "${j%%:*}" "${j#*:}" >>"$LOG"; fi
    done
  done
done
python3 bench/peers/rounds_table.py "$LOG" --context "$CONTEXT"
