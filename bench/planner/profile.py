#!/usr/bin/python3
"""Measures a worker's cost model on this machine and writes it as a planner profile
(schema yoco-profile/1, tools/planner/README.md "Profiles"):

  bench/planner/profile.py --model models/kjv-yoco [--device cpu|cuda] [--threads 1] [--build-dir build]
                           [--prefill-lens 16,64,128,256,512,1024] [--decode-batches 1,2,4,8,16,32]
                           [--decode-contexts 64,512,2048] [--router HOST:PORT] --out PROFILE.json

- prefill: engine_bench (cuda_engine_bench with --device cuda) over --prefill-lens, one prompt
  alone from position 0 (its time includes the last position's logits, as a TTFT would);
- decode: the step time over --decode-batches × --decode-contexts, fitted as
  base + per_sequence·B + per_context_token·Σcontext (least squares, tools/planner/profiles.py);
- transfer: transfer_bench over UCX tcp (push) on this host: bandwidth at the largest message and
  the per-message latency at the smallest (CPU only: a GPU fleet's fabric is an input, --transfer-gbps);
- the KV store: a dir store on --store-dir's file system (write, then read back, 16 MiB);
- with --router (a running local cluster, otherwise idle): over a few lone requests, the decode
  step's cost in the worker beyond the engine's step (measured ITL p50 minus the fitted step:
  the batcher's turn, sampling, the stream) and the fixed cost of a request outside the workers'
  compute (router, RPC hops, reservation, commit acknowledgement: measured TTFT minus the model).
Never asserts speed; run it on an idle machine (bench/README.md, "SLA planner").
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "planner"))

from profiles import SCHEMA, Profile, fit_decode  # noqa: E402


def run_json_lines(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        sys.exit("profile.py: %s exited %d:\n%s" % (" ".join(cmd), out.returncode, out.stderr[-2000:]))
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def ints(text):
    return [int(x) for x in text.split(",") if x]


def measure_cpu(a, bench):
    prefill, decode, kv, state = [], [], 0, 0
    for i, ctx in enumerate(ints(a.decode_contexts)):
        lens = a.prefill_lens if i == 0 else "16"
        cmd = [bench, "--model", a.model, "--threads", str(a.threads), "--prefill-lens", lens,
               "--decode-batches", a.decode_batches, "--decode-context", str(ctx), "--decode-steps", str(a.decode_steps),
               "--repeats", str(a.repeats), "--json"] + (["--dtype", a.dtype] if a.dtype else [])
        d = run_json_lines(cmd)[-1]
        if i == 0:
            for r in d["prefill"]:
                prefill.append({"tokens": r["tokens"], "seconds": r["seconds"]})
                kv = max(kv, r["kv_bytes"] / max(1, r["tokens"]))
                state = max(state, r["self_state_bytes"])
        for r in d["decode"]:
            decode.append({"batch": r["batch"], "context": r["context"], "seconds": r["ms_per_step"] / 1e3})
    return prefill, decode, kv, state


def measure_cuda(a, bench):
    cmd = [bench, "--model", a.model, "--prefill-lens", a.prefill_lens, "--decode-batches", a.decode_batches,
           "--decode-contexts", a.decode_contexts, "--decode-steps", str(a.decode_steps), "--repeats", str(a.repeats),
           "--json"]
    prefill, decode, kv, state = [], [], 0, 0
    for r in run_json_lines(cmd):
        if r.get("op") == "prefill":
            prefill.append({"tokens": r["tokens"], "seconds": r["seconds"]})
            kv = r.get("kv_bytes_per_token", kv)
        elif r.get("op") == "decode":
            decode.append({"batch": r["batch"], "context": r["context"], "seconds": r["seconds_per_step"]})
            state = max(state, r.get("state_bytes", 0) / max(1, r["batch"]))
    return prefill, decode, kv, state


def measure_transfer(a):
    if a.transfer_gbps:
        return {"latency_seconds": a.transfer_latency_ms / 1e3, "bytes_per_second": a.transfer_gbps * 1e9}
    rows = run_json_lines([os.path.join(a.build_dir, "bench", "transfer_bench"), "--transports", "tcp", "--paths",
                           "push", "--min-bytes", "4096", "--max-bytes", "16777216", "--reps", "3", "--json"])[-1]["rows"]
    key = [k for k in rows[0] if k.startswith("tcp")][0]
    big, small = rows[-1], rows[0]
    bw = big[key] * 1e9
    latency = max(0.0, small["bytes"] / (small[key] * 1e9) - small["bytes"] / bw)
    return {"latency_seconds": latency, "bytes_per_second": bw}


def measure_store(a):
    data = os.urandom(16 << 20)
    with tempfile.TemporaryDirectory(dir=a.store_dir) as d:
        path = os.path.join(d, "blob")
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        small = os.path.join(d, "small")
        with open(small, "wb") as f:
            f.write(data[:4096])
        t0 = time.perf_counter()
        for _ in range(50):
            with open(small, "rb") as f:
                f.read()
        latency = (time.perf_counter() - t0) / 50
        t0 = time.perf_counter()
        with open(path, "rb") as f:
            f.read()
        bw = len(data) / max(1e-9, time.perf_counter() - t0 - latency)
    return {"latency_seconds": latency, "bytes_per_second": bw}


def measure_overhead(a, doc, path):
    """Lone requests through the router: the decode step's overhead (measured ITL p50 minus the
    engine's step) and the fixed per-request cost (measured TTFT minus the modelled compute and
    transfer), medians over a few prompt lengths."""
    cli = os.path.join(a.build_dir, "tools", "yoco-cli")
    runs = []
    for n in (16, 64, 256):
        for seed in range(3):
            out = subprocess.run([cli, "bench", "--router", a.router, "--requests", "1", "--prompt-tokens", str(n),
                                  "--max-tokens", "16", "--seed", str(seed), "--json"],
                                 capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                sys.exit("profile.py: yoco-cli bench failed:\n" + out.stderr[-2000:])
            d = json.loads(out.stdout)
            runs.append((n, d["ttft_ms"]["p50"] / 1e3, d["itl_ms"]["p50"] / 1e3))
    p = Profile(doc, path)
    step = max(0.0, statistics.median(itl - p.decode_step(1, n + 8) for n, _, itl in runs))
    doc["decode"]["step_overhead_seconds"] = step
    p = Profile(doc, path)
    ttft = statistics.median(t - (p.prefill_time(n) + p.transfer_time(n * p.kv_bytes_per_token + p.state_bytes)
                                  + p.decode_step(1, n)) for n, t, _ in runs)
    doc["request_overhead_seconds"] = max(0.0, ttft)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--threads", type=int, default=1, help="the workers' --threads (deploy/local/cluster.py: 1)")
    ap.add_argument("--dtype", default="")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--prefill-lens", default="16,64,128,256,512,1024")
    ap.add_argument("--decode-batches", default="1,2,4,8,16,32")
    ap.add_argument("--decode-contexts", default="64,512,2048")
    ap.add_argument("--decode-steps", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transfer-gbps", type=float, default=0.0, help="take the fabric's bandwidth instead of measuring")
    ap.add_argument("--transfer-latency-ms", type=float, default=0.05)
    ap.add_argument("--store-dir", default=tempfile.gettempdir())
    ap.add_argument("--router", help="a running cluster's router, to measure the per-request overhead")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.device == "cpu":
        prefill, decode, kv, state = measure_cpu(a, os.path.join(a.build_dir, "bench", "engine_bench"))
    else:
        prefill, decode, kv, state = measure_cuda(a, os.path.join(a.build_dir, "bench", "cuda_engine_bench"))
    base, per_seq, per_ctx = fit_decode([(d["batch"], d["context"], d["seconds"]) for d in decode])
    doc = {"schema": SCHEMA, "device": a.device, "model": os.path.basename(os.path.normpath(a.model)),
           "source": "bench/planner/profile.py on %s, %s, threads %d" % (os.uname().nodename, time.strftime(
               "%Y-%m-%d %H:%M UTC", time.gmtime()), a.threads),
           "kv_bytes_per_token": kv, "state_bytes": state, "prefill": prefill,
           "decode": {"base_seconds": base, "per_sequence_seconds": per_seq, "per_context_token_seconds": per_ctx,
                      "points": decode},
           "transfer": measure_transfer(a), "store": measure_store(a), "request_overhead_seconds": 0.0}
    if a.router:
        measure_overhead(a, doc, a.out)
    Profile(doc, a.out)  # the schema's own checks
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s: prefill %d points, decode fit %.3g + %.3g·B + %.3g·Σctx s (+ %.2f ms a step in the worker), "
          "transfer %.2f GB/s, request overhead %.1f ms" % (
              a.out, len(prefill), base, per_seq, per_ctx, doc["decode"].get("step_overhead_seconds", 0) * 1e3,
              doc["transfer"]["bytes_per_second"] / 1e9, doc["request_overhead_seconds"] * 1e3))


if __name__ == "__main__":
    main()
