#!/usr/bin/env bash
# Score at prefill speed (issue 30, point 3): through the cluster, a Score of N tokens against a
# Generate of the same N tokens with max_tokens 1, at N = 1K, 4K, 16K, fresh random prompts, median
# of 3 (bench/score_speed.py). Two clusters side by side, the driver alternating between them:
# "sliced" (the default decode worker: Score as forward slices, Engine::forward) and "per_token"
# (--score-per-token: one forced token per decode step, the plain reference; only up to 1K by
# default, it is slow). Router + 1 prefill + 1 decode worker each, on loopback.
# Model: a copy of MODEL_DIR when given (e.g. models/kjv-yoco), else the small-gret random preset;
# either way with max_seq_len raised to 32K.
# Usage: [SIZES=1024,4096,16384] [OUT=bench/results/score_speed.json] bench/score_speed.sh [MODEL_DIR] [THREADS]
# (default: random small-gret, 1 thread per process).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-}
THREADS=${2:-1}
SIZES=${SIZES:-1024,4096,16384}
OUT=${OUT:-bench/results/score_speed.json}
work=$(mktemp -d -t yoco-score.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
if [[ -z $MODEL ]]; then
  build/tools/yoco-cli make-random-model --preset small-gret --out "$work/model" --seed 1 >/dev/null
else
  cp -r "$MODEL" "$work/model"
fi
# 16K tokens must fit: max_seq_len is a limit only (RoPE needs no table), so it is raised to 32K.
VOCAB=$(python3 - "$work/model/params.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["max_seq_len"] = 32768; json.dump(p, open(sys.argv[1], "w"))
print(p["vocab_size"])
PY
)
MODEL="$work/model"
mkdir -p bench/results
for mode in sliced per_token; do
  extra=()
  [[ $mode == per_token ]] && extra=(--decode-arg=--score-per-token)
  python3 deploy/local/cluster.py --bin-dir build --model "$MODEL" --state-dir "$work/cluster-$mode" \
    --threads "$THREADS" --kv-blocks 2048 --kv-store none "${extra[@]}" >"$work/$mode.out" 2>"$work/$mode.err" &
  pids+=($!)
done
for mode in sliced per_token; do
  for ((i = 0; i < 1200; i++)); do [[ -f "$work/cluster-$mode/cluster.json" ]] && break; sleep 0.1; done
done
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/score_speed.py --cli build/tools/yoco-cli --vocab "$VOCAB" \
  --cluster "sliced=$work/cluster-sliced/cluster.json" --cluster "per_token=$work/cluster-per_token/cluster.json" \
  --sizes "$SIZES" --out "$OUT"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
