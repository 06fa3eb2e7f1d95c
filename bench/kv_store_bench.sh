#!/usr/bin/env bash
# The redis backend over plain TCP and over TLS (client certificate required, as Redis's default
# tls-auth-clients), one local redis-server each on loopback, same values: bench/kv_store_bench.cc.
# Usage: bench/kv_store_bench.sh [extra kv_store_bench flags]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d -t yoco-kvbench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
bench/make_pki.sh "$work"
plain=$(free_port)
tls=$(free_port)
redis-server --port "$plain" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/plain.log" 2>&1 &
pids+=($!)
redis-server --port 0 --tls-port "$tls" --tls-cert-file "$work/server.crt" --tls-key-file "$work/server.key" \
  --tls-ca-cert-file "$work/ca.crt" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/tls.log" 2>&1 &
pids+=($!)
sleep 0.5
common="timeout_ms=5000&breaker=0"
build/bench/kv_store_bench --store "redis://127.0.0.1:$plain/0?$common" "$@"
build/bench/kv_store_bench \
  --store "rediss://127.0.0.1:$tls/0?$common&tls_ca=$work/ca.crt&tls_cert=$work/client.crt&tls_key=$work/client.key" "$@"
