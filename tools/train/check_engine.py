#!/usr/bin/env python3
"""Compare the C++ engine with the training script's evaluation, and sample from it.

    python3 tools/train/check_engine.py score --model models/kjv-yoco [--cli build/tools/yoco-cli] \
        [--windows all|N] [--threads 2] [--rtol 1e-3]
    python3 tools/train/check_engine.py generate --model models/kjv-yoco \
        --prompt "In the beginning God created" [--max-tokens 48] [generate flags...]

score: runs `yoco-cli score --json` on the windows stored in DIR/eval.json (written by
train_yoco.py export/eval) and compares each window's sum of log-probs, and the resulting
perplexity, with the script's float64 values; exit 1 if any relative difference exceeds --rtol.
generate: tokenizes the prompt with DIR/tokenizer.json, runs `yoco-cli generate --json` (greedy
unless sampling flags are given) and decodes the ids with the tokenizers package.
"""
import argparse
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_CLI = os.path.join(ROOT, "build", "tools", "yoco-cli")


def cli_json(cmd):
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        # e.g. an engine that predates a params.json key the model uses (n_experts: MoE)
        raise SystemExit(f"{os.path.basename(cmd[0])} {cmd[1]} failed (exit {res.returncode}): {res.stderr.strip()}")
    return json.loads(res.stdout)


def cmd_score(args):
    with open(os.path.join(args.model, "eval.json")) as f:
        ev = json.load(f)
    wins = ev["windows"] if args.windows == "all" else ev["windows"][: int(args.windows)]
    worst, tot_e, tot_s, cnt = 0.0, 0.0, 0.0, 0
    for w in wins:
        out = cli_json([args.cli, "score", "--model", args.model, "--json", "--threads", str(args.threads),
                        "--tokens", ",".join(map(str, w["tokens"]))])
        n = len(out["token_logprobs"])
        if n != w["count"]:
            raise SystemExit(f"window {w['index']}: engine scored {n} tokens, script {w['count']}")
        rel = abs(out["sum_logprob"] - w["sum_logprob"]) / abs(w["sum_logprob"])
        worst = max(worst, rel)
        tot_e += out["sum_logprob"]
        tot_s += w["sum_logprob"]
        cnt += n
        if args.verbose or w["index"] < 4:
            print(f"window {w['index']:3d}: {n + 1} tokens  engine {out['sum_logprob']:.6f}  "
                  f"script {w['sum_logprob']:.6f}  rel diff {rel:.2e}")
    ppl_e, ppl_s = math.exp(-tot_e / cnt), math.exp(-tot_s / cnt)
    rel_ppl = abs(ppl_e - ppl_s) / ppl_s
    summary = {"windows": len(wins), "predicted_tokens": cnt, "engine_perplexity": ppl_e,
               "script_perplexity": ppl_s, "perplexity_rel_diff": rel_ppl,
               "worst_window_sum_logprob_rel_diff": worst, "rtol": args.rtol}
    if len(wins) == len(ev["windows"]):
        summary["script_perplexity_eval_json"] = ev["perplexity"]
    print(json.dumps(summary, indent=1))
    ok = worst <= args.rtol and rel_ppl <= args.rtol
    print("OK" if ok else "FAIL: engine and script disagree")
    return 0 if ok else 1


def cmd_generate(args, extra):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    ids = tok.encode(args.prompt).ids
    out = cli_json([args.cli, "generate", "--model", args.model, "--json", "--threads", str(args.threads),
                    "--tokens", ",".join(map(str, ids)), "--max-tokens", str(args.max_tokens)] + extra)
    gen = out["tokens"]
    print(json.dumps({"prompt_ids": ids, "generated_ids": gen, "finish_reason": out["finish_reason"]}))
    print("---")
    print(args.prompt + tok.decode(gen))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score")
    g = sub.add_parser("generate")
    for p in (s, g):
        p.add_argument("--model", required=True)
        p.add_argument("--cli", default=DEFAULT_CLI)
        p.add_argument("--threads", type=int, default=2)
    s.add_argument("--windows", default="all", help="'all' or the first N windows")
    s.add_argument("--rtol", type=float, default=1e-3)
    s.add_argument("--verbose", action="store_true")
    g.add_argument("--prompt", default="In the beginning God created")
    g.add_argument("--max-tokens", type=int, default=48)
    args, extra = ap.parse_known_args()
    if args.cmd == "score":
        if extra:
            ap.error(f"unknown arguments {extra}")
        return cmd_score(args)
    return cmd_generate(args, extra)


if __name__ == "__main__":
    sys.exit(main())
