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
import bisect
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
from simulator import Cluster, simulate  # noqa: E402
from traces import synthetic, write_trace  # noqa: E402


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


def cli_bench(a, *args):
    cli = os.path.join(a.build_dir, "tools", "yoco-cli")
    out = subprocess.run([cli, "bench", "--router", a.router, "--json"] + [str(x) for x in args],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit("profile.py: yoco-cli bench failed:\n" + out.stderr[-2000:])
    return json.loads(out.stdout)


class Background:
    """Load beside a measurement: yoco-cli bench running until stopped."""

    def __init__(self, a, *args):
        cli = os.path.join(a.build_dir, "tools", "yoco-cli")
        self.proc = subprocess.Popen([cli, "bench", "--router", a.router, "--json"] + [str(x) for x in args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


def measure_shared_host(a, doc, path):
    """Through the running cluster, with the workers sharing this host: how much longer a request
    waits while a decode worker steps (TTFT of 32- and 256-token prompts beside four streams, less
    the larger first step, against alone; ten alternations of ten requests a side, the median of
    each length's differences: a shared host is noisy, and five of five gave 0.15-0.52 for the
    slowdown in four sittings of 2026-12-04), split by the two lengths into a part proportional to
    the prefill's compute (prefill_slowdown_beside_decode: the prefill worker is held longer) and a
    fixed part (request_delay_beside_decode_seconds: the router's, the client's and the hops'
    turns for a core, which hold no worker). The decode side is measured under load
    (measure_under_load)."""
    p = Profile(doc, path)
    lengths = (32, 256)
    extra = {}
    extra_step = {n: p.decode_step(5, 4 * 100 + n) - p.decode_step(1, n) for n in lengths}  # the larger first step
    for rep in range(10):
        seed = 600 + 10 * rep
        for j, n in enumerate(lengths):
            prompt = ("--requests", 10, "--concurrency", 1, "--prompt-tokens", n, "--max-tokens", 1)
            t_alone = cli_bench(a, *prompt, "--seed", seed + 3 + 1000 * j)["ttft_ms"]["p50"] / 1e3
            with Background(a, "--requests", 100000, "--concurrency", 4, "--prompt-tokens", 16, "--max-tokens", 4000,
                            "--seed", seed + 4 + 1000 * j):
                t_beside = cli_bench(a, *prompt, "--seed", seed + 5 + 1000 * j)["ttft_ms"]["p50"] / 1e3
            extra.setdefault(n, []).append(t_beside - t_alone - extra_step[n])
    medians = {n: statistics.median(v) for n, v in extra.items()}
    slow, delay = split_beside(p, medians)
    doc["shared_host"] = {"prefill_slowdown_beside_decode": slow, "request_delay_beside_decode_seconds": delay,
                          "ttft_extra_beside_decode": [[n, round(t, 6)] for n, t in sorted(medians.items())]}


def split_beside(p, extra):
    """From the extra TTFT beside a busy decode worker at two prompt lengths ({tokens: seconds}):
    (prefill_slowdown_beside_decode, request_delay_beside_decode_seconds) with
    extra(n) = delay + slowdown · prefill_time(n), both clamped at 0 (the other then takes it all)."""
    (n0, e0), (n1, e1) = sorted(extra.items())
    t0, t1 = p.prefill_time(n0), p.prefill_time(n1)
    slow = (e1 - e0) / (t1 - t0)
    delay = e0 - slow * t0
    if slow < 0:
        slow, delay = 0.0, statistics.mean((e0, e1))
    elif delay < 0:
        slow, delay = e1 / t1, 0.0
    return round(max(0.0, slow), 4), round(max(0.0, delay), 6)


def knee_rate(profile, cluster, shape, n=150):
    """The rate at which the simulated cluster's TTFT p90 reaches 5× the unloaded one (bisection)."""
    def p90(rate):
        s = simulate(profile, cluster, synthetic(n, rate, seed=7, **shape), sample_interval=0).summary()
        ok = s["completed"] == n and s["request_throughput"] >= 0.8 * rate
        return s["ttft_ms"]["p90"], ok
    idle, _ = p90(1e-3)
    lo, hi = 1e-3, 1000.0
    for _ in range(24):
        mid = (lo * hi) ** 0.5
        t, ok = p90(mid)
        lo, hi = (mid, hi) if ok and t <= 5 * idle else (lo, mid)
    return lo


def token_gaps(rows):
    """From an open-loop run's request timelines (yoco-cli bench --requests-out): every token gap
    as (batch, context, seconds per token, whether a prefill ran). The batch is the requests
    between their first and last token (as the client sees them) at the gap's midpoint, its
    context their prompts plus the tokens they had by then; a gap in which another request's first
    token arrived is left out (that turn also admitted it, which the simulator adds by itself)."""
    reqs = []
    for r in rows:
        if r.get("status") != "OK" or len(r["deltas"]) < 2:
            continue
        times = [r["sent"] + t for t, _ in r["deltas"]]
        counts, n = [], 0
        for _, k in r["deltas"]:
            n += k
            counts.append(n)
        reqs.append((r["sent"], times, counts, r["prompt_tokens"], [k for _, k in r["deltas"]]))
    firsts = sorted(q[1][0] for q in reqs)
    out = []
    for sent, times, counts, prompt, ks in reqs:
        for j in range(1, len(times)):
            t0, t1 = times[j - 1], times[j]
            i = bisect.bisect_right(firsts, t0)
            if i < len(firsts) and firsts[i] <= t1:
                continue  # another request's first token: an admitting turn
            mid = 0.5 * (t0 + t1)
            batch, ctx, prefill = 0, 0, False
            for s2, ts2, c2, p2, _ in reqs:
                if ts2[0] <= mid <= ts2[-1]:
                    batch += 1
                    ctx += p2 + c2[bisect.bisect_right(ts2, mid) - 1]
                elif s2 <= mid < ts2[0]:
                    prefill = True
            out.append((max(1, batch), ctx, (t1 - t0) / ks[j], prefill))
    return out


def isotonic(ys):
    """The non-decreasing sequence nearest ys in least squares (pool adjacent violators)."""
    blocks = []  # [mean, count]
    for y in ys:
        blocks.append([y, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m1, n1 = blocks.pop()
            m0, n0 = blocks.pop()
            blocks.append([(m0 * n0 + m1 * n1) / (n0 + n1), n0 + n1])
    return [m for m, n in blocks for _ in range(n)]


def measure_under_load(a, doc, path):
    """The decode step under open-loop load: two Poisson runs through the cluster (prompts of
    16–320 tokens, outputs of 16–64; 35% and 70% of the simulated knee: a shape and seeds of the
    profile's own, not the calibration's traces), every token gap with the batch decoding at its
    time (token_gaps), the context term taken off. Where no prefill ran:
    - each batch size's median gap (with ≥ 30 gaps) is its decode.batch_points value; batch sizes
      the load did not reach take the steady streams' value (measure_overhead) times the median
      ratio of the two where both exist; the whole made non-decreasing in B (isotonic);
    - the gaps over their batch's value give decode.step_jitter's deciles (under load a turn
      also meets other requests' reservations, transfers and the prompt cache's writes).
    With a prefill running, the median of the same ratios, less 1, is
    shared_host.decode_slowdown_beside_prefill."""
    p = Profile(doc, path)
    shape = dict(prompt=(16, 320), output=(16, 64))
    knee = knee_rate(p, Cluster(shared_host=1), shape)
    gaps = []
    for i, level in enumerate((0.35, 0.7)):
        reqs = synthetic(150, level * knee, seed=41 + i, **shape)
        with tempfile.TemporaryDirectory() as d:
            trace, timelines = os.path.join(d, "trace.csv"), os.path.join(d, "requests.jsonl")
            with open(trace, "w") as f:
                write_trace(reqs, f)
            cli_bench(a, "--trace", trace, "--seed", 4100 + i, "--requests-out", timelines)
            with open(timelines) as f:
                gaps += token_gaps([json.loads(line) for line in f if line.strip()])
    by_batch = {}
    for b, ctx, g, busy in gaps:
        if not busy:
            by_batch.setdefault(b, []).append(g - p.decode_per_ctx * ctx)
    loaded = {b: statistics.median(v) for b, v in by_batch.items() if len(v) >= 30}
    steady = dict(doc["decode"]["batch_points"])
    both = [loaded[b] / steady[b] for b in loaded if b in steady]
    if not both:
        sys.exit("profile.py: the load runs reached no measured batch size (%s)" % sorted(by_batch))
    k = statistics.median(both)
    bs = sorted(set(steady) | set(loaded))
    ys = isotonic([loaded[b] if b in loaded else k * steady[b] for b in bs])
    doc["decode"]["steady_batch_points"] = doc["decode"]["batch_points"]
    doc["decode"]["batch_points"] = [[b, round(max(1e-6, y), 7)] for b, y in zip(bs, ys)]
    p = Profile(doc, path)
    alone = sorted(g / p.decode_step(b, ctx) for b, ctx, g, busy in gaps if not busy)
    beside = [g / p.decode_step(b, ctx) for b, ctx, g, busy in gaps if busy]
    if len(alone) < 50 or len(beside) < 20:
        sys.exit("profile.py: the load runs gave too few token gaps (%d alone, %d beside a prefill)"
                 % (len(alone), len(beside)))
    qs = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
    doc["decode"]["step_jitter"] = [[q, round(alone[min(len(alone) - 1, int(q * len(alone)))], 4)] for q in qs]
    doc.setdefault("shared_host", {})["decode_slowdown_beside_prefill"] = round(
        max(0.0, statistics.median(beside) / statistics.median(alone) - 1.0), 4)
    doc["under_load"] = {"knee_rate": round(knee, 3), "gaps_alone": len(alone), "gaps_beside_prefill": len(beside),
                         "batches_measured": sorted(loaded), "steady_scale": round(k, 4)}


LONE_LENGTHS = (16, 64, 256, 512)


def lone_requests(a, lengths, reps, seed):
    """Lone requests through the router (a.router): (prompt tokens, TTFT seconds) for each length,
    reps times, each with a seed of its own (no prompt shares a prefix with an earlier one)."""
    out = []
    for n in lengths:
        for rep in range(reps):
            d = cli_bench(a, "--requests", 1, "--prompt-tokens", n, "--max-tokens", 2, "--seed", seed + len(out))
            out.append((n, d["ttft_ms"]["p50"] / 1e3))
    return out


def steady_step(a, p, batch, seed):
    """The decode step as the worker runs it at one batch size: B streams of 128 tokens after
    64-token prompts, started together; their ITL p50 less the engine's context term at the
    streams' mean context (64 + 64)."""
    itl = cli_bench(a, "--requests", batch, "--concurrency", batch, "--prompt-tokens", 64, "--max-tokens", 128,
                    "--seed", seed)["itl_ms"]["p50"] / 1e3
    return max(1e-6, itl - p.decode_per_ctx * batch * 128)


def fit_prefill(p, lone):
    """The prefill as the worker runs it, from lone requests' TTFTs: TTFT less the modelled
    transfer and first step, fitted over prompt lengths as request overhead + prefill_scale · the
    engine's prefill time (least squares; the intercept is the fixed cost of a request outside the
    workers' compute: router, RPC hops, reservation, commit acknowledgement). Returns
    (prefill_scale, request_overhead_seconds)."""
    xs = [p.engine_prefill_time(n) for n, _ in lone]
    ys = [t - p.transfer_time(n * p.kv_bytes_per_token + p.state_bytes) - p.decode_step(1, n) for n, t in lone]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    scale = round(max(0.5, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)), 4)
    return scale, max(0.0, my - scale * mx)


def measure_overhead(a, doc, path):
    """Lone requests through the router: the decode step's overhead (a lone stream's ITL p50 minus
    the engine's step), and the prefill as the worker runs it: TTFT less the modelled transfer and
    first step, fitted over prompt lengths as request overhead + prefill_scale · the engine's
    prefill time (least squares; the intercept is the fixed cost of a request outside the workers'
    compute: router, RPC hops, reservation, commit acknowledgement)."""
    # The step as the worker runs it (the batcher's turn, sampling, handing tokens to the stream):
    # B streams of 128 tokens after 64-token prompts, started together, so that most steps run
    # the whole batch with no prefill beside it; each B's ITL p50 less the engine's context term
    # at the streams' mean context (64 + 64), taken three times (batches up, down, up), the median,
    # made non-decreasing in B (isotonic: a larger batch never steps faster; the rest is noise).
    # The values per B are decode.batch_points (the step is not linear in B: the engine's
    # products change at small batches); base + per_sequence·B is their least-squares line, for
    # readers of the fit. The engine's own fit stays for the record.
    p = Profile(doc, path)
    batches = [int(x) for x in a.worker_batches.split(",") if x]
    got = {b: [] for b in batches}
    for rep, order in enumerate((batches, batches[::-1], batches)):
        for b in order:
            got[b].append(steady_step(a, p, b, 500 + b + 1000 * rep))
    bs = batches
    steps = isotonic([statistics.median(got[b]) for b in bs])
    mb, ms = statistics.mean(bs), statistics.mean(steps)
    per_seq = max(0.0, sum((b - mb) * (y - ms) for b, y in zip(bs, steps)) / sum((b - mb) ** 2 for b in bs))
    doc["decode"]["engine_fit"] = {"base_seconds": doc["decode"]["base_seconds"],
                                   "per_sequence_seconds": doc["decode"]["per_sequence_seconds"]}
    doc["decode"]["base_seconds"] = max(1e-6, ms - per_seq * mb)
    doc["decode"]["per_sequence_seconds"] = per_seq
    doc["decode"]["batch_points"] = [[b, round(y, 7)] for b, y in zip(bs, steps)]
    doc["decode"]["step_overhead_seconds"] = 0.0
    p = Profile(doc, path)
    lone = lone_requests(a, LONE_LENGTHS, 3, seed=100)
    doc["lone_requests"] = [[n, round(t, 6)] for n, t in lone]
    doc["prefill_scale"], doc["request_overhead_seconds"] = fit_prefill(p, lone)
    # Resuming from a cached document (the store's lookup, read and checks, the state restored):
    # lone requests of 64 tokens on one cached 256-token document, TTFT less the model of them.
    p = Profile(doc, path)
    t = resume_requests(a, seed=700)
    doc["store"]["resume_ttft_seconds"] = round(t, 6)
    doc["store"]["resume_overhead_seconds"] = fit_resume(p, t)


def resume_requests(a, seed):
    """Lone requests of 64 tokens on one cached 256-token document (six, a quarter second apart):
    their TTFT p50 in seconds."""
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens,DocumentId,DocumentTokens\n")
        for i in range(6):
            f.write("%.2f,320,2,doc,256\n" % (0.25 * i))
        f.flush()
        return cli_bench(a, "--trace", f.name, "--seed", seed)["ttft_ms"]["p50"] / 1e3


def fit_resume(p, t):
    """What resuming from a cached document costs beyond the model of it (the request overhead, the
    store's read, the 64-token slice, the transfer, the first step): resume_overhead_seconds from
    resume_requests' TTFT t."""
    model = (p.request_overhead + p.store_load_time(256 * p.kv_bytes_per_token + p.state_bytes) + p.slice_time(256, 64)
             + p.transfer_time(64 * p.kv_bytes_per_token + p.state_bytes) + p.decode_step(1, 320))
    return round(max(0.0, t - model), 6)


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
    ap.add_argument("--worker-batches", default="1,2,3,4,6,8,12,16,24,32",
                    help="with --router: the batch sizes of decode.batch_points")
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
        measure_shared_host(a, doc, a.out)
        measure_under_load(a, doc, a.out)
    Profile(doc, a.out)  # the schema's own checks
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote %s: prefill %d points, decode fit %.3g + %.3g·B + %.3g·Σctx s (+ %.2f ms a step in the worker), "
          "transfer %.2f GB/s, request overhead %.1f ms, shared host %s" % (
              a.out, len(prefill), base, per_seq, per_ctx, doc["decode"].get("step_overhead_seconds", 0) * 1e3,
              doc["transfer"]["bytes_per_second"] / 1e9, doc["request_overhead_seconds"] * 1e3,
              doc.get("shared_host", {})))


if __name__ == "__main__":
    main()
