#!/usr/bin/python3
"""yoco-plan: the SLA planner's command line (tools/planner/README.md).

  yoco_plan.py trace     --requests N --rate R [--prompt 128|64:256] [--output 32] [--arrivals poisson|gamma --cv 2]
                         [--documents K --document-tokens T --document-share F] [--seed S] --out FILE.csv
  yoco_plan.py simulate  --profile P.json (--trace FILE.csv | the trace flags) [--prefill N] [--decode M]
                         [--set KEY=VALUE ...] [--timeline FILE.json] [--json]
  yoco_plan.py plan      --profile P.json (--trace FILE.csv | the trace flags) --ttft-p90 S --itl-p90 S
                         [--max-prefill N] [--max-decode M] [--set KEY=VALUE ...] [--json]
  yoco_plan.py autoscale --profile P.json --metrics-url URL --ttft-p90 S --itl-p90 S [--interval 30]
                         [--horizon 60] [--min-replicas 1] [--max-replicas 16] [--down-after 3] [--dry-run]

Bad profiles, traces and flags end with exit status 2 and one line naming the file, line and field.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from errors import PlanError  # noqa: E402
from profiles import load_profile  # noqa: E402
from search import Search, Slo, format_plan  # noqa: E402
from simulator import Cluster, simulate  # noqa: E402
from traces import load_trace, parse_range, synthetic, write_trace  # noqa: E402


def trace_flags(p, required):
    p.add_argument("--trace", help="a trace file (CSV: TIMESTAMP,ContextTokens,GeneratedTokens[,DocumentId,DocumentTokens])")
    p.add_argument("--requests", type=int, required=required)
    p.add_argument("--rate", type=float, required=required, help="requests per second")
    p.add_argument("--prompt", default="128", help="prompt tokens: N or LO:HI (uniform)")
    p.add_argument("--output", default="32", help="generated tokens: N or LO:HI")
    p.add_argument("--arrivals", default="poisson", choices=["poisson", "gamma"])
    p.add_argument("--cv", type=float, default=1.0, help="gamma arrivals: coefficient of variation of the gaps")
    p.add_argument("--documents", type=int, default=0, help="shared documents")
    p.add_argument("--document-tokens", type=int, default=0)
    p.add_argument("--document-share", type=float, default=0.0, help="fraction of requests that use a document")
    p.add_argument("--seed", type=int, default=0)


def get_trace(a):
    if getattr(a, "trace", None):
        return load_trace(a.trace)
    if a.requests is None or a.rate is None:
        raise PlanError("--trace FILE or --requests and --rate: needed")
    if a.documents and a.document_tokens < 1:
        raise PlanError("--document-tokens: must be >= 1 with --documents")
    return synthetic(a.requests, a.rate, parse_range(a.prompt, "--prompt"), parse_range(a.output, "--output"),
                     a.arrivals, a.cv, a.seed, a.documents, a.document_tokens, a.document_share)


def cluster_from(a, profile):
    c = Cluster()
    if profile.memory_bytes > 0:  # a device profile sizes the pool
        c.set("kv_blocks", max(1, int(profile.memory_bytes // (profile.kv_bytes_per_token * c.block_size))))
    for kv in a.set or []:
        k, eq, v = kv.partition("=")
        if not eq:
            raise PlanError("--set: KEY=VALUE (got %r)" % kv)
        c.set(k.strip(), v.strip())
        if k.strip() == "block_size" and profile.memory_bytes > 0 and not any(x.startswith("kv_blocks=") for x in a.set):
            c.set("kv_blocks", max(1, int(profile.memory_bytes // (profile.kv_bytes_per_token * c.block_size))))
    return c


def main(argv):
    ap = argparse.ArgumentParser(prog="yoco_plan.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trace", help="write a synthetic trace")
    trace_flags(t, True)
    t.add_argument("--out", required=True)
    for name in ("simulate", "plan"):
        s = sub.add_parser(name)
        s.add_argument("--profile", required=True)
        trace_flags(s, False)
        s.add_argument("--set", action="append", metavar="KEY=VALUE", help="a cluster setting (simulator.Cluster)")
        s.add_argument("--json", action="store_true")
        if name == "simulate":
            s.add_argument("--prefill", type=int, default=1)
            s.add_argument("--decode", type=int, default=1)
            s.add_argument("--timeline", help="write queue lengths and pool use over time (JSON)")
            s.add_argument("--interval", type=float, default=1.0, help="timeline sample interval, seconds")
        else:
            s.add_argument("--ttft-p90", type=float, required=True, help="seconds")
            s.add_argument("--itl-p90", type=float, required=True, help="seconds")
            s.add_argument("--max-prefill", type=int, default=16)
            s.add_argument("--max-decode", type=int, default=16)
    s = sub.add_parser("autoscale", help="scale a running cluster from the router's metrics")
    s.add_argument("--profile", required=True)
    s.add_argument("--metrics-url", required=True, help="the router's /metrics")
    s.add_argument("--ttft-p90", type=float, required=True)
    s.add_argument("--itl-p90", type=float, required=True)
    s.add_argument("--set", action="append", metavar="KEY=VALUE")
    s.add_argument("--interval", type=float, default=30.0)
    s.add_argument("--horizon", type=float, default=60.0, help="seconds of traffic each plan simulates")
    s.add_argument("--min-replicas", type=int, default=1)
    s.add_argument("--max-replicas", type=int, default=16)
    s.add_argument("--down-after", type=int, default=3, help="evaluations below the current count before one goes")
    s.add_argument("--prefill-deployment", default="yoco-prefill")
    s.add_argument("--decode-deployment", default="yoco-decode")
    s.add_argument("--namespace")
    s.add_argument("--initial-prefill", type=int, default=1, help="with --dry-run: the counts to start from")
    s.add_argument("--initial-decode", type=int, default=1)
    s.add_argument("--iterations", type=int, default=0, help="0: run until stopped")
    s.add_argument("--dry-run", action="store_true", help="print the targets, scale nothing")
    a = ap.parse_args(argv)
    try:
        return run(a)
    except PlanError as e:
        print("yoco_plan.py: %s" % e, file=sys.stderr)
        return 2


def run(a):
    if a.cmd == "trace":
        reqs = get_trace(a)
        with open(a.out, "w", encoding="utf-8") as f:
            write_trace(reqs, f)
        print("wrote %d requests over %.1f s to %s" % (len(reqs), reqs[-1].arrival, a.out))
        return 0
    profile = load_profile(a.profile)
    if a.cmd == "autoscale":
        from autoscaler import run_loop
        c = cluster_from(a, profile)
        run_loop(a, profile, c, Slo(a.ttft_p90, a.itl_p90), lambda o: print(json.dumps(o), flush=True))
        return 0
    reqs = get_trace(a)
    c = cluster_from(a, profile)
    if a.cmd == "simulate":
        c.set("prefill_workers", a.prefill)
        c.set("decode_workers", a.decode)
        r = simulate(profile, c, reqs, sample_interval=a.interval)
        s = r.summary()
        if a.timeline:
            with open(a.timeline, "w", encoding="utf-8") as f:
                json.dump(r.timeline, f)
        if a.json:
            print(json.dumps(s))
        else:
            print("simulated %d requests on %d prefill + %d decode workers (%s profile %s)" % (
                s["requests"], c.prefill_workers, c.decode_workers, profile.device, a.profile))
            print("completed %d, rejected %s, preemptions %d" % (s["completed"], s["rejected"] or 0, s["preemptions"]))
            print("TTFT ms  p50 %.1f  p90 %.1f  p99 %.1f" % tuple(s["ttft_ms"][k] for k in ("p50", "p90", "p99")))
            print("ITL ms   p50 %.2f  p90 %.2f  p99 %.2f" % tuple(s["itl_ms"][k] for k in ("p50", "p90", "p99")))
            print("throughput %.2f req/s, %.1f tok/s; busy prefill %s decode %s" % (
                s["request_throughput"], s["output_tokens_per_second"], s["prefill_busy"], s["decode_busy"]))
            print("peaks %s" % json.dumps(s["peak"]))
        return 0
    slo = Slo(a.ttft_p90, a.itl_p90)
    result = Search(profile, c, reqs, slo, a.max_prefill, a.max_decode).plan()
    print(json.dumps(result) if a.json else format_plan(result, slo))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
