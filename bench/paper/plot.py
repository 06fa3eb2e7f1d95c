#!/usr/bin/python3
"""Draws bench/paper's figures (PNG) from the raw JSON that bench/paper/run.sh wrote, nothing else.

  /usr/bin/python3 bench/paper/plot.py [--results bench/results/paper] [--out bench/figures]

Needs Debian's python3-matplotlib. The paper's points (grey, marked "paper") are the numbers the
YOCO paper states in its text next to each figure (bench/paper/README.md cites them); ours are
drawn in colour. A figure whose JSON is missing is skipped with a note; a malformed one fails.
"""
import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

GIB = 1 << 30
COLORS = {"YOCO-gRet": "tab:blue", "YOCO-SWA": "tab:green", "YOCO-U": "tab:purple", "Transformer": "tab:red",
          "disaggregated": "tab:blue", "colocated": "tab:orange"}
PAPER = dict(color="0.35", marker="*", markersize=13, linestyle="none")

# Reported in the YOCO paper (arXiv 2405.05254v2, Sec. 4.4), 3B models on one H100-80GB:
PAPER_MEMORY_1M = {"YOCO-gRet": 12.4, "Transformer": 12.4 * 9.4}  # GB, Fig. 6a: "12.4GB", "9.4x"
PAPER_MEMORY_RATIO = {32768: 2.0, 1 << 20: 9.4}                     # Fig. 6a: "about 2x" at 32K, 9.4x at 1M
PAPER_PREFILL = {"Transformer": {1 << 19: 180.0, 1 << 20: 300.0},   # Fig. 8: "about 180 s and 300 s"
                 "YOCO-gRet": {1 << 19: 6.0, 1 << 20: 300.0 / 71.8}}  # "< 6 s" at 512K; 71.8x at 1M
PAPER_PREFILL_RATIO = {32768: 2.87, 1 << 20: 71.8}
PAPER_THROUGHPUT = {"Transformer": {1 << 19: 4.5}, "YOCO-gRet": {1 << 19: 43.1}}  # Fig. 9, tokens/s
PAPER_KV_65B = {"YOCO": GIB / (128 * 1024), "Transformer": GIB / 1600}  # Fig. 7 text: 128K vs 1.6K tokens per GB


def load(results, name):
    path = os.path.join(results, name + ".json")
    if not os.path.exists(path):
        print("plot.py: %s missing, figure skipped" % path, file=sys.stderr)
        return None
    with open(path) as f:
        return json.load(f)


def footer(fig, doc):
    m = doc["machine"]
    where = m.get("gpu") or "%s, %s CPUs, %.0f GiB" % (m.get("cpu", "?"), m.get("cpus", "?"), m.get("mem_gib", 0))
    fig.text(0.01, 0.005, "ours: %s, %s threads, commit %s%s; %s run; load avg %.1f" %
             (where, doc["threads"], doc["git_commit"][:8], "+" if doc.get("git_dirty") else "", doc["mode"],
              doc["machine"]["load_avg_start"][0]), fontsize=7, color="0.4")


def tokens_axis(ax):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
        lambda x, _: "%dM" % (x / 2**20) if x >= 2**20 else "%dK" % (x / 1024) if x >= 1024 else "%d" % x))
    ax.set_xlabel("context length (tokens)")
    ax.grid(True, which="both", alpha=0.3)


def save(fig, out, name):
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(out, name + ".png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("plot.py: wrote " + path)


def series(rows, key, x, y, skip=lambda r: False):
    out = {}
    for r in rows:
        if "skipped" in r or skip(r):
            continue
        out.setdefault(r[key], []).append((r[x], r[y] if not callable(y) else y(r)))
    return out


def fig1(doc, out):
    rows = doc["data"]["rows"]
    fig, axs = plt.subplots(1, 3, figsize=(16, 5))
    kv = series(rows, "arch", "context", lambda r: (r["kv_bytes"] + r["self_state_bytes"]) / GIB)
    rss = series(rows, "arch", "context", lambda r: r["peak_rss_mb"] / 1024)
    for arch, pts in kv.items():
        axs[0].plot(*zip(*pts), "o-", color=COLORS[arch], label=arch)
    for arch, pts in rss.items():
        axs[1].plot(*zip(*pts), "o-", color=COLORS[arch], label=arch)
    for arch, gb in PAPER_MEMORY_1M.items():
        axs[1].plot([1 << 20], [gb * 1e9 / GIB], **PAPER, label="paper %s 3B, 1M (Fig. 6a)" % arch)
    base = {"kv": dict(kv.get("YOCO-gRet", [])), "rss": dict(rss.get("YOCO-gRet", []))}
    for what, data, style in (("KV + state", kv, "o-"), ("peak RSS", rss, "s--")):
        tf = dict(data.get("Transformer", []))
        ref = base["kv" if what == "KV + state" else "rss"]
        pts = sorted((n, tf[n] / ref[n]) for n in tf if n in ref and ref[n] > 0)
        if pts:
            axs[2].plot(*zip(*pts), style, color="tab:red", label="Transformer / YOCO-gRet, " + what)
            for n, v in pts:
                axs[2].annotate("%.1fx" % v, (n, v), textcoords="offset points", xytext=(0, 6), fontsize=7,
                                ha="center")
    axs[2].plot(list(PAPER_MEMORY_RATIO), list(PAPER_MEMORY_RATIO.values()), **PAPER,
                label="paper, total memory (Fig. 6a)")
    for ax, title in zip(axs, ("KV cache + self-decoder state (pool accounting)",
                               "process peak RSS after loading (weights + pool + activations)",
                               "ratio Transformer / YOCO")):
        tokens_axis(ax)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    axs[0].set_yscale("log")
    axs[1].set_yscale("log")
    axs[0].set_ylabel("GiB")
    axs[1].set_ylabel("GiB")
    axs[2].set_ylabel("x")
    fig.suptitle("Memory vs context length (%s models, CPU engine, fp32 K/V; prefill of the first %d tokens)" %
                 (doc["data"]["model_size"], doc["data"]["prefill_tokens_per_run"]))
    footer(fig, doc)
    save(fig, out, "fig1_memory")


def fig2(doc, out):
    rows = doc["data"]["rows"]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for src, mk in (("paper Table 7 config (computed)", "o-"), ("preset (computed)", "D")):
        rs = sorted((r for r in rows if r["source"] == src), key=lambda r: r["params"])
        if not rs:
            continue
        p = [r["params"] for r in rs]
        ax.plot(p, [r["transformer_kv_bytes_per_token"] / 1024 for r in rs], mk, color="tab:red",
                label="Transformer, " + src, fillstyle="none" if src.startswith("preset") else "full")
        ax.plot(p, [r["yoco_kv_bytes_per_token"] / 1024 for r in rs], mk, color="tab:blue",
                label="YOCO, " + src, fillstyle="none" if src.startswith("preset") else "full")
        for r in rs:
            ax.annotate("%s (%.0fx)" % (r["name"], r["transformer_kv_bytes_per_token"] / r["yoco_kv_bytes_per_token"]),
                        (r["params"], r["transformer_kv_bytes_per_token"] / 1024), fontsize=6,
                        textcoords="offset points", xytext=(3, 4))
    ax.plot([65e9], [PAPER_KV_65B["Transformer"] / 1024], **PAPER, label="paper, 65B (Fig. 7 text, bf16)")
    ax.plot([65e9], [PAPER_KV_65B["YOCO"] / 1024], **PAPER)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylabel("KV cache per token (KiB)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title("KV cache per token vs model size (computed from configs; %s)" % doc["data"]["dtype"].split(" (")[0],
                 fontsize=10)
    footer(fig, doc)
    save(fig, out, "fig2_kv_per_token")


def slope(pts):
    """Least-squares slope of log(t) on log(n): ≈1 linear, ≈2 quadratic."""
    if len(pts) < 2:
        return float("nan")
    xs = [math.log(n) for n, _ in pts]
    ys = [math.log(t) for _, t in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def fig3(doc, out):
    data = series(doc["data"]["rows"], "arch", "tokens", "seconds")
    fig, axs = plt.subplots(1, 2, figsize=(13, 5))
    for arch, pts in data.items():
        pts.sort()
        tail = [p for p in pts if p[0] >= 4096] or pts  # the slope where the per-token costs dominate less
        axs[0].plot(*zip(*pts), "o-", color=COLORS[arch],
                    label="%s (slope %.2f over all, %.2f from 4K)" % (arch, slope(pts), slope(tail)))
    for arch, pts in PAPER_PREFILL.items():
        axs[0].plot(list(pts), list(pts.values()), **PAPER)
        axs[0].annotate("paper %s 3B H100" % arch, (max(pts), pts[max(pts)]), fontsize=7, textcoords="offset points",
                        xytext=(-60, 8))
    tf = dict(data.get("Transformer", []))
    for arch in ("YOCO-gRet", "YOCO-SWA"):
        yo = dict(data.get(arch, []))
        ratio = sorted((n, tf[n] / yo[n]) for n in tf if n in yo)
        if ratio:
            axs[1].plot(*zip(*ratio), "o-", color=COLORS[arch], label="ours: Transformer / " + arch)
            for n, v in ratio:
                axs[1].annotate("%.1fx" % v, (n, v), textcoords="offset points", xytext=(0, 6), fontsize=7,
                                ha="center", color=COLORS[arch])
    axs[1].plot(list(PAPER_PREFILL_RATIO), list(PAPER_PREFILL_RATIO.values()), **PAPER,
                label="paper (Fig. 8: 2.87x at 32K, 71.8x at 1M)")
    for ax in axs:
        tokens_axis(ax)
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    axs[0].set_ylabel("prefill latency (s): prompt + first-token logits")
    axs[1].set_ylabel("speed-up (x)")
    axs[0].set_title("prefill latency, log-log (stars: paper)", fontsize=10)
    axs[1].set_title("YOCO speed-up over the Transformer", fontsize=10)
    fig.suptitle("Prefill latency vs length (%s models, same CPU engine and threads)" % doc["data"]["model_size"])
    footer(fig, doc)
    save(fig, out, "fig3_prefill")


def fig4(doc, out):
    rows = doc["data"]["rows"]
    fig, axs = plt.subplots(1, 2, figsize=(13, 5))
    data = series(rows, "arch", "context", "tokens_per_s", skip=lambda r: r["batch"] == 0)
    for arch, pts in data.items():
        axs[0].plot(*zip(*pts), "o-", color=COLORS[arch], label=arch)
        for r in rows:
            if r["arch"] == arch and r["batch"] > 0:
                axs[0].annotate("B=%d" % r["batch"], (r["context"], r["tokens_per_s"]), fontsize=7,
                                textcoords="offset points", xytext=(0, 6), ha="center")
    for arch, pts in PAPER_THROUGHPUT.items():
        axs[0].plot(list(pts), list(pts.values()), **PAPER)
        axs[0].annotate("paper %s 3B H100" % arch, (max(pts), pts[max(pts)]), fontsize=7, textcoords="offset points",
                        xytext=(-70, 8))
    tf, yo = dict(data.get("Transformer", [])), dict(data.get("YOCO-gRet", []))
    ratio = sorted((n, yo[n] / tf[n]) for n in tf if n in yo and tf[n] > 0)
    if ratio:
        axs[1].plot(*zip(*ratio), "o-", color="tab:blue", label="ours: YOCO-gRet / Transformer")
        for n, v in ratio:
            axs[1].annotate("%.1fx" % v, (n, v), textcoords="offset points", xytext=(0, 6), fontsize=7, ha="center")
    axs[1].plot([1 << 19], [43.1 / 4.5], **PAPER, label="paper (Fig. 9: 9.6x at 512K)")
    for ax in axs:
        tokens_axis(ax)
        ax.set_yscale("log")
        ax.legend(fontsize=7)
    axs[0].set_ylabel("generated tokens/s (prefill included)")
    axs[1].set_ylabel("x")
    d = doc["data"]
    fig.suptitle("Throughput vs context: prompt + %d generated, batch B as large as %d MiB of KV allows (<= %d); "
                 "%s models" % (d["generate"], d["memory_budget_mb"], d["max_batch"], d["model_size"]), fontsize=10)
    footer(fig, doc)
    save(fig, out, "fig4_throughput")


def fig5(doc, out):
    rows = sorted(doc["data"]["rows"], key=lambda r: r["loops"])
    t = [r["loops"] for r in rows]
    fig, axs = plt.subplots(1, 2, figsize=(13, 5))
    p0, d0 = rows[0]["prefill_seconds"], rows[0]["decode"]["seconds"]
    axs[0].plot(t, [r["prefill_seconds"] / p0 for r in rows], "o-", color="tab:purple",
                label="prefill of %d tokens (self-decoder only)" % rows[0]["context"])
    axs[0].plot(t, [r["decode"]["seconds"] / d0 for r in rows], "s-", color="tab:orange",
                label="decode step (B=%d, context %d)" % (rows[0]["decode"]["batch"], rows[0]["decode"]["context"]))
    axs[0].plot(t, [(x + 1) / 2 for x in t], **PAPER, label="paper: FLOPs (T+1)/2 (YOCO-U Sec. 4: T=3 is 2x)")
    axs[0].plot(t, t, ":", color="0.5", label="T (self-decoder work alone)")
    axs[0].set_ylabel("time relative to T=1")
    axs[1].plot(t, [r["kv_bytes"] / 2**20 for r in rows], "o-", color="tab:blue", label="global KV (pool accounting)")
    axs[1].plot(t, [r["self_state_bytes"] / 2**20 for r in rows], "s-", color="tab:green",
                label="self-decoder state (SWA windows)")
    axs[1].plot(t, [r["peak_rss_mb"] for r in rows], "^-", color="tab:red", label="peak RSS (MiB)")
    axs[1].set_ylabel("MiB")
    axs[1].set_yscale("log")
    for ax in axs:
        ax.set_xlabel("loops T")
        ax.set_xticks(t)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    axs[0].set_title("time vs loops", fontsize=10)
    axs[1].set_title("memory vs loops (one sequence, %d tokens)" % rows[0]["context"], fontsize=10)
    fig.suptitle("YOCO-U: cost of loops at fixed parameters (%s-swa sizes, NoPE cross-decoder)" %
                 doc["data"]["model_size"])
    footer(fig, doc)
    save(fig, out, "fig5_yocou_loops")


def fig6(doc, out):
    rows = doc["data"]["rows"]
    fig, axs = plt.subplots(1, 2, figsize=(13, 5))
    for setup in ("disaggregated", "colocated"):
        rs = sorted((r for r in rows if r["setup"] == setup), key=lambda r: r["rate"])
        if not rs:
            continue
        rates = [r["rate"] for r in rs]
        for ax, key in zip(axs, ("ttft_ms", "itl_ms")):
            ax.plot(rates, [r["result"][key]["p50"] for r in rs], "o-", color=COLORS[setup], label=setup + " p50")
            ax.plot(rates, [r["result"][key]["p99"] for r in rs], "s--", color=COLORS[setup], label=setup + " p99")
    for ax, title in zip(axs, ("time to first token", "inter-token latency")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("offered rate (requests/s, Poisson)")
        ax.set_ylabel("ms")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    d = doc["data"]
    fig.suptitle("Serving (yoco-cli bench): %d requests of %d prompt + %d output tokens, %s, %s" %
                 (d["requests"], d["prompt"], d["max_tokens"], d["model"], d["workers"]), fontsize=10)
    footer(fig, doc)
    save(fig, out, "fig6_serving")


def fig_cuda(results, out):
    """The CUDA engine's runs (run.sh --device cuda): prefill and memory from one compare run, loops."""
    doc = load(results, "fig3_prefill_cuda")
    if doc:
        rows = [r for r in doc["data"]["rows"] if r["ran"]]
        fig, axs = plt.subplots(1, 2, figsize=(13, 5))
        for role, color in (("yoco", "tab:blue"), ("transformer", "tab:red")):
            pts = sorted((r["tokens"], r["seconds"]) for r in rows if r["role"] == role)
            mem = sorted((r["tokens"], (r["weight_bytes"] + r["kv_bytes_per_token"] * r["tokens"]) / GIB)
                         for r in rows if r["role"] == role)
            if pts:
                axs[0].plot(*zip(*pts), "o-", color=color, label="%s (slope %.2f)" % (role, slope(pts)))
                axs[1].plot(*zip(*mem), "o-", color=color, label=role + ": weights + KV (pool accounting)")
        for arch, pts in PAPER_PREFILL.items():
            axs[0].plot(list(pts), list(pts.values()), **PAPER)
        for arch, gb in PAPER_MEMORY_1M.items():
            axs[1].plot([1 << 20], [gb * 1e9 / GIB], **PAPER)
        for ax, yl in zip(axs, ("prefill seconds", "GiB")):
            tokens_axis(ax)
            ax.set_yscale("log")
            ax.set_ylabel(yl)
            ax.legend(fontsize=7)
        fig.suptitle("CUDA engine: %s (stars: paper, 3B on H100)" % doc["data"]["pair"])
        footer(fig, doc)
        save(fig, out, "fig13_cuda")


def fig7(doc, out):
    """The MoE next to the dense model of its active size (issue 27): weights, KV per token, prefill, decode."""
    rows = doc["data"]["rows"]
    colors = ["tab:purple", "tab:gray"]
    fig, axs = plt.subplots(1, 4, figsize=(17, 4.5))
    labels = ["%s\n(%s)" % (r["label"], r["preset"]) for r in rows]
    axs[0].bar(labels, [r["weight_bytes"] / 2**20 for r in rows], color=colors)
    axs[0].set_ylabel("resident weights (MiB)")
    axs[1].bar(labels, [r["kv_bytes_per_token"] for r in rows], color=colors)
    axs[1].set_ylabel("KV bytes per token (fp32)")
    for r, c in zip(rows, colors):
        axs[2].plot([p["tokens"] for p in r["prefill"]], [p["seconds"] for p in r["prefill"]], "o-", color=c,
                    label=r["label"])
        axs[3].plot([d["batch"] for d in r["decode"]], [d["ms_per_step"] for d in r["decode"]], "o-", color=c,
                    label=r["label"])
    axs[2].set_xlabel("prompt tokens")
    axs[2].set_ylabel("prefill seconds (TTFT)")
    axs[3].set_xlabel("decode batch")
    axs[3].set_ylabel("ms per decode step")
    for ax in axs[2:]:
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axs[:2]:
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("mixture of experts vs a dense model of the same active size (same attention, same KV cache)")
    footer(fig, doc)
    save(fig, out, "fig7_moe")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(root, "bench", "results", "paper"))
    ap.add_argument("--out", default=os.path.join(root, "bench", "figures"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, draw in (("fig1_memory", fig1), ("fig2_kv_per_token", fig2), ("fig3_prefill", fig3),
                       ("fig4_throughput", fig4), ("fig5_yocou_loops", fig5), ("fig6_serving", fig6),
                       ("fig7_moe", fig7)):
        doc = load(args.results, name)
        if doc:
            draw(doc, args.out)
    fig_cuda(args.results, args.out)


if __name__ == "__main__":
    main()
