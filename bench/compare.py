#!/usr/bin/env python3
"""Prints a markdown comparison of engine_bench and torch_baseline.py JSON outputs."""
import json
import sys


def main(engine_path, torch_path):
    e = json.load(open(engine_path))
    t = json.load(open(torch_path))
    c = e["config"]
    mixer = f"SWA {c['sliding_window']}" if c.get("sliding_window") else "gRet"
    print(f"### {engine_path.split('/')[-1].split('.')[0]}: dim {c['dim']}, {c['n_layers']} layers, {mixer}, "
          f"loops {c['n_loops']}, threads {e['threads']}, {e.get('dtype', 'fp32')} "
          f"(engine GEMM: {e.get('gemm_library', 'openblas' if e.get('blas') else 'reference')})")
    print()
    print("| prefill tokens | engine tok/s | torch tok/s | speedup |")
    print("|---:|---:|---:|---:|")
    tp = {r["tokens"]: r for r in t["prefill"]}
    secs = {}
    for r in e["prefill"]:
        n = r["tokens"]
        secs[n] = r["seconds"]
        o = tp.get(n)
        tt = f"{o['tokens_per_s']:.0f}" if o else "-"
        sp = f"{r['tokens_per_s'] / o['tokens_per_s']:.2f}x" if o else "-"
        print(f"| {n} | {r['tokens_per_s']:.0f} | {tt} | {sp} |")
    if 4096 in secs and 32768 in secs:
        print(f"\nengine t(32K)/t(4K) = {secs[32768] / secs[4096]:.2f} (linear scaling: 8)")
    print()
    print("| decode batch | engine tok/s | torch tok/s | speedup |")
    print("|---:|---:|---:|---:|")
    td = {r["batch"]: r for r in t["decode"]}
    for r in e["decode"]:
        o = td.get(r["batch"])
        tt = f"{o['tokens_per_s']:.1f}" if o else "-"
        sp = f"{r['tokens_per_s'] / o['tokens_per_s']:.2f}x" if o else "-"
        print(f"| {r['batch']} | {r['tokens_per_s']:.1f} | {tt} | {sp} |")
    print()
    print(f"peak RSS: engine {e['peak_rss_mb']:.0f} MB, torch {t.get('peak_rss_mb', 0):.0f} MB; "
          f"KV bytes/token (fp32): {e['kv_bytes_per_token_f32']} "
          f"(same-size Transformer: {e['transformer_kv_bytes_per_token_f32']}); "
          f"self-decoder state: {e['prefill'][-1]['self_state_bytes']} bytes per sequence, constant")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
