"""The planner in a running cluster: every interval it scrapes the router's /metrics, turns the
window's arrivals, length distributions and measured TTFT / ITL into a trace, asks the planner for
replica counts and, with hysteresis, sets the prefill and decode Deployments' scale through the
Kubernetes API (deploy/k8s/components/planner; tools/planner/README.md, "Autoscaling")."""

import json
import math
import os
import random
import socket
import ssl
import time
import urllib.parse
import urllib.request

from errors import PlanError
from traces import Request

ARRIVALS = "yoco_request_prompt_tokens"        # histogram, observed at admission: count = arrivals
OUTPUTS = "yoco_request_generation_tokens"     # histogram, observed when a call ends
TTFT = "yoco_time_to_first_token_seconds"
ITL = "yoco_inter_token_latency_seconds"


def parse_prometheus(text):
    """Prometheus text format → {(name, frozenset(labels)): value}. Comments skipped."""
    out = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels = {}
        if "{" in line:
            name, rest = line.split("{", 1)
            body, _, value = rest.rpartition("}")
            for part in _split_labels(body):
                k, _, v = part.partition("=")
                labels[k.strip()] = v.strip().strip('"')
        else:
            name, _, value = line.partition(" ")
        try:
            v = float(value.split()[0])
        except (ValueError, IndexError):
            raise PlanError("metrics:%d: not a sample (%r)" % (lineno, line[:80]))
        out[(name.strip(), frozenset(labels.items()))] = v
    return out


def _split_labels(body):
    parts, cur, quoted = [], "", False
    for ch in body:
        if ch == '"' and not cur.endswith("\\"):
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


class Histogram:
    """One histogram's cumulative buckets, summed over label sets other than le."""

    def __init__(self, samples, name):
        buckets = {}
        self.count = self.sum = 0.0
        for (n, labels), v in samples.items():
            d = dict(labels)
            if n == name + "_bucket":
                le = float("inf") if d["le"] == "+Inf" else float(d["le"])
                buckets[le] = buckets.get(le, 0.0) + v
            elif n == name + "_count":
                self.count += v
            elif n == name + "_sum":
                self.sum += v
        self.buckets = sorted(buckets.items())

    def minus(self, older):
        h = Histogram({}, "")
        old = dict(older.buckets)
        h.buckets = [(le, max(0.0, c - old.get(le, 0.0))) for le, c in self.buckets]
        h.count = max(0.0, self.count - older.count)
        h.sum = max(0.0, self.sum - older.sum)
        return h

    def quantile(self, q):
        """Prometheus's histogram_quantile: linear within the bucket."""
        if self.count <= 0 or not self.buckets:
            return math.nan
        rank, prev_le, prev_c = q * self.count, 0.0, 0.0
        for le, c in self.buckets:
            if c >= rank:
                if math.isinf(le):
                    return prev_le
                return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 1.0)
            prev_le, prev_c = le, c
        return prev_le

    def sample(self, rng):
        """A value drawn from the bucket distribution (uniform within a bucket)."""
        if self.count <= 0:
            raise PlanError("metrics: no observations to draw lengths from")
        x = rng.random() * self.count
        prev_le, prev_c = 0.0, 0.0
        for le, c in self.buckets:
            if c >= x and c > prev_c:
                hi = prev_le * 2 if math.isinf(le) else le
                return max(1, int(round(prev_le + (hi - prev_le) * (x - prev_c) / (c - prev_c))))
            prev_le, prev_c = le, c
        return max(1, int(prev_le))


class Window:
    """What the router's metrics say about the traffic between two scrapes."""

    def __init__(self, older, newer, seconds):
        if seconds <= 0:
            raise PlanError("window: seconds must be > 0")
        self.seconds = seconds
        self.prompts = Histogram(newer, ARRIVALS).minus(Histogram(older, ARRIVALS))
        self.outputs = Histogram(newer, OUTPUTS).minus(Histogram(older, OUTPUTS))
        self.ttft = Histogram(newer, TTFT).minus(Histogram(older, TTFT))
        self.itl = Histogram(newer, ITL).minus(Histogram(older, ITL))
        self.rate = self.prompts.count / seconds

    def trace(self, seconds, seed=0):
        """A Poisson trace of `seconds` at the window's rate, lengths drawn from its histograms."""
        rng = random.Random(seed)
        reqs, t = [], 0.0
        if self.rate <= 0:
            return reqs
        while True:
            t += rng.expovariate(self.rate)
            if t > seconds:
                return reqs
            out = self.outputs.sample(rng) if self.outputs.count > 0 else 16
            reqs.append(Request(len(reqs), t, self.prompts.sample(rng), out))

    def describe(self):
        return {"rate": round(self.rate, 4), "prompt_mean": round(self.prompts.sum / self.prompts.count, 1)
                if self.prompts.count else None,
                "output_mean": round(self.outputs.sum / self.outputs.count, 1) if self.outputs.count else None,
                "ttft_p90_s": _round(self.ttft.quantile(0.9)), "itl_p90_s": _round(self.itl.quantile(0.9))}


def _round(x):
    return None if math.isnan(x) else round(x, 4)


class Hysteresis:
    """Up at once (by at most max_step), down only after the target stayed below the current count
    for down_after consecutive evaluations, one replica at a time; within [lo, hi]."""

    def __init__(self, lo=1, hi=16, down_after=3, max_step=4):
        if not 1 <= lo <= hi:
            raise PlanError("hysteresis: needs 1 <= min <= max (got %d, %d)" % (lo, hi))
        self.lo, self.hi, self.down_after, self.max_step = lo, hi, down_after, max_step
        self.below = 0

    def next(self, current, target):
        target = min(self.hi, max(self.lo, target))
        if target > current:
            self.below = 0
            return min(target, current + self.max_step)
        if target < current:
            self.below += 1
            if self.below >= self.down_after:
                self.below = 0
                return current - 1
            return current
        self.below = 0
        return current


def feedback(target_prefill, target_decode, window, slo):
    """The measured percentiles overrule a plan that says the current size is enough: a TTFT p90
    over its SLO adds a prefill worker, an ITL p90 over its SLO a decode worker."""
    t, i = window.ttft.quantile(0.9), window.itl.quantile(0.9)
    if not math.isnan(t) and t > slo.ttft_p90:
        target_prefill += 1
    if not math.isnan(i) and i > slo.itl_p90:
        target_decode += 1
    return target_prefill, target_decode


class KubeScaler:
    """get/patch on deployments/scale, with the Pod's ServiceAccount (the Role grants nothing else)."""

    SA = "/var/run/secrets/kubernetes.io/serviceaccount"

    def __init__(self, namespace=None):
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise PlanError("kubernetes: KUBERNETES_SERVICE_HOST is not set (not in a Pod: use --dry-run)")
        self.base = "https://%s:%s" % (host, port)
        with open(os.path.join(self.SA, "token")) as f:
            self.token = f.read().strip()
        self.ns = namespace or open(os.path.join(self.SA, "namespace")).read().strip()
        self.ctx = ssl.create_default_context(cafile=os.path.join(self.SA, "ca.crt"))

    def _call(self, method, name, body=None):
        url = "%s/apis/apps/v1/namespaces/%s/deployments/%s/scale" % (self.base, self.ns, name)
        req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
        req.add_header("Authorization", "Bearer " + self.token)
        if body is not None:
            req.add_header("Content-Type", "application/merge-patch+json")
        with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
            return json.loads(r.read())

    def get(self, name):
        return int(self._call("GET", name)["spec"].get("replicas", 0))

    def set(self, name, replicas):
        self._call("PATCH", name, {"spec": {"replicas": replicas}})


def scrape(url, timeout=5):
    """Every address the URL's host resolves to (a headless Service: each router pod), summed."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or 80
    try:
        addrs = sorted({ai[4][0] for ai in socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)})
    except socket.gaierror as e:
        raise PlanError("metrics: %s: cannot resolve %s (%s)" % (url, parts.hostname, e))
    total = {}
    for addr in addrs:
        host = "[%s]" % addr if ":" in addr else addr
        one = urllib.parse.urlunsplit((parts.scheme, "%s:%d" % (host, port), parts.path, parts.query, ""))
        try:
            with urllib.request.urlopen(one, timeout=timeout) as r:
                samples = parse_prometheus(r.read().decode("utf-8", "replace"))
        except OSError as e:
            raise PlanError("metrics: %s (%s): %s" % (url, addr, e))
        for k, v in samples.items():
            total[k] = total.get(k, 0.0) + v
    return total


def run_loop(args, profile, cluster, slo, log):
    """The planner Deployment's loop (yoco_plan.py autoscale)."""
    from search import Search
    scaler = None if args.dry_run else KubeScaler(args.namespace)
    hp = {"prefill": Hysteresis(args.min_replicas, args.max_replicas, args.down_after),
          "decode": Hysteresis(args.min_replicas, args.max_replicas, args.down_after)}
    current = {"prefill": args.initial_prefill, "decode": args.initial_decode}
    deploy = {"prefill": args.prefill_deployment, "decode": args.decode_deployment}
    older, t_old = scrape(args.metrics_url), time.monotonic()
    for n in range(args.iterations or 1 << 62):
        time.sleep(args.interval)
        newer, t_new = scrape(args.metrics_url), time.monotonic()
        w = Window(older, newer, t_new - t_old)
        older, t_old = newer, t_new
        if scaler:
            current = {k: scaler.get(v) for k, v in deploy.items()}
        reqs = w.trace(args.horizon, seed=n)
        if reqs:
            s = Search(profile, cluster, reqs, slo, args.max_replicas, args.max_replicas)
            try:
                rec = s.plan()["recommended"]
                tp, td = rec["prefill"], rec["decode"]
            except PlanError:
                tp, td = args.max_replicas, args.max_replicas
        else:
            tp, td = args.min_replicas, args.min_replicas
        tp, td = feedback(tp, td, w, slo)
        new = {"prefill": hp["prefill"].next(current["prefill"], tp), "decode": hp["decode"].next(current["decode"], td)}
        log({"window": w.describe(), "planned": {"prefill": tp, "decode": td}, "current": current, "target": new})
        for k in new:
            if scaler and new[k] != current[k]:
                scaler.set(deploy[k], new[k])
        current = new
