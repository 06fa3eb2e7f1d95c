#!/usr/bin/env python3
"""The table of bench/peers/decode_rounds.sh from its JSON lines: per ISA and context, each engine's
median tokens/s (min–max over the rounds), and ours / llama.cpp as the median of the per-round
ratios, since the engines of one round ran seconds apart and the machine's speed drifts between
rounds (bench/README.md, "The peer benchmark")."""
import argparse
import json
import statistics
import sys

ENGINES = ("llama.cpp F32", "ours, transformer, fp32", "ours, yoco, fp32", "ours, transformer, fp32, bf16 K/V",
           "ours, yoco, fp32, bf16 K/V")
NAMES = ("llama.cpp F32", "ours, Transformer, fp32", "ours, YOCO, fp32", "ours, Transformer, fp32, bf16 K/V",
         "ours, YOCO, fp32, bf16 K/V")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("jsonl")
    ap.add_argument("--context", type=int, default=2048)
    a = ap.parse_args()
    rows, kv = [], set()
    with open(a.jsonl) as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
                rows.append((r["isa"], int(r["round"]), r["engine"], int(r["context"]), float(r["tokens_per_s"])))
                if "kv_dtype" in r:
                    kv.add(r["kv_dtype"])
            except (ValueError, KeyError, TypeError) as e:
                sys.exit("rounds_table.py: %s line %d: %s" % (a.jsonl, n, e))
    if not rows:
        sys.exit("rounds_table.py: %s has no runs" % a.jsonl)
    present = [k for k, e in enumerate(ENGINES) if any(r[2] == e for r in rows)]
    engines = [ENGINES[k] for k in present]
    names = [NAMES[k] for k in present]
    for isa in sorted({r[0] for r in rows}):
        rounds = sorted({r[1] for r in rows if r[0] == isa})
        print("\n%s, decode at batch 1, our K/V rows %s, tokens/s: median of %d rounds (min–max); ratios: median of "
              "the per-round ratios (min–max)\n" % (isa, "/".join(sorted(kv)) or "f32", len(rounds)))
        print("| context | " + " | ".join(names) + " | " + " | ".join(n[6:] + " / llama" for n in names[1:]) + " |")
        print("|---|" + "---:|" * (2 * len(names) - 1))
        for c in (0, a.context):
            val = {(e, rd): v for (i, rd, e, cc, v) in rows if i == isa and cc == c}
            cells, ratios = [], []
            for e in engines:
                v = [val[(e, rd)] for rd in rounds if (e, rd) in val]
                cells.append("%.1f (%.1f–%.1f)" % (statistics.median(v), min(v), max(v)) if v else "–")
            for e in engines[1:]:
                r = [val[(e, rd)] / val[(ENGINES[0], rd)] for rd in rounds if (e, rd) in val and (ENGINES[0], rd) in val]
                ratios.append("%.2f× (%.2f–%.2f)" % (statistics.median(r), min(r), max(r)) if r else "–")
            print("| %s | %s | %s |" % ("empty" if c == 0 else "{:,}".format(c), " | ".join(cells), " | ".join(ratios)))

if __name__ == "__main__":
    main()
