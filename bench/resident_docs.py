#!/usr/bin/env python3
"""The driver of bench/resident_docs.sh: caches one document in each cluster, then asks the same
questions over it, alternating between the clusters question by question (so both modes see the
same machine load), and records per question the bytes each decode worker received and the time
to first token."""
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


def summary(mode, rows, decode):
    later = rows[1:] if len(rows) > 1 else rows  # the first question of a round ships the document either way
    ttfts = sorted(r["ttft_s"] for r in later)
    return {"mode": mode, "per_question": rows,
            "bytes_median": statistics.median(r["bytes"] for r in rows),
            "bytes_total": sum(r["bytes"] for r in rows),
            "ttft_median": statistics.median(ttfts), "ttft_p90": ttfts[int(0.9 * (len(ttfts) - 1))],
            "prefill_median": statistics.median(r["prefill_s"] for r in later),
            "transfer_median": statistics.median(r["transfer_s"] for r in later),
            "resident_blocks_total": metric(decode, "yoco_kv_resident_blocks_total")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--cluster", action="append", required=True, metavar="MODE=CLUSTER_JSON")
    ap.add_argument("--doc-tokens", type=int, default=16384)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--question-tokens", type=int, default=64)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = random.Random(a.doc_tokens)
    doc = ",".join(str(rng.randrange(32000)) for _ in range(a.doc_tokens))
    modes = []
    for spec in a.cluster:
        mode, path = spec.split("=", 1)
        c = json.load(open(path))
        router = c["router"]["grpc"]
        cached = json.loads(subprocess.check_output(
            [a.cli, "cache-doc", "--router", router, "--tokens", doc, "--deadline-ms", "600000"]))
        modes.append({"mode": mode, "router": router, "decode": c["decode"][0]["metrics"], "doc": cached["id"],
                      "rows": []})
    for q in range(a.questions):
        qr = random.Random(1000 + q)
        question = ",".join(str(qr.randrange(32000)) for _ in range(a.question_tokens))
        for m in modes if q % 2 == 0 else reversed(modes):
            before = metric(m["decode"], "yoco_kv_transfer_request_bytes_sum")
            out = json.loads(subprocess.check_output(
                [a.cli, "generate", "--router", m["router"], "--document-ids", m["doc"], "--tokens", question,
                 "--max-tokens", "1", "--temperature", "0", "--ignore-eos", "--json", "--deadline-ms", "600000"]))
            m["rows"].append({"question": q, "bytes": int(metric(m["decode"], "yoco_kv_transfer_request_bytes_sum") - before),
                              "ttft_s": out["timings"]["first_token_seconds"],
                              "prefill_s": out["timings"]["prefill_seconds"],
                              "transfer_s": out["timings"]["transfer_seconds"],
                              "cached_tokens": out["usage"]["cached_tokens"],
                              "token": out["token_ids"]})
    res = {"doc_tokens": a.doc_tokens, "questions": a.questions, "question_tokens": a.question_tokens,
           "modes": [summary(m["mode"], m["rows"], m["decode"]) for m in modes]}
    # Both modes must answer alike (greedy): resident rows change what is shipped, never the answer.
    res["answers_equal"] = all(x["token"] == y["token"] for x, y in zip(modes[0]["rows"], modes[-1]["rows"]))
    json.dump(res, open(a.out, "w"), indent=2)


if __name__ == "__main__":
    main()
