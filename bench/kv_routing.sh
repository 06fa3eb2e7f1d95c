#!/usr/bin/env bash
# KV-aware decode routing benchmark (docs/design.md §3.3): 2 decode workers, 1 prefill worker, the
# bundled model (kjv-yoco), one thread each, UCX over tcp on loopback. A question load over 4
# documents: each request is a plain prompt (document tokens + a 32-token question, token ids over
# the OpenAI HTTP API, streamed) on a random document, REQUESTS requests from CONCURRENCY clients
# in a closed loop. Decode pools of KV_BLOCKS blocks (32 rows) hold about two documents each plus
# the running requests, so which worker a document's questions go to decides what stays resident.
# Run once per router --decode-routing (free-blocks, kv); reports decode residency (decode side:
# leading whole blocks found in the pool on arrival / whole blocks shipped; router side: predicted)
# and client TTFT p50/p99. Writes bench/results/kv_routing.json.
# Usage: bench/kv_routing.sh   (environment: REQUESTS=256 CONCURRENCY=2 DOC_TOKENS=1024 KV_BLOCKS=80
#        MAX_TOKENS=8 YOCO_BUILD_DIR=build OUT=bench/results/kv_routing.json)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${YOCO_BUILD_DIR:-build}
export REQUESTS=${REQUESTS:-256} CONCURRENCY=${CONCURRENCY:-2} DOC_TOKENS=${DOC_TOKENS:-1024}
export KV_BLOCKS=${KV_BLOCKS:-80} MAX_TOKENS=${MAX_TOKENS:-8}
out=${OUT:-bench/results/kv_routing.json}
work=$(mktemp -d -t yoco-kvroute.XXXXXX)
launcher=
cleanup() {
  [[ -n "$launcher" ]] && kill "$launcher" 2>/dev/null && wait "$launcher" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
for mode in free-blocks kv; do
  state="$work/$mode"
  python3 deploy/local/cluster.py --bin-dir "$BUILD" --model models/kjv-yoco --prefill 1 --decode 2 --threads 1 \
    --kv-blocks "$KV_BLOCKS" --state-dir "$state" --router-arg=--decode-routing="$mode" ${ROUTER_ARGS:-} \
    >"$work/$mode.out" 2>"$work/$mode.err" &
  launcher=$!
  for ((i = 0; i < 1200; i++)); do [[ -f "$state/cluster.json" ]] && break; sleep 0.1; done
  [[ -f "$state/cluster.json" ]] || { cat "$work/$mode.err" >&2; exit 1; }
  python3 - "$state/cluster.json" "$mode" "$work/$mode.json" <<'PY'
import http.client, json, os, random, sys, threading, time, urllib.request

cluster, mode, out = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
N, C = int(os.environ["REQUESTS"]), int(os.environ["CONCURRENCY"])
doc_tokens, max_tokens = int(os.environ["DOC_TOKENS"]), int(os.environ["MAX_TOKENS"])
rng = random.Random(1)
docs = [[rng.randrange(4096) for _ in range(doc_tokens)] for _ in range(4)]
plan = [(rng.randrange(4), [rng.randrange(4096) for _ in range(32)]) for _ in range(N)]
host, port = cluster["router"]["http"].rsplit(":", 1)

def scrape(addr):
    text = urllib.request.urlopen("http://%s/metrics" % addr, timeout=10).read().decode()
    vals = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            vals[name] = float(v)
    return vals

def counters():
    r = scrape(cluster["router"]["metrics"])
    d = [scrape(w["metrics"]) for w in cluster["decode"]]
    return {"router_blocks": r.get("yoco_router_residency_blocks_total", 0),
            "router_predicted": r.get("yoco_router_residency_predicted_hits_total", 0),
            "decode_blocks": sum(x.get("yoco_kv_residency_blocks_total", 0) for x in d),
            "decode_hits": sum(x.get("yoco_kv_resident_blocks_total", 0) for x in d),
            "per_worker_requests": [x.get("yoco_kv_residency_blocks_total", 0) for x in d],
            "retries": sum(v for k, v in r.items() if k.startswith("yoco_router_retries_total")),
            "transfer_failures": sum(x.get("yoco_kv_transfer_failures_total", 0) for x in d)}

ttft, errors, lock, nxt = [], [], threading.Lock(), [0]

def one(doc, question):
    body = json.dumps({"prompt": docs[doc] + question, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "ignore_eos": True})
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = None
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:200]))
    for line in resp:
        if first is None and line.startswith(b"data: {"):
            first = time.perf_counter() - t0
    conn.close()
    return first

def client():
    while True:
        with lock:
            if nxt[0] >= N:
                return
            i = nxt[0]
            nxt[0] += 1
        try:
            t = one(*plan[i])
            with lock:
                ttft.append(t)
        except Exception as e:  # counted, reported
            with lock:
                errors.append(str(e))

before = counters()
t0 = time.perf_counter()
threads = [threading.Thread(target=client) for _ in range(C)]
for t in threads:
    t.start()
for t in threads:
    t.join()
wall = time.perf_counter() - t0
time.sleep(0.2)
after = counters()
d = {k: after[k] - before[k]
     for k in ("router_blocks", "router_predicted", "decode_blocks", "decode_hits", "retries", "transfer_failures")}
ttft.sort()
pct = lambda p: ttft[min(len(ttft) - 1, int(p * len(ttft)))] if ttft else None
res = {"routing": mode, "requests": N, "concurrency": C, "doc_tokens": doc_tokens, "documents": 4,
       "question_tokens": 32, "max_tokens": max_tokens, "kv_blocks_per_decode_worker": int(os.environ["KV_BLOCKS"]),
       "errors": len(errors), "first_error": errors[0] if errors else None, "wall_seconds": round(wall, 2),
       "decode_resident_hit_rate": round(d["decode_hits"] / d["decode_blocks"], 4) if d["decode_blocks"] else None,
       "router_predicted_hit_rate": round(d["router_predicted"] / d["router_blocks"], 4) if d["router_blocks"] else None,
       "shipped_whole_blocks": d["decode_blocks"], "resident_blocks": d["decode_hits"],
       "router_retries": d["retries"], "decode_transfer_failures": d["transfer_failures"],
       "blocks_per_decode_worker": [b - a for a, b in zip(before["per_worker_requests"], after["per_worker_requests"])],
       "ttft_p50_seconds": round(pct(0.5), 4) if ttft else None,
       "ttft_p99_seconds": round(pct(0.99), 4) if ttft else None,
       "loadavg_1m": os.getloadavg()[0]}
json.dump(res, open(out, "w"))
print(json.dumps(res))
PY
  kill "$launcher" 2>/dev/null || true
  wait "$launcher" 2>/dev/null || true
  launcher=
done
mkdir -p bench/results
python3 - "$work" "$out" <<'PY'
import json, os, sys
runs = [json.load(open(os.path.join(sys.argv[1], m + ".json"))) for m in ("free-blocks", "kv")]
json.dump({"machine": "shared (2 cores, other builds and benchmarks running); loadavg per run", "runs": runs},
          open(sys.argv[2], "w"), indent=1)
print("| routing | decode residency hit rate | router predicted | TTFT p50 (s) | TTFT p99 (s) | errors |")
print("| --- | --- | --- | --- | --- | --- |")
for r in runs:
    print("| %s | %s | %s | %s | %s | %d |" % (r["routing"], r["decode_resident_hit_rate"], r["router_predicted_hit_rate"],
                                          r["ttft_p50_seconds"], r["ttft_p99_seconds"], r["errors"]))
PY
