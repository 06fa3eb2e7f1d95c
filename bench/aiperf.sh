#!/usr/bin/env bash
# A serving benchmark made by others against our OpenAI-compatible endpoint: NVIDIA's `aiperf`
# (PyPI, in its own virtualenv build/.venv-aiperf, made here when missing) at two Poisson request
# rates against the local cluster's HTTP API (router + 1 prefill + 1 decode worker, one thread
# each, the bundled model), and `yoco-cli bench` over gRPC for the same load: the same prompt and
# output lengths, rate, request count and seed, greedy, ignore_eos. aiperf makes synthetic prompts
# and counts tokens with the model's own tokenizer, given as a local path (models/kjv-yoco has
# tokenizer.json): nothing is downloaded. (HF_HUB_OFFLINE=1 would make aiperf look for the path in
# the Hugging Face cache only, and fail.) Raw results go to bench/results/aiperf/, a Markdown
# table of both to bench/results/aiperf/summary.md and stdout (bench/README.md, Serving over HTTP).
# Usage: bench/aiperf.sh [requests] [prompt_tokens] [max_tokens] [rates...]   (defaults: 64 512 64 4 8)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-64}
PROMPT=${2:-512}
MAXTOK=${3:-64}
shift 3 2>/dev/null || shift $#
RATES=${*:-4 8}
MODEL=models/kjv-yoco
OUT=bench/results/aiperf
AIPERF_VERSION=0.13.0

venv=build/.venv-aiperf
if ! "$venv/bin/aiperf" --version >/dev/null 2>&1; then
  echo "aiperf.sh: creating $venv with aiperf==$AIPERF_VERSION"
  python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check "aiperf==$AIPERF_VERSION"
fi
for b in build/router/yoco-router build/prefill_service/yoco-prefill build/decode_service/yoco-decode build/tools/yoco-cli; do
  [[ -x "$b" ]] || { echo "aiperf.sh: missing $b (scripts/build.sh --target $(basename "$b"))" >&2; exit 1; }
done

state=$(mktemp -d -t yoco-aiperf.XXXXXX)
launcher=
stop_cluster() {  # on any exit: the cluster must not outlive this script
  if [[ -n "$launcher" ]] && kill -0 "$launcher" 2>/dev/null; then
    kill "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  rm -rf "$state"
}
trap stop_cluster EXIT
# No KV store: both clients send the same prompts at every rate (one seed), and a prompt prefix
# cached by the first rate would make the second one's prefill nearly free.
python3 deploy/local/cluster.py --bin-dir build --model "$MODEL" --prefill 1 --decode 1 --threads 1 --kv-store none \
  --state-dir "$state" --http-port 0 >"$state/out" 2>"$state/err" &
launcher=$!
for ((i = 0; i < 1200; i++)); do
  [[ -f "$state/cluster.json" ]] && break
  kill -0 "$launcher" 2>/dev/null || { cat "$state/err" >&2; exit 1; }
  sleep 0.1
done
[[ -f "$state/cluster.json" ]] || { echo "aiperf.sh: the cluster was not ready" >&2; exit 1; }
grpc=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["grpc"])' "$state/cluster.json")
http=http://$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["http"])' "$state/cluster.json")
model=$(curl -sS "$http/v1/models" | python3 -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["id"])')

rm -rf "$OUT"
mkdir -p "$OUT"
{
  echo "date: $(date -u +%FT%TZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "load: $N requests, prompt $PROMPT tokens, max_tokens $MAXTOK, rates $RATES req/s (Poisson), greedy, ignore_eos"
  echo "cpu: $(nproc) cores; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "aiperf: $("$venv/bin/aiperf" --version 2>&1 | tail -1)"
} >"$OUT/run.txt"

# The client's own CPU seconds (it shares the 2 cores with the cluster): its children's rusage.
cpu_of() {
  local out=$1
  shift
  python3 -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[2:]).returncode
r = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%.1f\n" % (r.ru_utime + r.ru_stime))
sys.exit(rc)' "$out" "$@"
}

for rate in $RATES; do
  echo "== aiperf: $N requests at $rate req/s over HTTP ($http, /v1/completions, streaming)"
  HF_HUB_DISABLE_TELEMETRY=1 cpu_of "$OUT/aiperf-rate$rate.cpu" "$venv/bin/aiperf" profile --model "$model" --url "$http" \
    --endpoint-type completions --streaming --tokenizer "$PWD/$MODEL" \
    --isl "$PROMPT" --isl-stddev 0 --osl "$MAXTOK" --osl-stddev 0 \
    --request-rate "$rate" --arrival-pattern poisson --request-count "$N" --random-seed 1 \
    --extra-inputs ignore_eos:true --extra-inputs temperature:0 \
    --ui-type none --no-server-metrics --no-gpu-telemetry --artifact-dir "$OUT/aiperf-rate$rate" \
    >"$OUT/aiperf-rate$rate.log" 2>&1 || { tail -40 "$OUT/aiperf-rate$rate.log" >&2; exit 1; }
  # Kept: the summary (profile_export_aiperf.{json,csv}) and one record per request
  # (profile_export.jsonl); its debug log, the console copy (aiperf-rate$rate.log has it) and the
  # prompts (inputs.json: --random-seed makes them again) are not.
  rm -rf "$OUT/aiperf-rate$rate/logs" "$OUT/aiperf-rate$rate/inputs.json" \
    "$OUT/aiperf-rate$rate/profile_export_console.txt" "$OUT/aiperf-rate$rate/.aiperf_results_ready.json"
  echo "== yoco-cli bench: $N requests at $rate req/s over gRPC ($grpc)"
  cpu_of "$OUT/yoco-cli-rate$rate.cpu" build/tools/yoco-cli bench --router "$grpc" --requests "$N" --rate "$rate" --prompt-tokens "$PROMPT" \
    --max-tokens "$MAXTOK" --seed 1 --json >"$OUT/yoco-cli-rate$rate.json"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/run.txt"
python3 bench/aiperf_table.py "$OUT" $RATES | tee "$OUT/summary.md"
