#!/usr/bin/env bash
# Documents that stay on the decode worker (issue 16, part 3): 16 questions of 64 tokens over one
# cached 16K-token document, with resident prefixes on (the default: the decode worker maps the
# document's blocks it already holds, the prefill worker neither loads nor ships them) and off
# (--no-prefix-sharing on the decode worker: every question ships the whole document, as before).
# Per mode: K/V + state bytes the decode worker received per question (yoco_kv_transfer_request_bytes)
# and the time to first token (the final message's first_token_seconds).
# Model: the small-gret random preset (max_seq_len raised to 32K). Router + 1 prefill + 1 decode
# worker, one thread each, on loopback, memory KV store.
# Usage: bench/resident_docs.sh [doc_tokens] [questions]  (default 16384 16); writes
# bench/results/resident_docs.json.
set -euo pipefail
cd "$(dirname "$0")/.."
DOC=${1:-16384}
QUESTIONS=${2:-16}
work=$(mktemp -d -t yoco-resident.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
build/tools/yoco-cli make-random-model --preset small-gret --out "$work/model" --seed 1 >/dev/null
python3 - "$work/model/params.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["max_seq_len"] = 32768; json.dump(p, open(sys.argv[1], "w"))
PY
mkdir -p bench/results
# Both clusters run side by side and the driver alternates between them question by question, so
# both modes see the same load.
for mode in resident shipped; do
  state="$work/cluster-$mode"
  extra=()
  [[ $mode == shipped ]] && extra=(--decode-arg=--no-prefix-sharing)
  python3 deploy/local/cluster.py --bin-dir build --model "$work/model" --state-dir "$state" --threads 1 \
    --kv-blocks 2048 --prefill-arg=--kv-store=memory:2GiB "${extra[@]}" >"$work/$mode.out" 2>"$work/$mode.err" &
  pids+=($!)
done
for mode in resident shipped; do
  for ((i = 0; i < 1200; i++)); do [[ -f "$work/cluster-$mode/cluster.json" ]] && break; sleep 0.1; done
done
load=$(cut -d' ' -f1 /proc/loadavg)
python3 bench/resident_docs.py --cli build/tools/yoco-cli --cluster "resident=$work/cluster-resident/cluster.json" \
  --cluster "shipped=$work/cluster-shipped/cluster.json" --doc-tokens "$DOC" --questions "$QUESTIONS" \
  --out "$work/result.json"
for mode in resident shipped; do
  python3 deploy/local/cluster.py stop --state-dir "$work/cluster-$mode" >/dev/null 2>&1 || true
done
python3 - "$work/result.json" bench/results/resident_docs.json "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["load_before"] = float(sys.argv[3])
json.dump(r, open(sys.argv[2], "w"), indent=2)
print("answers equal in both modes:", r["answers_equal"])
for m in r["modes"]:
    print("%-9s bytes/question median %10.0f  total %11d  ttft median %.3f s  p90 %.3f s  prefill %.3f s"
          "  transfer %.4f s  (questions 2..n)" % (m["mode"], m["bytes_median"], m["bytes_total"], m["ttft_median"],
                                                  m["ttft_p90"], m["prefill_median"], m["transfer_median"]))
PY
