#!/usr/bin/env bash
# Starts the local cluster (deploy/local/cluster.py, PREFILL prefill workers [1] + 1 decode on the
# bundled model, loopback ports chosen at run time), runs cluster_cli_test.sh against its router,
# and stops the cluster whatever happens. PREFILL 0 is the colocated mode: the decode worker
# prefills locally, and the document RPCs answer FAILED_PRECONDITION.
# Usage: run_with_cluster.sh path/to/yoco-cli SOURCE_DIR BUILD_DIR [PREFILL]
set -euo pipefail
CLI=$1
SRC=$2
BUILD=$3
PREFILL=${4:-1}
state=$(mktemp -d -t yoco-cli-cluster.XXXXXX)
launcher=
cleanup() {
  local rc=$?
  if [[ -n "$launcher" ]]; then
    kill "$launcher" 2>/dev/null || true
    wait "$launcher" 2>/dev/null || true
  fi
  if (( rc != 0 )); then
    for f in "$state"/*.log "$state"/launcher.err; do [[ -f "$f" ]] && { echo "== $f"; tail -20 "$f"; }; done >&2
  fi
  rm -rf "$state"
}
trap cleanup EXIT
/usr/bin/python3 "$SRC/deploy/local/cluster.py" --bin-dir "$BUILD" --model "$SRC/models/kjv-yoco" --prefill "$PREFILL" --decode 1 \
  --threads 1 --state-dir "$state" >"$state/launcher.out" 2>"$state/launcher.err" &
launcher=$!
for ((i = 0; i < 1200; i++)); do
  [[ -f "$state/cluster.json" ]] && break
  kill -0 "$launcher" 2>/dev/null || { echo "the cluster did not start" >&2; exit 1; }
  sleep 0.1
done
router=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["router"]["grpc"])' "$state/cluster.json")
"$SRC/tests/cli/cluster_cli_test.sh" "$router" "$CLI" "$((PREFILL > 0 ? 1 : 0))"
if (( PREFILL == 0 )); then
  set +e
  err=$("$CLI" cache-doc --router "$router" --tokens 1,2,3 2>&1 >/dev/null)
  rc=$?
  set -e
  (( rc != 0 )) && [[ "$err" == *FAILED_PRECONDITION*prefill* ]] || { echo "colocated cache-doc: rc $rc: $err" >&2; exit 1; }
  echo "colocated: documents refused as expected"
fi
