#!/usr/bin/env bash
# Runs the system on the bundled model: set-up, build the four binaries, start the local cluster
# (router + 1 prefill + 1 decode worker on loopback: deploy/local/cluster.py), stream a greedy
# continuation of a KJV-style prompt through the router with yoco-cli (gRPC), ask for the same
# through the router's OpenAI-compatible HTTP API with curl, and stop the cluster.
# YOCO_MODEL and YOCO_PROMPT override the defaults; extra arguments go to `yoco-cli generate`
# (e.g. --temperature 0.8 --seed 1). The workers compute in bf16 where the CPU has bf16 dot-product
# instructions (AVX512-BF16 or AMX; bench/README.md, "CPU GEMM roof and the bf16 path"), else in
# fp32; YOCO_DTYPE=fp32|bf16 overrides.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target yoco-cli yoco-decode yoco-prefill yoco-router >/dev/null
MODEL=${YOCO_MODEL:-models/kjv-yoco}   # the bundled YOCO trained on the King James Bible
PROMPT=${YOCO_PROMPT:-In the beginning God created}
READY_SECONDS=120
DTYPE=${YOCO_DTYPE:-$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo 2>/dev/null && echo bf16 || echo fp32)}

state=$(mktemp -d -t yoco-run.XXXXXX)
launcher=
stop_cluster() {  # on any exit: the cluster must not outlive this script
  local rc=$?
  if [[ -n "$launcher" ]] && kill -0 "$launcher" 2>/dev/null; then
    python3 deploy/local/cluster.py stop --state-dir "$state" >/dev/null 2>&1 || kill "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  if (( rc == 0 )); then
    rm -rf "$state"
  else
    echo "run.sh: failed; the cluster's logs are in $state" >&2
  fi
}
trap stop_cluster EXIT

python3 deploy/local/cluster.py --bin-dir build --model "$MODEL" --prefill 1 --decode 1 --state-dir "$state" \
  --http-port 0 --prefill-arg=--dtype --prefill-arg="$DTYPE" --decode-arg=--dtype --decode-arg="$DTYPE" \
  >"$state/launcher.out" 2>"$state/launcher.err" &
launcher=$!
for ((i = 0; i < READY_SECONDS * 10; i++)); do
  [[ -f "$state/cluster.json" ]] && break
  if ! kill -0 "$launcher" 2>/dev/null; then  # it says which process failed, with its log's tail
    cat "$state/launcher.err" >&2
    exit 1
  fi
  sleep 0.1
done
if [[ ! -f "$state/cluster.json" ]]; then
  echo "run.sh: the cluster was not ready after ${READY_SECONDS} s" >&2
  cat "$state/launcher.err" >&2
  exit 1
fi
router=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["grpc"])' "$state/cluster.json")
http=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["http"])' "$state/cluster.json")

echo "model: $MODEL (models/README.md); cluster: router $router (gRPC), http://$http/v1 (OpenAI HTTP API),"
echo "1 prefill + 1 decode worker"
echo "greedy continuation of \"$PROMPT\" through the router:"
printf '%s' "$PROMPT"
build/tools/yoco-cli generate --router "$router" --prompt "$PROMPT" --max-tokens 48 --temperature 0 "$@"
echo "the same prompt over HTTP (curl http://$http/v1/completions, 16 tokens):"
body=$(python3 -c 'import json, sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 16, "temperature": 0}))' "$PROMPT")
curl -sS --max-time 60 "http://$http/v1/completions" -H 'Content-Type: application/json' -d "$body" |
  python3 -c 'import json, sys; r = json.load(sys.stdin); print(repr(r["choices"][0]["text"]), r["usage"])'
