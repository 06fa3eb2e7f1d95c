#!/usr/bin/python3
"""The simulator against the local cluster (issue 32, calibration): measure TTFT and ITL p50/p90 with
yoco-cli bench --trace at three load levels on two traces (plain prompts; prompts on shared
documents), simulate the same traces with the profile measured on this machine, and write the
comparison (JSON, a markdown table, a plot). Then the planner's recommendation for two SLO
scenarios, each shown next to a measured run of the configuration it recommends.

  bench/planner/calibrate.py [--build-dir build] [--model models/kjv-yoco] [--profile P.json]
                             [--prefill 1] [--decode 1] [--requests 60] [--out-dir bench/results/planner]
                             [--scenarios] [--quick]

Without --profile it first measures one (bench/planner/profile.py, with the cluster's router for
the per-request overhead). Probes taken before the first round of runs and after each (lone
requests, steady decode streams, document resumes: profile.py's measurements) give a second
simulation beside the first, the profile at the machine's speed over the runs' own minutes
(sitting_profile). The load levels are 30%, 60% and 85% of the rate at which the simulated
cluster reaches its knee (TTFT p90 at 5× the unloaded one). bench/planner/calibrate.sh runs it end to end; run it on an
idle machine (bench/README.md, "SLA planner"): about 7 minutes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools", "planner"))

from errors import PlanError  # noqa: E402
from profiles import Profile, load_profile  # noqa: E402
from search import Search, Slo  # noqa: E402
from simulator import Cluster, simulate  # noqa: E402
from traces import load_trace, synthetic, write_trace  # noqa: E402


def _load_profile_tool():
    """bench/planner/profile.py as a module (its name is the standard library's profile's)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("planner_profile_tool", os.path.join(HERE, "profile.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


profile_tool = _load_profile_tool()


TRACES = {  # name: the synthetic trace's shape (prompt and output ranges, documents)
    "plain": dict(prompt=(32, 256), output=(8, 48)),
    "documents": dict(prompt=(16, 96), output=(8, 48), documents=4, document_tokens=256, document_share=0.8),
}
LEVELS = (0.3, 0.6, 0.85)


def pin_process(pid, cpu):
    """Every thread of process pid onto one CPU (the threads it starts later inherit it)."""
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except (ProcessLookupError, PermissionError):
            pass


class LocalCluster:
    def __init__(self, a, prefill, decode):
        need = (prefill + decode) * a.threads + 1  # the workers' threads, and the router with the client
        if (os.cpu_count() or 1) < need:
            print("calibrate.py: warning: %d cores for %d prefill + %d decode workers of %d thread(s) plus the router "
                  "and the client: the workers will wait for cores, which the simulator does not model"
                  % (os.cpu_count() or 1, prefill, decode, a.threads), file=sys.stderr, flush=True)
        self.state = tempfile.mkdtemp(prefix="yoco-calibrate.")
        cmd = [sys.executable, os.path.join(ROOT, "deploy", "local", "cluster.py"), "--bin-dir", a.build_dir,
               "--model", a.model, "--prefill", str(prefill), "--decode", str(decode), "--threads", str(a.threads),
               "--state-dir", self.state, "--http-port", "-1"]
        if not a.prompt_cache:
            # The simulator does not model the prompt cache's write-back (tools/planner/README.md,
            # left out), and the calibration's traces never repeat a prompt (documents stay).
            cmd.append("--prefill-arg=--no-prompt-cache")
        self.err = open(os.path.join(self.state, "launcher.err"), "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err)
        path = os.path.join(self.state, "cluster.json")
        for _ in range(1800):
            if os.path.exists(path):
                break
            if self.proc.poll() is not None:
                raise SystemExit("calibrate.py: the cluster did not start (%s)" % self.state)
            time.sleep(0.1)
        else:
            self.stop()
            raise SystemExit("calibrate.py: the cluster was not ready in 180 s (%s)" % self.state)
        with open(path) as f:
            desc = json.load(f)
        self.router = desc["router"]["grpc"]
        if a.pin:
            # Each worker's threads on one core of its own, in turn (prefill first, then decode);
            # the router and the client stay free to run anywhere.
            cpus = sorted(os.sched_getaffinity(0))
            workers = desc.get("prefill", []) + desc.get("decode", [])
            for i, w in enumerate(workers):
                pin_process(w["pid"], cpus[i % len(cpus)])
        # Warm-up (first connections, the workers' first allocations and their pools' growth to a
        # loaded run's size: a first measured run after only a few requests ran 15-20% slower than
        # the next ones), with prompts of its own.
        cli = os.path.join(a.build_dir, "tools", "yoco-cli")
        for args in (("--requests", 8, "--concurrency", 4, "--seed", 900), ("--requests", 120, "--rate", 20, "--seed", 901)):
            subprocess.run([cli, "bench", "--router", self.router, "--prompt-tokens", "128", "--max-tokens", "24"]
                           + [str(x) for x in args], capture_output=True, timeout=300)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def cpu_ticks():
    """(all, steal) of /proc/stat's cpu line, or None where there is none."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return sum(v), (v[7] if len(v) > 7 else 0)


def measure(a, router, trace_path, seed):
    """One measured run. Each run draws its prompts from a seed of its own: runs on one cluster
    sharing prompts would find each other's prefixes cached, which the simulated trace does not.
    The run's share of CPU time stolen by the hypervisor (/proc/stat) comes back as steal_pct."""
    cli = os.path.join(a.build_dir, "tools", "yoco-cli")
    t0 = cpu_ticks()
    out = subprocess.run([cli, "bench", "--router", router, "--trace", trace_path, "--seed", str(seed), "--json"],
                         capture_output=True, text=True, timeout=900)
    t1 = cpu_ticks()
    if out.returncode != 0:
        raise SystemExit("calibrate.py: yoco-cli bench --trace %s failed:\n%s" % (trace_path, out.stderr[-2000:]))
    m = json.loads(out.stdout)
    if t0 and t1 and t1[0] > t0[0]:
        m["steal_pct"] = round(100.0 * (t1[1] - t0[1]) / (t1[0] - t0[0]), 2)
    return m


def capacity(profile, cluster, shape, n):
    """The simulated knee: the highest rate whose TTFT p90 stays under 5× the unloaded one with every
    request served and the requests completing as fast as they arrive. (A decode worker steps
    whenever a sequence runs, so its busy time is no measure of load.)"""
    def served(rate):
        reqs = synthetic(n, rate, seed=7, **shape)
        s = simulate(profile, cluster, reqs, sample_interval=0).summary()
        return s, s["completed"] == n and s["request_throughput"] >= 0.8 * rate
    idle, _ = served(1e-3)
    lo, hi = 1e-3, 1000.0
    for _ in range(30):
        mid = (lo * hi) ** 0.5
        s, ok = served(mid)
        ok = ok and s["ttft_ms"]["p90"] <= 5 * idle["ttft_ms"]["p90"]
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def level_rate(profile, cluster, shape, level, n):
    """`level` of the simulated capacity (above)."""
    return round(level * capacity(profile, cluster, shape, n), 3)


def err(sim, real):
    return round(100.0 * (sim - real) / real, 1) if real else None


def median_of(xs):
    v = sorted(xs)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def calibrate(a, profile, out):
    """Each cell measured a.repeats times on one cluster, every run with prompts of its own, the
    repeats taken in rounds over all cells (a single run is not a measurement on a shared 2-core
    machine whose speed drifts by minutes, and back-to-back repeats would share a slow minute);
    the cell's measured figures are the medians over its runs (each run stays in the JSON), the
    simulated ones the trace's."""
    # One machine's cluster: the workers share its cores (profiles.py, shared_host).
    cluster = Cluster(prefill_workers=a.prefill, decode_workers=a.decode, shared_host=1)
    keys = [(k, p) for k in ("ttft", "itl") for p in ("p50", "p90")]
    cells = []
    for name, shape in TRACES.items():
        for level in LEVELS:
            rate = level_rate(profile, cluster, shape, level, a.requests)
            reqs = synthetic(a.requests, rate, seed=11, **shape)
            path = os.path.join(out, "trace-%s-%d.csv" % (name, int(level * 100)))
            with open(path, "w") as f:
                write_trace(reqs, f)
            cells.append({"trace": name, "level": level, "rate": rate, "requests": len(reqs), "path": path,
                          "runs": []})
    probes = []  # the machine's speed before the first round and after each, on the measured cluster (probe)
    with LocalCluster(a, a.prefill, a.decode) as lc:
        # Warm-up rounds over the cells' own traces, with prompts of their own, not compared: after
        # the launcher's warm-up the first round still ran slower than the next ones (in two
        # sittings of 2026-12-04, TTFT p50 of the plain trace at 60% load 38.0 and 44.0 ms in the
        # first round against 24.1-29.0 in the four after it): the workers' buffers and pools
        # growing to the traces' prompts and documents.
        for rep in range(a.warmup_rounds):
            for i, c in enumerate(cells):
                m = measure(a, lc.router, c["path"], seed=90000 + 100 * i + rep)
                c.setdefault("warmup_runs", []).append({"ttft_ms": m["ttft_ms"], "itl_ms": m["itl_ms"]})
        for rep in range(a.repeats):
            probes.append(probe(a, lc.router, profile, seed=5000 + 100 * rep))
            for i, c in enumerate(cells):
                seed = 11 + 100 * i + rep
                m = measure(a, lc.router, c["path"], seed=seed)
                c["runs"].append({"seed": seed, "ttft_ms": m["ttft_ms"], "itl_ms": m["itl_ms"],
                                  "completed": m["completed"], "steal_pct": m.get("steal_pct")})
                print(json.dumps({"trace": c["trace"], "level": c["level"], "run": c["runs"][-1]}), flush=True)
        probes.append(probe(a, lc.router, profile, seed=5000 + 100 * a.repeats))
    sitting, decode_scale = sitting_profile(profile, probes)
    rows = []
    for c in cells:
        runs = c["runs"]
        trace = load_trace(c.pop("path"))
        s = simulate(profile, cluster, trace).summary()
        s2 = simulate(sitting, cluster, trace).summary()
        measured = {k + "_ms": {p: round(median_of([r[k + "_ms"][p] for r in runs]), 3) for p in ("p50", "p90")}
                    for k in ("ttft", "itl")}
        measured["completed"] = min(r["completed"] for r in runs)
        row = dict(c, measured=measured,
                   simulated={"ttft_ms": s["ttft_ms"], "itl_ms": s["itl_ms"], "completed": s["completed"]},
                   measured_range={"%s_%s" % (k, p): [min(r[k + "_ms"][p] for r in runs),
                                                      max(r[k + "_ms"][p] for r in runs)] for k, p in keys})
        row["error_pct"] = {"%s_%s" % (k, p): err(s[k + "_ms"][p], measured[k + "_ms"][p]) for k, p in keys}
        row["sitting"] = {"ttft_ms": s2["ttft_ms"], "itl_ms": s2["itl_ms"], "completed": s2["completed"],
                          "error_pct": {"%s_%s" % (k, p): err(s2[k + "_ms"][p], measured[k + "_ms"][p])
                                        for k, p in keys}}
        rows.append(row)
    return rows, sitting, decode_scale, probes


PROBE_BATCHES = (1, 4, 16)


def probe(a, router, profile, seed):
    """The machine's speed as the runs around it met it, through the measured cluster: lone
    requests (bench/planner/profile.py's lengths, two each), the steady decode step at three
    batch sizes (profile.py's steady streams) and six requests resuming from a cached document.
    Returns {"lone": [(tokens, TTFT s)], "steady": [(batch, step s)], "resume": their TTFT s}."""
    ns = argparse.Namespace(build_dir=a.build_dir, router=router)
    return {"lone": profile_tool.lone_requests(ns, profile_tool.LONE_LENGTHS, 2, seed),
            "steady": [(b, profile_tool.steady_step(ns, profile, b, seed + 50 + b)) for b in PROBE_BATCHES],
            "resume": profile_tool.resume_requests(ns, seed + 90)}


def sitting_profile(profile, probes):
    """The profile at the sitting's speed, from the probes taken before the calibration's first
    round and after each, pooled over the sitting (the same minutes as the runs whose medians are
    compared, where the profile's own measurements took the minutes before them): its prefill
    refitted from the probes' lone requests (prefill_scale, request_overhead_seconds: profile.py's
    fit), its decode steps (decode.batch_points) scaled by the median over the probes of their
    steady step against the profile's steady streams at the same batch size, and the cost of
    resuming from a cached document refitted from the probes' resume requests (their median
    TTFT; profile.py's fit). Everything else as measured. Returns (the profile, the decode
    scale)."""
    doc = json.loads(json.dumps(profile.to_json()))
    lone = [x for pr in probes for x in pr["lone"]]
    doc["prefill_scale"], doc["request_overhead_seconds"] = profile_tool.fit_prefill(profile, lone)
    steady = dict(doc["decode"].get("steady_batch_points") or doc["decode"].get("batch_points") or [])
    ratios = [t / steady[b] for pr in probes for b, t in pr["steady"] if b in steady]
    scale = median_of(ratios) if ratios else 1.0
    if "batch_points" in doc["decode"]:
        doc["decode"]["batch_points"] = [[b, y * scale] for b, y in doc["decode"]["batch_points"]]
    resumes = [pr["resume"] for pr in probes if "resume" in pr]
    if resumes:
        doc["store"]["resume_overhead_seconds"] = profile_tool.fit_resume(Profile(doc, profile.path),
                                                                          median_of(resumes))
    doc["sitting_probes"] = probes
    return Profile(doc, profile.path + " (at the sitting's speed)"), scale


def scenarios(a, profile, out):
    """Two SLO scenarios on the documents trace past a 1 × 1 cluster's knee: the planner's pick
    (within 2 × 2) and measured runs of it (the medians). The SLOs are set from what the simulator gives two
    configurations, so each can be met: a TTFT-bound one (1.25× the TTFT p90 of 2 prefill + 1
    decode, a loose ITL) and an ITL-bound one (1.25× the TTFT p90 and 1.1× the ITL p90 of 1 + 2)."""
    shape = TRACES["documents"]
    base = Cluster(shared_host=1)
    rate = level_rate(profile, base, shape, 1.1, a.requests)
    reqs = synthetic(a.requests, rate, seed=13, **shape)
    path = os.path.join(out, "trace-scenarios.csv")
    with open(path, "w") as f:
        write_trace(reqs, f)
    sim = {(p, d): simulate(profile, base.copy(prefill_workers=p, decode_workers=d), reqs).summary()
           for p in (1, 2) for d in (1, 2)}
    loose_itl = 2 * max(x["itl_ms"]["p90"] for x in sim.values()) / 1e3
    wanted = {"TTFT-bound": Slo(1.25 * sim[(2, 1)]["ttft_ms"]["p90"] / 1e3, loose_itl),
              "ITL-bound": Slo(1.25 * sim[(1, 2)]["ttft_ms"]["p90"] / 1e3, 1.1 * sim[(1, 2)]["itl_ms"]["p90"] / 1e3)}
    results = []
    for name, slo in wanted.items():
        try:
            plan = Search(profile, base, reqs, slo, 2, 2).plan()
        except PlanError as e:
            print("calibrate.py: %s: %s" % (name, e))
            continue
        rec = plan["recommended"]
        with LocalCluster(a, rec["prefill"], rec["decode"]) as lc:
            for rep in range(a.warmup_rounds):  # as the calibration's warm-up rounds: not compared
                measure(a, lc.router, path, seed=91000 + 10 * len(results) + rep)
            runs = [measure(a, lc.router, path, seed=31 + 10 * len(results) + rep) for rep in range(a.repeats)]
        measured = {k + "_ms": {p: round(median_of([r[k + "_ms"][p] for r in runs]), 3) for p in ("p50", "p90")}
                    for k in ("ttft", "itl")}
        measured["completed"] = min(r["completed"] for r in runs)
        measured["runs"] = [{"ttft_p90_ms": r["ttft_ms"]["p90"], "itl_p90_ms": r["itl_ms"]["p90"]} for r in runs]
        results.append({"scenario": name, "rate": rate, "slo_ms": {"ttft_p90": round(slo.ttft_p90 * 1e3, 1),
                                                                   "itl_p90": round(slo.itl_p90 * 1e3, 2)},
                        "plan": plan, "measured": measured})
        print(json.dumps(results[-1]), flush=True)
    return results


def simulated_of(row, sim):
    """A row's simulated figures and their errors: sim "simulated" (the profile as measured
    before the runs, its errors in row["error_pct"]) or "sitting" (the profile at the sitting's
    speed, all under row["sitting"])."""
    return dict(row["simulated"], error_pct=row["error_pct"]) if sim == "simulated" else row[sim]


def table(rows, scen, sim="simulated"):
    """The markdown table of measured against simulated (sim: simulated_of's)."""
    lines = ["| trace | load | rate req/s | TTFT p50 ms meas [runs] / sim (err) | TTFT p90 ms meas [runs] / sim (err) | "
             "ITL p50 ms meas [runs] / sim (err) | ITL p90 ms meas [runs] / sim (err) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        cells = []
        for k in ("ttft", "itl"):
            for p in ("p50", "p90"):
                lo, hi = r.get("measured_range", {}).get("%s_%s" % (k, p), [None, None])
                spread = " [%.1f–%.1f]" % (lo, hi) if lo is not None and len(r.get("runs", [])) > 1 else ""
                got = simulated_of(r, sim)
                cells.append("%.1f%s / %.1f (%+.0f%%)" % (r["measured"][k + "_ms"][p], spread,
                                                          got[k + "_ms"][p], got["error_pct"]["%s_%s" % (k, p)] or 0))
        lines.append("| %s | %d%% | %.2f | %s |" % (r["trace"], r["level"] * 100, r["rate"], " | ".join(cells)))
    errs = [abs(v) for r in rows for v in simulated_of(r, sim)["error_pct"].values() if v is not None]
    worst = max(errs, default=0)
    lines.append("")
    lines.append("Measured: the medians over %d run(s) per cell. "
                 "%d of %d cells within 15%%; largest error %.1f%% (the issue's bound: 15%%)."
                 % (max((len(r.get("runs", [])) for r in rows), default=1), sum(e <= 15 for e in errs), len(errs),
                    worst))
    if scen:
        lines += ["", "| scenario | SLO TTFT p90 / ITL p90 ms | recommended P × D | simulated TTFT p90 / ITL p90 ms | "
                  "measured TTFT p90 / ITL p90 ms (medians of the runs) | neighbours (P×D: sim TTFT p90 / ITL p90, SLO) |",
                  "|---|---|---|---|---|---|"]
        for s in scen:
            rec = s["plan"]["recommended"]
            nb = "; ".join("%d×%d: %.0f / %.1f %s" % (n["prefill"], n["decode"], n["ttft_p90_ms"], n["itl_p90_ms"],
                                                       "met" if n["meets_slo"] else "missed")
                           for n in s["plan"]["neighbours"])
            lines.append("| %s | %.0f / %.1f | %d × %d | %.0f / %.1f | %.0f / %.1f | %s |" % (
                s["scenario"], s["slo_ms"]["ttft_p90"], s["slo_ms"]["itl_p90"], rec["prefill"], rec["decode"],
                rec["ttft_p90_ms"], rec["itl_p90_ms"], s["measured"]["ttft_ms"]["p90"], s["measured"]["itl_ms"]["p90"],
                nb))
    return "\n".join(lines) + "\n"


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("calibrate.py: no matplotlib, no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, metric in zip(axes, ("ttft", "itl")):
        for trace, marker in (("plain", "o"), ("documents", "s")):
            for p, color in (("p50", "tab:blue"), ("p90", "tab:red")):
                pts = [(r["measured"][metric + "_ms"][p], r["simulated"][metric + "_ms"][p]) for r in rows
                       if r["trace"] == trace]
                ax.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker, color=color,
                           label="%s %s" % (trace, p))
        lim = max([max(r["measured"][metric + "_ms"]["p90"], r["simulated"][metric + "_ms"]["p90"]) for r in rows]) * 1.1
        ax.plot([0, lim], [0, lim], "k-", lw=0.8)
        ax.fill_between([0, lim], [0, lim * 0.85], [0, lim * 1.15], color="0.9")
        ax.set_xlim(0, lim)
        ax.set_ylim(0, lim)
        ax.set_xlabel("measured %s ms" % metric.upper())
        ax.set_ylabel("simulated %s ms" % metric.upper())
        ax.legend(fontsize=7)
    fig.suptitle("Simulator vs local cluster (grey: within 15%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "kjv-yoco"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--profile")
    ap.add_argument("--prefill", type=int, default=1)
    ap.add_argument("--decode", type=int, default=1)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5, help="measured runs per cell (their medians are compared)")
    ap.add_argument("--warmup-rounds", type=int, default=1,
                    help="rounds over the cells before the measured ones, not compared (kept in the JSON)")
    ap.add_argument("--pin", action="store_true",
                    help="each worker's threads on one core of its own, in turn (the router and the client free)")
    ap.add_argument("--prompt-cache", action="store_true",
                    help="keep the prefill workers' prompt cache on (the simulator does not model its write-back)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench", "results", "planner"))
    ap.add_argument("--scenarios", action="store_true", help="also the planner's two scenarios, measured")
    ap.add_argument("--quick", action="store_true", help="a smoke run: 12 requests, the plain trace's first level")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    if a.quick:
        a.requests = 12
        a.repeats = 1
        a.warmup_rounds = 0
        TRACES.pop("documents") if not a.scenarios else None
        globals()["LEVELS"] = (0.3,)
    prof_path = a.profile or os.path.join(a.out_dir, "profile-cpu.json")
    if not a.profile:
        with LocalCluster(a, 1, 1) as lc:
            subprocess.run([sys.executable, os.path.join(HERE, "profile.py"), "--model", a.model, "--threads",
                            str(a.threads), "--build-dir", a.build_dir, "--router", lc.router, "--out", prof_path]
                           + (["--prefill-lens", "16,64,256", "--decode-batches", "1,4", "--decode-contexts", "64,512",
                               "--repeats", "1"] if a.quick else []), check=True)
    profile = load_profile(prof_path)
    rows, sitting, decode_scale, probes = calibrate(a, profile, a.out_dir)
    scen = scenarios(a, profile, a.out_dir) if a.scenarios else []
    with open(os.path.join(a.out_dir, "calibration.json"), "w") as f:
        json.dump({"profile": prof_path, "rows": rows, "scenarios": scen,
                   "sitting": {"prefill_scale": sitting.prefill_scale,
                               "request_overhead_seconds": sitting.request_overhead,
                               "decode_scale": round(decode_scale, 4), "probes": probes}}, f, indent=1)
    md = table(rows, scen)
    md += ("\nAt the sitting's speed (%d probes, before the first round and after each: the prefill refitted, "
           "prefill_scale %.3f and request overhead %.1f ms against the profile's %.3f and %.1f ms; the decode "
           "steps ×%.3f; the document resume's overhead %.1f ms against %.1f; everything else as measured):\n\n"
           % (len(probes), sitting.prefill_scale, sitting.request_overhead * 1e3, profile.prefill_scale,
              profile.request_overhead * 1e3, decode_scale, sitting.resume_overhead * 1e3,
              profile.resume_overhead * 1e3)) + table(rows, [], sim="sitting")
    with open(os.path.join(a.out_dir, "calibration.md"), "w") as f:
        f.write(md)
    plot(rows, os.path.join(a.out_dir, "calibration.png"))
    print(md)


if __name__ == "__main__":
    main()
