#!/usr/bin/env python3
"""The Markdown table of bench/aiperf.sh: aiperf's figures (HTTP) next to yoco-cli bench's (gRPC) per rate.

    python3 bench/aiperf_table.py bench/results/aiperf 2 8
"""

import json
import os
import sys


def aiperf_row(d):
    g = lambda k, p: d[k][p]  # noqa: E731
    return {
        "completed": int(d["request_count"]["avg"]),
        "errors": len(d.get("error_summary") or []),
        "req_s": d["request_throughput"]["avg"],
        "tok_s": d["output_token_throughput"]["avg"],
        "ttft": (g("time_to_first_token", "p50"), g("time_to_first_token", "p99")),
        # Per token gap, pooled over requests (one token per SSE chunk here): yoco-cli's ITL.
        "gap": (g("inter_chunk_latency", "p50"), g("inter_chunk_latency", "p99")),
        # aiperf's ITL: per request, (latency - TTFT) / (output tokens - 1); percentiles over requests.
        "itl": (g("inter_token_latency", "p50"), g("inter_token_latency", "p99")),
        "e2e": (g("request_latency", "p50"), g("request_latency", "p99")),
        "osl": d["output_sequence_length"]["avg"],
        "isl": d["input_sequence_length"]["avg"],
    }


def cli_row(d):
    return {
        "completed": d["completed"],
        "errors": sum(d["errors"].values()),
        "req_s": d["request_throughput"],
        "tok_s": d["output_tokens_per_second"],
        "ttft": (d["ttft_ms"]["p50"], d["ttft_ms"]["p99"]),
        "gap": (d["itl_ms"]["p50"], d["itl_ms"]["p99"]),
        "itl": None,
        "e2e": (d["e2e_ms"]["p50"], d["e2e_ms"]["p99"]),
        "osl": d["output_tokens"] / max(1, d["completed"]),
        "isl": d["config"]["prompt_tokens"],
    }


def token_counts_agree(path):
    """(requests, how many of them the server counted the same prompt and output tokens as aiperf did)."""
    n = same = 0
    with open(path) as f:
        for line in f:
            m = json.loads(line).get("metrics") or {}
            v = lambda k: (m.get(k) or {}).get("value")  # noqa: E731
            n += 1
            same += v("usage_prompt_tokens") == v("input_sequence_length") and \
                v("usage_completion_tokens") == v("output_sequence_length")
    return n, same


def cpu_seconds(path):
    try:
        with open(path) as f:
            return "%.1f" % float(f.read())
    except (OSError, ValueError):
        return "?"


def main():
    out, rates = sys.argv[1], sys.argv[2:]
    print("| client (protocol) | rate (req/s) | done / errors | req/s | out tok/s | prompt / output tokens "
          "| TTFT p50 / p99 (ms) | token gap p50 / p99 (ms) | per-request ITL p50 / p99 (ms) | E2E p50 / p99 (ms) "
          "| client CPU (s) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for rate in rates:
        rows = [("aiperf (HTTP, SSE)", "aiperf-rate%s" % rate,
                 aiperf_row(json.load(open(os.path.join(out, "aiperf-rate%s" % rate, "profile_export_aiperf.json"))))),
                ("yoco-cli bench (gRPC)", "yoco-cli-rate%s" % rate,
                 cli_row(json.load(open(os.path.join(out, "yoco-cli-rate%s.json" % rate)))))]
        for name, stem, r in rows:
            itl = "%.2f / %.2f" % r["itl"] if r["itl"] else "-"
            print("| %s | %s | %d / %d | %.2f | %.1f | %.0f / %.1f | %.1f / %.1f | %.2f / %.2f | %s | %.1f / %.1f | %s |"
                  % (name, rate, r["completed"], r["errors"], r["req_s"], r["tok_s"], r["isl"], r["osl"], *r["ttft"],
                     *r["gap"], itl, *r["e2e"], cpu_seconds(os.path.join(out, stem + ".cpu"))))
    print()
    for rate in rates:
        n, same = token_counts_agree(os.path.join(out, "aiperf-rate%s" % rate, "profile_export.jsonl"))
        print("rate %s: the router's usage counted the same prompt and output tokens as aiperf's tokenizer in %d of %d "
              "requests" % (rate, same, n))


if __name__ == "__main__":
    main()
