#!/usr/bin/python3
"""Writes bench/planner/profiles/h100-{yoco,transformer}-1.3b.json: stand-in GPU profiles from the
seed paper's Tables 8-9 (seed 003, the YOCO-U paper, appendix D), for bench/planner/fleet.py.
Each file's "source" says what it is; none is a measurement of ours."""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "planner"))

from profiles import Profile, fit_decode  # noqa: E402

LENS = [8192, 16384, 32768, 65536, 131072, 262144]
TABLE8 = {"transformer": [85707, 66342, 45566, 27276, 14987, 7475],  # prefill tokens/s
          "yoco": [220662, 219734, 218247, 219106, 220416, 220407]}
TABLE9 = {"transformer": [2712, 1795, 638, 450, 220, 137],  # decode tokens/s at batch 32
          "yoco": [3356, 2539, 1722, 975, 556, 318]}
HIDDEN, LAYERS, WINDOW = 2560, 20, 512  # the 1.3B of Table 7
MEMORY = 80e9 * 0.7 - 1.3e9 * 2  # 70% of an H100-80GB for the engine, less the bf16 weights
# Not measured on a GPU: a 400 Gb/s NIC per GPU, and the request overhead (h100_profile.py too).
ASSUMED = {"transfer": {"latency_seconds": 0.001, "bytes_per_second": 50e9},
           "store": {"latency_seconds": 0.001, "bytes_per_second": 25e9},
           "request_overhead_seconds": 0.005}


def decode_of(points):
    """The decode section from (batch, context, seconds) steps of one batch size: base +
    per_context_token x sum(context); the per-sequence term cannot be told from the base."""
    _, _, per_ctx = fit_decode(points)
    base = max(0.0, sum(s - per_ctx * b * n for b, n, s in points) / len(points))
    return {"base_seconds": base, "per_sequence_seconds": 0.0, "per_context_token_seconds": per_ctx,
            "points": [{"batch": b, "context": n, "seconds": s} for b, n, s in points]}


def write_profile(doc, name):
    """Checks doc as the planner will read it and writes bench/planner/profiles/NAME.json."""
    Profile(doc)
    path = os.path.join(HERE, "profiles", name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote", path)


def main():
    for m in ("transformer", "yoco"):
        kv = 2 * LAYERS * HIDDEN * 2 if m == "transformer" else 2 * HIDDEN * 2  # bf16 K and V per token
        # YOCO's self-decoder: sliding-window attention (window 512) in half the layers, a fixed state.
        state = 0 if m == "transformer" else (LAYERS // 2) * WINDOW * 2 * HIDDEN * 2
        dec = [(32, n, 32.0 / thr) for n, thr in zip(LENS, TABLE9[m])]
        doc = {"schema": "yoco-profile/1", "device": "cuda", "model": "%s-1.3b" % m,
               "source": "stand-in, not a measurement: seed 003 (the YOCO-U paper) appendix D, Tables 8-9: one "
                         "H100-80GB, Nano-vLLM, bf16, 1.3B (hidden 2560, 20 layers, 20 heads), block 256, 70% memory; "
                         "prefill = length / Table 8 throughput; decode step at batch 32 = 32 / Table 9 throughput, "
                         "fitted as base + per_context_token x sum(context) (one batch size: no per-sequence term); "
                         "KV bytes from the shapes (bf16); transfer assumed 50 GB/s + 1 ms (a 400 Gb/s NIC per GPU)",
               "kv_bytes_per_token": kv, "state_bytes": state, "state_in_pool": True, "kv_memory_bytes": MEMORY,
               "prefill": [{"tokens": n, "seconds": n / thr} for n, thr in zip(LENS, TABLE8[m])],
               "decode": decode_of(dec), **ASSUMED}
        write_profile(doc, "h100-%s-1.3b" % m)


if __name__ == "__main__":
    main()
