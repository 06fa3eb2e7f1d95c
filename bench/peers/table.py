#!/usr/bin/env python3
"""The table and plot of bench/peers/peers.sh: llama-bench's and engine_bench's JSON of one machine
into OUT.md (Markdown, naming the CPU and its ISA flags) and OUT.svg (prefill and decode tokens/s).

  table.py RAW_DIR --preset mid-gret --threads 2 --context 2048 --out bench/results/peers/HOST
"""
import argparse
import datetime
import json
import platform
import sys
from pathlib import Path

FLAGS = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_tile"]


def cpu_info():
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name in ("", "unknown CPU", platform.processor()):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, [f for f in FLAGS if f in flags]


def load(path: Path):
    return json.loads(path.read_text()) if path.exists() and path.stat().st_size else None


def llama_rates(rows):
    """{("prefill", n) | ("decode", depth): tokens/s} of one llama-bench JSON."""
    out = {}
    for r in rows or []:
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            out[("prefill", r["n_prompt"])] = r["avg_ts"]
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            out[("decode", r.get("n_depth", 0))] = r["avg_ts"]
    return out


def ours_rates(doc, context):
    out = {}
    if not doc:
        return out
    for r in doc["prefill"]:
        if r["tokens"] > 1:
            out[("prefill", r["tokens"])] = r["tokens_per_s"]
    for r in doc["decode"]:
        if r["batch"] == 1:
            out[("decode", 0 if r["context"] <= 1 else r["context"])] = r["tokens_per_s"]
    return out


def fmt(x):
    return "—" if x is None else (f"{x:.0f}" if x >= 100 else f"{x:.1f}")


def ratio(a, b):
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("raw", type=Path)
    ap.add_argument("--preset", default="mid-gret")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=2048)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()

    name, flags = cpu_info()
    builds = [b for b in ("avx2", "native") if (a.raw / f"llama-{b}-f32.json").exists()]
    lines = [f"### {name}: {', '.join(flags)}", ""]
    lines.append(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {a.threads} threads, "
                 f"preset {a.preset} (the Transformer of its sizes for both engines), tokens/s, one run each "
                 f"(`bench/peers/peers.sh --preset {a.preset} --threads {a.threads} --context {a.context}`).")
    series = {}  # plot: label -> {key: rate}
    for b in builds:
        ll = {dt: llama_rates(load(a.raw / f"llama-{b}-{dt}.json")) for dt in ("f32", "bf16")}
        ours = {(m, dt): ours_rates(load(a.raw / f"ours-{b}-{m}-{dt}.json"), a.context)
                for m in ("transformer", "yoco") for dt in ("fp32", "bf16")}
        meta = (load(a.raw / f"llama-{b}-f32.json") or [{}])[0]
        isa = (load(a.raw / f"ours-{b}-transformer-fp32.json") or {}).get("isa", "?")
        what = ("llama.cpp built AVX2-only; ours with YOCO_CPU_ISA=avx2 (our kernels and oneDNN narrowed to "
                "AVX2: an AVX2-only CPU emulated on this one)" if b == "avx2" and "avx512f" in flags else
                "llama.cpp built AVX2-only; ours native" if b == "avx2" else
                "llama.cpp built -march=native; ours native")
        lines += ["", f"**{b}**: {what}. Our ISA path: `{isa}`; llama.cpp {meta.get('build_commit', '?')}, "
                      f"flash attention {meta.get('flash_attn', '?')}, K/V {meta.get('type_k', '?')}.", ""]
        lines.append("| tokens/s | llama.cpp F32 | llama.cpp BF16 | ours, Transformer, fp32 | ours, Transformer, bf16 "
                     "| ours, YOCO, fp32 | ours, YOCO, bf16 | Transformer fp32 / llama F32 | YOCO fp32 / llama F32 |")
        lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        keys = sorted({k for d in [*ll.values(), *ours.values()] for k in d}, key=lambda k: (k[0] != "prefill", k[1]))
        for k in keys:
            label = f"prefill {k[1]:,}" if k[0] == "prefill" else (
                "decode, batch 1, empty context" if k[1] == 0 else f"decode, batch 1, {k[1]:,} context")
            vals = [ll["f32"].get(k), ll["bf16"].get(k)] + [ours[(m, dt)].get(k) for m in ("transformer", "yoco")
                                                             for dt in ("fp32", "bf16")]
            lines.append(f"| {label} | " + " | ".join(fmt(v) for v in vals) +
                         f" | {ratio(vals[2], vals[0])} | {ratio(vals[4], vals[0])} |")
        for dt, d in ll.items():
            series[f"llama.cpp {dt.upper()} ({b})"] = d
        for (m, dt), d in ours.items():
            series[f"ours {'Transformer' if m == 'transformer' else 'YOCO'} {dt} ({b})"] = d
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    a.out.with_suffix(".svg").write_text(svg(series, f"{name}, {a.threads} threads"))
    print("\n".join(lines))
    print(f"\n(written: {a.out.with_suffix('.md')}, {a.out.with_suffix('.svg')})", file=sys.stderr)
    return 0


def svg(series, title):
    """Two panels: prefill tokens/s against prompt length, decode tokens/s at each context."""
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
              "#bcbd22", "#17becf", "#393b79", "#637939"]
    W, H, pad = 980, 420, 50
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 40 + 18 * len(series)}" '
           f'font-family="sans-serif" font-size="12">', f'<text x="{pad}" y="20" font-size="14">{title}</text>']
    for panel, kind, x0 in (("prefill tokens/s by prompt length", "prefill", pad),
                            ("decode tokens/s (batch 1) by context", "decode", W // 2 + pad // 2)):
        pw, ph, top = W // 2 - pad * 1.5, H - 2 * pad, pad
        xs = sorted({k[1] for d in series.values() for k in d if k[0] == kind})
        ys = [v for d in series.values() for k, v in d.items() if k[0] == kind]
        if not xs or not ys:
            continue
        ymax = max(ys) * 1.1
        out.append(f'<text x="{x0}" y="{top - 8}">{panel}</text>')
        out.append(f'<rect x="{x0}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#888"/>')
        px = lambda i: x0 + (i + 0.5) * pw / len(xs)
        py = lambda v: top + ph - v / ymax * ph
        for i, x in enumerate(xs):
            out.append(f'<text x="{px(i)}" y="{top + ph + 15}" text-anchor="middle">{x:,}</text>')
        for t in range(5):
            v = ymax * t / 4
            out.append(f'<text x="{x0 - 4}" y="{py(v) + 4}" text-anchor="end">{v:.0f}</text>')
        for c, (label, d) in enumerate(series.items()):
            pts = [(px(i), py(d[(kind, x)])) for i, x in enumerate(xs) if (kind, x) in d]
            if not pts:
                continue
            dash = ' stroke-dasharray="5,3"' if "llama" in label else ""
            out.append(f'<polyline fill="none" stroke="{colors[c % len(colors)]}" stroke-width="2"{dash} points="' +
                       " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
            out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colors[c % len(colors)]}"/>' for x, y in pts]
    for c, label in enumerate(series):
        y = H + 30 + 18 * c
        out.append(f'<rect x="{pad}" y="{y - 9}" width="14" height="4" fill="{colors[c % len(colors)]}"/>')
        out.append(f'<text x="{pad + 20}" y="{y - 4}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
