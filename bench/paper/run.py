#!/usr/bin/env python3
"""Runs the measurements behind bench/paper/README.md and writes one raw JSON file per figure.

Standard library only (it also runs on a lent GPU machine); bench/paper/plot.py draws the PNGs.
Usage: see bench/paper/run.sh (the documented entry point).
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GIB = 1 << 30

# The architectures of figures 1, 3 and 4: (label, preset, engine_bench config overrides).
def archs(size):
    return {
        "YOCO-gRet": (size + "-gret", []),
        "YOCO-SWA": (size + "-swa", []),
        # YOCO-U at the same sizes: the SWA self-decoder looped 3 times, NoPE cross-decoder (as yoco-u-1.3b).
        "YOCO-U": (size + "-swa", ["--loops", "3", "--nope"]),
        "Transformer": (size + "-gret", ["--transformer"]),
    }

# Paper Table 7 (the scaling-curve configs, 160M..13B): size, hidden dim, layers, heads. No GQA there.
TABLE7 = [("160M", 768, 12, 12), ("400M", 1024, 24, 16), ("830M", 1536, 24, 12), ("1.4B", 2048, 24, 16),
          ("2.7B", 2560, 32, 20), ("6.8B", 4096, 32, 32), ("13B", 5120, 40, 40)]
TABLE7_PARAMS = {"160M": 0.16e9, "400M": 0.4e9, "830M": 0.83e9, "1.4B": 1.4e9, "2.7B": 2.7e9, "6.8B": 6.8e9,
                 "13B": 13e9}

# Sizes per mode. Lengths in tokens; the Transformer's prefill series stops after a point slower
# than stop_after_s (figure 3); KV above kv_limit is not attempted (figure 1: this machine's memory).
MODES = {
    "quick": dict(size="small", mem_lens=[4096, 8192], mem_prefill=512, kv_limit=1 * GIB,
                  prefill_size="small", prefill_lens=[512, 1024], stop_after_s=30, prefill_repeats=1,
                  repeat_below_s=0,
                  tput_size="small", tput_lens=[512, 1024], tput_generate=4, tput_budget_mb=64, tput_max_batch=8,
                  loops=[1, 2], loops_context=512, loops_repeats=1,
                  loops_decode_ctx=256, loops_decode_batch=2, loops_decode_steps=2,
                  serve=dict(requests=4, prompt=64, max_tokens=8, rates=[4]),
                  moe=("tiny-moe-yocou", "tiny-moe-yocou-dense-active"), moe_lens=[256], moe_batches=[1, 4],
                  moe_ctx=128, moe_steps=4),
    "full": dict(size="mid", mem_lens=[4096, 8192, 16384, 32768, 65536, 131072, 262144], mem_prefill=2048,
                 kv_limit=6 * GIB,
                 prefill_size="mid", prefill_lens=[1024, 2048, 4096, 8192, 16384, 32768], stop_after_s=90,
                 prefill_repeats=2, repeat_below_s=30,
                 tput_size="small", tput_lens=[1024, 4096, 16384], tput_generate=128, tput_budget_mb=512,
                 tput_max_batch=64,
                 loops=[1, 2, 3, 4], loops_context=2048, loops_repeats=2, loops_decode_ctx=1024, loops_decode_batch=8,
                 loops_decode_steps=16,
                 serve=dict(requests=32, prompt=512, max_tokens=64, rates=[2, 4, 8, 16]),
                 moe=("mid-moe", "mid-moe-dense-active"), moe_lens=[1024, 4096], moe_batches=[1, 4, 16, 32],
                 moe_ctx=1024, moe_steps=16),
}
# The CUDA engine (figures 1, 3, 5), presets generated on the device.
CUDA_MODES = {
    "quick": dict(pair="small-gret,small-transformer", lens=[1024, 4096], loops_preset="small-swa", loops=[1, 2],
                  loops_context=1024),
    "full": dict(pair="yoco-3b,transformer-3b", lens=[4096, 16384, 32768, 65536, 131072, 262144],
                 loops_preset="yoco-u-1.3b", loops=[1, 2, 3, 4], loops_context=16384),
}


def log(msg):
    print("[paper] " + msg, file=sys.stderr, flush=True)


def run_json(cmd, timeout=None):
    """Runs a bench binary; returns every JSON line it printed. Fails loudly on any error."""
    log(" ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit("bench/paper: %s failed (exit %d):\n%s" % (cmd[0], p.returncode, p.stderr[-4000:]))
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise SystemExit("bench/paper: %s printed no JSON:\n%s" % (cmd[0], p.stdout[-2000:]))
    return lines


def sh(cmd):
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              cwd=ROOT).stdout.strip()
    except OSError:
        return ""


def machine_info(args):
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem_kb = int(next(l.split()[1] for l in f if l.startswith("MemTotal")))
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    info = {"hostname": platform.node(), "cpu": cpu, "cpus": os.cpu_count(), "mem_gib": round(mem_kb / 2**20, 1),
            "kernel": platform.release(), "load_avg_start": list(os.getloadavg())}
    if args.device == "cuda":
        info["gpu"] = sh(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"])
    return info


class Runner:
    def __init__(self, args):
        self.args = args
        self.mode = MODES["quick" if args.quick else "full"]
        self.models = tempfile.mkdtemp(prefix="yoco-paper-")
        self.bench = os.path.join(args.build_dir, "bench", "engine_bench")
        self.threads = ["--threads", str(args.threads)]

    def need(self, path):
        if not os.access(path, os.X_OK):
            raise SystemExit("bench/paper: %s is missing (build it: cmake --build %s --target %s)" %
                             (path, self.args.build_dir, os.path.basename(path)))
        return path

    def model(self, preset, overrides):
        """Writes a random model once (outside the measured processes, so its RSS is not counted)."""
        d = os.path.join(self.models, preset + "".join(o.strip("-") for o in overrides))
        if not os.path.isdir(d):
            run_json_or_none([self.need(self.bench), "--preset", preset, *overrides, "--write-model", d])
        return d

    def describe(self, preset, overrides=()):
        return run_json([self.need(self.bench), "--preset", preset, *overrides, "--describe"])[0]

    # ---- figure 1: memory vs context length -------------------------------------------------------
    def fig1(self):
        m, rows = self.mode, []
        for label, (preset, ov) in archs(m["size"]).items():
            per_token = self.describe(preset, ov)["kv_bytes_per_token_f32"]
            d = self.model(preset, ov)
            for n in m["mem_lens"]:
                if per_token * n > m["kv_limit"]:
                    rows.append({"arch": label, "context": n, "skipped": "KV %.1f GiB over this run's limit %.1f GiB" %
                                 (per_token * n / GIB, m["kv_limit"] / GIB)})
                    continue
                r = run_json([self.bench, "--model", d, *self.threads, "--memory-context", str(n),
                              "--memory-prefill", str(m["mem_prefill"])])[0]
                rows.append({"arch": label, "preset": preset, "overrides": ov, **r})
        return {"model_size": m["size"], "prefill_tokens_per_run": m["mem_prefill"],
                "kv_limit_bytes": m["kv_limit"], "rows": rows}

    # ---- figure 2: KV bytes per token vs model size (computed) -------------------------------------
    def fig2(self):
        rows = []
        for preset in ["small-gret", "mid-gret", "yoco-u-1.3b", "yoco-3b"]:
            r = self.describe(preset)
            c = r["config"]
            rows.append({"name": preset, "source": "preset (computed)", "params": approx_params(c),
                         "n_layers": c["n_layers"], "dim": c["dim"],
                         "yoco_kv_bytes_per_token": r["kv_bytes_per_token_f32"],
                         "transformer_kv_bytes_per_token": r["transformer_kv_bytes_per_token_f32"]})
        for name, d, layers, heads in TABLE7:
            # fp32 K and V rows of width d (no GQA in Table 7): YOCO once, a Transformer per layer.
            rows.append({"name": name, "source": "paper Table 7 config (computed)", "params": TABLE7_PARAMS[name],
                         "n_layers": layers, "dim": d, "yoco_kv_bytes_per_token": 2 * d * 4,
                         "transformer_kv_bytes_per_token": layers * 2 * d * 4})
        return {"dtype": "fp32 (the CPU engine and the KV pool keep K/V in fp32; bf16 halves both)", "rows": rows}

    # ---- figure 3: prefill latency vs length ------------------------------------------------------
    def fig3(self):
        m, rows = self.mode, []
        for label in ["YOCO-gRet", "YOCO-SWA", "Transformer"]:
            preset, ov = archs(m["prefill_size"])[label]
            d = self.model(preset, ov)
            for n in m["prefill_lens"]:
                # One sequence through the engine (time to first token: prefill + last logits), each
                # run in a fresh process; points under repeat_below_s take the best of prefill_repeats
                # (the machine may be shared).
                runs = []
                while not runs or (len(runs) < m["prefill_repeats"] and runs[-1] < m["repeat_below_s"]):
                    r = run_json([self.bench, "--model", d, *self.threads, "--memory-context", str(n)])[0]
                    runs.append(r["prefill_seconds"])
                rows.append({"arch": label, "tokens": n, "seconds": min(runs), "runs": runs})
                if min(runs) > m["stop_after_s"]:
                    log("%s: %d tokens took %.0f s; longer ones not run" % (label, n, min(runs)))
                    break
        return {"model_size": m["prefill_size"], "stop_after_s": m["stop_after_s"], "rows": rows}

    # ---- figure 4: throughput vs length under a memory budget --------------------------------------
    def fig4(self):
        m, rows = self.mode, []
        for label in ["YOCO-gRet", "Transformer"]:
            preset, ov = archs(m["tput_size"])[label]
            d = self.model(preset, ov)
            for n in m["tput_lens"]:
                r = run_json([self.bench, "--model", d, *self.threads, "--throughput-context", str(n), "--generate",
                              str(m["tput_generate"]), "--memory-budget-mb", str(m["tput_budget_mb"]),
                              "--max-batch", str(m["tput_max_batch"])])[0]
                rows.append({"arch": label, **r})
        return {"model_size": m["tput_size"], "generate": m["tput_generate"], "memory_budget_mb": m["tput_budget_mb"],
                "max_batch": m["tput_max_batch"], "rows": rows}

    # ---- figure 5: YOCO-U loops ---------------------------------------------------------------------
    def fig5(self):
        m, rows = self.mode, []
        preset = m["size"] + "-swa"
        for t in m["loops"]:
            ov = ["--loops", str(t), "--nope"]
            d = self.model(preset, ov)
            # Best of loops_repeats fresh processes for each time (the machine may be shared).
            mems = [run_json([self.bench, "--model", d, *self.threads, "--memory-context", str(m["loops_context"])])[0]
                    for _ in range(m["loops_repeats"])]
            decs = [run_json([self.bench, "--model", d, *self.threads, "--json", "--prefill-lens", "64", "--repeats",
                              "1", "--decode-batches", str(m["loops_decode_batch"]), "--decode-context",
                              str(m["loops_decode_ctx"]), "--decode-steps", str(m["loops_decode_steps"])])[0]
                    for _ in range(m["loops_repeats"])]
            mem = min(mems, key=lambda r: r["prefill_seconds"])
            dec = min(decs, key=lambda r: r["decode"][0]["seconds"])
            rows.append({"loops": t, "preset": preset, "context": m["loops_context"],
                         "prefill_runs": [r["prefill_seconds"] for r in mems],
                         "decode_runs": [r["decode"][0]["seconds"] for r in decs],
                         "prefill_seconds": mem["prefill_seconds"], "kv_bytes": mem["kv_bytes"],
                         "self_state_bytes": mem["self_state_bytes"], "peak_rss_mb": mem["peak_rss_mb"],
                         "rss_after_load_mb": mem["rss_after_load_mb"], "decode": dec["decode"][0]})
        return {"model_size": m["size"], "rows": rows}

    # ---- figure 6: serving, disaggregated vs colocated ---------------------------------------------
    def fig6(self):
        s = self.mode["serve"]
        for b in ["router/yoco-router", "prefill_service/yoco-prefill", "decode_service/yoco-decode",
                  "tools/yoco-cli"]:
            self.need(os.path.join(self.args.build_dir, b))
        out = os.path.join(self.models, "serve.jsonl")
        env = dict(os.environ, SERVE_BENCH_JSON=out, YOCO_BUILD_DIR=os.path.abspath(self.args.build_dir))
        cmd = [os.path.join(ROOT, "bench", "serve_bench.sh"), str(s["requests"]), str(s["prompt"]),
               str(s["max_tokens"]), *map(str, s["rates"])]
        log(" ".join(cmd))
        p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise SystemExit("bench/paper: serve_bench.sh failed (exit %d):\n%s" % (p.returncode, p.stderr[-4000:]))
        with open(out) as f:
            rows = [json.loads(l) for l in f if l.strip()]
        return {"model": "models/kjv-yoco", "workers": "router + 1 prefill + 1 decode, 1 thread each", **s,
                "rows": rows}

    # ---- figure 7: the MoE next to a dense model of the same active size ------------------------------
    def fig7(self):
        m, rows = self.mode, []
        for label, preset in zip(("MoE", "dense, same active size"), m["moe"]):
            d = self.model(preset, [])
            r = run_json([self.bench, "--model", d, *self.threads, "--json", "--prefill-lens",
                          ",".join(map(str, m["moe_lens"])), "--repeats", "2", "--decode-batches",
                          ",".join(map(str, m["moe_batches"])), "--decode-context", str(m["moe_ctx"]),
                          "--decode-steps", str(m["moe_steps"])])[0]
            rows.append({"label": label, "preset": preset, "config": r["config"], "weight_bytes": r["weight_bytes"],
                         "kv_bytes_per_token": r["kv_bytes_per_token_f32"], "prefill": r["prefill"],
                         "decode": r["decode"]})
        return {"rows": rows}

    # ---- the CUDA engine: figures 1, 3 (one compare run) and 5 ---------------------------------------
    def cuda_compare(self):
        c = CUDA_MODES["quick" if self.args.quick else "full"]
        b = self.need(os.path.join(self.args.build_dir, "bench", "cuda_engine_bench"))
        rows = run_json([b, "--compare-prefill", c["pair"], "--compare-lens", ",".join(map(str, c["lens"])), "--json"])
        return {"pair": c["pair"], "rows": rows}

    def cuda_fig5(self):
        c = CUDA_MODES["quick" if self.args.quick else "full"]
        b = self.need(os.path.join(self.args.build_dir, "bench", "cuda_engine_bench"))
        rows = []
        for t in c["loops"]:
            r = run_json([b, "--preset", c["loops_preset"], "--loops", str(t), "--prefill-lens",
                          str(c["loops_context"]),
                          "--decode-batches", "8", "--decode-contexts", str(c["loops_context"]), "--repeats", "1",
                          "--json"])
            rows.append({"loops": t, "preset": c["loops_preset"], "lines": r})
        return {"rows": rows}


def run_json_or_none(cmd):
    log(" ".join(cmd))
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit("bench/paper: %s failed (exit %d):\n%s" % (cmd[0], p.returncode, p.stderr[-4000:]))


def approx_params(c):
    """Parameter count of a config (embedding included), for figure 2's x axis."""
    d, h, v, layers = c["dim"], c["hidden_dim"], c["vocab_size"], c["n_layers"]
    hd = d // c["n_attn_heads"]
    kv = c["n_attn_kv_heads"] * hd
    ls = c.get("n_self_layers", layers // 2)
    self_mix = (3 if c.get("sliding_window") else 4) * d * d + d * d
    cross = ((d * d + d * d + 3 * d * h) * (layers - ls) + (self_mix + 3 * d * h) * ls + 2 * d * kv)
    return cross + v * d * (1 if c.get("tie_embeddings") else 2)


FIGURES = {"1": ("fig1_memory", "fig1"), "2": ("fig2_kv_per_token", "fig2"), "3": ("fig3_prefill", "fig3"),
           "4": ("fig4_throughput", "fig4"), "5": ("fig5_yocou_loops", "fig5"), "6": ("fig6_serving", "fig6"),
           "7": ("fig7_moe", "fig7")}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_true", help="small sizes, a few minutes (CI: correctness only)")
    g.add_argument("--full", action="store_true", help="the figures of bench/paper/README.md (default)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "paper"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--figures", default=None, help="comma list of 1..7 (default: all the device can do)")
    args = ap.parse_args()
    args.build_dir = os.path.abspath(args.build_dir)
    default_figs = "1,2,3,4,5,6,7" if args.device == "cpu" else "1,3,5"
    figs = (args.figures or default_figs).split(",")
    for f in figs:
        if f not in FIGURES:
            raise SystemExit("bench/paper: --figures: unknown figure %r (1..7)" % f)
        if args.device == "cuda" and f not in ("1", "3", "5"):
            raise SystemExit("bench/paper: --device cuda runs figures 1, 3 and 5 only (not %s)" % f)
    os.makedirs(args.out, exist_ok=True)
    r = Runner(args)
    meta = {"command": " ".join([os.path.relpath(os.path.join(ROOT, "bench/paper/run.sh"), ROOT)] + sys.argv[1:]),
            "mode": "quick" if args.quick else "full", "device": args.device, "threads": args.threads,
            "git_commit": sh(["git", "rev-parse", "HEAD"]),
            "git_dirty": bool(sh(["git", "status", "--porcelain", "--untracked-files=no"])),
            "machine": machine_info(args)}
    try:
        cuda_compare = None
        for f in figs:
            name, method = FIGURES[f]
            t0 = time.time()
            started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            if args.device == "cuda":
                if f in ("1", "3"):
                    cuda_compare = cuda_compare or r.cuda_compare()
                    data = cuda_compare
                else:
                    data = r.cuda_fig5()
            else:
                data = getattr(r, method)()
            doc = {"figure": int(f), "name": name, **meta, "started_utc": started,
                   "seconds": round(time.time() - t0, 1), "load_avg_end": list(os.getloadavg()), "data": data}
            suffix = "" if args.device == "cpu" else "_cuda"
            path = os.path.join(args.out, name + suffix + ".json")
            with open(path, "w") as out:
                json.dump(doc, out, indent=1)
                out.write("\n")
            log("wrote %s (%.0f s)" % (path, doc["seconds"]))
    finally:
        shutil.rmtree(r.models, ignore_errors=True)


if __name__ == "__main__":
    main()
