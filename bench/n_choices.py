#!/usr/bin/env python3
"""The driver of bench/n_choices.sh (issue 30, point 4): through the router's HTTP API, a
/v1/completions request with n = 1, 4, 8 choices and max_tokens 1 on a fresh ~700-word prompt
(fresh per call: no prefix is cached anywhere), the sizes alternated round by round so all see the
same machine load. Wall time of each request; the median per n and its ratio to n = 1."""
import argparse
import json
import random
import statistics
import time
import urllib.request

# Words for the prompts (a fresh random sequence per call; any text the tokenizer reads will do).
WORDS = ("the and of to in that he shall unto for his a lord they be is him not them it with all thou "
         "thy was god which my me said but ye their have will thee from as are when this out were upon "
         "man by you israel king son up there hath then people came had house into her on before one "
         "also day against land men us children did hand at them or went saying an so let come may "
         "over our earth came city name now father great after heart made these days put down way").split()


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--http", required=True, help="the router's HTTP address, host:port")
    ap.add_argument("--ns", default="1,4,8")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--words", type=int, default=700)
    ap.add_argument("--token-ids", type=int, default=0,
                    help="send this many random token ids below --vocab instead of words (a model without a tokenizer)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    base = "http://" + a.http
    with urllib.request.urlopen(base + "/v1/models", timeout=60) as r:
        model = json.loads(r.read())["data"][0]["id"]
    ns = [int(x) for x in a.ns.split(",")]
    times = {n: [] for n in ns}
    for rep in range(a.reps):
        order = ns if rep % 2 == 0 else list(reversed(ns))
        for n in order:
            rng = random.Random("n_choices/%d/%d" % (n, rep))
            if a.token_ids:
                prompt = [rng.randrange(a.vocab) for _ in range(a.token_ids)]
            else:
                prompt = " ".join(rng.choice(WORDS) for _ in range(a.words))
            s, out = post(base + "/v1/completions", {"model": model, "prompt": prompt, "n": n, "max_tokens": 1,
                                                    "temperature": 1.0, "seed": 1})
            assert len(out["choices"]) == n, out
            times[n].append(s)
    rows = []
    one = statistics.median(times[ns[0]])
    for n in ns:
        med = statistics.median(times[n])
        rows.append({"n": n, "seconds": times[n], "median_s": med, "ratio_to_first": med / one})
        print("n %2d  median %8.3f s  ratio to n=%d %6.2f" % (n, med, ns[0], med / one), flush=True)
    json.dump({"model": model, "rows": rows}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
