#!/usr/bin/python3
"""At scale, on paper (issue 32, part 5): YOCO vs a Transformer of the same size on the same traffic,
as the planner sizes them: GPUs to meet the SLOs and the prefill : decode split.

  bench/planner/fleet.py [--slice-rates transformer=10,yoco=40,yoco-measured=40] [--fleet-gpus 1000]
                         [--seconds 90] [--out-dir bench/results/planner]

Profiles (bench/planner/profiles/, each says what it is in its "source"): the seed paper's Tables
8–9 (prefill and decode throughput of the 1.3B YOCO and Transformer on one H100, Nano-vLLM, bf16,
block 256, 70% of memory for the cache) as stand-ins, and yoco-measured, our CUDA engine measured
on an H100 (bench/planner/h100_profile.py; fp32 K/V). These are simulated numbers, not timings.

Method: the planner searches the smallest prefill + decode counts meeting the SLOs for a slice of
the traffic (--slice-rates requests/s, per model: big enough that the split is not all ones); the
fleet is that slice repeated. Identical slices behind
load-balanced routers are an upper bound on the GPUs a pooled fleet needs (a larger pool queues
less), so both models get the same bound. The traffic is then scaled to the rate at which the
Transformer's fleet is --fleet-gpus GPUs, and YOCO's count is given for that same traffic.
"""

import argparse
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "planner"))

from profiles import load_profile  # noqa: E402
from search import Search, Slo  # noqa: E402
from simulator import Cluster  # noqa: E402
from traces import synthetic  # noqa: E402

TRAFFIC = dict(prompt=(2048, 32768), output=(128, 512))  # long-context requests, uniform lengths
SLO = Slo(ttft_p90=3.0, itl_p90=0.060)
GPU_CLUSTER = dict(block_size=256, max_running=256, chunk_tokens=8192, max_active=4, reserve_ahead_rows=256,
                   max_in_flight=1 << 20, max_queued_tokens=1 << 40, prefill_max_queued_tokens=1 << 40,
                   max_waiting=1 << 20)


def plan_one(name, rate, seconds, max_workers):
    profile = load_profile(os.path.join(HERE, "profiles", name + ".json"))
    c = Cluster(**GPU_CLUSTER)
    c.set("kv_blocks", max(1, int(profile.memory_bytes // (profile.kv_bytes_per_token * c.block_size))))
    reqs = synthetic(max(50, int(rate * seconds)), rate, TRAFFIC["prompt"], TRAFFIC["output"], seed=5)
    t0 = time.time()
    out = Search(profile, c, reqs, SLO, max_workers, max_workers).plan()
    out["model"], out["kv_blocks"], out["search_seconds"] = name, c.kv_blocks, round(time.time() - t0, 1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slice-rates", default="transformer=10,yoco=40,yoco-measured=40",
                    help="requests/s of each model's simulated slice (the transformer first: it sets the traffic)")
    ap.add_argument("--seconds", type=float, default=90.0, help="simulated traffic per configuration")
    ap.add_argument("--fleet-gpus", type=int, default=1000)
    ap.add_argument("--max-workers", type=int, default=32)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results", "planner"))
    ap.add_argument("--figure", default=os.path.join(ROOT, "bench", "figures", "planner_fleet.png"))
    a = ap.parse_args()
    rates = {}
    for kv in a.slice_rates.split(","):
        k, _, v = kv.partition("=")
        rates["h100-%s-1.3b" % k.strip()] = float(v)
    if "h100-transformer-1.3b" not in rates:
        ap.error("--slice-rates: the transformer's rate is needed (it sets the fleet's traffic)")
    plans = {m: plan_one(m, r, a.seconds, a.max_workers) for m, r in rates.items()}
    t = plans["h100-transformer-1.3b"]["recommended"]
    fleet_rate = rates["h100-transformer-1.3b"] * a.fleet_gpus / (t["prefill"] + t["decode"])
    rows = []
    for m, p in plans.items():
        r = p["recommended"]
        slices = fleet_rate / rates[m]
        rows.append({"model": m, "slice_rate": rates[m], "slice": r, "neighbours": p["neighbours"],
                     "kv_blocks": p["kv_blocks"], "fleet_rate": round(fleet_rate, 1),
                     "prefill_gpus": math.ceil(r["prefill"] * slices), "decode_gpus": math.ceil(r["decode"] * slices)})
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "fleet.json"), "w") as f:
        json.dump({"slo": {"ttft_p90": SLO.ttft_p90, "itl_p90": SLO.itl_p90}, "traffic": TRAFFIC,
                   "slice_rates": rates, "seconds": a.seconds, "cluster": GPU_CLUSTER, "rows": rows}, f, indent=1)
    lines = ["| model (1.3B, H100) | slice req/s | slice P + D | slice TTFT p90 / ITL p90 ms | fleet at %.0f req/s: "
             "prefill GPUs | decode GPUs | total | P:D |" % fleet_rate, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s = r["slice"]
        total = r["prefill_gpus"] + r["decode_gpus"]
        lines.append("| %s | %.0f | %d + %d | %.0f / %.1f | %d | %d | %d | %.2f |" % (
            r["model"].replace("h100-", "").replace("-1.3b", ""), r["slice_rate"], s["prefill"], s["decode"], s["ttft_p90_ms"],
            s["itl_p90_ms"], r["prefill_gpus"], r["decode_gpus"], total, r["prefill_gpus"] / r["decode_gpus"]))
    md = "\n".join(lines) + "\n"
    with open(os.path.join(a.out_dir, "fleet.md"), "w") as f:
        f.write(md)
    print(md)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.6))
        names = [r["model"].replace("h100-", "").replace("-1.3b", "") for r in rows]
        pre = [r["prefill_gpus"] for r in rows]
        dec = [r["decode_gpus"] for r in rows]
        ax.bar(names, pre, label="prefill GPUs", color="tab:blue")
        ax.bar(names, dec, bottom=pre, label="decode GPUs", color="tab:orange")
        for i, (p, d) in enumerate(zip(pre, dec)):
            ax.text(i, p + d, "%d (P:D %.2f)" % (p + d, p / d), ha="center", va="bottom", fontsize=9)
        ax.set_ylabel("H100s to meet TTFT p90 %.1f s, ITL p90 %.0f ms" % (SLO.ttft_p90, SLO.itl_p90 * 1e3), fontsize=8)
        ax.set_title("Same traffic (%.0f req/s, prompts 2K-32K): simulated; seed Tables 8-9 and measured" % fleet_rate,
                     fontsize=8)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.figure, dpi=110)
        print("wrote", a.figure)
    except ImportError:
        print("fleet.py: no matplotlib, no plot")


if __name__ == "__main__":
    main()
