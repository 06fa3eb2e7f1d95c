#!/usr/bin/env python3
"""Summarises bench/cpu_roof.sh's JSON (one directory) as markdown: the roofs, GFLOP/s per shape per
library, and the engine's prefill as a share of the fp32/bf16 roof."""
import glob
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def matrix_flops_per_token(c):
    """2 · multiply-adds of the projections one prefill token passes (self-decoder + K/V; in a
    mixture of experts its router, k experts and the shared one); the mixers (retention, windowed
    attention) are not counted, so the share of roof is a lower bound."""
    D, H = c["dim"], c["hidden_dim"]
    if c.get("n_experts"):  # an MoE token passes its k experts, the shared one and the router
        H = c["n_experts_per_token"] * c["expert_hidden_dim"] + c.get("shared_expert_hidden_dim", 0)
    swa = bool(c.get("sliding_window"))
    rows = (3 if swa else 4) * D + (0 if swa else c["n_self_heads"]) + D + 2 * H  # qkv(g), gt, wo, w13
    rows += c.get("n_experts", 0)  # the router
    self_layers = c.get("n_self_layers") or c["n_layers"] // 2
    kv_dim = c["n_attn_kv_heads"] * (D // c["n_attn_heads"])
    per_layer = rows * D + D * H
    return 2 * (c.get("n_loops", 1) * self_layers * per_layer + 2 * kv_dim * D)


def main(d):
    m = load(os.path.join(d, "machine.json"))
    print(f"machine: {m['cpu']}, {m['nproc']} CPUs, threads {m['threads']}, OPENBLAS_CORETYPE={m['openblas_coretype']}, "
          f"load at start {m['load']}\n")
    gemms = {os.path.basename(p)[5:-5]: load(p) for p in sorted(glob.glob(os.path.join(d, "gemm-*.json")))}
    roof = {"fp32": 0.0, "bf16": 0.0}
    print("| library | fp32 2048³ GFLOP/s | bf16 2048³ GFLOP/s |\n|---|---:|---:|")
    for name, g in gemms.items():
        r = g["roof_gflops"]
        for k in roof:
            roof[k] = max(roof[k], r.get(k, 0.0))
        print(f"| {name} | {r.get('fp32', 0):.0f} | {r['bf16']:.0f} |" if "bf16" in r else
              f"| {name} | {r.get('fp32', 0):.0f} | - |")
    print(f"\nroof (best of the libraries): fp32 {roof['fp32']:.0f} GFLOP/s, bf16 {roof['bf16']:.0f} GFLOP/s\n")

    # Per shape: one column per (library, dtype).
    cols, table = [], {}
    for name, g in gemms.items():
        for s in g["shapes"]:
            col = f"{name} {s['dtype']}"
            if col not in cols:
                cols.append(col)
            key = (s["preset"], s["matrix"], s["n"], s["k"], s["phase"], s["m"])
            table.setdefault(key, {})[col] = s["gflops"]
    print("| preset | matrix (n×k) | m | " + " | ".join(cols) + " |")
    print("|---|---|---:|" + "---:|" * len(cols))
    for key in sorted(table, key=lambda k: (k[0], k[1], k[4] != "prefill", k[5])):
        p, mat, n, k, phase, mm = key
        vals = " | ".join(f"{table[key][c]:.0f}" if c in table[key] else "-" for c in cols)
        print(f"| {p} | {mat} ({n}×{k}) | {mm} | {vals} |")

    print("\n| preset | path | prefill tokens | tok/s | matrix GFLOP/s | % of roof | weight MB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    engines = {}
    for p in sorted(glob.glob(os.path.join(d, "engine-*.json"))):
        e = load(p)
        name = os.path.basename(p)[7:-5]
        engines[name] = e
        fl = matrix_flops_per_token(e["config"])
        dt = e.get("dtype", "fp32")
        for r in e["prefill"]:
            gf = r["tokens_per_s"] * fl / 1e9
            print(f"| {name.rsplit('-', 2)[0] if name.endswith('openblas') else name.rsplit('-', 1)[0]} | "
                  f"{dt} {e.get('gemm_library', '')} | {r['tokens']} | {r['tokens_per_s']:.0f} | {gf:.0f} | "
                  f"{100 * gf / roof[dt]:.0f}% | {e.get('weight_bytes', 0) / 1e6:.0f} |")
    print("\n| preset | path | " + " | ".join(f"decode B={r['batch']} tok/s" for r in
                                            next(iter(engines.values()))["decode"]) + " |")
    print("|---|---|" + "---:|" * len(next(iter(engines.values()))["decode"]))
    for name, e in engines.items():
        print(f"| {name} | {e.get('dtype', 'fp32')} {e.get('gemm_library', '')} | " +
              " | ".join(f"{r['tokens_per_s']:.1f}" for r in e["decode"]) + " |")
    # bf16 over fp32 per preset.
    print()
    for name, e in engines.items():
        if not name.endswith("-bf16"):
            continue
        f = engines.get(name[:-5] + "-fp32")
        if not f:
            continue
        sp = [b["tokens_per_s"] / a["tokens_per_s"] for a, b in zip(f["prefill"], e["prefill"])]
        print(f"{name[:-5]}: bf16 prefill {' / '.join(f'{x:.2f}x' for x in sp)} of fp32 "
              f"(tokens {', '.join(str(r['tokens']) for r in e['prefill'])}); resident weights "
              f"{e['weight_bytes'] / f['weight_bytes']:.3f} of fp32")


    for p in sorted(glob.glob(os.path.join(d, "score-*-bf16.json"))):
        f = p[:-10] + "-fp32.json"
        if os.path.exists(f):
            a, b = load(f)["token_logprobs"], load(p)["token_logprobs"]
            print(f"{os.path.basename(p)[6:-10]}: bf16 vs fp32 max |d log p| over {len(a)} scored tokens "
                  f"{max(abs(x - y) for x, y in zip(a, b)):.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
