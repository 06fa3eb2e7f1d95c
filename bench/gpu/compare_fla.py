#!/usr/bin/env python3
"""Joins cuda_ops_bench's JSON lines (impl "yoco") with fla_compare.py's (fla, SDPA, flex) into
markdown tables: per op and shape, our ms and TFLOP/s, each baseline's ms with our speed-up over
it (baseline ms / our ms: above 1 means ours is faster), and the speed-up over the fastest baseline.

  python3 bench/gpu/compare_fla.py $OUT/cuda_ops_bench.txt $OUT/fla_compare.txt > $OUT/fla_table.md

Any line of the inputs that holds a JSON object with "op" and "ms" (or "error") counts; the rest
(human-readable output, checks) is skipped. Standard library only.
"""
import json
import sys

GOALS = {"retention_prefill": 1.5}  # issue: gated retention prefill >= 1.5x fla's chunked kernels


def parse(lines):
    """The benchmark records in `lines`: dicts with "op" and either "ms" or "error"."""
    out = []
    for line in lines:
        i = line.find("{")
        if i < 0:
            continue
        try:
            rec = json.loads(line[i:])
        except ValueError:
            continue
        if isinstance(rec, dict) and "op" in rec and ("ms" in rec or "error" in rec):
            out.append(rec)
    return out


def group_key(r):
    """The shape apart from n: a table per group."""
    return (r["op"], r.get("batch", 1), r.get("heads"), r.get("head_dim"), r.get("window"))


def label(r):
    return "%s %s" % (r["impl"], r.get("dtype", "")) if r.get("dtype") else r["impl"]


def fmt_ms(ms):
    return "%.3f" % ms if ms < 100 else "%.1f" % ms


def tables(records):
    groups = {}
    for r in records:
        if r.get("n") is None or r.get("heads") is None:
            continue
        groups.setdefault(group_key(r), []).append(r)
    md = []
    for key in sorted(groups, key=lambda k: tuple(str(x) for x in k)):
        op, batch, heads, hd, window = key
        rows = groups[key]
        ours = {r["n"]: r for r in rows if r["impl"] == "yoco"}
        base_labels = []
        for r in rows:
            if r["impl"] != "yoco" and label(r) not in base_labels:
                base_labels.append(label(r))
        base = {(label(r), r["n"]): r for r in rows if r["impl"] != "yoco"}
        ours_dtype = next((r.get("dtype") for r in ours.values() if r.get("dtype")), "")
        title = "%s: batch %s, %s heads x hd %s" % (op, batch, heads, hd)
        if window is not None:
            title += ", window %s" % window
        md.append("### " + title + (" (ours: %s)" % ours_dtype if ours_dtype else ""))
        md.append("")
        head = ["n", "ours ms", "ours TFLOP/s"] + ["%s ms (ours x)" % b for b in base_labels] + ["fastest baseline", "ours vs fastest"]
        md.append("| " + " | ".join(head) + " |")
        md.append("|" + "|".join(["---:"] * 3 + ["---:"] * len(base_labels) + ["---", "---:"]) + "|")
        goal, met, counted = GOALS.get(op), 0, 0
        for n in sorted({r["n"] for r in rows}):
            o = ours.get(n)
            o_ms = o.get("ms") if o else None
            cells = [str(n), fmt_ms(o_ms) if o_ms else ("error" if o else "-"),
                     "%.1f" % o["tflops"] if o and o.get("tflops") is not None else "-"]
            best = None
            for b in base_labels:
                r = base.get((b, n))
                if r is None:
                    cells.append("-")
                elif "ms" not in r:
                    cells.append("error")
                else:
                    cells.append(fmt_ms(r["ms"]) + (" (%.2fx)" % (r["ms"] / o_ms) if o_ms else ""))
                    if best is None or r["ms"] < best[1]:
                        best = (b, r["ms"])
            if best and o_ms:
                cells += [best[0], "%.2fx" % (best[1] / o_ms)]
                counted += 1
                met += goal is not None and best[1] / o_ms >= goal
            else:
                cells += [best[0] if best else "-", "-"]
            md.append("| " + " | ".join(cells) + " |")
        md.append("")
        if goal is not None and counted:
            md.append("Goal (ours >= %.1fx the fastest baseline): met at %d of %d lengths." % (goal, met, counted))
            md.append("")
    return "\n".join(md)


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    lines = []
    for path in argv[1:]:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines += f.read().splitlines()
    records = parse(lines)
    if not records:
        print("compare_fla: no benchmark lines in %s" % ", ".join(argv[1:]), file=sys.stderr)
        return 1
    print(tables(records))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
