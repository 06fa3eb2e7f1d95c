#!/usr/bin/env bash
# Serving benchmark on this machine: the local cluster (1 prefill + 1 decode worker, one thread
# each, the bundled model, UCX over tcp) under open-loop Poisson load from `yoco-cli bench`,
# against the same decode worker prefilling locally (no disaggregation), reached through a second
# router with no prefill workers (colocated mode).
# Usage: bench/serve_bench.sh [requests] [prompt_tokens] [max_tokens] [rates...]
# Environment: YOCO_BUILD_DIR (default build); SERVE_UCX_TLS (the workers' UCX_TLS, default tcp;
# posix,sysv,cma,self,tcp for shared memory); SERVE_BENCH_JSON=FILE appends one JSON line per run
# ({"setup": "disaggregated"|"colocated", "rate": R, "result": <yoco-cli bench --json>}) instead of
# printing the tables (bench/paper/ uses it); each run then gets its own prompts (seed 1, 2, ...),
# so no run is served from the prompts a previous run left in the prefill worker's prompt cache.
# SERVE_DEVICE=cuda runs both workers with --device=cuda (the colocated router reaches the same
# CUDA decode worker); SERVE_MODEL picks another model directory (default models/kjv-yoco).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${YOCO_BUILD_DIR:-build}
N=${1:-64}
PROMPT=${2:-512}
MAXTOK=${3:-64}
shift 3 2>/dev/null || true
RATES=${*:-4 16}
state=$(mktemp -d -t yoco-bench.XXXXXX)
MODEL=${SERVE_MODEL:-models/kjv-yoco}
device_args=()
if [[ ${SERVE_DEVICE:-cpu} == cuda ]]; then
  device_args=(--prefill-arg=--device=cuda --decode-arg=--device=cuda)
elif [[ ${SERVE_DEVICE:-cpu} != cpu ]]; then
  echo "serve_bench: SERVE_DEVICE is cpu or cuda, not \"$SERVE_DEVICE\"" >&2
  exit 2
fi
python3 deploy/local/cluster.py --bin-dir "$BUILD" --model "$MODEL" --prefill 1 --decode 1 --threads 1 \
  --ucx-tls "${SERVE_UCX_TLS:-tcp}" --state-dir "$state" ${device_args[@]+"${device_args[@]}"} >"$state/out" 2>"$state/err" &
launcher=$!
colo=
trap 'kill $colo $launcher 2>/dev/null; wait $colo $launcher 2>/dev/null; rm -rf "$state"' EXIT
for ((i = 0; i < 600; i++)); do [[ -f "$state/cluster.json" ]] && break; sleep 0.1; done
get() { python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$state/cluster.json" "$1"; }
router=$(get 'd["router"]["grpc"]')
decode=$(get 'd["decode"][0]["grpc"]')
"$BUILD"/router/yoco-router --model "$MODEL" --decode "$decode" --listen 127.0.0.1:0 \
  --port-file "$state/colocated.port" 2>"$state/colocated.log" &
colo=$!
for ((i = 0; i < 600; i++)); do [[ -f "$state/colocated.port" ]] && break; sleep 0.1; done
colocated=127.0.0.1:$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["grpc_port"])' "$state/colocated.port")
runs=0
run() {  # setup router rate
  if [[ -n "${SERVE_BENCH_JSON:-}" ]]; then
    runs=$((runs + 1))
    result=$("$BUILD"/tools/yoco-cli bench --router "$2" --requests "$N" --rate "$3" --prompt-tokens "$PROMPT" \
      --max-tokens "$MAXTOK" --seed "$runs" --json)
    echo "{\"setup\": \"$1\", \"rate\": $3, \"result\": $result}" >>"$SERVE_BENCH_JSON"
  else
    "$BUILD"/tools/yoco-cli bench --router "$2" --requests "$N" --rate "$3" --prompt-tokens "$PROMPT" \
      --max-tokens "$MAXTOK" --seed 1
  fi
}
for rate in $RATES; do
  echo "== disaggregated (router -> prefill -> UCX -> decode), rate $rate req/s"
  run disaggregated "$router" "$rate"
  echo "== colocated (router -> the same decode worker, local prefill in the batcher), rate $rate req/s"
  run colocated "$colocated" "$rate"
done
