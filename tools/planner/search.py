"""The planner: the fewest prefill + decode workers whose simulated TTFT p90 and ITL p90 meet the
SLOs with every request served, found by searching over the simulator (tools/planner/README.md,
"The planner")."""

from errors import PlanError
from simulator import simulate


class Slo:
    def __init__(self, ttft_p90, itl_p90):
        if not (ttft_p90 > 0 and itl_p90 > 0):
            raise PlanError("slo: ttft_p90 and itl_p90 must be > 0 seconds (got %r, %r)" % (ttft_p90, itl_p90))
        self.ttft_p90, self.itl_p90 = ttft_p90, itl_p90

    def met(self, summary):
        return (summary["completed"] == summary["requests"] and
                summary["ttft_ms"]["p90"] <= self.ttft_p90 * 1e3 and summary["itl_ms"]["p90"] <= self.itl_p90 * 1e3)


class Search:
    def __init__(self, profile, cluster, reqs, slo, max_prefill=64, max_decode=64):
        self.p, self.c, self.reqs, self.slo = profile, cluster, reqs, slo
        self.max_p, self.max_d = max_prefill, max_decode
        self.cache = {}

    def run(self, n_prefill, n_decode):
        key = (n_prefill, n_decode)
        if key not in self.cache:
            c = self.c.copy(prefill_workers=n_prefill, decode_workers=n_decode)
            self.cache[key] = simulate(self.p, c, self.reqs, sample_interval=0).summary()
        return self.cache[key]

    def ok(self, n_prefill, n_decode):
        return self.slo.met(self.run(n_prefill, n_decode))

    def ttft_ok(self, n_prefill, n_decode):
        s = self.run(n_prefill, n_decode)
        return s["completed"] == s["requests"] and s["ttft_ms"]["p90"] <= self.slo.ttft_p90 * 1e3

    def min_true(self, pred, lo, hi):
        """The smallest x in [lo, hi] with pred(x) (pred assumed monotone), or None."""
        if not pred(hi):
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            if pred(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def plan(self):
        """The recommendation (P, D) and its neighbours, each with its simulated summary."""
        best = None
        # For each prefill count, the fewest decode workers that meet both SLOs; prefill counts
        # below the one that meets TTFT with every decode worker allowed cannot work at all.
        p_min = self.min_true(lambda p: self.ttft_ok(p, self.max_d), 1, self.max_p)
        if p_min is None:
            raise PlanError("plan: no configuration up to %d prefill and %d decode workers meets the TTFT SLO" %
                            (self.max_p, self.max_d))
        for p in range(p_min, self.max_p + 1):
            if best and p >= sum(best):
                break
            d = self.min_true(lambda d: self.ok(p, d), 1, self.max_d)
            if d is not None and (best is None or p + d < sum(best) or (p + d == sum(best) and p < best[0])):
                best = (p, d)
        if best is None:
            raise PlanError("plan: no configuration up to %d prefill and %d decode workers meets the SLOs" %
                            (self.max_p, self.max_d))
        p, d = best
        neighbours = []
        for dp, dd in ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, 1), (1, -1)):
            q, e = p + dp, d + dd
            if 1 <= q <= self.max_p and 1 <= e <= self.max_d:
                neighbours.append(self.row(q, e))
        return {"recommended": self.row(p, d), "neighbours": neighbours, "simulations": len(self.cache)}

    def row(self, p, d):
        s = self.run(p, d)
        return {"prefill": p, "decode": d, "meets_slo": self.slo.met(s), "ttft_p90_ms": s["ttft_ms"]["p90"],
                "ttft_p50_ms": s["ttft_ms"]["p50"], "itl_p90_ms": s["itl_ms"]["p90"], "itl_p50_ms": s["itl_ms"]["p50"],
                "completed": s["completed"], "requests": s["requests"], "preemptions": s["preemptions"],
                "output_tokens_per_second": s["output_tokens_per_second"]}


def plan(profile, cluster, reqs, slo, max_prefill=64, max_decode=64):
    return Search(profile, cluster, reqs, slo, max_prefill, max_decode).plan()


def format_plan(result, slo):
    lines = ["SLO: TTFT p90 <= %.0f ms, ITL p90 <= %.1f ms" % (slo.ttft_p90 * 1e3, slo.itl_p90 * 1e3),
             "%-12s %7s %6s %12s %12s %11s %11s %6s %9s" % ("", "prefill", "decode", "TTFT p50 ms", "TTFT p90 ms",
                                                           "ITL p50 ms", "ITL p90 ms", "SLO", "served")]
    rows = [("recommended", result["recommended"])] + [("neighbour", r) for r in result["neighbours"]]
    for name, r in rows:
        lines.append("%-12s %7d %6d %12.1f %12.1f %11.2f %11.2f %6s %4d/%-4d" % (
            name, r["prefill"], r["decode"], r["ttft_p50_ms"], r["ttft_p90_ms"], r["itl_p50_ms"], r["itl_p90_ms"],
            "met" if r["meets_slo"] else "missed", r["completed"], r["requests"]))
    return "\n".join(lines)

