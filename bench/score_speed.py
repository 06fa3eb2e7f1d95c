#!/usr/bin/env python3
"""The driver of bench/score_speed.sh: through each cluster, a Score of N tokens against a Generate
of the same N tokens with max_tokens 1 (prefill + transfer + one row's cross-decoder), on fresh
random prompts (no prefix is cached anywhere), alternating the two calls and the clusters so both
see the same machine load. Wall time of each yoco-cli call, median over the repetitions."""
import argparse
import json
import random
import statistics
import subprocess
import time


def timed(cmd):
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--cluster", action="append", required=True, metavar="MODE=CLUSTER_JSON")
    ap.add_argument("--sizes", default="1024,4096,16384")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--per-token-max", type=int, default=1024,
                    help="the per-token cluster (mode per_token) runs only sizes up to this")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    clusters = []
    for spec in a.cluster:
        mode, path = spec.split("=", 1)
        clusters.append((mode, json.load(open(path))["router"]["grpc"]))
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        for mode, router in clusters:
            if mode == "per_token" and n > a.per_token_max:
                continue
            score_s, gen_s = [], []
            for rep in range(a.reps):
                calls = ["score", "generate"] if rep % 2 == 0 else ["generate", "score"]
                for kind in calls:
                    # A fresh prompt per call: no call finds another's prefix in any cache.
                    rng = random.Random("%s/%d/%d/%s" % (mode, n, rep, kind))
                    toks = ",".join(str(rng.randrange(a.vocab)) for _ in range(n))
                    if kind == "score":
                        cmd = [a.cli, "score", "--router", router, "--tokens", toks, "--json"]
                    else:
                        cmd = [a.cli, "generate", "--router", router, "--tokens", toks, "--max-tokens", "1",
                               "--temperature", "0", "--json"]
                    s, _ = timed(cmd)
                    (score_s if kind == "score" else gen_s).append(s)
            row = {"mode": mode, "tokens": n, "score_s": score_s, "generate_s": gen_s,
                   "score_median_s": statistics.median(score_s), "generate_median_s": statistics.median(gen_s)}
            row["ratio"] = row["score_median_s"] / row["generate_median_s"]
            rows.append(row)
            print("%-10s %6d tokens  score %8.3f s  generate(max_tokens 1) %8.3f s  ratio %6.2f" %
                  (mode, n, row["score_median_s"], row["generate_median_s"], row["ratio"]), flush=True)
    json.dump({"rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
