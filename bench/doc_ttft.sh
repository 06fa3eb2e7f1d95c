#!/usr/bin/env bash
# RAG pre-caching benchmark (issue 5): time to first token of a 64-token question over a cached
# document of 4K and 16K tokens, against the same full prompt uncached, per KV store backend;
# and the bytes the store keeps per document token against a Transformer of the same size.
# Model: the small-gret random preset (~50M parameters). One prefill + one decode worker, one
# thread each, on loopback. Usage: bench/doc_ttft.sh [backends...] (default: memory dir redis)
# Backend rediss: Redis over TLS with a client certificate (throwaway PKI made with openssl).
set -euo pipefail
cd "$(dirname "$0")/.."
BACKENDS=${*:-memory dir redis}
work=$(mktemp -d -t yoco-docbench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
build/tools/yoco-cli make-random-model --preset small-gret --out "$work/model" --seed 1 >/dev/null
python3 - "$work/model/params.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); p["max_seq_len"] = 32768; json.dump(p, open(sys.argv[1], "w"))
PY
CLI=build/tools/yoco-cli
for backend in $BACKENDS; do
  case $backend in
    memory) store="memory:2GiB" ;;
    dir) store="dir://$work/kv?max_bytes=4GiB" ;;
    redis)
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
      pids+=($!)
      sleep 0.5
      store="redis://127.0.0.1:$port/0?timeout_ms=2000" ;;
    rediss)
      port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      bench/make_pki.sh "$work"
      redis-server --port 0 --tls-port "$port" --tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key" \
        --tls-ca-cert-file "$work/ca.crt" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/rediss.log" 2>&1 &
      pids+=($!)
      sleep 0.5
      store="rediss://127.0.0.1:$port/0?timeout_ms=2000&tls_ca=$work/ca.crt&tls_cert=$work/client.crt&tls_key=$work/client.key" ;;
  esac
  state="$work/cluster-$backend"
  python3 deploy/local/cluster.py --bin-dir build --model "$work/model" --state-dir "$state" --threads 1 \
    --prefill-arg=--kv-store="$store" --prefill-arg=--no-prompt-cache >"$work/$backend.out" 2>"$work/$backend.err" &
  pids+=($!)
  for ((i = 0; i < 1200; i++)); do [[ -f "$state/cluster.json" ]] && break; sleep 0.1; done
  router=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["grpc"])' "$state/cluster.json")
  for n in 4096 16384; do
    doc=$(python3 -c "import random; r = random.Random($n); print(','.join(str(r.randrange(32000)) for _ in range($n)))")
    q=$(python3 -c "import random; r = random.Random(7); print(','.join(str(r.randrange(32000)) for _ in range(64)))")
    cached=$($CLI cache-doc --router "$router" --tokens "$doc" --deadline-ms 600000)
    id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["id"])' "$cached")
    bytes=$(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["stored_bytes"])' "$cached")
    ttft() {  # first-token seconds from the final message (median of 3)
      for _ in 1 2 3; do
        "$CLI" generate --router "$router" "$@" --max-tokens 1 --temperature 0 --ignore-eos --json --deadline-ms 600000 |
          python3 -c 'import json, sys; print(json.load(sys.stdin)["timings"]["first_token_seconds"])'
      done | sort -n | sed -n 2p
    }
    with_doc=$(ttft --document-ids "$id" --tokens "$q")
    uncached=$(ttft --tokens "$doc,$q")
    echo "$backend doc=$n stored_bytes=$bytes bytes_per_token=$((bytes / n)) ttft_cached_s=$with_doc ttft_uncached_s=$uncached"
  done
  python3 deploy/local/cluster.py stop --state-dir "$state" >/dev/null 2>&1 || true
done
