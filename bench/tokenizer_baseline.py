#!/usr/bin/env python3
"""Encoding speed of Hugging Face `tokenizers` and `tiktoken` next to ours (bench/tokenizer_bench).

  build/.venv/bin/python3 bench/tokenizer_baseline.py --data build/tokenizer_testdata \\
      [--bench build/bench/tokenizer_bench] [--repeats 3]

--data is what tests/tokenizer/make_reference.py writes (ctest -R tokenizer_reference_data):
corpus.jsonl plus the hf/, hf_qwen/ (NFC normalizer, Qwen2's regex) and tiktoken/ tokenizers
trained on it. Every figure is one thread:
`tokenizers` is timed with Tokenizer.encode per document (encode_batch would spread over all
cores with rayon; it is shown too, with RAYON_NUM_THREADS=1 so it stays one thread), tiktoken
with encode_ordinary per document. "cold" = first pass over the corpus on a fresh tokenizer,
"warm" = the second pass (both libraries memoise words/pieces). Speed is never asserted.
"""
import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers starts its thread pool


def best(fn, repeats):
    out = None
    for _ in range(repeats):
        t = fn()
        out = t if out is None else tuple(min(a, b) for a, b in zip(out, t))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--bench", help="path of tokenizer_bench, to print ours side by side")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import tiktoken
    import tokenizers
    from tokenizers import Tokenizer

    with open(os.path.join(args.data, "corpus.jsonl"), encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    rows = []

    def hf_encode(hf_path):
        tok = Tokenizer.from_file(hf_path)
        tok.encode_special_tokens = True
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t, add_special_tokens=False)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        for t in texts:
            tok.encode(t, add_special_tokens=False)
        return cold, time.perf_counter() - t0

    def hf_batch(hf_path):
        tok = Tokenizer.from_file(hf_path)
        tok.encode_special_tokens = True
        t0 = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        tok.encode_batch(texts, add_special_tokens=False)
        return cold, time.perf_counter() - t0

    hf_names = [n for n in ("hf", "hf_qwen") if os.path.exists(os.path.join(args.data, n, "tokenizer.json"))]
    for name in hf_names:
        hf_path = os.path.join(args.data, name, "tokenizer.json")
        cold, warm = best(lambda: hf_encode(hf_path), args.repeats)
        rows.append((f"tokenizers {tokenizers.__version__} encode ({name}/)", mb / cold, mb / warm))
        cold, warm = best(lambda: hf_batch(hf_path), args.repeats)
        rows.append((f"tokenizers encode_batch, RAYON_NUM_THREADS={os.environ['RAYON_NUM_THREADS']} ({name}/)",
                     mb / cold, mb / warm))

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "tokenizer"))
    import make_reference
    ranks = {}
    import base64
    with open(os.path.join(args.data, "tiktoken", "yoco.tiktoken")) as f:
        for line in f:
            if line.strip():
                tok_b64, rank = line.split()
                ranks[base64.b64decode(tok_b64)] = int(rank)
    with open(os.path.join(args.data, "tiktoken", "tokenizer_config.json")) as f:
        specials = json.load(f)["special_tokens"]

    def tt_encode():
        enc = tiktoken.Encoding(name="bench", pat_str=make_reference.CL100K_PATTERN, mergeable_ranks=ranks,
                                special_tokens=specials)
        t0 = time.perf_counter()
        for t in texts:
            enc.encode_ordinary(t)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        for t in texts:
            enc.encode_ordinary(t)
        return cold, time.perf_counter() - t0

    cold, warm = best(tt_encode, args.repeats)
    rows.append((f"tiktoken {tiktoken.__version__} encode_ordinary (tiktoken/)", mb / cold, mb / warm))

    if args.bench:
        for name in hf_names + ["tiktoken"]:
            out = subprocess.run([args.bench, "--tokenizer", os.path.join(args.data, name), "--corpus",
                                  os.path.join(args.data, "corpus.jsonl"), "--repeats", str(args.repeats), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out)
            rows.append((f"yoco tokenizer_bench ({name}/)", r["encode_cold_mb_s"], r["encode_warm_mb_s"]))

    print(f"corpus: {len(texts)} documents, {mb:.2f} MB; one thread; best of {args.repeats}")
    print(f"{'encoder':64s} {'cold MB/s':>10s} {'warm MB/s':>10s}")
    for name, c, w in rows:
        print(f"{name:64s} {c:10.2f} {w:10.2f}")


if __name__ == "__main__":
    main()
