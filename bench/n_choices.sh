#!/usr/bin/env bash
# n choices share one prefill (issue 30, point 4): through the router's HTTP API, /v1/completions
# with n = 1, 4, 8 and max_tokens 1 on a fresh ~700-word prompt per call, median of 3, the time
# ratio to n = 1 (bench/n_choices.py). Router + 1 prefill + 1 decode worker on loopback, no KV store.
# Model: MODEL_DIR (default models/kjv-yoco: text prompts); a model without tokenizer.json gets
# 900 random token ids instead of words.
# Usage: [NS=1,4,8] [REPS=3] [OUT=bench/results/n_choices.json] bench/n_choices.sh [MODEL_DIR] [THREADS]
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/kjv-yoco}
THREADS=${2:-1}
NS=${NS:-1,4,8}
REPS=${REPS:-3}
OUT=${OUT:-bench/results/n_choices.json}
work=$(mktemp -d -t yoco-nchoices.XXXXXX)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
python3 deploy/local/cluster.py --bin-dir build --model "$MODEL" --state-dir "$work/cluster" \
  --threads "$THREADS" --kv-store none >"$work/cluster.out" 2>"$work/cluster.err" &
pid=$!
for ((i = 0; i < 1200; i++)); do [[ -f "$work/cluster/cluster.json" ]] && break; sleep 0.1; done
HTTP=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["router"]["http"])' "$work/cluster/cluster.json")
extra=()
if [[ ! -f $MODEL/tokenizer.json ]]; then
  VOCAB=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$MODEL/params.json")
  extra=(--token-ids 900 --vocab "$VOCAB")
fi
mkdir -p "$(dirname "$OUT")"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 bench/n_choices.py --http "$HTTP" --ns "$NS" --reps "$REPS" --out "$OUT" "${extra[@]}"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
