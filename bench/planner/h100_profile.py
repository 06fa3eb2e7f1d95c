#!/usr/bin/python3
"""Writes bench/planner/profiles/h100-yoco-measured-1.3b.json: the GPU profile of our own CUDA
engine, from the H100 runs of 2026-11-27 (bench/results/gpu-h100/, bench/README.md "GPU"):
prefill of yoco-u-1.3b at T = 1 (run1/engine_t1.log) and decode steps at batch 32 as CUDA graphs
(run2/decode_t1_graphs.log), both cuda_engine_bench JSON lines. KV bytes per token and the weights
come from the same lines; the window rings (fp32, 2 · 512 · 2560 per self layer) are the engine's
state. Transfer and store are not measured on a GPU: the stand-ins' assumption (seed_profiles.py)."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "planner"))

from seed_profiles import ASSUMED, decode_of, write_profile  # noqa: E402

RUNS = os.path.join(ROOT, "bench", "results", "gpu-h100")
HIDDEN, SELF_LAYERS, WINDOW = 2560, 10, 512


def json_lines(path, op):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    rows = [r for r in rows if r.get("op") == op]
    if not rows:
        sys.exit("h100_profile.py: no %s lines in %s" % (op, path))
    return rows


def main():
    pre = json_lines(os.path.join(RUNS, "run1", "engine_t1.log"), "prefill")
    dec_rows = json_lines(os.path.join(RUNS, "run2", "decode_t1_graphs.log"), "decode")
    dec = [(r["batch"], r["context"], r["seconds_per_step"]) for r in dec_rows]
    weights = pre[0]["weight_bytes"]
    doc = {"schema": "yoco-profile/1", "device": "cuda", "model": "yoco-measured-1.3b",
           "source": "measured: our CUDA engine on one H100 80GB HBM3, 2026-11-27 (bench/results/gpu-h100/): "
                     "cuda_engine_bench --preset yoco-u-1.3b --loops 1, prefill in calls of 4,096 tokens "
                     "(run1/engine_t1.log), decode at batch 32 with --cuda-graphs (run2/decode_t1_graphs.log), fitted "
                     "as base + per_context_token x sum(context); fp32 K/V (kv_bytes_per_token from the engine); "
                     "transfer and store assumed as the stand-ins (50 GB/s + 1 ms), not measured on a GPU",
           "kv_bytes_per_token": pre[0]["kv_bytes_per_token"],
           "state_bytes": SELF_LAYERS * 2 * WINDOW * HIDDEN * 4, "state_in_pool": True,
           "kv_memory_bytes": 80e9 * 0.7 - weights,
           "prefill": [{"tokens": r["tokens"], "seconds": r["seconds"]} for r in pre],
           "decode": decode_of(dec), **ASSUMED}
    write_profile(doc, "h100-yoco-measured-1.3b")


if __name__ == "__main__":
    main()
