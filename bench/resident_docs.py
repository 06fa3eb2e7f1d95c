#!/usr/bin/env python3
"""One mode of bench/resident_docs.sh: cache a document, ask questions over it, and record per
question the bytes the decode worker received and the time to first token."""
import argparse
import json
import random
import statistics
import subprocess
import urllib.request


def metric(addr, name):
    text = urllib.request.urlopen("http://%s/metrics" % addr, timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--mode", required=True)
    ap.add_argument("--doc-tokens", type=int, default=16384)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    c = json.load(open(a.cluster))
    router, decode = c["router"]["grpc"], c["decode"][0]["metrics"]
    rng = random.Random(a.doc_tokens)
    doc = ",".join(str(rng.randrange(32000)) for _ in range(a.doc_tokens))
    cached = json.loads(subprocess.check_output(
        [a.cli, "cache-doc", "--router", router, "--tokens", doc, "--deadline-ms", "600000"]))
    rows = []
    for q in range(a.questions):
        qr = random.Random(1000 + q)
        question = ",".join(str(qr.randrange(32000)) for _ in range(a.question_tokens))
        before = metric(decode, "yoco_kv_transfer_request_bytes_sum")
        out = json.loads(subprocess.check_output(
            [a.cli, "generate", "--router", router, "--document-ids", cached["id"], "--tokens", question,
             "--max-tokens", "1", "--temperature", "0", "--ignore-eos", "--json", "--deadline-ms", "600000"]))
        rows.append({"question": q, "bytes": int(metric(decode, "yoco_kv_transfer_request_bytes_sum") - before),
                     "ttft_s": out["timings"]["first_token_seconds"],
                     "prefill_s": out["timings"]["prefill_seconds"],
                     "transfer_s": out["timings"]["transfer_seconds"],
                     "cached_tokens": out["usage"]["cached_tokens"]})
    ttfts = sorted(r["ttft_s"] for r in rows)
    res = {"mode": a.mode, "doc_tokens": a.doc_tokens, "questions": a.questions,
           "question_tokens": a.question_tokens, "per_question": rows,
           "bytes_median": statistics.median(r["bytes"] for r in rows),
           "bytes_total": sum(r["bytes"] for r in rows),
           "ttft_median": statistics.median(ttfts), "ttft_p90": ttfts[int(0.9 * (len(ttfts) - 1))],
           "prefill_median": statistics.median(r["prefill_s"] for r in rows),
           "transfer_median": statistics.median(r["transfer_s"] for r in rows),
           "resident_blocks_total": metric(decode, "yoco_kv_resident_blocks_total")}
    json.dump(res, open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
